"""The bundled cluster as a context manager that always tears down.

`cluster.launcher.LocalCluster` already stops every process when its block ends and when its
start fails (any BaseException), and its processes get a parent-death SIGKILL. What it does
not cover is an interrupt that lands *during* the graceful close (a second Ctrl-C while brokers
move leadership away): that close is abandoned half-way, and the brokers not yet stopped would
live on until the interpreter exits. Here, any exception out of the graceful close kills every
node that is still running before it propagates.
"""

from __future__ import annotations

from cluster.launcher import CONTROLLER_NODE_ID, LocalCluster as _LauncherCluster

__all__ = ["LocalCluster"]


class LocalCluster(_LauncherCluster):
    """`with LocalCluster(brokers=3, config={...}) as cluster: cluster.bootstrap_servers`.

    Arguments are `cluster.launcher.LocalCluster`'s: `brokers` (1-7), `config` (broker
    settings, Kafka names, plus the bundled cluster's switches), `base_dir` (data and logs;
    a temporary directory removed on exit by default), `seed`.
    """

    def close(self) -> None:
        try:
            super().close()
        except BaseException:
            self.kill_all()
            raise

    def kill_all(self) -> None:
        """SIGKILL every broker and the controller that is still running, and reap them."""
        for node_id in [*(b.broker_id for b in self.brokers), CONTROLLER_NODE_ID]:
            if self.is_alive(node_id):
                self.kill(node_id)

    def pids(self) -> list[int]:
        """Process ids of the nodes running now (for tests and tools that watch them)."""
        nodes = [*self.brokers, self.controller]
        return [n.pid for n in nodes if n.pid is not None and self.is_alive(n.broker_id)]
