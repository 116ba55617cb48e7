"""The quorum's settings, read from the controller's properties (KRaft's names where KRaft
has the setting, with its defaults), and the two unsafe switches that model real consensus
bugs (ours; both off by default)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

# KRaft's defaults (org.apache.kafka.raft.QuorumConfig, MetadataLogConfig).
DEFAULTS: dict[str, str] = {
    "controller.quorum.election.timeout.ms": "1000",
    "controller.quorum.fetch.timeout.ms": "2000",
    "controller.quorum.election.backoff.max.ms": "1000",
    "controller.quorum.request.timeout.ms": "2000",
    "controller.quorum.retry.backoff.ms": "20",
    "controller.quorum.fetch.max.wait.ms": "500",
    # Ours: how many bytes of the log one follower fetch asks for (at least one batch comes
    # back whatever the limit, as KIP-74 says).
    "controller.quorum.fetch.max.bytes": str(8 * 1024 * 1024),
    # Snapshots: after this many bytes of new committed records, or this long.
    "metadata.log.max.record.bytes.between.snapshots": str(20 * 1024 * 1024),
    "metadata.log.max.snapshot.interval.ms": str(60 * 60 * 1000),
    "controller.quorum.vote.skip.log.check": "false",
    "controller.quorum.commit.previous.epoch.by.count": "false",
}

UNSAFE_SWITCHES = ("controller.quorum.vote.skip.log.check", "controller.quorum.commit.previous.epoch.by.count")


class QuorumConfigError(ValueError):
    """A quorum setting that cannot be used; the message names it."""


def _int(props: Mapping[str, str], key: str, minimum: int) -> int:
    text = str(props.get(key, DEFAULTS[key])).strip()
    try:
        value = int(text)
    except ValueError:
        raise QuorumConfigError(f"{key}: {text!r} is not an integer") from None
    if value < minimum:
        raise QuorumConfigError(f"{key}: {value} is below the minimum {minimum}")
    return value


def _bool(props: Mapping[str, str], key: str) -> bool:
    text = str(props.get(key, DEFAULTS[key])).strip().lower()
    if text not in ("true", "false"):
        raise QuorumConfigError(f"{key}: {text!r} is not true or false")
    return text == "true"


@dataclass(frozen=True, slots=True)
class QuorumConfig:
    election_timeout_ms: int = 1000
    fetch_timeout_ms: int = 2000
    election_backoff_max_ms: int = 1000
    request_timeout_ms: int = 2000
    retry_backoff_ms: int = 20
    fetch_max_wait_ms: int = 500
    fetch_max_bytes: int = 8 * 1024 * 1024
    snapshot_max_new_record_bytes: int = 20 * 1024 * 1024
    snapshot_max_interval_ms: int = 60 * 60 * 1000
    # Unsafe: grant votes (and pre-votes) without comparing the candidate's log with ours,
    # so a candidate missing committed records can win and truncate them everywhere.
    vote_skip_log_check: bool = False
    # Unsafe: Raft's Figure 8. The leader advances the high watermark over records of an
    # earlier epoch because a majority holds them, without one record of its own epoch.
    commit_previous_epoch_by_count: bool = False

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> QuorumConfig:
        return cls(
            election_timeout_ms=_int(props, "controller.quorum.election.timeout.ms", 1),
            fetch_timeout_ms=_int(props, "controller.quorum.fetch.timeout.ms", 1),
            election_backoff_max_ms=_int(props, "controller.quorum.election.backoff.max.ms", 1),
            request_timeout_ms=_int(props, "controller.quorum.request.timeout.ms", 1),
            retry_backoff_ms=_int(props, "controller.quorum.retry.backoff.ms", 0),
            fetch_max_wait_ms=_int(props, "controller.quorum.fetch.max.wait.ms", 0),
            fetch_max_bytes=_int(props, "controller.quorum.fetch.max.bytes", 1),
            snapshot_max_new_record_bytes=_int(props, "metadata.log.max.record.bytes.between.snapshots", 1),
            snapshot_max_interval_ms=_int(props, "metadata.log.max.snapshot.interval.ms", 0),
            vote_skip_log_check=_bool(props, "controller.quorum.vote.skip.log.check"),
            commit_previous_epoch_by_count=_bool(props, "controller.quorum.commit.previous.epoch.by.count"),
        )
