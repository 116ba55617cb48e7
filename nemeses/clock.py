"""clock: skew brokers' wall clocks (libfaketime per broker, through cluster.control).

start-clock is one of (chosen by the seeded schedule, per Jepsen's clock nemesis):
    bump    each target broker's clock jumps by its own ±1.5^(6+U[0,25)) ms (11 ms … 290 s),
            on top of any offset it already has
    strobe  each target broker's clock flips between +delta and its offset every period for
            a duration: delta 2^(2+U[0,16)) ms, period 2^U[lo,10) ms, duration U[0,32) s;
            it runs in a background thread, so the nemesis is not blocked
stop-clock resets every broker's clock to real time (Jepsen's reset; there is no NTP here,
the offset simply returns to +0). Only wall time moves: monotonic time and therefore every
broker timer stays real.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator
from typing import Any

from cluster.control import ClusterControl
from nemeses.base import COLORS, NemesisError, NemesisOptions, alternate, fault_nodes, live_controller, live_leaders
from nemeses.targets import CONTROLLER_SPECS, choose_nodes

MAX_STROBE_DURATION_S = 32.0


def bump_delta_ms(rng: random.Random) -> int:
    return int(rng.choice((-1, 1)) * 1.5 ** (6 + rng.uniform(0, 25)))


class Strobe:
    """Flips brokers' clocks between two offsets until its duration ends or it is stopped."""

    def __init__(self, control: ClusterControl, nodes: list[int], delta_s: float, period_s: float, duration_s: float):
        self.control = control
        self.nodes = nodes
        self.delta_s = delta_s
        self.period_s = period_s
        self.duration_s = duration_s
        self.base_s = {node: control.clock_offset(node) for node in nodes}
        self.flips = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="clock-strobe", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        # Event.wait runs on monotonic time: the harness's own clock is never faked.
        ends_after_flips = max(1, int(self.duration_s / self.period_s))
        shifted = False
        while self.flips < ends_after_flips and not self._stop.wait(self.period_s):
            shifted = not shifted
            for node in self.nodes:
                self.control.set_clock_offset(node, self.base_s[node] + (self.delta_s if shifted else 0.0))
            self.flips += 1
        for node in self.nodes:
            self.control.set_clock_offset(node, self.base_s[node])

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join()


class ClockPackage:
    name = "clock"
    color = COLORS["clock"]

    def __init__(self, control: ClusterControl, options: NemesisOptions) -> None:
        if not control.controls_clocks:
            raise NemesisError("the clock nemesis needs the brokers started under libfaketime: "
                               "pass extra_env=BrokerClocks(dir).extra_env to the cluster and the clocks to ClusterControl")
        self.control = control
        self.options = options
        self._strobes: list[Strobe] = []
        self._lock = threading.Lock()

    def schedule(self, rng: random.Random) -> Iterator[dict]:
        nodes = fault_nodes(self.control, self.options)
        lo = self.options.strobe_min_period_exponent

        def starts() -> Iterator[dict]:
            while True:
                kind = rng.choice(self.options.clock_kinds)
                spec = rng.choice(self.options.db_targets)
                chosen = choose_nodes(spec, nodes, rng)
                if kind == "bump":
                    yield {"kind": "bump", "targets": spec, "nodes": chosen, "delta_ms": bump_delta_ms(rng)}
                else:
                    yield {"kind": "strobe", "targets": spec, "nodes": chosen,
                           "delta_ms": int(2 ** (2 + rng.uniform(0, 16))),
                           "period_ms": round(2 ** rng.uniform(lo, 10), 3),
                           "duration_ms": int(rng.uniform(0, MAX_STROBE_DURATION_S) * 1000)}

        return alternate("start-clock", "stop-clock", starts())

    def invoke(self, f: str, value: Any) -> object:
        if f == "start-clock":
            return self.start(value)
        if f == "stop-clock":
            return {"reset": self.reset()}
        raise ValueError(f"the clock nemesis has no op {f!r}")

    def _nodes(self, value: dict) -> tuple[list[int], dict]:
        if value.get("nodes") is not None:
            return sorted(int(n) for n in value["nodes"]), {}
        if value.get("targets") in CONTROLLER_SPECS:
            return live_controller(self.control, value["targets"])
        return live_leaders(self.control, value.get("targets", "primaries"), self.options.primary_topics)

    def start(self, value: Any) -> dict:
        if not isinstance(value, dict) or value.get("kind") not in ("bump", "strobe"):
            raise ValueError(f"start-clock needs a value with kind bump or strobe, got {value!r}")
        nodes, seen = self._nodes(value)
        if value["kind"] == "bump":
            offsets = {}
            for node in nodes:
                offset_s = self.control.clock_offset(node) + value["delta_ms"] / 1000.0
                offsets[str(node)] = self.control.set_clock_offset(node, offset_s)
            return {**value, "nodes": nodes, "offsets": offsets, **seen}
        strobe = Strobe(self.control, nodes, value["delta_ms"] / 1000.0, value["period_ms"] / 1000.0,
                        value["duration_ms"] / 1000.0)
        with self._lock:
            self._strobes.append(strobe)
        strobe.start()
        return {**value, "nodes": nodes, **seen}

    def reset(self) -> dict[str, str]:
        with self._lock:
            strobes, self._strobes = self._strobes, []
        for strobe in strobes:
            strobe.stop()
        return {str(node): self.control.set_clock_offset(node, 0.0) for node in fault_nodes(self.control, self.options)}

    def heal(self) -> None:
        self.reset()
