"""Run asyncio clients inside a SimCluster: one deterministic loop on the cluster's scheduler,
connections over its virtual network from the client host, and the client library's `time`
and `random` pointed at the simulation (see aio_loop, aio_transport, aio_client_env).

    with SimAsyncio(sim) as runtime:
        result = runtime.run(main(), timeout_s=120)   # simulated seconds

Inside `main` the cluster may be driven directly (`sim.kill(b)`, `sim.isolate(...)`), but
never advanced (`sim.run_for`, `sim.run_until`): the loop advances time. The client library's
names stay pointed at the simulation from construction to `close()`, so its objects (a
consumer's sets of partitions) keep one hash for their whole life; use them only in between.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import time
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

from cluster.runtime.virtual_time import NodeClock
from cluster.sim.aio_client_env import CanonicalRandom, virtual_environment
from cluster.sim.aio_loop import SimEventLoop
from cluster.sim.aio_transport import SimConnector, TraceEntry
from cluster.sim.cluster import CLIENT_HOST, SimCluster

T = TypeVar("T")


@dataclass(slots=True)
class SimSpeed:
    simulated_s: float
    wall_s: float  # measured outside the simulation, for reporting only
    # This process's CPU seconds over the same span (every thread's): on a shared machine the
    # wall figure follows the load, this one much less.
    cpu_s: float = 0.0

    @property
    def ratio(self) -> float:
        return self.simulated_s / self.wall_s if self.wall_s > 0 else float("inf")

    @property
    def cpu_ratio(self) -> float:
        return self.simulated_s / self.cpu_s if self.cpu_s > 0 else float("inf")


class SimAsyncio:
    def __init__(self, sim: SimCluster, host: str = CLIENT_HOST, packages: tuple[str, ...] = ("aiokafka",)) -> None:
        self.sim = sim
        self.connector = SimConnector(sim.network, host)
        self.loop = SimEventLoop(sim.scheduler, self.connector)
        # The client host's own wall clock (a clock fault could skew it as a broker's).
        self.clock = NodeClock(sim.clock)
        self.rng = CanonicalRandom(sim.rng.getrandbits(64))
        self.speed = SimSpeed(0.0, 0.0)
        self._environment = contextlib.ExitStack()
        self._environment.enter_context(virtual_environment(self.clock, self.rng, packages))

    def __enter__(self) -> SimAsyncio:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def trace(self) -> list[TraceEntry]:
        assert self.connector.trace is not None
        return self.connector.trace

    def wall_ms(self) -> int:
        """The client host's wall clock, for record timestamps (see the README: aiokafka's C
        record builder reads the real clock when the timestamp is left out)."""
        return self.clock.wall_ms()

    def run(self, coro: Coroutine[Any, Any, T], timeout_s: float) -> T:
        """Run `coro` to completion on the simulation; TimeoutError after `timeout_s`
        simulated seconds."""
        started_ns = self.sim.clock.monotonic_ns()
        wall_started = time.perf_counter()  # speed report only: nothing in the run reads it
        cpu_started = time.process_time()
        # What exists when the loop starts (the modules, the cluster as set up) is most of
        # the heap and mostly lives on: frozen out of the cyclic collector's sight while the
        # loop runs, so its full passes cover what the run makes (re-scanning the rest was
        # most of their cost, ~4 % of a bench_sim run's CPU). Cycles among the frozen objects
        # (a killed node's) wait until the loop stops. Not when something else froze first:
        # its freeze is not ours to undo.
        freeze = gc.get_freeze_count() == 0
        if freeze:
            gc.freeze()
        try:
            return self.loop.run_until_complete(asyncio.wait_for(coro, timeout_s))
        finally:
            if freeze:
                gc.unfreeze()
            self.speed.simulated_s += (self.sim.clock.monotonic_ns() - started_ns) / 1e9
            self.speed.wall_s += time.perf_counter() - wall_started
            self.speed.cpu_s += time.process_time() - cpu_started

    def close(self) -> None:
        try:
            if not self.loop.is_closed():
                self.loop.close()
        finally:
            self._environment.close()
