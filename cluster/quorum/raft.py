"""A Raft node shaped as KRaft's KafkaRaftClient (KIP-595, KIP-996 pre-vote, KIP-630
snapshots), sans-I/O: the clock, scheduler, random source, disk and outbound connections are
injected, so the same core runs in a controller process and in the simulator.

Roles: Unattached (an epoch and maybe a vote, no leader known), Follower (fetching from the
epoch's leader), Prospective (pre-voting: asks whether a majority would vote for it before
bumping the epoch, so a node cut off from the leader cannot disrupt the quorum by raising
epochs), Candidate (a new epoch, voted for itself), Leader, and Resigned (shut down).

- Elections: a node whose leader has not answered a fetch for `fetch_timeout_ms`, or that
  knows no leader for a randomized election timeout, pre-votes; a majority of pre-votes
  makes it a candidate of epoch + 1; a majority of votes makes it leader. A voter grants at
  most one vote per epoch (durably, before it answers), and only to a candidate whose log is
  at least as fresh as its own (last epoch, then end offset).
- Replication: followers fetch from the leader with their end offset and the epoch of
  their last record; the leader answers a mismatch with the diverging epoch (the largest
  epoch it shares and where it ends), and the follower truncates there. A follower behind
  the leader's log start is told the snapshot id and fetches the snapshot.
- Commitment: the leader's first record in an epoch is a LeaderChange control record; the
  high watermark is the offset a majority of voters have fsynced, and it moves only once
  that includes the epoch's first record. Committed records reach the state machine through
  `QuorumListener.on_commit` on every node, in order, once per process lifetime.
- A leader that has not heard fetches from a majority within 1.5 fetch timeouts resigns
  (KRaft's check-quorum), so a leader cut off in a minority stops accepting appends.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from kio.schema.errors import ErrorCode

from cluster.broker.env import ClientInfo, Clock, Endpoint, Outbound, OutboundResult, Reply, Response, Rng, Scheduler, TimerHandle
from cluster.protocol.codec import Request, encode_response
from cluster.protocol.versions import ApiKey
from cluster.quorum import rpc
from cluster.quorum.api import AppendDone, QuorumListener, QuorumState, QuorumVoters
from cluster.quorum.config import QuorumConfig
from cluster.quorum.elections import backoff_ms, log_is_up_to_date, majority, majority_end_offset, next_high_watermark, randomized_timeout_ms
from cluster.quorum.log import ReplicatedLog
from cluster.quorum.quorum_state_store import ElectionState, QuorumStateStore
from cluster.quorum.snapshot import SnapshotId
from cluster.storage.disk import Disk

log = logging.getLogger(__name__)
SNAPSHOT_CHUNK_BYTES = 1 << 20
_NEVER = -(1 << 62)


class Role(str, Enum):
    UNATTACHED = "unattached"
    FOLLOWER = "follower"
    PROSPECTIVE = "prospective"
    CANDIDATE = "candidate"
    LEADER = "leader"
    RESIGNED = "resigned"


@dataclass(frozen=True, slots=True)
class Transition:
    """One change of a node's role, epoch or leader, for the checks and for tests."""

    time_ns: int
    node_id: int
    epoch: int
    role: str
    leader_id: int | None


@dataclass(slots=True)
class _Progress:
    """The leader's view of one voter."""

    end_offset: int = -1  # fsynced end offset it last fetched from (-1: not yet)
    last_fetch_ns: int = _NEVER
    sent_high_watermark: int = -1
    begin_resent_ns: int = _NEVER


@dataclass(slots=True)
class _ParkedFetch:
    voter_id: int
    request: Request
    reply: Reply
    fetch_offset: int
    max_bytes: int
    timer: TimerHandle | None = None


@dataclass(slots=True)
class _SnapshotDownload:
    snapshot_id: SnapshotId
    data: bytearray = field(default_factory=bytearray)


class RaftQuorum:
    """`MetadataQuorum` (cluster/quorum/api.py) on Raft."""

    def __init__(self, node_id: int, voters: QuorumVoters, config: QuorumConfig, disk: Disk, data_dir: str, clock: Clock,
                 scheduler: Scheduler, rng: Rng, outbound: Outbound, listener: QuorumListener, *,
                 observer: Callable[[Transition], None] | None = None) -> None:
        if node_id not in voters.voters:
            raise ValueError(f"node {node_id} is not one of the voters {sorted(voters.voters)} (controller.quorum.voters)")
        self.node_id = node_id
        self.voters: dict[int, Endpoint] = dict(voters.voters)
        self.config = config
        self._disk = disk
        self._data_dir = data_dir
        self.clock = clock
        self.scheduler = scheduler
        self.rng = rng
        self.outbound = outbound
        self.listener = listener
        self.observer = observer
        self.role = Role.RESIGNED
        self.epoch = 0
        self.voted_for: int | None = None
        self.leader_id: int | None = None
        self.high_watermark = 0
        self.applied_offset = 0  # the next offset to deliver through on_commit
        self._persisted: ElectionState | None = None
        self._store: QuorumStateStore | None = None
        self._log: ReplicatedLog | None = None
        self._generation = 0  # bumped at every transition: stale callbacks see it and stop
        self._timer: TimerHandle | None = None
        self._timer_due_ns = 0
        self._timer_action: Callable[[], None] | None = None
        # elections
        self._granted: set[int] = set()
        # A prospective that granted a pre-vote to a voter ahead of it (fresher log, or as
        # fresh and a higher id) lets that voter stand first, for a few round trips: when
        # several followers lose the leader at once, they would otherwise all stand and
        # split the vote, costing an election timeout.
        self._deferring_to: int | None = None
        self._pre_vote_retries: dict[int, int] = {}  # per voter, in this round
        self._election_attempts = 0
        # follower
        self._last_leader_contact_ns = _NEVER
        self._download: _SnapshotDownload | None = None
        # leader
        self._progress: dict[int, _Progress] = {}
        self._epoch_start_offset = 0
        self._leader_ready = False
        self._pending: deque[tuple[int, int, AppendDone]] = deque()  # (next offset, base offset, on_done)
        self._parked: list[_ParkedFetch] = []
        self._after_append_scheduled = False
        # snapshots
        self._bytes_since_snapshot = 0
        self._last_snapshot_ns = 0
        self._delivering = False
        # The recent role changes (the observer sees every one); bounded for long-lived
        # processes, whose isolated nodes pre-vote every few seconds.
        self.transitions: deque[Transition] = deque(maxlen=10_000)
        self.snapshots_installed = 0  # from the leader, by FetchSnapshot

    # ---- MetadataQuorum ---------------------------------------------------------------------

    @property
    def state(self) -> QuorumState:
        leader = self.leader_id if self.role in (Role.FOLLOWER, Role.LEADER) else None
        end = self._log.end_offset if self._log is not None else 0
        return QuorumState(self.node_id, self.epoch, leader, self.high_watermark, end)

    @property
    def is_leader(self) -> bool:
        """Leads and has delivered everything committed before its epoch (the controller
        may append and act)."""
        return self.role is Role.LEADER and self._leader_ready

    @property
    def log(self) -> ReplicatedLog:
        assert self._log is not None, "the quorum has not started"
        return self._log

    def start(self) -> None:
        now_ms = self.clock.wall_ms()
        self._store = QuorumStateStore(self._disk, self._data_dir)
        stored = self._store.read()
        self._persisted = stored
        self._log = ReplicatedLog(self._disk, self._data_dir, now_ms)
        snapshot = self._log.snapshots.latest_id
        if snapshot is not None:
            self.listener.load_snapshot(snapshot.end_offset, self._log.snapshots.read(snapshot))
            self.applied_offset = snapshot.end_offset
        else:
            self.applied_offset = self._log.start_offset
        self.high_watermark = self.applied_offset
        self._last_snapshot_ns = self.clock.monotonic_ns()
        self.epoch = stored.epoch
        self.voted_for = stored.voted_for
        if stored.leader_id is not None and stored.leader_id != self.node_id and stored.leader_id in self.voters:
            self._become_follower(stored.epoch, stored.leader_id)
        else:
            # A node that led this epoch before it stopped cannot lead it again (its
            # uncommitted appends may differ from what it would write now): it waits for
            # an election in a later epoch, as KRaft's Resigned state does.
            self._become_unattached(stored.epoch, stored.voted_for, timeout_ms=0 if len(self.voters) == 1 else None)

    def shutdown(self) -> None:
        if self.role is Role.RESIGNED:
            return
        if self.role is Role.LEADER:
            # Graceful resignation: the voters start an election at once instead of waiting
            # out their fetch timeouts; the freshest first (KRaft's preferred successors).
            successors = sorted((v for v in self.voters if v != self.node_id), key=lambda v: -self._progress[v].end_offset)
            body = rpc.end_quorum_epoch_request(self.node_id, self.epoch, successors)
            for voter in successors:
                self.outbound.send(self.voters[voter].on_channel("quorum"), ApiKey.END_QUORUM_EPOCH, rpc.END_QUORUM_EPOCH_VERSION, body,
                                   lambda _: None, self.config.request_timeout_ms)
        was_leader = self.role is Role.LEADER
        epoch = self.epoch
        self._set_role(Role.RESIGNED, self.epoch, None)
        if was_leader:
            self.listener.on_resign(epoch, None)
        if self._log is not None:
            self._log.close()

    def append(self, records: list[bytes], on_done: AppendDone) -> int | None:
        if not self.is_leader:
            return None
        if not records:
            raise ValueError("append of an empty batch")
        base, end = self.log.append_records(records, self.epoch, self.clock.wall_ms())
        self._progress[self.node_id].end_offset = end
        self._pending.append((end, base, on_done))
        # The commit (and on_commit, on_done) come in an event of their own, never inside
        # the caller's append: a single voter commits at once, and the controller must not
        # be re-entered while it is appending.
        if not self._after_append_scheduled:
            self._after_append_scheduled = True

            def after_append() -> None:
                self._after_append_scheduled = False
                if self.role is Role.LEADER:
                    self._maybe_advance_high_watermark()
                    self._wake_parked()

            self.scheduler.call_later(0, after_append)
        return base

    def read_committed(self, offset: int, max_bytes: int) -> list[bytes | memoryview]:
        """Committed batches from `offset` (raises OffsetOutOfRangeError below the log start:
        that reader needs the snapshot)."""
        return self.log.read(offset, max_bytes, max_offset=self.high_watermark)

    def latest_snapshot(self) -> tuple[int, int] | None:
        snapshot = self.log.snapshots.latest_id
        return None if snapshot is None else (snapshot.end_offset, snapshot.epoch)

    def handle(self, request: Any, client: ClientInfo, reply: Reply) -> bool:
        api_key = request.api_key
        if api_key == ApiKey.FETCH:
            partition = rpc.fetch_partition(request.api_version, request.body)
            if partition is None or rpc.fetch_replica_id(request.body) not in self.voters:
                return False  # a broker's metadata fetch: the controller serves it (read_committed)
            self._handle_fetch(request, partition, reply)
            return True
        handler = {
            ApiKey.VOTE: self._handle_vote,
            ApiKey.BEGIN_QUORUM_EPOCH: self._handle_begin_quorum_epoch,
            ApiKey.END_QUORUM_EPOCH: self._handle_end_quorum_epoch,
            ApiKey.FETCH_SNAPSHOT: self._handle_fetch_snapshot,
            ApiKey.DESCRIBE_QUORUM: self._handle_describe_quorum,
        }.get(api_key)
        if handler is None:
            return False
        handler(request, reply)
        return True

    # ---- transitions --------------------------------------------------------------------------

    def _persist(self, epoch: int, voted_for: int | None, leader_id: int | None) -> None:
        state = ElectionState(epoch, voted_for, leader_id)
        if state != self._persisted:
            assert self._store is not None
            self._store.write(state)  # fsynced before anything acts on it
            self._persisted = state

    def _set_role(self, role: Role, epoch: int, leader_id: int | None) -> None:
        if epoch < self.epoch:
            raise AssertionError(f"node {self.node_id}: epoch would go back from {self.epoch} to {epoch}")
        was_leader = self.role is Role.LEADER
        self._generation += 1
        self._cancel_timer()
        if was_leader and role is not Role.LEADER:
            self._step_down()
        self.role = role
        self.epoch = epoch
        self.leader_id = leader_id
        self._granted = set()
        self._deferring_to = None
        self._pre_vote_retries = {}
        self._download = None
        transition = Transition(self.clock.monotonic_ns(), self.node_id, epoch, role.value, leader_id)
        self.transitions.append(transition)
        if self.observer is not None:
            self.observer(transition)

    def _step_down(self) -> None:
        """Leaving leadership: appends not yet committed are answered as failed (the next
        leader may or may not keep them), parked fetches are answered."""
        pending, self._pending = self._pending, deque()
        for _, _, on_done in pending:
            on_done(None, f"node {self.node_id} lost the leadership of epoch {self.epoch} before the append was committed")
        parked, self._parked = self._parked, []
        for fetch in parked:
            if fetch.timer is not None:
                fetch.timer.cancel()
            self._answer_fetch_error(fetch.request, fetch.reply, ErrorCode.not_leader_or_follower)
        self._progress = {}
        self._leader_ready = False

    def _observe_epoch(self, epoch: int, leader_id: int | None, *, adopt_leader: bool = True) -> bool:
        """A message told of `epoch` (and its leader, if known). A newer epoch ends what
        this node was doing; True when it moved on (the caller's state is gone). With
        `adopt_leader` a leader of our own epoch is followed too: not from vote answers,
        whose sender may name the very leader we stopped hearing from."""
        if epoch > self.epoch:
            was_leader = self.role is Role.LEADER
            old_epoch = self.epoch
            if leader_id is not None and leader_id >= 0 and leader_id != self.node_id and leader_id in self.voters:
                self._become_follower(epoch, leader_id)
            else:
                self._become_unattached(epoch, None)
            if was_leader:
                self.listener.on_resign(old_epoch, self.leader_id)
            return True
        if (adopt_leader and epoch == self.epoch and leader_id is not None and leader_id >= 0 and leader_id != self.node_id and leader_id in self.voters
                and self.role in (Role.UNATTACHED, Role.PROSPECTIVE, Role.CANDIDATE)):
            self._become_follower(epoch, leader_id)
            return True
        return False

    def _become_unattached(self, epoch: int, voted_for: int | None, timeout_ms: float | None = None) -> None:
        self._persist(epoch, voted_for, None)
        self.voted_for = voted_for
        self._set_role(Role.UNATTACHED, epoch, None)
        self._arm(randomized_timeout_ms(self.config.election_timeout_ms, self.rng) if timeout_ms is None else timeout_ms,
                  self._begin_pre_vote)

    def _become_follower(self, epoch: int, leader_id: int) -> None:
        voted_for = self.voted_for if epoch == self.epoch else None
        self._persist(epoch, voted_for, leader_id)
        self.voted_for = voted_for
        self._set_role(Role.FOLLOWER, epoch, leader_id)
        self._last_leader_contact_ns = self.clock.monotonic_ns()
        self._election_attempts = 0
        self._arm(self.config.fetch_timeout_ms, self._check_fetch_timeout)
        self._fetch()

    def _begin_pre_vote(self) -> None:
        if self.role is Role.RESIGNED or self.role is Role.LEADER:
            return
        leader = self.leader_id if self.role is Role.FOLLOWER else None
        self._set_role(Role.PROSPECTIVE, self.epoch, None)
        self._last_leader_contact_ns = _NEVER if leader is None else self._last_leader_contact_ns
        self._granted = {self.node_id}
        self._arm(randomized_timeout_ms(self.config.election_timeout_ms, self.rng), self._election_lost)
        if not self._check_votes(pre_vote=True):
            self._request_votes(pre_vote=True)

    def _become_candidate(self) -> None:
        epoch = self.epoch + 1
        self._persist(epoch, self.node_id, None)
        self.voted_for = self.node_id
        self._set_role(Role.CANDIDATE, epoch, None)
        self._granted = {self.node_id}
        self._arm(randomized_timeout_ms(self.config.election_timeout_ms, self.rng), self._election_lost)
        if not self._check_votes(pre_vote=False):
            self._request_votes(pre_vote=False)

    def _election_lost(self) -> None:
        """No majority within the election timeout: pre-vote again after a backoff."""
        self._election_attempts += 1
        generation = self._generation
        delay = backoff_ms(self._election_attempts, self.config.retry_backoff_ms, self.config.election_backoff_max_ms, self.rng)
        self._arm(delay, lambda: self._begin_pre_vote() if self._generation == generation else None)

    def _check_votes(self, *, pre_vote: bool) -> bool:
        if len(self._granted) < majority(len(self.voters)):
            return False
        if pre_vote and self._deferring_to is not None:
            return False  # _defer_to's timer checks again
        if pre_vote:
            self._become_candidate()
        else:
            self._become_leader()
        return True

    def _become_leader(self) -> None:
        self._persist(self.epoch, self.node_id, self.node_id)
        self._set_role(Role.LEADER, self.epoch, self.node_id)
        self._election_attempts = 0
        now_ns = self.clock.monotonic_ns()
        self._progress = {v: _Progress(last_fetch_ns=now_ns) for v in self.voters}
        base, end = self.log.append_leader_change(self.epoch, self.node_id, self.clock.wall_ms())
        self._epoch_start_offset = base
        self._progress[self.node_id].end_offset = end
        self._leader_ready = False
        for voter in self.voters:
            if voter != self.node_id:
                self._send_begin_quorum_epoch(voter, 0)
        self._arm(self.config.fetch_timeout_ms * 1.5, self._check_quorum)
        self._maybe_advance_high_watermark()

    # ---- timers ---------------------------------------------------------------------------------

    def _arm(self, delay_ms: float, action: Callable[[], None]) -> None:
        self._cancel_timer()
        generation = self._generation
        self._timer_action = action

        def fire() -> None:
            if self._generation == generation and self._timer_action is action:
                self._timer = None
                action()

        self._timer = self.scheduler.call_later(delay_ms, fire)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._timer_action = None

    def _check_fetch_timeout(self) -> None:
        """Follower: no answer from the leader for fetch_timeout_ms starts a pre-vote."""
        silent_ms = (self.clock.monotonic_ns() - self._last_leader_contact_ns) / 1e6
        if silent_ms < self.config.fetch_timeout_ms:
            # At least 1 us: a remainder under 1 ns in floats would re-arm at the same instant forever.
            self._arm(max(self.config.fetch_timeout_ms - silent_ms, 1e-3), self._check_fetch_timeout)
            return
        log.info("quorum node %d: no fetch answered by leader %s for %.0f ms (epoch %d)", self.node_id, self.leader_id, silent_ms, self.epoch)
        self._begin_pre_vote()

    def _check_quorum(self) -> None:
        """Leader: resign when a majority has not fetched within 1.5 fetch timeouts."""
        window_ns = int(self.config.fetch_timeout_ms * 1.5 * 1e6)
        now_ns = self.clock.monotonic_ns()
        live = sum(1 for v, p in self._progress.items() if v == self.node_id or now_ns - p.last_fetch_ns < window_ns)
        if live >= majority(len(self.voters)):
            # Voters not fetching may have missed BeginQuorumEpoch (cut off, restarted, or
            # pre-voting among themselves): tell them again who leads.
            # Once per fetch timeout at most.
            fetch_timeout_ns = int(self.config.fetch_timeout_ms * 1e6)
            for voter, progress in self._progress.items():
                if voter != self.node_id and now_ns - progress.last_fetch_ns >= fetch_timeout_ns \
                        and now_ns - progress.begin_resent_ns >= fetch_timeout_ns:
                    progress.begin_resent_ns = now_ns
                    self._send_begin_quorum_epoch(voter, -1)
            # Check again when the first voter that counts now would stop counting.
            expiries = [p.last_fetch_ns + window_ns for v, p in self._progress.items() if v != self.node_id and now_ns - p.last_fetch_ns < window_ns]
            next_ms = (min(expiries) - now_ns) / 1e6 + 1 if expiries else self.config.fetch_timeout_ms * 1.5
            self._arm(min(max(next_ms, 1.0), self.config.fetch_timeout_ms * 1.5), self._check_quorum)
            return
        log.info("quorum node %d: leader of epoch %d heard from %d of %d voters: resigning", self.node_id, self.epoch, live, len(self.voters))
        epoch = self.epoch
        self._become_unattached(self.epoch, self.voted_for)
        self.listener.on_resign(epoch, None)

    # ---- votes --------------------------------------------------------------------------------

    def _request_votes(self, *, pre_vote: bool) -> None:
        for voter in self.voters:
            if voter != self.node_id:
                self._send_vote(voter, pre_vote)

    def _send_vote(self, voter: int, pre_vote: bool) -> None:
        generation = self._generation
        epoch = self.epoch + 1 if pre_vote else self.epoch
        body = rpc.vote_request(self.node_id, voter, epoch, self.log.last_epoch, self.log.end_offset, pre_vote)

        def done(result: OutboundResult) -> None:
            if self._generation != generation:
                return
            if not result.ok:
                self.scheduler.call_later(self.config.retry_backoff_ms,
                                          lambda: self._send_vote(voter, pre_vote) if self._generation == generation else None)
                return
            answer = rpc.first_partition(result.body)
            if answer is None or result.body.error_code != ErrorCode.none:
                return
            leader = int(answer.leader_id)
            # A leader of our epoch is followed when the leader itself answered (it lives);
            # another voter naming it may name the very leader we stopped hearing from.
            if self._observe_epoch(int(answer.leader_epoch), leader if leader >= 0 else None, adopt_leader=leader == voter):
                return
            if answer.vote_granted:
                self._granted.add(voter)
                self._check_votes(pre_vote=pre_vote)
            elif pre_vote and leader >= 0:
                # Refused because it still follows a leader: followers notice the leader's
                # silence at slightly different times, so ask again shortly in this round
                # (backing off: a voter whose leader lives keeps refusing).
                asked = self._pre_vote_retries.get(voter, 0)
                self._pre_vote_retries[voter] = asked + 1
                self.scheduler.call_later(self.config.retry_backoff_ms * 2 ** min(asked, 10),
                                          lambda: self._send_vote(voter, pre_vote) if self._generation == generation else None)

        self.outbound.send(self.voters[voter].on_channel("quorum"), ApiKey.VOTE, rpc.VOTE_VERSION, body, done, self.config.request_timeout_ms)

    def _defer_to(self, candidate: int) -> None:
        """Let `candidate` stand first, for a few round trips only: if its Vote does not
        come (it cannot collect a majority, or cannot reach us), we stand ourselves."""
        self._deferring_to = candidate
        generation = self._generation

        def expire() -> None:
            if self._generation == generation and self._deferring_to == candidate:
                self._deferring_to = None
                self._check_votes(pre_vote=True)

        window_ms = max(4 * self.config.retry_backoff_ms, 50)
        # Jittered, so prospectives deferring to the same voter do not all stand at once.
        self.scheduler.call_later(window_ms * (1 + self.rng.random()), expire)

    def _ahead_of_us(self, candidate: int, last_epoch: int, end_offset: int) -> bool:
        """The order in which prospectives yield to each other: fresher log first, then the
        higher id. With the log check switched off, logs count for nothing here either."""
        if self.config.vote_skip_log_check:
            return candidate > self.node_id
        return (last_epoch, end_offset, candidate) > (self.log.last_epoch, self.log.end_offset, self.node_id)

    def _has_live_leader(self) -> bool:
        if self.role is Role.LEADER:
            return True
        return self.role is Role.FOLLOWER and (self.clock.monotonic_ns() - self._last_leader_contact_ns) / 1e6 < self.config.fetch_timeout_ms

    def _handle_vote(self, request: Request, reply: Reply) -> None:
        version = request.api_version
        p = rpc.first_partition(request.body)
        if p is None or int(p.replica_id) not in self.voters or self.role is Role.RESIGNED:
            error = ErrorCode.inconsistent_voter_set if p is not None and self.role is not Role.RESIGNED else ErrorCode.not_leader_or_follower
            self._respond(request, reply, rpc.vote_response(version, error, self.leader_id, self.epoch, False))
            return
        candidate = int(p.replica_id)
        candidate_epoch = int(p.replica_epoch)
        pre_vote = bool(getattr(p, "pre_vote", False))
        if candidate_epoch < self.epoch:
            self._respond(request, reply, rpc.vote_response(version, ErrorCode.fenced_leader_epoch, self.leader_id, self.epoch, False))
            return
        if not pre_vote and candidate_epoch > self.epoch:
            self._observe_epoch(candidate_epoch, None)
        log_ok = self.config.vote_skip_log_check or log_is_up_to_date(int(p.last_offset_epoch), int(p.last_offset),
                                                                      self.log.last_epoch, self.log.end_offset)
        if pre_vote:
            granted = log_ok and not self._has_live_leader()
            if granted and self.role is Role.PROSPECTIVE and self._deferring_to is None and \
                    self._ahead_of_us(candidate, int(p.last_offset_epoch), int(p.last_offset)):
                self._defer_to(candidate)
        elif self.voted_for == candidate:
            granted = True
        elif self.voted_for is None and self.role in (Role.UNATTACHED, Role.PROSPECTIVE) and log_ok:
            self._become_unattached(self.epoch, candidate)  # the vote is durable before the answer leaves
            granted = True
        else:
            granted = False
        leader = self.leader_id if self.role in (Role.FOLLOWER, Role.LEADER) else None
        self._respond(request, reply, rpc.vote_response(version, ErrorCode.none, leader, self.epoch, granted))

    # ---- BeginQuorumEpoch / EndQuorumEpoch ---------------------------------------------------------

    def _send_begin_quorum_epoch(self, voter: int, attempt: int) -> None:
        generation = self._generation
        body = rpc.begin_quorum_epoch_request(self.node_id, self.epoch, voter)

        def done(result: OutboundResult) -> None:
            if self._generation != generation or self.role is not Role.LEADER:
                return
            progress = self._progress[voter]
            if result.ok:
                answer = rpc.first_partition(result.body)
                if answer is not None and self._observe_epoch(int(answer.leader_epoch), int(answer.leader_id)):
                    return
                if answer is not None and answer.error_code == ErrorCode.none:
                    return
            if progress.end_offset < 0 and attempt >= 0:  # it has not fetched in this epoch either: try again
                delay = backoff_ms(attempt + 1, self.config.retry_backoff_ms, self.config.election_timeout_ms, self.rng)
                self.scheduler.call_later(delay, lambda: self._send_begin_quorum_epoch(voter, attempt + 1)
                                          if self._generation == generation else None)

        self.outbound.send(self.voters[voter].on_channel("quorum"), ApiKey.BEGIN_QUORUM_EPOCH, rpc.BEGIN_QUORUM_EPOCH_VERSION, body, done,
                           self.config.request_timeout_ms)

    def _handle_begin_quorum_epoch(self, request: Request, reply: Reply) -> None:
        p = rpc.first_partition(request.body)
        key, version = ApiKey.BEGIN_QUORUM_EPOCH, request.api_version
        if p is None or int(p.leader_id) not in self.voters or self.role is Role.RESIGNED:
            self._respond(request, reply, rpc.epoch_response(key, version, ErrorCode.inconsistent_voter_set, self.leader_id, self.epoch))
            return
        epoch, leader = int(p.leader_epoch), int(p.leader_id)
        if epoch < self.epoch:
            self._respond(request, reply, rpc.epoch_response(key, version, ErrorCode.fenced_leader_epoch, self.leader_id, self.epoch))
            return
        if not self._observe_epoch(epoch, leader) and self.role is Role.FOLLOWER and self.leader_id == leader:
            self._last_leader_contact_ns = self.clock.monotonic_ns()
        self._respond(request, reply, rpc.epoch_response(key, version, ErrorCode.none, self.leader_id, self.epoch))

    def _handle_end_quorum_epoch(self, request: Request, reply: Reply) -> None:
        p = rpc.first_partition(request.body)
        key, version = ApiKey.END_QUORUM_EPOCH, request.api_version
        if p is None or self.role is Role.RESIGNED:
            self._respond(request, reply, rpc.epoch_response(key, version, ErrorCode.not_leader_or_follower, self.leader_id, self.epoch))
            return
        epoch, leader = int(p.leader_epoch), int(p.leader_id)
        if epoch < self.epoch:
            self._respond(request, reply, rpc.epoch_response(key, version, ErrorCode.fenced_leader_epoch, self.leader_id, self.epoch))
            return
        self._respond(request, reply, rpc.epoch_response(key, version, ErrorCode.none, self.leader_id, self.epoch))
        if epoch > self.epoch:
            self._observe_epoch(epoch, None)
        if self.role is Role.FOLLOWER and self.leader_id == leader and self.epoch == epoch:
            # The leader stepped down: its fetches will not be answered. The first named
            # successor stands at once, the others after a backoff by their rank.
            successors = [int(s) for s in getattr(p, "preferred_successors", ())]
            rank = successors.index(self.node_id) if self.node_id in successors else len(successors)
            self._last_leader_contact_ns = _NEVER
            delay = 0.0 if rank == 0 else backoff_ms(rank, self.config.retry_backoff_ms, self.config.election_backoff_max_ms, self.rng)
            self._arm(delay, self._begin_pre_vote)

    # ---- fetching (follower) ----------------------------------------------------------------------

    def _fetch(self) -> None:
        if self.role is not Role.FOLLOWER:
            return
        if self._download is not None:
            self._fetch_snapshot_chunk()
            return
        generation = self._generation
        assert self.leader_id is not None
        body = rpc.fetch_request(self.node_id, self.epoch, self.log.end_offset, self.log.last_epoch, self.log.start_offset,
                                 self.config.fetch_max_wait_ms, self.config.fetch_max_bytes)

        def done(result: OutboundResult) -> None:
            if self._generation != generation:
                return
            if not result.ok:
                self._retry_fetch(generation)
                return
            self._on_fetch_response(result.body, generation)

        self.outbound.send(self.voters[self.leader_id].on_channel("quorum-fetch"), ApiKey.FETCH, rpc.FETCH_VERSION, body, done,
                           self.config.request_timeout_ms + self.config.fetch_max_wait_ms)

    def _retry_fetch(self, generation: int) -> None:
        self.scheduler.call_later(self.config.retry_backoff_ms, lambda: self._fetch() if self._generation == generation else None)

    def _on_fetch_response(self, body: Any, generation: int) -> None:
        partition = rpc.fetch_partition(rpc.FETCH_VERSION, body) if body.error_code == ErrorCode.none else None
        if partition is None:
            self._retry_fetch(generation)
            return
        leader = partition.current_leader
        if partition.error_code != ErrorCode.none:
            leader_id = int(leader.leader_id)
            if not self._observe_epoch(int(leader.leader_epoch), leader_id if leader_id >= 0 else None):
                self._retry_fetch(generation)
            return
        self._last_leader_contact_ns = self.clock.monotonic_ns()
        now_ms = self.clock.wall_ms()
        diverging = partition.diverging_epoch
        if int(diverging.end_offset) >= 0 or int(diverging.epoch) >= 0:
            _, own_end = self.log.end_offset_for_epoch(int(diverging.epoch))
            before = self.log.end_offset
            end = self.log.truncate_to(min(int(diverging.end_offset), own_end))
            log.info("quorum node %d: log diverges from leader %s at epoch %d: truncated from %d to %d", self.node_id, self.leader_id,
                     int(diverging.epoch), before, end)
            self.high_watermark = min(self.high_watermark, end)
            if end < before:
                self._fetch()
            else:
                self._retry_fetch(generation)  # nothing to cut: never spin on an answer we cannot act on
            return
        snapshot = partition.snapshot_id
        if int(snapshot.end_offset) >= 0:
            self._download = _SnapshotDownload(SnapshotId(int(snapshot.end_offset), int(snapshot.epoch)))
            self._fetch()
            return
        records = partition.records
        if records:
            self.log.append_fetched(bytes(records), now_ms)
        leader_hwm = int(partition.high_watermark)
        self.high_watermark = min(max(self.high_watermark, leader_hwm), self.log.end_offset)
        self._deliver_committed()
        if self._generation == generation:
            self._fetch()

    def _fetch_snapshot_chunk(self) -> None:
        download = self._download
        assert download is not None and self.leader_id is not None
        generation = self._generation
        body = rpc.fetch_snapshot_request(self.node_id, self.epoch, download.snapshot_id.end_offset, download.snapshot_id.epoch,
                                          len(download.data), SNAPSHOT_CHUNK_BYTES)

        def done(result: OutboundResult) -> None:
            if self._generation != generation or self._download is not download:
                return
            answer = rpc.first_partition(result.body) if result.ok else None
            if answer is None or answer.error_code != ErrorCode.none:
                if answer is not None and self._observe_epoch(int(answer.current_leader.leader_epoch), int(answer.current_leader.leader_id)):
                    return
                if answer is not None and answer.error_code == ErrorCode.snapshot_not_found:
                    self._download = None  # the leader moved on to a newer snapshot: fetch again to learn it
                self._retry_fetch(generation)
                return
            self._last_leader_contact_ns = self.clock.monotonic_ns()
            if int(answer.position) != len(download.data):
                self._retry_fetch(generation)
                return
            download.data += bytes(answer.unaligned_records or b"")
            if len(download.data) >= int(answer.size):
                self._install_snapshot(download)
            self._fetch()

        self.outbound.send(self.voters[self.leader_id].on_channel("quorum-fetch"), ApiKey.FETCH_SNAPSHOT, rpc.FETCH_SNAPSHOT_VERSION, body,
                           done, self.config.request_timeout_ms)

    def _install_snapshot(self, download: _SnapshotDownload) -> None:
        self._download = None
        self.snapshots_installed += 1
        snapshot_id = download.snapshot_id
        data = bytes(download.data)
        self.log.install_snapshot(snapshot_id, data, self.clock.wall_ms())
        self.listener.load_snapshot(snapshot_id.end_offset, data)
        self.applied_offset = snapshot_id.end_offset
        self.high_watermark = max(self.high_watermark, snapshot_id.end_offset)
        self._bytes_since_snapshot = 0
        self._last_snapshot_ns = self.clock.monotonic_ns()
        log.info("quorum node %d: installed snapshot %s from leader %s", self.node_id, snapshot_id, self.leader_id)

    # ---- serving fetches (leader) -------------------------------------------------------------

    def _answer_fetch_error(self, request: Request, reply: Reply, error: ErrorCode) -> None:
        leader = self.leader_id if self.role in (Role.FOLLOWER, Role.LEADER) and self.leader_id is not None else -1
        self._respond(request, reply, rpc.fetch_response(request.api_version, error, leader=(leader, self.epoch)))

    def _handle_fetch(self, request: Request, partition: Any, reply: Reply) -> None:
        voter = rpc.fetch_replica_id(request.body)
        if self.role is not Role.LEADER:
            self._answer_fetch_error(request, reply, ErrorCode.not_leader_or_follower)
            return
        leader_epoch = int(partition.current_leader_epoch)
        if leader_epoch < self.epoch:
            self._answer_fetch_error(request, reply, ErrorCode.fenced_leader_epoch)
            return
        if leader_epoch > self.epoch:
            self._answer_fetch_error(request, reply, ErrorCode.unknown_leader_epoch)
            return
        progress = self._progress[voter]
        progress.last_fetch_ns = self.clock.monotonic_ns()
        fetch_offset = int(partition.fetch_offset)
        last_fetched_epoch = int(partition.last_fetched_epoch)
        leader = (self.node_id, self.epoch)
        version = request.api_version
        snapshot = self.log.snapshots.latest_id
        if snapshot is not None and (fetch_offset < self.log.start_offset
                                     or (fetch_offset == self.log.start_offset and last_fetched_epoch != snapshot.epoch
                                         and snapshot.end_offset == self.log.start_offset)):
            self._respond(request, reply, rpc.fetch_response(version, ErrorCode.none, high_watermark=self.high_watermark,
                                                             log_start_offset=self.log.start_offset, leader=leader,
                                                             snapshot=(snapshot.end_offset, snapshot.epoch)))
            return
        if fetch_offset > 0 or last_fetched_epoch >= 0:
            epoch, end = self.log.end_offset_for_epoch(last_fetched_epoch)
            if epoch != last_fetched_epoch or end < fetch_offset:
                self._respond(request, reply, rpc.fetch_response(version, ErrorCode.none, high_watermark=self.high_watermark,
                                                                 log_start_offset=self.log.start_offset, leader=leader,
                                                                 diverging=(epoch, end)))
                return
        progress.end_offset = fetch_offset  # a follower fetches from what it has fsynced
        self._maybe_advance_high_watermark()
        if self.role is not Role.LEADER:
            self._answer_fetch_error(request, reply, ErrorCode.not_leader_or_follower)
            return
        max_bytes = max(1, int(partition.partition_max_bytes))
        max_wait_ms = request.body.max_wait.total_seconds() * 1000
        if fetch_offset < self.log.end_offset or progress.sent_high_watermark < self.high_watermark or max_wait_ms <= 0:
            self._answer_fetch(request, reply, voter, fetch_offset, max_bytes)
            return
        parked = _ParkedFetch(voter, request, reply, fetch_offset, max_bytes)
        self._parked.append(parked)
        generation = self._generation

        def expire() -> None:
            if self._generation == generation and parked in self._parked:
                self._parked.remove(parked)
                self._answer_fetch(request, reply, voter, fetch_offset, max_bytes)

        parked.timer = self.scheduler.call_later(min(max_wait_ms, self.config.fetch_max_wait_ms), expire)

    def _answer_fetch(self, request: Request, reply: Reply, voter: int, fetch_offset: int, max_bytes: int) -> None:
        records = b"".join(bytes(chunk) for chunk in self.log.read(fetch_offset, max_bytes)) if fetch_offset < self.log.end_offset else b""
        self._progress[voter].sent_high_watermark = self.high_watermark
        self._respond(request, reply, rpc.fetch_response(request.api_version, ErrorCode.none, high_watermark=self.high_watermark,
                                                         log_start_offset=self.log.start_offset, records=records,
                                                         leader=(self.node_id, self.epoch)))

    def _wake_parked(self) -> None:
        parked, self._parked = self._parked, []
        for fetch in parked:
            if fetch.timer is not None:
                fetch.timer.cancel()
            self._answer_fetch(fetch.request, fetch.reply, fetch.voter_id, fetch.fetch_offset, fetch.max_bytes)

    def _maybe_advance_high_watermark(self) -> None:
        offsets = [p.end_offset for p in self._progress.values()]
        candidate = majority_end_offset(offsets, len(self.voters))
        new = next_high_watermark(self.high_watermark, candidate, self._epoch_start_offset,
                                  count_previous_epochs=self.config.commit_previous_epoch_by_count)
        if new <= self.high_watermark:
            return
        self.high_watermark = new
        self._deliver_committed()
        if self.role is Role.LEADER and self._parked:
            self._wake_parked()

    def _handle_fetch_snapshot(self, request: Request, reply: Reply) -> None:
        # Served to voters and observers alike (KRaft's leader does the same): a broker behind the
        # log start is sent here by the controller's metadata fetch answer, naming this epoch.
        version = request.api_version
        p = rpc.first_partition(request.body)
        leader = (self.leader_id if self.leader_id is not None and self.role in (Role.FOLLOWER, Role.LEADER) else -1, self.epoch)
        if self.role is not Role.LEADER or p is None:
            self._respond(request, reply, rpc.fetch_snapshot_response(version, ErrorCode.not_leader_or_follower, leader=leader))
            return
        if int(p.current_leader_epoch) != self.epoch:
            error = ErrorCode.fenced_leader_epoch if int(p.current_leader_epoch) < self.epoch else ErrorCode.unknown_leader_epoch
            self._respond(request, reply, rpc.fetch_snapshot_response(version, error, leader=leader))
            return
        wanted = SnapshotId(int(p.snapshot_id.end_offset), int(p.snapshot_id.epoch))
        if self.log.snapshots.latest_id != wanted:
            self._respond(request, reply, rpc.fetch_snapshot_response(version, ErrorCode.snapshot_not_found, leader=leader))
            return
        data = self.log.snapshots.read(wanted)
        position = int(p.position)
        if not 0 <= position <= len(data):
            self._respond(request, reply, rpc.fetch_snapshot_response(version, ErrorCode.position_out_of_range, leader=leader))
            return
        chunk = data[position:position + max(1, int(request.body.max_bytes))]
        self._respond(request, reply, rpc.fetch_snapshot_response(version, ErrorCode.none, end_offset=wanted.end_offset,
                                                                  snapshot_epoch=wanted.epoch, leader=leader, size=len(data),
                                                                  position=position, data=chunk))

    def _handle_describe_quorum(self, request: Request, reply: Reply) -> None:
        version = request.api_version
        if self.role is not Role.LEADER:
            self._respond(request, reply, rpc.describe_quorum_response(version, ErrorCode.not_leader_or_follower, self.leader_id, self.epoch,
                                                                       self.high_watermark, []))
            return
        voters = [(v, self._progress[v].end_offset) for v in sorted(self.voters)]
        self._respond(request, reply, rpc.describe_quorum_response(version, ErrorCode.none, self.node_id, self.epoch, self.high_watermark,
                                                                   voters))

    # ---- committing --------------------------------------------------------------------------------

    def _deliver_committed(self) -> None:
        """Hand every committed batch not yet delivered to the state machine, in order."""
        if self._delivering:
            return
        self._delivering = True
        try:
            while self.applied_offset < self.high_watermark:
                progressed = False
                for batch in self.log.batches(self.applied_offset, self.high_watermark):
                    if batch.base_offset < self.applied_offset:
                        continue
                    if not batch.control:
                        self.listener.on_commit(batch.base_offset, batch.records, batch.epoch)
                        self._bytes_since_snapshot += sum(len(r) for r in batch.records)
                    self.applied_offset = batch.next_offset
                    progressed = True
                if not progressed:
                    break
        finally:
            self._delivering = False
        if self.role is Role.LEADER:
            if not self._leader_ready and self.applied_offset > self._epoch_start_offset:
                self._leader_ready = True
                self.listener.on_become_leader(self.epoch)
            while self._pending and self._pending[0][0] <= self.high_watermark:
                _, base, on_done = self._pending.popleft()
                on_done(base, None)
        self._maybe_snapshot()

    def _maybe_snapshot(self) -> None:
        due_by_time = self.config.snapshot_max_interval_ms > 0 and \
            (self.clock.monotonic_ns() - self._last_snapshot_ns) / 1e6 >= self.config.snapshot_max_interval_ms
        if self._bytes_since_snapshot < self.config.snapshot_max_new_record_bytes and not (due_by_time and self._bytes_since_snapshot):
            return
        end_offset, data = self.listener.snapshot()
        latest = self.log.snapshots.latest_id
        if end_offset > self.applied_offset or end_offset <= (latest.end_offset if latest else 0) or end_offset <= self.log.start_offset:
            return
        epoch = self.log.epoch_at(end_offset - 1)
        if epoch < 0:
            return
        self.log.take_snapshot(SnapshotId(end_offset, epoch), data)
        self._bytes_since_snapshot = 0
        self._last_snapshot_ns = self.clock.monotonic_ns()

    # ---- plumbing ----------------------------------------------------------------------------------

    def _respond(self, request: Request, reply: Reply, body: Any) -> None:
        reply(Response([encode_response(request.api_key, request.api_version, request.correlation_id, body)]))
