"""logquake's Python API: run Jepsen-style tests of Kafka-protocol systems from Python code.

Three things, for programs and test suites that want more than `logquake test`'s exit code:

``TestSpec``
    A test, with the same fields as `logquake test`'s options (``workload``, ``nemesis``,
    ``time_limit_s``, ``client_config``, ``cluster_config``, ``bootstrap_servers``, ``seed``,
    ...) and the same defaults. It is turned into a run by the command line's own code, so it
    accepts and refuses exactly what the command accepts and refuses (``SpecError``).

``run(spec, results_dir="results") -> Result``
    Runs the test as `logquake test` does (in a child process; tests with faults inside their
    own network namespace) and returns its ``Result``: ``verdict`` ("valid", "invalid" or
    "unknown"), the ``anomalies`` found, each with its count, whether the run's claims allow
    it, and its witnesses, the ``run_dir`` with ``report_path``, the ``seed`` and the exact
    ``reproduce_command``. A harness failure raises ``RunError``; an interrupt stops the run
    (faults healed, cluster torn down) and re-raises ``KeyboardInterrupt``.

``LocalCluster``
    The bundled Kafka-compatible cluster as a context manager, like a Testcontainers
    container. Its processes are stopped when the block ends, however it ends (an exception,
    ``KeyboardInterrupt``), and die with the Python process if that is killed outright::

        import logquake

        with logquake.LocalCluster(brokers=3, config={"min.insync.replicas": "2"}) as cluster:
            result = logquake.run(logquake.TestSpec(
                time_limit_s=10, brokers=3, bootstrap_servers=cluster.bootstrap_servers,
                client_config={"acks": "all"}))
        print(result.verdict, result.report_path, result.reproduce_command)

The pytest plugin (``logquake.pytest_plugin``, installed with logquake) offers the same as
fixtures: ``logquake_cluster`` and ``logquake_runner``.

``fault_schedules(brokers, time_limit_s, kinds)`` and ``Fault`` (``logquake.strategies``)
    A Hypothesis strategy for the fault schedules of simulated runs
    (``TestSpec(sim=True, fault_schedule=...)``), for property tests of your own; it shrinks
    to fewer, earlier, shorter faults on fewer brokers. `logquake hunt` searches with it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__all__ = ["Anomaly", "LocalCluster", "Result", "RunError", "SpecError", "TestSpec", "Witness", "run"]

# Loaded on first use (PEP 562): pytest imports this package for its plugin in every session,
# and the API pulls in the harness, which must not load before pytest's other plugins do.
_WHERE = {"LocalCluster": "logquake.local_cluster", **{name: "logquake.api" for name in __all__ if name != "LocalCluster"}}
# Hypothesis strategies for simulated runs' fault schedules (logquake.strategies).
__all__ += ["Fault", "fault_schedules"]
_WHERE.update({"Fault": "logquake.strategies", "fault_schedules": "logquake.strategies"})

if TYPE_CHECKING:
    from logquake.api import Anomaly, Result, RunError, SpecError, TestSpec, Witness, run
    from logquake.local_cluster import LocalCluster
    from logquake.strategies import Fault, fault_schedules


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(importlib.import_module(_WHERE[name]), name)
    raise AttributeError(f"module 'logquake' has no attribute {name!r}")
