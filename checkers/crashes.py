"""How many brokers were down at once from crashes that lose unflushed data, read from the
nemesis ops of a history.

With `log.crash.lose.unflushed=true` a killed broker loses what it had not fsynced, and a
disk torn-crash (a power loss) always does. An acknowledged write is on at least min ISR
replicas, so it can be lost only when that many copies crash before flushing it with their
crashes overlapping (checkers/claims.py `loss_allowance`; README "Claims"). This module
finds, from the history alone, the largest number of distinct brokers that were certainly
down at the same moment from such crashes.

Every choice errs towards counting fewer brokers (a false alarm, never a false pass):
- a crash counts from the nemesis line that proves it happened (a start op's completion
  naming the broker killed or powered off; the invocation proves nothing) until the first
  line of any op that may have restarted that broker (a stop op of the package that
  crashed or took hold of it, any op of an unknown kind, a brokers-down script that
  restarts a follower). A restarted broker comes back through an unclean shutdown and leaves
  every ISR and ELR (KIP-966), so it carries no loss afterwards; it is not counted while it
  catches up either, though until then it holds no copy (an undercount);
- a start op that failed, timed out or never completed proves no crash;
- a halt (a failed log directory) is not counted, nor is a dedicated controller (node ids
  from 1000: the bundled cluster's numbering), whose kill loses no partition data.
Positions are the nemesis lines' order in the history (the nemesis runs one op at a time),
so two crashes overlap only if the second is proven before the first may have ended; a kill
that ends before another starts does not overlap it. Times are the history's own `time_ns`,
for the explanation only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping

# Fault kinds whose packages SIGKILL brokers (and restart them at their stop op).
KILL_KINDS = frozenset({"kill", "brokers-down", "lone-leader-crash"})
# The disk package powers a broker off (torn-crash) and restarts halted or powered-off ones.
POWER_LOSS = "torn-crash"
# Kinds whose ops never restart a broker (a resume or a network heal leaves a dead broker
# dead); a stop of any other kind not in RESTARTING_KINDS may restart anything.
RESTARTING_KINDS = KILL_KINDS | {"disk"}
NEVER_RESTART = frozenset({"pause", "partition", "clock", "latency", "bandwidth", "flaky", "link-delay", "link-loss",
                           "link-duplicate", "link-reorder", "packet"})
# Dedicated controllers are numbered from here (cluster/sim/cluster.py, cluster/launcher.py).
FIRST_CONTROLLER_ID = 1000
_ANY = None  # an adoption set that may hold any broker


@dataclass(frozen=True)
class CrashPeriod:
    """One broker certainly down from a crash, between two nemesis line positions."""

    node: int
    kind: str  # the package that crashed it: kill, brokers-down, lone-leader-crash, or torn-crash
    start: int  # position of the line proving the crash
    end: int | None  # position of the first line that may have restarted it; None: down to the end
    start_time_ns: int

    @property
    def power_loss(self) -> bool:
        """A torn-crash loses unflushed data whatever log.crash.lose.unflushed says."""
        return self.kind == POWER_LOSS


@dataclass(frozen=True)
class DownAtOnce:
    """The most brokers down at one moment from crashes that lose unflushed data."""

    count: int = 0
    nodes: tuple[int, ...] = ()
    kinds: tuple[str, ...] = ()
    time_ns: int | None = None

    def describe(self) -> str:
        if not self.count:
            return "no broker down from an unflushed crash"
        at = "" if self.time_ns is None else f" at {self.time_ns / 1e9:.1f} s of the history"
        return f"broker(s) {', '.join(map(str, self.nodes))} ({', '.join(self.kinds)}){at}"


def _ints(value: Any) -> list[int]:
    if isinstance(value, bool):
        return []
    if isinstance(value, int):
        return [value]
    if isinstance(value, (list, tuple)):
        return [v for v in value if isinstance(v, int) and not isinstance(v, bool)]
    return []


def _named_nodes(value: Any) -> set[int]:
    """Every broker a start op's value names (targets, each one acted on, roles)."""
    if not isinstance(value, Mapping):
        return set()
    nodes = set(_ints(value.get("nodes"))) | set(_ints(value.get("leader"))) | set(_ints(value.get("followers")))
    for key in ("killed", "faulted"):
        for entry in value.get(key) or ():
            if isinstance(entry, Mapping):
                nodes |= set(_ints(entry.get("node")))
    return nodes


def _split(f: str) -> tuple[str, str] | None:
    for phase in ("start", "stop"):
        if f.startswith(phase + "-") and len(f) > len(phase) + 1:
            return phase, f[len(phase) + 1:]
    return None


class _Tracker:
    def __init__(self) -> None:
        self.periods: list[CrashPeriod] = []
        self.open: dict[int, tuple[str, int, int]] = {}  # node -> (kind, start, start_time_ns)
        # Brokers each restarting package has taken hold of since its last stop (its stop
        # restarts them): those it crashed, and those it found down and adopted.
        self.held: dict[str, set[int] | None] = {}
        self.script_at: int | None = None  # a brokers-down start invoked, not yet completed

    def crash(self, node: int, kind: str, at: int, time_ns: int) -> None:
        if node >= FIRST_CONTROLLER_ID or node in self.open:
            return  # a controller; or down already, since then
        self.open[node] = (kind, at, time_ns)

    def end(self, node: int, at: int) -> None:
        opened = self.open.pop(node, None)
        if opened is not None:
            kind, start, time_ns = opened
            self.periods.append(CrashPeriod(node, kind, start, max(at, start), time_ns))

    def end_all(self, at: int) -> None:
        for node in list(self.open):
            self.end(node, at)

    def hold(self, kind: str, nodes: set[int] | None) -> None:
        if kind not in self.held:
            self.held[kind] = set()
        current = self.held[kind]
        self.held[kind] = None if nodes is None or current is None else current | nodes

    def restart_by(self, kind: str, at: int) -> None:
        held = self.held.pop(kind, set())
        for node, (crashed_by, _, _) in list(self.open.items()):
            if held is None or node in held or crashed_by == kind or (kind == "disk" and crashed_by == POWER_LOSS):
                self.end(node, at)


def crash_periods(nemesis_ops: Iterable[Mapping[str, Any]]) -> tuple[CrashPeriod, ...]:
    """The crash periods of a history's nemesis op lines (dicts with f, time_ns, value,
    error, in history order; harness/history_parquet.py collects them)."""
    t = _Tracker()
    at = -1
    for at, op in enumerate(nemesis_ops):
        f = str(op.get("f", ""))
        value, error, time_ns = op.get("value"), op.get("error"), int(op.get("time_ns") or 0)
        if t.script_at is not None and f != "start-brokers-down":
            # The script's op never completed: it may still be restarting any broker.
            t.end_all(t.script_at)
            t.script_at = None
        split = _split(f)
        if split is None:
            continue  # quiet, or an instant op: nothing starts or stops
        phase, kind = split
        if phase == "stop":
            if kind in RESTARTING_KINDS:
                t.restart_by(kind, at)
            elif kind not in NEVER_RESTART:
                t.end_all(at)  # a kind this module does not know may restart anything
            continue
        if kind not in RESTARTING_KINDS:
            continue
        done = isinstance(value, Mapping) and error is None
        if kind == "brokers-down":
            _brokers_down_line(t, value if done else None, error, at, time_ns)
            continue
        # kill, lone-leader-crash, disk: both lines name what the package holds; a line with
        # an error (the action raised, or timed out) may hold anything.
        t.hold(kind, _named_nodes(value) if error is None else None)
        if not done:
            continue
        if kind == "kill":
            for entry in value.get("killed") or ():
                if isinstance(entry, Mapping) and not entry.get("not_running"):
                    for node in _ints(entry.get("node")):
                        t.crash(node, "kill", at, time_ns)
        elif kind == "lone-leader-crash" and "stalled" in value:
            for node in _ints(value.get("leader")):
                t.crash(node, "lone-leader-crash", at, time_ns)
        elif kind == "disk" and value.get("kind") == POWER_LOSS:
            for entry in value.get("faulted") or ():
                if isinstance(entry, Mapping) and entry.get("power_loss"):
                    for node in _ints(entry.get("node")):
                        t.crash(node, POWER_LOSS, at, time_ns)
    if t.script_at is not None:
        t.end_all(t.script_at)
    periods = t.periods + [CrashPeriod(node, kind, start, None, time_ns) for node, (kind, start, time_ns) in t.open.items()]
    return tuple(sorted(periods, key=lambda p: (p.start, p.node)))


def _brokers_down_line(t: _Tracker, value: Mapping[str, Any] | None, error: Any, at: int, time_ns: int) -> None:
    """brokers-down's start: it kills follower `first`, then `second`, then the leader, then
    restarts `first`, all inside one op (nemeses/scripted.py). Its completion (`followers`,
    `leader`) proves that the three were down together when the leader died, and that
    `second` and the leader stay down until the stop op."""
    proof = value is not None and isinstance(value.get("leader"), int) and len(_ints(value.get("followers"))) == 2
    if proof:
        started = t.script_at if t.script_at is not None else at
        t.script_at = None
        first, second = _ints(value["followers"])
        leader = value["leader"]
        t.end(first, started)  # restarted by the script (if it was down before)
        t.hold("brokers-down", {first, second, leader})
        if first < FIRST_CONTROLLER_ID:
            t.periods.append(CrashPeriod(first, "brokers-down", at, at, time_ns))
        t.crash(second, "brokers-down", at, time_ns)
        t.crash(leader, "brokers-down", at, time_ns)
        return
    if error is None and not (isinstance(value, Mapping) and "error" in value):
        # The invocation: the script runs until its completion. One still pending never
        # completed: it may have restarted any broker since it began.
        if t.script_at is not None:
            t.end_all(t.script_at)
        t.script_at = at
        return
    # A completion that proves nothing: no target found (nothing done), or the script raised
    # part way, perhaps after restarting a broker.
    nothing_done = isinstance(value, Mapping) and set(value) == {"error"} and error is None
    if not nothing_done:
        t.end_all(t.script_at if t.script_at is not None else at)
    t.script_at = None


def most_down_at_once(periods: Iterable[CrashPeriod], *, kills_lose_unflushed: bool) -> DownAtOnce:
    """The largest number of distinct brokers down at one position from crashes that lose
    unflushed data: power losses always, kills only when `kills_lose_unflushed`
    (log.crash.lose.unflushed=true; otherwise a SIGKILL keeps the page cache). The first
    position where that many are down is the one described."""
    counted = [p for p in periods if p.power_loss or (kills_lose_unflushed and p.kind in KILL_KINDS)]
    # A sweep over the positions: a period is down from its start to its end inclusive, so
    # at one position the starts go before the ends (ends are placed half a line later).
    events = sorted([(float(p.start), 0, i) for i, p in enumerate(counted)]
                    + [(p.end + 0.5, 1, i) for i, p in enumerate(counted) if p.end is not None])
    best = DownAtOnce()
    active: dict[int, CrashPeriod] = {}
    for _, is_end, i in events:
        if is_end:
            active.pop(i, None)
            continue
        active[i] = counted[i]
        # One broker's periods never overlap (a crash of a broker already down is not a new
        # one), but count distinct brokers all the same.
        nodes = tuple(sorted({p.node for p in active.values()}))
        if len(nodes) > best.count:
            best = DownAtOnce(len(nodes), nodes, tuple(sorted({p.kind for p in active.values()})),
                              max(p.start_time_ns for p in active.values()))
    return best
