"""Leader election and ISR rules (KRaft with one controller), as pure functions of a
partition's state and of which brokers may lead: the core decides when a partition must
change, this module decides what it changes to.

- A leader comes from the ISR, first acceptable member in replica order (clean election).
- With unclean.leader.election.enable and no acceptable ISR member, the first acceptable
  replica leads alone (ISR = [it]) and is marked recovering (KIP-704): records the old ISR
  had committed may be lost.
- A broker leaving (fenced or shutting down) leaves the ISR. Without eligible leader
  replicas it stays if it is the last member: KRaft kept the last member so the partition
  remembers who has its committed records, and elects it again when it returns, even after
  it lost its unflushed tail in a crash (KIP-966's "last replica standing").
- With eligible leader replicas (KIP-966, eligible.leader.replicas.version=1, Kafka 4.1's
  default for new clusters) the ISR may empty. While it is below min.insync.replicas the
  high watermark stands still, so every member it loses still holds every committed record:
  they join the ELR, and when the ISR is empty a usable ELR member leads (ISR = [it]). A
  broker that registers after an unclean shutdown leaves every ISR and ELR (its log may
  have lost its unflushed tail). The ELR empties once the ISR is back at min ISR, and an
  unclean election empties it. With ISR and ELR both empty, the leader the partition had
  when its ISR emptied is elected once usable, recovering (KIP-966's last known leader, as
  Kafka 4.1 does: it is where the old rule would have gone, and keeps the partition online).
  (PartitionChangeBuilder in Kafka's metadata module.) Altering a topic's min.insync.replicas
  empties its ELRs and last known leaders (`clear_elr`, Kafka's ClearElrRecord).
- Every leader change bumps the leader epoch and the partition epoch; any other change only
  the partition epoch.
- AlterPartition is the leader's proposal for the ISR, accepted only against the exact
  epochs it was made from and with eligible new members (KIP-497, KIP-903, KIP-704).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from cluster.metadata.image import BrokerRegistration, PartitionState
from cluster.metadata.records import NO_LEADER, PartitionRecord

log = logging.getLogger(__name__)

# Whether a broker may lead or join the ISR in the decision being made.
Acceptable = Callable[[int], bool]


@dataclass(frozen=True)
class LeaderChoice:
    leader: int  # NO_LEADER when nobody may lead
    isr: tuple[int, ...]
    recovering: bool
    unclean: bool
    elr: tuple[int, ...] = ()


def choose_leader(p: PartitionState, isr: tuple[int, ...], acceptable: Acceptable, unclean_allowed: bool,
                  elr: tuple[int, ...] = (), last_known_leader: int = NO_LEADER) -> LeaderChoice:
    """The first acceptable ISR member in replica order; with an empty ISR the first
    acceptable ELR member, which becomes the ISR and leaves the ELR; with both empty the
    last known leader, recovering; else, if allowed, any acceptable replica (unclean: the
    ELR is dropped); else nobody."""
    for replica in p.replicas:
        if replica in isr and acceptable(replica):
            return LeaderChoice(replica, isr, recovering=False, unclean=False, elr=elr)
    if not isr:
        for replica in p.replicas:
            if replica in elr and acceptable(replica):
                return LeaderChoice(replica, (replica,), recovering=False, unclean=False,
                                    elr=tuple(b for b in elr if b != replica))
        if not elr and last_known_leader != NO_LEADER and acceptable(last_known_leader):
            return LeaderChoice(last_known_leader, (last_known_leader,), recovering=True, unclean=True, elr=())
    if unclean_allowed:
        for replica in p.replicas:
            if acceptable(replica):
                return LeaderChoice(replica, (replica,), recovering=True, unclean=True, elr=())
    return LeaderChoice(NO_LEADER, isr, recovering=p.leader_recovering, unclean=False, elr=elr)


def target_elr(p: PartitionState, isr: tuple[int, ...], min_isr: int, enabled: bool,
               unclean_shutdown: frozenset[int] = frozenset()) -> tuple[int, ...]:
    """The ELR that goes with the new ISR `isr` (Kafka's maybePopulateTargetElr): empty when
    ELR is off or the ISR is at min ISR; else the old ELR and ISR members outside the new
    ISR, without brokers back from an unclean shutdown."""
    if not enabled or len(isr) >= min_isr:
        return ()
    candidates = set(p.elr) | set(p.isr)
    return tuple(b for b in p.replicas if b in candidates and b not in isr and b not in unclean_shutdown)


def partition_change(p: PartitionState, *, isr: tuple[int, ...], leader: int, recovering: bool,
                     elr: tuple[int, ...] | None = None, last_known_leader: int | None = None) -> PartitionRecord | None:
    """The record taking `p` to the given ISR, leader, recovery state, ELR and last known
    leader (None: as they are); None if that is what it already is."""
    elr = p.elr if elr is None else elr
    last_known_leader = p.last_known_leader if last_known_leader is None else last_known_leader
    if (isr == p.isr and leader == p.leader and recovering == p.leader_recovering and elr == p.elr
            and last_known_leader == p.last_known_leader):
        return None
    leader_epoch = p.leader_epoch + 1 if leader != p.leader else p.leader_epoch
    return PartitionRecord(str(p.topic_id), p.partition, p.replicas, isr, leader, leader_epoch, p.partition_epoch + 1, recovering, elr,
                           last_known_leader)


def reelect(p: PartitionState, leaving: int | None, acceptable: Acceptable, unclean_allowed: bool, *,
            min_isr: int = 1, elr_enabled: bool = False, unclean_shutdown: bool = False) -> PartitionRecord | None:
    """`leaving` (if any) leaves the ISR and the leadership (without ELR keeping the last
    ISR member; with `unclean_shutdown` it leaves the ELR too); a new leader is chosen when
    the partition has none or its leader may no longer lead."""
    isr = tuple(b for b in p.isr if b != leaving)
    if not isr and not elr_enabled:
        isr = p.isr
    gone = frozenset({leaving}) if unclean_shutdown and leaving is not None else frozenset()
    elr = target_elr(p, isr, min_isr, elr_enabled, gone)

    def may_lead(broker_id: int) -> bool:
        return broker_id != leaving and acceptable(broker_id)

    leader, recovering = p.leader, p.leader_recovering
    unclean = False
    nobody_eligible = not isr and not elr  # then only the last known leader, or an unclean election
    if leader == NO_LEADER or not may_lead(leader) or leader not in isr:
        choice = choose_leader(p, isr, may_lead, unclean_allowed, elr, p.last_known_leader if elr_enabled else NO_LEADER)
        leader, isr, recovering, unclean, elr = choice.leader, choice.isr, choice.recovering, choice.unclean, choice.elr
    # The last known leader: set when the ISR empties with nobody to lead (the leader it had),
    # kept while leaderless, cleared once the partition leads again.
    last_known_leader = NO_LEADER
    if elr_enabled and leader == NO_LEADER:
        last_known_leader = p.leader if not isr and p.leader != NO_LEADER else p.last_known_leader
    record = partition_change(p, isr=isr, leader=leader, recovering=recovering, elr=elr, last_known_leader=last_known_leader)
    if record is not None and unclean and nobody_eligible and elr_enabled and leader == p.last_known_leader:
        log.warning("%s-%d: ISR and ELR empty, the last known leader %d leads (recovering) in epoch %d; records it lost "
                    "in an unclean shutdown may be lost", p.topic, p.partition, leader, record.leader_epoch)
    elif record is not None and unclean:
        log.warning("UNCLEAN leader election for %s-%d: broker %d (not in ISR %s) leads in epoch %d; data may be lost",
                    p.topic, p.partition, leader, list(p.isr), record.leader_epoch)
    return record


def clear_elr(p: PartitionState) -> PartitionRecord | None:
    """The record emptying `p`'s ELR and last known leader (None if both are already empty).
    Kafka 4.1 does this for every partition of a topic whose min.insync.replicas is altered
    (KAFKA-16540's ClearElrRecord): the ELR holds "every committed record" only relative to
    the min ISR it was formed under, since lowering min ISR lets the high watermark advance
    without its members. A leaderless partition then stays offline until a former ISR member
    or an unclean election brings it back, rather than electing a replica that may lack
    records committed under the new min ISR."""
    if not p.elr and p.last_known_leader == NO_LEADER:
        return None
    return partition_change(p, isr=p.isr, leader=p.leader, recovering=p.leader_recovering, elr=(), last_known_leader=NO_LEADER)


@dataclass(frozen=True)
class IsrProposal:
    """One partition of an AlterPartition request, as the leader sent it."""

    sender: int
    leader_epoch: int
    partition_epoch: int
    new_isr: tuple[tuple[int, int], ...]  # (broker id, broker epoch or -1 when not sent: v2)
    leader_recovering: bool


def check_isr_proposal(p: PartitionState | None, proposal: IsrProposal, brokers: Mapping[int, BrokerRegistration], *,
                       min_isr: int = 1, elr_enabled: bool = False) -> tuple[ErrorCode, PartitionRecord | None]:
    """The error for an AlterPartition proposal, or none and the record to write (None when
    the proposal is the current state already: a retry of an accepted change). The ELR
    follows the new ISR (`target_elr`)."""
    if p is None:
        return ErrorCode.unknown_topic_or_partition, None
    if p.leader != proposal.sender:
        return ErrorCode.not_leader_or_follower, None
    if proposal.leader_epoch != p.leader_epoch:
        return ErrorCode.fenced_leader_epoch, None
    if proposal.partition_epoch != p.partition_epoch:
        return ErrorCode.invalid_update_version, None
    members = tuple(b for b, _ in proposal.new_isr)
    if proposal.sender not in members or len(set(members)) != len(members):
        return ErrorCode.invalid_request, None
    for broker_id, broker_epoch in proposal.new_isr:
        if broker_id not in p.replicas:
            return ErrorCode.ineligible_replica, None
        if broker_id in p.isr:
            continue  # only members being added must prove they are live (KIP-903)
        broker = brokers.get(broker_id)
        if broker is None or not broker.usable or (broker_epoch != -1 and broker_epoch != broker.broker_epoch):
            return ErrorCode.ineligible_replica, None
        if p.leader_recovering:
            # KIP-704: an uncleanly elected leader grows no ISR until it has recovered.
            return ErrorCode.invalid_request, None
    if proposal.leader_recovering and not p.leader_recovering:
        return ErrorCode.invalid_request, None  # only the controller marks a leader recovering
    ordered = tuple(b for b in p.replicas if b in members)
    return ErrorCode.none, partition_change(p, isr=ordered, leader=p.leader, recovering=proposal.leader_recovering,
                                            elr=target_elr(p, ordered, min_isr, elr_enabled))
