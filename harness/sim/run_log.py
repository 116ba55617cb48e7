"""harness.log during a simulated run: the client library's records buffered, the harness's own
written at once.

A simulated run's clients log thousands of records into harness.log (aiokafka logs every
failed connection attempt to a killed broker: ~11,000 in a 65-s run with every broker down
for 25 s), and the run's `FileHandler` flushes the file after each one: a write system call
per record. While the simulation runs, `buffered_run_log` puts a handler over the same open
file that leaves the client's records in the file object's buffer, and

- flushes at every record of the harness's own logger (`logquake` and below: phase changes,
  warnings, errors), so each phase's end and every harness error reach the file in order
  with what the clients logged before them;
- flushes from a flusher thread within `flush_interval_s` (50 ms, as history.jsonl) of a
  buffered record, so a harness killed outright (SIGKILL) loses at most that much of the
  client's log, and a run that hangs still shows its last records;
- flushes when it ends, however the run ends (an exception passes through it).

The records, their order and their format are the run handler's; only the flushes differ.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator

FLUSH_INTERVAL_S = 0.05


class BufferedLogHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to `stream` (another handler's open file) and flushes it only when told to, for
    records of the loggers named in `flush_at`, or from its flusher thread."""

    def __init__(self, stream: object, *, flush_at: tuple[str, ...], flush_interval_s: float = FLUSH_INTERVAL_S) -> None:
        super().__init__(stream)  # type: ignore[arg-type]
        if not flush_interval_s > 0:
            raise ValueError(f"flush_interval_s must be positive, got {flush_interval_s!r}")
        self._flush_at = flush_at
        self._dirty = False
        self._stopped = threading.Event()
        self._flusher = threading.Thread(target=self._flush_periodically, args=(flush_interval_s,),
                                         name="harness-log-flusher", daemon=True)
        self._flusher.start()

    def emit(self, record: logging.LogRecord) -> None:
        super().emit(record)  # its flush() below only marks the buffer
        if record.name.startswith(self._flush_at):
            self.flush_now()

    def flush(self) -> None:
        # StreamHandler.emit calls this after every record: leave the bytes in the buffer.
        self._dirty = True

    def flush_now(self) -> None:
        with self.lock:  # type: ignore[union-attr]
            self._dirty = False
            stream = self.stream
            if stream is not None and not getattr(stream, "closed", False):
                stream.flush()

    def _flush_periodically(self, interval_s: float) -> None:
        while not self._stopped.wait(interval_s):
            if self._dirty:
                try:
                    self.flush_now()
                except (OSError, ValueError):  # a full disk, a closed file: the run's own handler reports it
                    return

    def close(self) -> None:
        self._stopped.set()
        if self._flusher is not threading.current_thread():
            self._flusher.join()
        try:
            self.flush_now()
        finally:
            super().close()  # the stream is the run handler's: left open


@contextlib.contextmanager
def buffered_run_log(handler: logging.Handler | None, harness_logger: logging.Logger,
                     client_loggers: tuple[str, ...]) -> Iterator[None]:
    """While inside, `harness_logger` and the `client_loggers` (which stop propagating to the
    root logger: a simulated run's reconnect attempts would flood the terminal) write through
    a `BufferedLogHandler` over `handler`'s file instead of `handler`, which is back when it
    ends. A handler without a stream is used as it is; without a handler (a run with no
    harness.log) the client loggers are only kept off the terminal."""
    clients = [logging.getLogger(name) for name in client_loggers]
    propagate = [log.propagate for log in clients]
    for log in clients:
        log.propagate = False
    buffered = None
    if isinstance(handler, logging.StreamHandler) and handler.stream is not None:
        buffered = BufferedLogHandler(handler.stream, flush_at=(harness_logger.name,))
        buffered.setFormatter(handler.formatter)
        buffered.setLevel(handler.level)
        harness_logger.removeHandler(handler)
        harness_logger.addHandler(buffered)
    used = buffered or handler
    if used is not None:
        for log in clients:
            log.addHandler(used)
    try:
        yield
    finally:
        try:
            if used is not None:
                for log in clients:
                    log.removeHandler(used)
            if buffered is not None:
                harness_logger.removeHandler(buffered)
                harness_logger.addHandler(handler)  # type: ignore[arg-type]
                buffered.close()
        finally:
            for log, before in zip(clients, propagate):
                log.propagate = before
