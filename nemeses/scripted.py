"""Scripted faults: the failure sequences of the seed articles and of Kafka's documented
data-loss recipes, as nemesis packages, so a run reproduces them on schedule.

Each targets the first partition (in topic, partition order) of the primary topics (all
non-internal topics by default) that has a leader when the fault starts, and records which
brokers played which role. One start op performs the whole sequence; the stop op restarts
or resumes everything the sequence took down.

- `brokers-down` ("When Brokers Are Down"): SIGKILL one follower and wait until it has left
  the ISR and the leader has taken writes without it; the same for the second follower (ISR
  = the leader alone); SIGKILL the leader; restart the follower killed first. With unclean
  leader election off the partition stays offline until the stop op brings the leader back;
  with it on the restarted follower is elected and the writes it missed are lost.
- `lone-leader-crash` (the acks=1 failover loss, reliability notes S3): SIGSTOP both
  followers for less than the session timeout (so they stay in the ISR but fetch nothing),
  then SIGKILL the leader and resume the followers: one of them is elected without the
  records the leader acknowledged alone. acks=all is held back by the stalled followers and
  loses nothing.
"""

from __future__ import annotations

import asyncio
import random
from abc import ABC, abstractmethod
import threading
import time
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from typing import Any

from cluster.control import ClusterControl, ControlError, PartitionStatus
from nemeses.base import COLORS, NemesisError, NemesisOptions, alternate

# How long to let the leader take writes after each follower is gone, so each step of the
# script leaves data behind that the next step can lose.
SETTLE_S = 2.0
# How long an ISR change may take to show (session timeout plus propagation).
ISR_WAIT_S = 60.0
# How long the followers stall in lone-leader-crash: well under broker.session.timeout.ms
# (default 9 s, 3 s in the fast test settings), so they are not fenced meanwhile.
STALL_S = 1.0
# How long brokers-down waits, after restarting the first follower, for the controller to
# elect it (unclean election) before the stop op may restart the others.
OUTCOME_WAIT_S = 15.0


@dataclass(frozen=True)
class Sleep:
    """A script step: let `seconds` pass."""

    seconds: float


@dataclass(frozen=True)
class WaitFor:
    """A script step: ask `check` every `poll_s` until it answers something other than None
    or False, for at most `timeout_s`; the script gets that answer (None on timeout)."""

    check: Callable[[], Any]
    timeout_s: float
    poll_s: float = 0.1


# A script yields its waits and returns what it did (for the completion). The same script
# runs on real time (`run_script`, here) or on a simulation's virtual time
# (`run_script_async`, on its event loop), so a simulated run performs the very sequence a
# real one does.
Script = Generator["Sleep | WaitFor", Any, dict]


def run_script(script: Script) -> dict:
    """Drive `script` on real time (time.sleep between polls)."""
    answer: Any = None
    while True:
        try:
            step = script.send(answer)
        except StopIteration as done:
            return done.value
        answer = None
        if isinstance(step, Sleep):
            time.sleep(step.seconds)
            continue
        deadline = time.monotonic() + step.timeout_s
        while True:
            result = step.check()
            if result is not None and result is not False:
                answer = result
                break
            if time.monotonic() >= deadline:
                break
            time.sleep(step.poll_s)


async def run_script_async(script: Script) -> dict:
    """Drive `script` on the running event loop's time (asyncio.sleep between polls)."""
    loop = asyncio.get_running_loop()
    answer: Any = None
    while True:
        try:
            step = script.send(answer)
        except StopIteration as done:
            return done.value
        answer = None
        if isinstance(step, Sleep):
            await asyncio.sleep(step.seconds)
            continue
        deadline = loop.time() + step.timeout_s
        while True:
            result = step.check()
            if result is not None and result is not False:
                answer = result
                break
            if loop.time() >= deadline:
                break
            await asyncio.sleep(step.poll_s)


class _ScriptedPackage(ABC):
    name = ""
    color = ""

    def __init__(self, control: ClusterControl, options: NemesisOptions) -> None:
        if len(control.broker_ids) < 3:
            raise NemesisError(f"the {self.name} nemesis needs a partition with a leader and two followers: 3 or more brokers, "
                               f"the cluster has {len(control.broker_ids)}")
        self.control = control
        self.options = options
        self._lock = threading.Lock()
        self.killed: set[int] = set()
        self.paused: set[int] = set()

    def schedule(self, rng: random.Random) -> Iterator[dict]:
        def starts() -> Iterator[dict]:
            while True:
                yield {"script": self.name}

        return alternate(f"start-{self.name}", f"stop-{self.name}", starts())

    def invoke(self, f: str, value: Any) -> object:
        if f == f"start-{self.name}":
            with self._lock:
                target = self._target()
                if isinstance(target, dict):
                    return target
                return run_script(self.script(target))
        if f == f"stop-{self.name}":
            return self.stop()
        raise ValueError(f"the {self.name} nemesis has no op {f!r}")

    async def invoke_async(self, f: str, value: Any) -> object:
        """`invoke` on the running event loop's time (a simulated run): the same script,
        waiting with asyncio.sleep. One event loop thread: no lock to hold across waits."""
        if f == f"start-{self.name}":
            target = self._target()
            if isinstance(target, dict):
                return target
            return await run_script_async(self.script(target))
        return self.invoke(f, value)

    def _target(self) -> PartitionStatus | dict:
        try:
            states = self.control.partition_states(self.options.primary_topics)
        except ControlError as error:
            return {"error": str(error)}
        candidates = [s for tp, s in sorted(states.items(), key=lambda i: (i[0].topic, i[0].partition))
                      if not tp.topic.startswith("__") and s.leader >= 0 and len(s.replicas) >= 3]
        if not candidates:
            return {"error": "no partition with a leader and at least two followers"}
        return candidates[0]

    def _isr(self, target: PartitionStatus) -> tuple[int, ...] | None:
        try:
            state = self.control.partition_states([target.tp.topic]).get(target.tp)
        except ControlError:
            return None
        return None if state is None else state.isr

    def _wait_isr(self, target: PartitionStatus, done: Any) -> WaitFor:
        def check() -> bool:
            isr = self._isr(target)
            return isr is not None and bool(done(isr))

        return WaitFor(check, ISR_WAIT_S)

    def _kill(self, node: int) -> None:
        self.control.kill(node)
        self.killed.add(node)

    @abstractmethod
    def script(self, target: PartitionStatus) -> Script:
        """The script on `target`: yields its waits, returns what happened (for the
        completion)."""

    def stop(self) -> dict:
        with self._lock:
            resumed = sorted(self.paused)
            for node in resumed:
                self.control.resume(node)
            self.paused.clear()
            started = []
            for node in sorted(self.killed):
                if not self.control.is_alive(node):
                    self.control.start(node)
                    started.append(node)
            self.killed.clear()
        return {"started": started, "resumed": resumed}

    def heal(self) -> None:
        self.stop()


class BrokersDownPackage(_ScriptedPackage):
    name = "brokers-down"
    color = COLORS["brokers-down"]

    def script(self, target: PartitionStatus) -> Script:
        leader = target.leader
        first, second = [b for b in target.replicas if b != leader][:2]
        steps: list[str] = []
        out: dict = {"partition": f"{target.tp.topic}-{target.tp.partition}", "leader": leader, "followers": [first, second], "steps": steps}
        self._kill(first)
        left = yield self._wait_isr(target, lambda isr: first not in isr)
        steps.append(f"killed follower {first}" + ("" if left else " (still in the ISR after the wait)"))
        yield Sleep(SETTLE_S)
        self._kill(second)
        alone = yield self._wait_isr(target, lambda isr: tuple(isr) == (leader,))
        steps.append(f"killed follower {second}" + ("; ISR is the leader alone" if alone else " (the ISR did not shrink to the leader)"))
        yield Sleep(SETTLE_S)
        self._kill(leader)
        steps.append(f"killed leader {leader}")
        self.control.start(first)
        self.killed.discard(first)
        steps.append(f"restarted follower {first}")

        # Give the controller time to fence the dead leader and decide: with unclean election
        # the restarted follower takes over; without, the partition stays offline. The stop op
        # (which brings the others back) must not pre-empt that decision.
        def elected() -> int | None:
            try:
                state = self.control.partition_states([target.tp.topic]).get(target.tp)
            except ControlError:
                return None
            return state.leader if state is not None and state.leader not in (-1, leader) else None

        found = yield WaitFor(elected, OUTCOME_WAIT_S)
        new_leader = -1 if found is None else int(found)
        steps.append(f"broker {new_leader} elected" if new_leader >= 0 else f"no leader after {OUTCOME_WAIT_S:.0f} s")
        out["new_leader"] = new_leader
        return out


class LoneLeaderCrashPackage(_ScriptedPackage):
    name = "lone-leader-crash"
    color = COLORS["lone-leader-crash"]

    def script(self, target: PartitionStatus) -> Script:
        leader = target.leader
        followers = [b for b in target.replicas if b != leader]
        for node in followers:
            self.control.pause(node)
            self.paused.add(node)
        yield Sleep(STALL_S)
        self._kill(leader)
        for node in followers:
            self.control.resume(node)
            self.paused.discard(node)
        return {"partition": f"{target.tp.topic}-{target.tp.partition}", "leader": leader, "stalled": followers, "stall_s": STALL_S}
