"""The classic consumer-group coordinator: membership, generations, rebalances, sessions,
and the committed offsets of each group.

States follow Kafka's ClassicGroupState: Empty -> PreparingRebalance -> CompletingRebalance
-> Stable (and back). A rebalance waits until every known member has rejoined or the
largest rebalance timeout passes; a group's first rebalance is held open for
`group.initial.rebalance.delay.ms` (extended as members arrive, up to the rebalance
timeout) so that consumers starting together land in one generation. Session expiry runs
on the injected scheduler.

Answers to JoinGroup and SyncGroup may come later than the request (parked until the
rebalance completes), so they are delivered through callbacks. Offset commits and the group
record written when a generation's assignment is settled are answered only once
`__consumer_offsets` has committed them (the persist callbacks report the outcome, already
mapped to the error a client should see). A group whose offsets partition this broker stops
leading is unloaded: its parked requests are answered NOT_COORDINATOR.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import Enum

from kio.schema.errors import ErrorCode

from cluster.broker.env import Clock, Rng, Scheduler, TimerHandle
from cluster.config import BrokerConfig

log = logging.getLogger(__name__)


class GroupState(Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(frozen=True, slots=True)
class JoinedMember:
    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True, slots=True)
class JoinResult:
    error: ErrorCode
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str = ""
    member_id: str = ""
    members: tuple[JoinedMember, ...] = ()


@dataclass(frozen=True, slots=True)
class SyncResult:
    error: ErrorCode
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp_ms: int


@dataclass(frozen=True, slots=True)
class OffsetToCommit:
    topic: str
    partition: int
    offset: int
    leader_epoch: int
    metadata: str


@dataclass(slots=True)
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    awaiting_join: Callable[[JoinResult], None] | None = None
    awaiting_sync: Callable[[SyncResult], None] | None = None
    session_timer: TimerHandle | None = None

    def metadata_for(self, protocol: str) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        return b""


@dataclass(frozen=True, slots=True)
class StoredMember:
    """One member of a stored generation (Kafka's GroupMetadataValue member): what a new
    coordinator needs to keep serving it without a rebalance."""
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    subscription: bytes  # its metadata for the generation's protocol
    assignment: bytes


@dataclass(slots=True)
class Group:
    group_id: str
    state: GroupState = GroupState.EMPTY
    generation_id: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    rebalance_timer: TimerHandle | None = None
    # While the first rebalance of an empty group is held open, joins do not complete it.
    initial_delay_until_ns: int | None = None
    offsets: dict[tuple[str, int], CommittedOffset] = field(default_factory=dict)
    # Member ids handed out with MEMBER_ID_REQUIRED, expiring after a session timeout.
    pending_members: dict[str, TimerHandle] = field(default_factory=dict)
    # The leader's assignment is being written to __consumer_offsets; syncs wait for it.
    storing_assignment: bool = False
    # Static members (KIP-345): group.instance.id -> the member id it holds now.
    static_members: dict[str, str] = field(default_factory=dict)


PersistDone = Callable[[ErrorCode], None]
# (group id, partitions whose offsets go, whether the group itself goes, done): tombstones.
PersistDeletion = Callable[[str, list[tuple[str, int]], bool, PersistDone], None]


class GroupCoordinator:
    """All groups this broker coordinates. `persist_offsets` and `persist_group` append the
    commit/generation records to __consumer_offsets and call their `done` with the error the
    client should see (none once committed)."""

    def __init__(
        self,
        config: BrokerConfig,
        clock: Clock,
        scheduler: Scheduler,
        rng: Rng,
        persist_offsets: Callable[[str, list[OffsetToCommit], int, PersistDone], None],
        persist_group: Callable[[Group, PersistDone], None],
        persist_deletion: PersistDeletion,
    ) -> None:
        self._config = config
        self._clock = clock
        self._scheduler = scheduler
        self._rng = rng
        self._persist_offsets = persist_offsets
        self._persist_group = persist_group
        self._persist_deletion = persist_deletion
        self.groups: dict[str, Group] = {}

    # ---- recovery -------------------------------------------------------------------

    def restore_offset(self, group_id: str, topic: str, partition: int, committed: CommittedOffset | None) -> None:
        if committed is None:  # a tombstone (OffsetDelete, DeleteGroups)
            known = self.groups.get(group_id)
            if known is not None:
                known.offsets.pop((topic, partition), None)
            return
        group = self.groups.setdefault(group_id, Group(group_id))
        group.offsets[(topic, partition)] = committed

    def restore_group(self, group_id: str, generation_id: int, protocol_type: str | None, protocol_name: str | None,
                      leader_id: str | None = None, members: Sequence[StoredMember] = ()) -> None:
        """The stored generation, with its members as Kafka's coordinator loads them: a group
        with members is Stable and each member's session timer starts now, so members that keep
        heartbeating the new coordinator carry on without a rebalance and the others expire.
        Records from before members were stored restore an empty group: its members rejoin
        (UNKNOWN_MEMBER_ID), and the generation continues so an old member id never matches."""
        group = self.groups.setdefault(group_id, Group(group_id))
        for old in group.members.values():
            if old.session_timer is not None:
                old.session_timer.cancel()
        group.generation_id = generation_id
        group.protocol_type = protocol_type
        group.protocol_name = protocol_name
        group.members = {}
        group.static_members = {}
        for m in members:
            member = Member(m.member_id, m.group_instance_id, m.client_id, m.client_host, m.session_timeout_ms, m.rebalance_timeout_ms,
                            protocol_type or "", [(protocol_name or "", m.subscription)], assignment=m.assignment)
            group.members[m.member_id] = member
            if m.group_instance_id is not None:
                group.static_members[m.group_instance_id] = m.member_id
            self._touch_session(group, member)
        group.leader_id = leader_id if leader_id in group.members else None
        group.state = GroupState.STABLE if group.members and protocol_name else GroupState.EMPTY

    def stored_members(self, group: Group) -> tuple[StoredMember, ...]:
        """The members as a group record stores them."""
        return tuple(StoredMember(m.member_id, m.group_instance_id, m.client_id, m.client_host, m.session_timeout_ms,
                                  m.rebalance_timeout_ms, m.metadata_for(group.protocol_name or ""), m.assignment)
                     for m in group.members.values())

    def restore_deletion(self, group_id: str) -> None:
        """A group tombstone: the group was deleted (DeleteGroups) after the records before it."""
        self.groups.pop(group_id, None)

    def unload(self, group_ids: list[str]) -> None:
        """Forget groups this broker no longer coordinates (their offsets partition has a new
        leader, which loads them from the log): timers stop, parked JoinGroup/SyncGroup
        requests are answered NOT_COORDINATOR so the clients look the coordinator up again."""
        for group_id in group_ids:
            group = self.groups.pop(group_id, None)
            if group is None:
                continue
            if group.rebalance_timer is not None:
                group.rebalance_timer.cancel()
                group.rebalance_timer = None
            for timer in group.pending_members.values():
                timer.cancel()
            group.pending_members.clear()
            for member in group.members.values():
                if member.session_timer is not None:
                    member.session_timer.cancel()
                    member.session_timer = None
                if member.awaiting_join is not None:
                    callback, member.awaiting_join = member.awaiting_join, None
                    callback(JoinResult(ErrorCode.not_coordinator, member_id=member.member_id))
                if member.awaiting_sync is not None:
                    callback_sync, member.awaiting_sync = member.awaiting_sync, None
                    callback_sync(SyncResult(ErrorCode.not_coordinator))
            group.state = GroupState.DEAD

    # ---- JoinGroup --------------------------------------------------------------------

    def join(
        self,
        group_id: str,
        member_id: str,
        group_instance_id: str | None,
        client_id: str,
        client_host: str,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
        reply: Callable[[JoinResult], None],
        require_known_member_id: bool = False,
    ) -> None:
        """`require_known_member_id` (JoinGroup v4+): a first join without a member id is
        answered MEMBER_ID_REQUIRED with a fresh id, and only a rejoin with that id enters
        the group, so a client that never comes back leaves no member behind (KIP-394)."""
        if not group_id:
            reply(JoinResult(ErrorCode.invalid_group_id, member_id=member_id))
            return
        if not self._config.group_min_session_timeout_ms <= session_timeout_ms <= self._config.group_max_session_timeout_ms:
            reply(JoinResult(ErrorCode.invalid_session_timeout, member_id=member_id))
            return
        if rebalance_timeout_ms < 0:
            rebalance_timeout_ms = session_timeout_ms
        group = self.groups.get(group_id)
        if group is not None and group.state is GroupState.DEAD:
            # Being deleted: as Kafka, the client retries and then meets a fresh group.
            reply(JoinResult(ErrorCode.coordinator_not_available, member_id=member_id))
            return
        if group is None:
            if member_id:
                reply(JoinResult(ErrorCode.unknown_member_id, member_id=member_id))
                return
            group = self.groups[group_id] = Group(group_id)
        if not protocols or not self._protocols_compatible(group, protocol_type, protocols):
            reply(JoinResult(ErrorCode.inconsistent_group_protocol, member_id=member_id))
            return
        if group_instance_id is not None:
            held = group.static_members.get(group_instance_id)
            if held is not None and member_id and member_id != held:
                reply(JoinResult(ErrorCode.fenced_instance_id, member_id=member_id))
                return
            if held is not None and not member_id:
                self._rejoin_static(group, group_instance_id, held, client_id, client_host, session_timeout_ms, rebalance_timeout_ms,
                                    protocols, reply)
                return
        if not member_id and require_known_member_id:
            member_id = f"{client_id or 'member'}-{self._new_uuid_hex()}"
            group.pending_members[member_id] = self._scheduler.call_later(
                session_timeout_ms, lambda: group.pending_members.pop(member_id, None)
            )
            reply(JoinResult(ErrorCode.member_id_required, member_id=member_id))
            return
        pending = group.pending_members.pop(member_id, None) if member_id else None
        if pending is not None:
            pending.cancel()
        elif member_id and member_id not in group.members:
            reply(JoinResult(ErrorCode.unknown_member_id, member_id=member_id))
            return

        if member_id not in group.members:
            member_id = member_id or f"{client_id or 'member'}-{self._new_uuid_hex()}"
            member = Member(
                member_id, group_instance_id, client_id, client_host, session_timeout_ms, rebalance_timeout_ms, protocol_type, list(protocols)
            )
            group.members[member_id] = member
            if group_instance_id is not None:
                group.static_members[group_instance_id] = member_id
            member.awaiting_join = reply
            self._touch_session(group, member)
            self._prepare_rebalance(group, f"member {member_id} joined", new_member=True)
            return

        member = group.members[member_id]
        protocols_changed = member.protocols != list(protocols)
        member.protocols = list(protocols)
        member.session_timeout_ms = session_timeout_ms
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.client_host = client_host
        member.awaiting_join = reply
        self._touch_session(group, member)
        if group.state is GroupState.PREPARING_REBALANCE:
            self._maybe_complete_join(group)
        elif group.state is GroupState.STABLE and member_id != group.leader_id and not protocols_changed:
            # A follower rejoining with the same metadata just gets the current generation.
            member.awaiting_join = None
            reply(self._join_result(group, member, include_members=False))
        elif group.state is GroupState.COMPLETING_REBALANCE and not protocols_changed:
            member.awaiting_join = None
            reply(self._join_result(group, member, include_members=member_id == group.leader_id))
        else:
            self._prepare_rebalance(group, f"member {member_id} rejoined")

    def _rejoin_static(self, group: Group, instance_id: str, old_member_id: str, client_id: str, client_host: str, session_timeout_ms: int,
                       rebalance_timeout_ms: int, protocols: list[tuple[str, bytes]], reply: Callable[[JoinResult], None]) -> None:
        """A known static member restarted (KIP-345): it takes a new member id that fences the
        old one and keeps its place and assignment. In a Stable group whose protocol choice
        does not change this is no rebalance: it gets the current generation, and the old
        leader's id (so the member does not start assigning), as Kafka's coordinator does."""
        old = group.members.pop(old_member_id)
        if old.session_timer is not None:
            old.session_timer.cancel()
        if old.awaiting_join is not None:
            callback, old.awaiting_join = old.awaiting_join, None
            callback(JoinResult(ErrorCode.fenced_instance_id, member_id=old_member_id))
        if old.awaiting_sync is not None:
            callback_sync, old.awaiting_sync = old.awaiting_sync, None
            callback_sync(SyncResult(ErrorCode.fenced_instance_id))
        new_member_id = f"{client_id or 'member'}-{self._new_uuid_hex()}"
        member = Member(new_member_id, instance_id, client_id, client_host, session_timeout_ms, rebalance_timeout_ms, old.protocol_type,
                        list(protocols), assignment=old.assignment)
        group.members[new_member_id] = member
        group.static_members[instance_id] = new_member_id
        previous_leader = group.leader_id
        if group.leader_id == old_member_id:
            group.leader_id = new_member_id
        self._touch_session(group, member)
        log.info("group %s: static member %s rejoined as %s (was %s)", group.group_id, instance_id, new_member_id, old_member_id)
        if group.state is GroupState.STABLE and self._select_protocol(group) == group.protocol_name:
            # Stored before the answer, as Kafka does, so a coordinator that takes over knows
            # the instance's new member id and fences the old one.
            generation = group.generation_id

            def stored(error: ErrorCode) -> None:
                if error is not ErrorCode.none:
                    reply(JoinResult(error, member_id=new_member_id))
                    return
                reply(JoinResult(ErrorCode.none, generation, group.protocol_type, group.protocol_name, previous_leader or "", new_member_id))

            self._persist_group(group, stored)
        elif group.state is GroupState.PREPARING_REBALANCE:
            member.awaiting_join = reply
            self._maybe_complete_join(group)
        else:
            # Completing a rebalance: the leader may have assigned to the old id, so rebalance.
            member.awaiting_join = reply
            self._prepare_rebalance(group, f"static member {instance_id} rejoined as {new_member_id}")

    def fenced(self, group_id: str, member_id: str, group_instance_id: str | None) -> bool:
        """A static member's request under a member id its instance id no longer holds."""
        if group_instance_id is None:
            return False
        group = self.groups.get(group_id)
        held = group.static_members.get(group_instance_id) if group is not None else None
        return held is not None and held != member_id

    def _new_uuid_hex(self) -> str:
        return f"{self._rng.getrandbits(128):032x}"

    def _protocols_compatible(self, group: Group, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        if not group.members:
            return True
        if group.protocol_type is not None and protocol_type != group.protocol_type:
            return False
        names = {name for name, _ in protocols}
        common = set.intersection(*({name for name, _ in m.protocols} for m in group.members.values()))
        return bool(names & common)

    def _prepare_rebalance(self, group: Group, reason: str, new_member: bool = False) -> None:
        if group.state is GroupState.COMPLETING_REBALANCE:
            for member in group.members.values():
                if member.awaiting_sync is not None:
                    callback, member.awaiting_sync = member.awaiting_sync, None
                    callback(SyncResult(ErrorCode.rebalance_in_progress))
        now_ns = self._clock.monotonic_ns()
        if group.state is not GroupState.PREPARING_REBALANCE:
            log.info("group %s: preparing rebalance (generation %d): %s", group.group_id, group.generation_id, reason)
            was_empty = group.state is GroupState.EMPTY
            group.state = GroupState.PREPARING_REBALANCE
            max_rebalance_ms = max((m.rebalance_timeout_ms for m in group.members.values()), default=0)
            delay_ms = self._config.group_initial_rebalance_delay_ms
            if was_empty and delay_ms > 0:
                group.initial_delay_until_ns = now_ns + min(delay_ms, max_rebalance_ms) * 1_000_000
                self._arm_rebalance_timer(group, min(delay_ms, max_rebalance_ms))
            else:
                group.initial_delay_until_ns = None
                self._arm_rebalance_timer(group, max_rebalance_ms)
        elif new_member and group.initial_delay_until_ns is not None:
            # Another member arrived while the first rebalance is held open: wait one more
            # delay for stragglers, but never beyond the rebalance timeout.
            max_rebalance_ms = max((m.rebalance_timeout_ms for m in group.members.values()), default=0)
            delay_ms = self._config.group_initial_rebalance_delay_ms
            group.initial_delay_until_ns = now_ns + min(delay_ms, max_rebalance_ms) * 1_000_000
            self._arm_rebalance_timer(group, min(delay_ms, max_rebalance_ms))
        self._maybe_complete_join(group)

    def _arm_rebalance_timer(self, group: Group, delay_ms: int) -> None:
        if group.rebalance_timer is not None:
            group.rebalance_timer.cancel()
        group.rebalance_timer = self._scheduler.call_later(delay_ms, lambda: self._on_rebalance_timeout(group))

    def _on_rebalance_timeout(self, group: Group) -> None:
        group.rebalance_timer = None
        if group.state is not GroupState.PREPARING_REBALANCE:
            return
        if group.initial_delay_until_ns is not None:
            group.initial_delay_until_ns = None
            if not self._all_rejoined(group):
                max_rebalance_ms = max((m.rebalance_timeout_ms for m in group.members.values()), default=0)
                self._arm_rebalance_timer(group, max_rebalance_ms)
                return
        else:
            for member in [m for m in group.members.values() if m.awaiting_join is None]:
                log.info("group %s: member %s did not rejoin within the rebalance timeout", group.group_id, member.member_id)
                self._remove_member(group, member)
        self._complete_join(group)

    def _all_rejoined(self, group: Group) -> bool:
        return all(m.awaiting_join is not None for m in group.members.values())

    def _maybe_complete_join(self, group: Group) -> None:
        if group.state is GroupState.PREPARING_REBALANCE and group.initial_delay_until_ns is None and self._all_rejoined(group):
            self._complete_join(group)

    def _complete_join(self, group: Group) -> None:
        if group.rebalance_timer is not None:
            group.rebalance_timer.cancel()
            group.rebalance_timer = None
        group.initial_delay_until_ns = None
        group.generation_id += 1
        if not group.members:
            group.state = GroupState.EMPTY
            group.protocol_name = None
            group.leader_id = None
            log.info("group %s: empty at generation %d", group.group_id, group.generation_id)
            generation = group.generation_id

            def stored(error: ErrorCode) -> None:
                if error is not ErrorCode.none:
                    log.info("group %s: record of empty generation %d not stored: %s", group.group_id, generation, error.name)

            self._persist_group(group, stored)
            return
        group.protocol_type = next(iter(group.members.values())).protocol_type
        group.protocol_name = self._select_protocol(group)
        if group.leader_id not in group.members:
            group.leader_id = next(iter(group.members))
        group.state = GroupState.COMPLETING_REBALANCE
        group.storing_assignment = False
        for member in group.members.values():
            member.assignment = b""
        log.info(
            "group %s: generation %d with %d members, protocol %s, leader %s",
            group.group_id, group.generation_id, len(group.members), group.protocol_name, group.leader_id,
        )
        for member in list(group.members.values()):
            callback, member.awaiting_join = member.awaiting_join, None
            if callback is not None:
                callback(self._join_result(group, member, include_members=member.member_id == group.leader_id))
            self._touch_session(group, member)

    def _select_protocol(self, group: Group) -> str:
        members = list(group.members.values())
        candidates = set.intersection(*({name for name, _ in m.protocols} for m in members))
        votes: dict[str, int] = {}
        for member in members:
            for name, _ in member.protocols:
                if name in candidates:
                    votes[name] = votes.get(name, 0) + 1
                    break
        # Most first-preference votes; ties go to the first member's preference order.
        order = [name for name, _ in members[0].protocols if name in candidates]
        return max(order, key=lambda name: (votes.get(name, 0), -order.index(name)))

    def _join_result(self, group: Group, member: Member, include_members: bool) -> JoinResult:
        members: tuple[JoinedMember, ...] = ()
        if include_members:
            members = tuple(
                JoinedMember(m.member_id, m.group_instance_id, m.metadata_for(group.protocol_name or "")) for m in group.members.values()
            )
        return JoinResult(
            ErrorCode.none,
            group.generation_id,
            group.protocol_type,
            group.protocol_name,
            group.leader_id or "",
            member.member_id,
            members,
        )

    # ---- SyncGroup ---------------------------------------------------------------------

    def sync(self, group_id: str, member_id: str, generation_id: int, assignments: dict[str, bytes], reply: Callable[[SyncResult], None]) -> None:
        group = self.groups.get(group_id)
        if group is None or member_id not in group.members:
            reply(SyncResult(ErrorCode.unknown_member_id))
            return
        if generation_id != group.generation_id:
            reply(SyncResult(ErrorCode.illegal_generation))
            return
        member = group.members[member_id]
        self._touch_session(group, member)
        if group.state is GroupState.PREPARING_REBALANCE:
            reply(SyncResult(ErrorCode.rebalance_in_progress))
        elif group.state is GroupState.STABLE:
            reply(SyncResult(ErrorCode.none, group.protocol_type, group.protocol_name, member.assignment))
        elif group.state is GroupState.COMPLETING_REBALANCE:
            member.awaiting_sync = reply
            if member_id == group.leader_id and not group.storing_assignment:
                for m in group.members.values():
                    m.assignment = assignments.get(m.member_id, b"")
                # As Kafka does, the generation is stored before anyone learns its assignment.
                group.storing_assignment = True
                generation = group.generation_id
                self._persist_group(group, lambda error: self._on_assignment_stored(group, generation, error))
        else:
            reply(SyncResult(ErrorCode.unknown_member_id))

    def _on_assignment_stored(self, group: Group, generation: int, error: ErrorCode) -> None:
        if group.generation_id != generation or group.state is not GroupState.COMPLETING_REBALANCE:
            return  # a newer rebalance (or an unload) already answered the parked syncs
        group.storing_assignment = False
        if error is not ErrorCode.none:
            log.info("group %s: generation %d not stored (%s): rebalancing", group.group_id, generation, error.name)
            for m in group.members.values():
                m.assignment = b""
                if m.awaiting_sync is not None:
                    callback, m.awaiting_sync = m.awaiting_sync, None
                    callback(SyncResult(error))
            self._prepare_rebalance(group, f"storing generation {generation} failed with {error.name}")
            return
        group.state = GroupState.STABLE
        log.info("group %s: stable at generation %d", group.group_id, group.generation_id)
        for m in group.members.values():
            if m.awaiting_sync is not None:
                callback, m.awaiting_sync = m.awaiting_sync, None
                callback(SyncResult(ErrorCode.none, group.protocol_type, group.protocol_name, m.assignment))

    # ---- Heartbeat / LeaveGroup / sessions ---------------------------------------------

    def heartbeat(self, group_id: str, member_id: str, generation_id: int) -> ErrorCode:
        group = self.groups.get(group_id)
        if group is None or member_id not in group.members:
            return ErrorCode.unknown_member_id
        member = group.members[member_id]
        self._touch_session(group, member)
        if generation_id != group.generation_id:
            return ErrorCode.illegal_generation
        if group.state is GroupState.PREPARING_REBALANCE:
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    def leave(self, group_id: str, member_ids: list[str], instance_ids: list[str | None] | None = None) -> tuple[ErrorCode, list[ErrorCode]]:
        """LeaveGroup; v3+ names static members by group.instance.id, with or without their
        member id (a member id the instance no longer holds is FENCED_INSTANCE_ID)."""
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.unknown_member_id, [ErrorCode.unknown_member_id] * len(member_ids)
        results: list[ErrorCode] = []
        for member_id, instance_id in zip(member_ids, instance_ids or [None] * len(member_ids)):
            if instance_id is not None:
                held = group.static_members.get(instance_id)
                if held is not None and member_id and member_id != held:
                    results.append(ErrorCode.fenced_instance_id)
                    continue
                member_id = held or member_id
            member = group.members.get(member_id)
            if member is None:
                results.append(ErrorCode.unknown_member_id)
                continue
            log.info("group %s: member %s left", group_id, member_id)
            self._remove_member(group, member)
            results.append(ErrorCode.none)
            self._after_member_removed(group, f"member {member_id} left")
        top = ErrorCode.none if any(r is ErrorCode.none for r in results) or not member_ids else ErrorCode.unknown_member_id
        return top, results

    def _touch_session(self, group: Group, member: Member) -> None:
        if member.session_timer is not None:
            member.session_timer.cancel()
        member.session_timer = self._scheduler.call_later(member.session_timeout_ms, lambda: self._on_session_expired(group, member))

    def _on_session_expired(self, group: Group, member: Member) -> None:
        member.session_timer = None
        if group.members.get(member.member_id) is not member:
            return
        if member.awaiting_join is not None:
            # A member parked in JoinGroup is alive by definition; its answer is pending.
            self._touch_session(group, member)
            return
        log.info("group %s: member %s session expired", group.group_id, member.member_id)
        self._remove_member(group, member)
        self._after_member_removed(group, f"member {member.member_id} session expired")

    def _remove_member(self, group: Group, member: Member) -> None:
        group.members.pop(member.member_id, None)
        if member.group_instance_id is not None and group.static_members.get(member.group_instance_id) == member.member_id:
            del group.static_members[member.group_instance_id]
        if member.session_timer is not None:
            member.session_timer.cancel()
            member.session_timer = None
        if member.awaiting_join is not None:
            callback, member.awaiting_join = member.awaiting_join, None
            callback(JoinResult(ErrorCode.unknown_member_id, member_id=member.member_id))
        if member.awaiting_sync is not None:
            callback_sync, member.awaiting_sync = member.awaiting_sync, None
            callback_sync(SyncResult(ErrorCode.unknown_member_id))
        if group.leader_id == member.member_id:
            group.leader_id = next(iter(group.members), None)

    def _after_member_removed(self, group: Group, reason: str) -> None:
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(group, reason)
        elif group.state is GroupState.PREPARING_REBALANCE:
            self._maybe_complete_join(group)
            if not group.members and group.state is GroupState.PREPARING_REBALANCE:
                self._complete_join(group)

    # ---- offsets -----------------------------------------------------------------------

    def validate_commit(self, group_id: str, generation_id: int, member_id: str) -> ErrorCode:
        group = self.groups.get(group_id)
        if group is None:
            # Only a commit outside group management (generation -1) may create a group.
            return ErrorCode.none if generation_id < 0 else ErrorCode.illegal_generation
        if group.state is GroupState.DEAD:
            return ErrorCode.coordinator_not_available  # being deleted; retriable
        if generation_id < 0 and group.state is GroupState.EMPTY:
            return ErrorCode.none
        if member_id not in group.members:
            return ErrorCode.unknown_member_id
        if generation_id != group.generation_id:
            return ErrorCode.illegal_generation
        if group.state is GroupState.COMPLETING_REBALANCE:
            return ErrorCode.rebalance_in_progress
        self._touch_session(group, group.members[member_id])
        return ErrorCode.none

    def commit(self, group_id: str, offsets: list[OffsetToCommit], done: PersistDone) -> None:
        """Persist offsets already validated with `validate_commit`; once committed in
        __consumer_offsets they become visible to OffsetFetch and `done(none)` is called."""
        now_ms = self._clock.wall_ms()
        group = self.groups.setdefault(group_id, Group(group_id))

        def stored(error: ErrorCode) -> None:
            if error is ErrorCode.none and self.groups.get(group_id) is group:
                for o in offsets:
                    group.offsets[(o.topic, o.partition)] = CommittedOffset(o.offset, o.leader_epoch, o.metadata, now_ms)
            done(error)

        self._persist_offsets(group_id, offsets, now_ms, stored)

    def committed(self, group_id: str) -> dict[tuple[str, int], CommittedOffset]:
        group = self.groups.get(group_id)
        return dict(group.offsets) if group is not None else {}

    def forget_topic(self, topic: str) -> None:
        for group in self.groups.values():
            for key in [k for k in group.offsets if k[0] == topic]:
                del group.offsets[key]

    # ---- deletion: DeleteGroups, OffsetDelete ------------------------------------------

    def delete_group(self, group_id: str, done: PersistDone) -> None:
        """Kafka's classic-group deletion: only an Empty group (no members) may go; it is Dead
        while its tombstones are written, then forgotten. `done` gets GROUP_ID_NOT_FOUND,
        NON_EMPTY_GROUP, or the outcome of writing the tombstones."""
        group = self.groups.get(group_id)
        if group is None or group.state is GroupState.DEAD:
            done(ErrorCode.group_id_not_found)
            return
        if group.state is not GroupState.EMPTY or group.members:
            done(ErrorCode.non_empty_group)
            return
        group.state = GroupState.DEAD
        for timer in group.pending_members.values():
            timer.cancel()
        group.pending_members.clear()

        def stored(error: ErrorCode) -> None:
            if self.groups.get(group_id) is group:
                if error is ErrorCode.none:
                    del self.groups[group_id]
                    log.info("group %s: deleted", group_id)
                else:
                    group.state = GroupState.EMPTY  # not deleted: the client may retry
            done(error)

        self._persist_deletion(group_id, sorted(group.offsets), True, stored)

    def delete_offsets(self, group_id: str, partitions: list[tuple[str, int]],
                       done: Callable[[ErrorCode, dict[tuple[str, int], ErrorCode]], None]) -> None:
        """Kafka's OffsetDelete: `done(group error, per-partition errors)`. A group with
        members may lose only offsets of topics none of its members subscribes to
        (GROUP_SUBSCRIBED_TO_TOPIC otherwise); a non-consumer group with members refuses
        (NON_EMPTY_GROUP)."""
        group = self.groups.get(group_id)
        if group is None or group.state is GroupState.DEAD:
            done(ErrorCode.group_id_not_found, {})
            return
        subscribed: set[str] | None = set()
        if group.state is not GroupState.EMPTY:
            if group.protocol_type != "consumer":
                done(ErrorCode.non_empty_group, {})
                return
            subscribed = self._subscribed_topics(group)
        results = {
            tp: ErrorCode.group_subscribed_to_topic if subscribed is None or tp[0] in subscribed else ErrorCode.none for tp in partitions
        }
        deleting = [tp for tp, error in results.items() if error is ErrorCode.none and tp in group.offsets]
        if not deleting:
            done(ErrorCode.none, results)
            return

        def stored(error: ErrorCode) -> None:
            if error is ErrorCode.none and self.groups.get(group_id) is group:
                for tp in deleting:
                    group.offsets.pop(tp, None)
            done(error, results)

        self._persist_deletion(group_id, deleting, False, stored)

    @staticmethod
    def _subscribed_topics(group: Group) -> set[str] | None:
        """The topics the members subscribe to, from their consumer-protocol metadata for the
        group's protocol; None (treat every topic as subscribed, as Kafka does) while unknown."""
        if group.protocol_name is None:
            return None
        topics: set[str] = set()
        for member in group.members.values():
            member_topics = consumer_subscription_topics(member.metadata_for(group.protocol_name))
            if member_topics is None:
                return None
            topics |= member_topics
        return topics


def consumer_subscription_topics(metadata: bytes) -> set[str] | None:
    """The topics of a ConsumerProtocolSubscription (int16 version, then an int32-counted
    array of int16-length strings; later fields are not needed); None if unreadable."""
    try:
        (count,) = struct.unpack_from(">i", metadata, 2)
        position = 6
        topics = set()
        for _ in range(count):
            (length,) = struct.unpack_from(">h", metadata, position)
            position += 2
            if length < 0 or position + length > len(metadata):
                return None
            topics.add(metadata[position:position + length].decode())
            position += length
        return topics
    except (struct.error, UnicodeDecodeError):
        return None
