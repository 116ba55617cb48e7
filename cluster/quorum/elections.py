"""The pure rules of elections and commitment, kept apart from the state machine in raft.py
so each can be read (and tested) on its own."""

from __future__ import annotations

from collections.abc import Iterable

from cluster.broker.env import Rng


def majority(voter_count: int) -> int:
    if voter_count < 1:
        raise ValueError(f"a quorum needs at least one voter, not {voter_count}")
    return voter_count // 2 + 1


def log_is_up_to_date(candidate_last_epoch: int, candidate_end_offset: int, own_last_epoch: int, own_end_offset: int) -> bool:
    """Raft's election restriction: grant only to a candidate whose log is at least as
    fresh as ours (a later last epoch, or the same one and at least as long), so every
    winner holds every committed record."""
    return (candidate_last_epoch, candidate_end_offset) >= (own_last_epoch, own_end_offset)


def randomized_timeout_ms(base_ms: int, rng: Rng) -> float:
    """KRaft's election timeout: uniform in [base, 2 * base), so candidates rarely collide."""
    return base_ms * (1.0 + rng.random())


def backoff_ms(attempt: int, retry_backoff_ms: int, max_ms: int, rng: Rng) -> float:
    """Exponential backoff with jitter after a lost election (attempt 1, 2, ...)."""
    ceiling = min(max_ms, retry_backoff_ms * (2 ** min(attempt, 20)))
    return max(retry_backoff_ms, ceiling * rng.random())


def majority_end_offset(end_offsets: Iterable[int], voter_count: int) -> int:
    """The largest offset that a majority of voters have replicated up to."""
    ordered = sorted(end_offsets, reverse=True)
    need = majority(voter_count)
    if len(ordered) < need:
        return -1
    return ordered[need - 1]


def next_high_watermark(current: int, majority_offset: int, epoch_start_offset: int, *, count_previous_epochs: bool) -> int:
    """The leader's new high watermark. Safe rule (Raft section 5.4.2, KRaft's LeaderState):
    it moves only once a majority holds a record of the leader's own epoch, i.e. past the
    epoch's first offset; records of earlier epochs are committed only by that. With
    `count_previous_epochs` (the unsafe switch) a majority holding earlier records is taken
    as enough, which Raft's Figure 8 shows can commit a record a later leader erases."""
    if majority_offset <= current:
        return current
    if not count_previous_epochs and majority_offset <= epoch_start_offset:
        return current
    return majority_offset
