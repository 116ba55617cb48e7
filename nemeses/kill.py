"""kill: crash brokers with SIGKILL; the stop op restarts every broker this package killed
(and waits until each answers again). Jepsen's :kill / :start."""

from __future__ import annotations

from nemeses.base import COLORS
from nemeses.node_fault import NodeFaultPackage


class KillPackage(NodeFaultPackage):
    name = "kill"
    color = COLORS["kill"]
    past_tense = "killed"
    undo_past_tense = "started"

    def fault(self, node: int) -> dict:
        if not self.control.is_alive(node):
            return {"node": node, "not_running": True}
        pid = self.control.kill(node)
        return {"node": node, "pid": pid}

    def undo(self, node: int) -> dict:
        if self.control.is_alive(node):
            return {"node": node, "pid": self.control.pid(node), "already_running": True}
        pid = self.control.start(node)
        return {"node": node, "pid": pid}
