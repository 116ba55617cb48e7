"""Where AddPartitionsToTxn and AddOffsetsToTxn wait while their transactional id's previous
transaction is still completing.

A client that starts its next transaction right after EndTxn was answered finds the id in
PrepareCommit/PrepareAbort: the markers, then the Complete* record, are still being
written. Kafka's coordinator answers CONCURRENT_TRANSACTIONS and the client backs off
(librdkafka: a fixed 20 ms) and retries. Ours (in the spirit of Kafka 4.0's server-side
retry, KAFKA-18654) parks the request instead, for at most `wait_max_ms`
(`transaction.add.partitions.wait.max.ms`), and runs it again as soon as the Complete*
record is installed: the retry is judged from scratch, so nothing is answered that Kafka
would refuse. A request whose bound expires is answered CONCURRENT_TRANSACTIONS, as Kafka
would have answered it at once; one whose coordinator lost the partition meanwhile,
NOT_COORDINATOR (what it would be told if it arrived now). 0 turns parking off.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from cluster.broker.env import Scheduler, TimerHandle

log = logging.getLogger(__name__)
ErrorDone = Callable[[ErrorCode], None]


@dataclass(slots=True)
class _Parked:
    retry: Callable[[ErrorDone], None]  # the request run again, answering through its argument
    done: ErrorDone
    timer: TimerHandle | None = None
    answered: bool = False

    def answer(self, error: ErrorCode) -> None:
        if not self.answered:
            self.answered = True
            if self.timer is not None:
                self.timer.cancel()
            self.done(error)


class ParkedRequests:
    def __init__(self, scheduler: Scheduler, wait_max_ms: int) -> None:
        if wait_max_ms < 0:
            raise ValueError(f"transaction.add.partitions.wait.max.ms must be >= 0, not {wait_max_ms}")
        self._scheduler = scheduler
        self.wait_max_ms = wait_max_ms
        self._parked: dict[str, list[_Parked]] = {}

    def park(self, transactional_id: str, retry: Callable[[ErrorDone], None], done: ErrorDone) -> bool:
        """Hold a request until `release` or the bound; False (not parked) when parking is off."""
        if self.wait_max_ms <= 0:
            return False
        entry = _Parked(retry, done)
        queue = self._parked.setdefault(transactional_id, [])
        queue.append(entry)

        def expired() -> None:
            entry.timer = None
            if entry in queue:
                queue.remove(entry)
                if not queue and self._parked.get(transactional_id) is queue:
                    del self._parked[transactional_id]
            log.info("%s: a held AddPartitionsToTxn/AddOffsetsToTxn is answered CONCURRENT_TRANSACTIONS: the previous transaction has not "
                     "completed in %d ms", transactional_id, self.wait_max_ms)
            entry.answer(ErrorCode.concurrent_transactions)

        entry.timer = self._scheduler.call_later(self.wait_max_ms, expired)
        return True

    def release(self, transactional_id: str) -> None:
        """The previous transaction completed: run the parked requests again, in the order
        they came, each once the one before it is answered (they would otherwise meet each
        other's transition in flight)."""
        queue = self._parked.pop(transactional_id, None)
        if not queue:
            return

        def run_next() -> None:
            while queue:
                entry = queue.pop(0)
                if entry.answered:
                    continue
                if entry.timer is not None:
                    entry.timer.cancel()
                    entry.timer = None

                def answered(error: ErrorCode, entry: _Parked = entry) -> None:
                    entry.answer(error)
                    run_next()

                entry.retry(answered)
                return

        run_next()

    def drop(self, transactional_id: str, error: ErrorCode) -> None:
        """Answer every request parked for the id with `error` (the coordinator moved)."""
        for entry in self._parked.pop(transactional_id, []):
            entry.answer(error)

    def count(self, transactional_id: str) -> int:
        return sum(1 for e in self._parked.get(transactional_id, []) if not e.answered)
