"""Incremental fetch sessions (KIP-227), both sides.

The leader keeps a `FetchSessionCache`: per session the partitions the fetcher asked for,
with their fetch positions and what the last response told it (HWM, LSO, log start). A full
fetch (session epoch 0) creates a session; an incremental one (epoch N > 0) names only the
partitions whose fetch position changed (and `forgotten_topics_data` for those it drops),
and its response carries only the partitions with something new: records, an error, a
diverging epoch, or a moved HWM, LSO or log start. Each session also tracks which of its
partitions changed since it last answered (`dirty`, set by the partition's wake-ups), so a
fetch costs what changed, not what the session holds. Session id 0 with epoch -1 is the
sessionless fetch every client may send (librdkafka always does); it works as before.

The follower keeps a `FetchSessionHandler` per leader: it decides what the next request
names and resets to a full fetch after any session error or lost answer, as Kafka's
FetchSessionHandler does.

Sans-I/O: times are given, ids come from the broker's Rng.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from kio.schema.errors import ErrorCode

from cluster.broker.env import Rng

if TYPE_CHECKING:
    from cluster.broker.partition import Partition

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0  # a full fetch that creates a session
FINAL_EPOCH = -1  # a sessionless fetch (or the close of session_id)
MAX_EPOCH = 2**31 - 1
# Kafka's MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS: a session unused for this long may be
# evicted by any new one.
SESSION_EVICTION_MS = 120_000


def next_epoch(epoch: int) -> int:
    """The epoch after `epoch`; it wraps to 1 (0 and -1 have their own meanings)."""
    return 1 if epoch >= MAX_EPOCH or epoch < INITIAL_EPOCH else epoch + 1


@dataclass(slots=True)
class FetchStamp:
    """When a session's fetcher last fetched: the leader's lazy stand-in for updating every
    idle partition's follower state at every fetch (see Partition.on_follower_fetch)."""

    last_fetch_ms: int = -1
    previous_fetch_ms: int = -1
    active: bool = True

    def fetched(self, now_ms: int) -> None:
        self.previous_fetch_ms = self.last_fetch_ms
        self.last_fetch_ms = now_ms


@dataclass(slots=True)
class SessionPartition:
    """One partition of a fetch (in a session, or of a sessionless request)."""

    key: Hashable  # (topic id or name, partition index)
    topic: Any  # the topic id (v13+) or name as the request named it
    partition_index: int
    fetch_offset: int
    log_start_offset: int
    max_bytes: int
    current_leader_epoch: int
    last_fetched_epoch: int
    # What the last response that carried this partition told the fetcher (-1: nothing yet).
    sent_high_watermark: int = -1
    sent_last_stable_offset: int = -1
    sent_log_start_offset: int = -1
    # The hosted partition this entry listens to for changes (sessions only).
    partition: Partition | None = None
    listener: Callable[[], None] | None = None

    def update_from(self, other: SessionPartition) -> None:
        self.fetch_offset = other.fetch_offset
        self.log_start_offset = other.log_start_offset
        self.max_bytes = other.max_bytes
        self.current_leader_epoch = other.current_leader_epoch
        self.last_fetched_epoch = other.last_fetched_epoch


@dataclass(eq=False, slots=True)
class FetchSession:
    session_id: int
    replica_id: int  # the follower's broker id, or -1 for a consumer
    uses_topic_ids: bool
    epoch: int  # the epoch the next incremental request must carry
    last_used_ms: int
    entries: dict[Hashable, SessionPartition] = field(default_factory=dict)
    dirty: set[Hashable] = field(default_factory=set)
    stamp: FetchStamp = field(default_factory=FetchStamp)
    # Called with the key of a partition that changed (the parked fetch of this session).
    waiter: Callable[[Hashable], None] | None = None

    @property
    def privileged(self) -> bool:
        return self.replica_id >= 0

    def watch(self, entry: SessionPartition, partition: Partition | None) -> None:
        """Listen to `partition` (the hosted replica `entry` names) for changes."""
        if entry.partition is partition:
            return
        self.unwatch(entry)
        if partition is None:
            return
        key = entry.key

        def changed() -> None:
            self.mark_dirty(key)

        entry.partition, entry.listener = partition, changed
        partition.add_append_listener(changed)

    def unwatch(self, entry: SessionPartition) -> None:
        if entry.partition is not None and entry.listener is not None:
            entry.partition.remove_append_listener(entry.listener)
            follower = entry.partition.followers.get(self.replica_id) if self.replica_id >= 0 else None
            if follower is not None and follower.stamp is self.stamp:
                follower.stamp = None  # its fetches no longer vouch for this partition
        entry.partition, entry.listener = None, None

    def mark_dirty(self, key: Hashable) -> None:
        if key not in self.dirty:
            self.dirty.add(key)
            entry = self.entries.get(key)
            if entry is not None and entry.partition is not None and self.replica_id >= 0:
                # Up to the fetch before this change the follower found nothing new at every
                # fetch: record that, as Kafka's per-fetch update would have.
                entry.partition.follower_idle_until_change(self.replica_id, self.stamp)
        if self.waiter is not None:
            self.waiter(key)

    def forget(self, key: Hashable) -> None:
        entry = self.entries.pop(key, None)
        self.dirty.discard(key)
        if entry is not None:
            self.unwatch(entry)

    def close(self) -> None:
        self.stamp.active = False
        for entry in self.entries.values():
            self.unwatch(entry)
        self.waiter = None


class FetchSessionCache:
    """The leader's sessions, at most `max_slots` (max.incremental.fetch.session.cache.slots).
    A new session takes a free slot, else evicts one unused for SESSION_EVICTION_MS, else (as
    Kafka) a follower's evicts a consumer's and a larger one a smaller one of its kind, the
    least recently used first; otherwise none is created (session id 0: sessionless)."""

    def __init__(self, max_slots: int, rng: Rng, eviction_ms: int = SESSION_EVICTION_MS) -> None:
        if max_slots < 0:
            raise ValueError(f"max.incremental.fetch.session.cache.slots must be >= 0, not {max_slots}")
        self.max_slots = max_slots
        self.eviction_ms = eviction_ms
        self._rng = rng
        self._sessions: dict[int, FetchSession] = {}
        self.evictions = 0

    def __len__(self) -> int:
        return len(self._sessions)

    def get(self, session_id: int) -> FetchSession | None:
        return self._sessions.get(session_id)

    def sessions(self) -> list[FetchSession]:
        return list(self._sessions.values())

    def remove(self, session_id: int) -> FetchSession | None:
        session = self._sessions.pop(session_id, None)
        if session is not None:
            session.close()
        return session

    def _new_id(self) -> int:
        while True:
            candidate = self._rng.getrandbits(31)
            if candidate != INVALID_SESSION_ID and candidate not in self._sessions:
                return candidate

    def _evictable(self, replica_id: int, size: int, now_ms: int) -> FetchSession | None:
        stale = [s for s in self._sessions.values() if now_ms - s.last_used_ms >= self.eviction_ms]
        if stale:
            return min(stale, key=lambda s: s.last_used_ms)
        privileged = replica_id >= 0

        def weaker(s: FetchSession) -> bool:
            if privileged != s.privileged:
                return privileged
            return len(s.entries) < size

        candidates = [s for s in self._sessions.values() if weaker(s)]
        if not candidates:
            return None
        return min(candidates, key=lambda s: (s.privileged, len(s.entries), s.last_used_ms))

    def create(self, replica_id: int, uses_topic_ids: bool, entries: list[SessionPartition], now_ms: int) -> FetchSession | None:
        if self.max_slots == 0:
            return None
        if len(self._sessions) >= self.max_slots:
            victim = self._evictable(replica_id, len(entries), now_ms)
            if victim is None:
                return None
            self.remove(victim.session_id)
            self.evictions += 1
        session = FetchSession(self._new_id(), replica_id, uses_topic_ids, next_epoch(INITIAL_EPOCH), now_ms)
        for entry in entries:
            session.entries[entry.key] = entry
        self._sessions[session.session_id] = session
        return session


# ---- the follower's side ----------------------------------------------------------------


class PartitionFetchState(NamedTuple):
    """What a follower asks of one partition; a change is sent in the next incremental fetch.
    A tuple: built and compared for every followed partition at every fetch (the replica
    fetcher builds plain tuples in this order, which compare equal, to skip the constructor)."""

    fetch_offset: int
    log_start_offset: int
    max_bytes: int
    current_leader_epoch: int
    last_fetched_epoch: int


@dataclass(frozen=True, slots=True)
class FetchPlan:
    session_id: int
    epoch: int
    send: list[Hashable]  # partitions the request names
    forget: list[Hashable]  # partitions it drops from the session
    wanted: dict[Hashable, PartitionFetchState]

    @property
    def full(self) -> bool:
        return self.epoch in (INITIAL_EPOCH, FINAL_EPOCH)


class FetchSessionHandler:
    """One follower's session with one leader (Kafka's FetchSessionHandler)."""

    def __init__(self) -> None:
        self.session_id = INVALID_SESSION_ID
        self.epoch = INITIAL_EPOCH  # of the next request: 0 means a full one
        self._session: dict[Hashable, PartitionFetchState] = {}

    def build(self, wanted: dict[Hashable, PartitionFetchState]) -> FetchPlan:
        if self.epoch == INITIAL_EPOCH:
            # A full fetch: closes our old session (if any) and asks for a new one.
            return FetchPlan(self.session_id, INITIAL_EPOCH, list(wanted), [], dict(wanted))
        session = self._session
        send = [key for key, state in wanted.items() if session.get(key) != state]
        forget = [key for key in session if key not in wanted]
        return FetchPlan(self.session_id, self.epoch, send, forget, dict(wanted))

    def handle_response(self, plan: FetchPlan, error_code: int, session_id: int) -> bool:
        """Whether the response can be used; if not, the next fetch is a full one."""
        if error_code != ErrorCode.none.value:
            if error_code == ErrorCode.fetch_session_id_not_found.value:
                self.session_id = INVALID_SESSION_ID
            self._reset()
            return False
        if plan.full:
            self.session_id = session_id
            if session_id == INVALID_SESSION_ID:
                self._reset()  # the leader made no session (cache full): stay sessionless
            else:
                self.epoch = next_epoch(INITIAL_EPOCH)
                self._session = dict(plan.wanted)
            return True
        if session_id != self.session_id:
            self._reset()
            return False
        for key in plan.send:
            self._session[key] = plan.wanted[key]
        for key in plan.forget:
            self._session.pop(key, None)
        self.epoch = next_epoch(self.epoch)
        return True

    def handle_error(self) -> None:
        """No answer (lost connection, timeout): the leader may or may not have moved the
        session on, so start over with a full fetch."""
        self._reset()

    def _reset(self) -> None:
        self.epoch = INITIAL_EPOCH
        self._session = {}
