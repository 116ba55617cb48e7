"""What kio's writer accepts but its reader cannot read back, for the fuzzers to steer clear of.

kio's reader builds a timedelta from milliseconds through int64 microseconds, so a duration
beyond 2^63 µs (about 292,000 years) that its writer encodes does not decode. No client sends
one (OffsetCommit's retention time is -1 or days), so generated requests stay inside it."""

from __future__ import annotations

import dataclasses
import datetime

MAX_READABLE_DURATION = datetime.timedelta(microseconds=2**63 - 1000)


def readable_durations(value: object) -> bool:
    """True when every timedelta anywhere in `value` (a kio entity) reads back."""
    if isinstance(value, datetime.timedelta):
        return -MAX_READABLE_DURATION <= value <= MAX_READABLE_DURATION
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return all(readable_durations(getattr(value, f.name)) for f in dataclasses.fields(value))
    if isinstance(value, tuple):
        return all(readable_durations(v) for v in value)
    return True
