"""Leader election and ISR rules (KRaft with one controller), as pure functions of a
partition's state and of which brokers may lead: the core decides when a partition must
change, this module decides what it changes to.

- A leader comes from the ISR, first acceptable member in replica order (clean election).
- With unclean.leader.election.enable and no acceptable ISR member, the first acceptable
  replica leads alone (ISR = [it]) and is marked recovering (KIP-704): records the old ISR
  had committed may be lost.
- A broker leaving (fenced or shutting down) leaves the ISR unless it is the last member:
  KRaft keeps the last member so the partition remembers who has its committed records.
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


def choose_leader(p: PartitionState, isr: tuple[int, ...], acceptable: Acceptable, unclean_allowed: bool) -> LeaderChoice:
    for replica in p.replicas:
        if replica in isr and acceptable(replica):
            return LeaderChoice(replica, isr, recovering=False, unclean=False)
    if unclean_allowed:
        for replica in p.replicas:
            if acceptable(replica):
                return LeaderChoice(replica, (replica,), recovering=True, unclean=True)
    return LeaderChoice(NO_LEADER, isr, recovering=p.leader_recovering, unclean=False)


def partition_change(p: PartitionState, *, isr: tuple[int, ...], leader: int, recovering: bool) -> PartitionRecord | None:
    """The record taking `p` to the given ISR, leader and recovery state; None if that is
    what it already is."""
    if isr == p.isr and leader == p.leader and recovering == p.leader_recovering:
        return None
    leader_epoch = p.leader_epoch + 1 if leader != p.leader else p.leader_epoch
    return PartitionRecord(str(p.topic_id), p.partition, p.replicas, isr, leader, leader_epoch, p.partition_epoch + 1, recovering)


def reelect(p: PartitionState, leaving: int | None, acceptable: Acceptable, unclean_allowed: bool) -> PartitionRecord | None:
    """`leaving` (if any) leaves the ISR, keeping the last member, and the leadership; a new
    leader is chosen when the partition has none or its leader may no longer lead."""
    isr = tuple(b for b in p.isr if b != leaving) or p.isr

    def may_lead(broker_id: int) -> bool:
        return broker_id != leaving and acceptable(broker_id)

    leader, recovering = p.leader, p.leader_recovering
    unclean = False
    if leader == NO_LEADER or not may_lead(leader):
        choice = choose_leader(p, isr, may_lead, unclean_allowed)
        leader, isr, recovering, unclean = choice.leader, choice.isr, choice.recovering, choice.unclean
    record = partition_change(p, isr=isr, leader=leader, recovering=recovering)
    if record is not None and unclean:
        log.warning("UNCLEAN leader election for %s-%d: broker %d (not in ISR %s) leads in epoch %d; data may be lost",
                    p.topic, p.partition, leader, list(p.isr), record.leader_epoch)
    return record


@dataclass(frozen=True)
class IsrProposal:
    """One partition of an AlterPartition request, as the leader sent it."""

    sender: int
    leader_epoch: int
    partition_epoch: int
    new_isr: tuple[tuple[int, int], ...]  # (broker id, broker epoch or -1 when not sent: v2)
    leader_recovering: bool


def check_isr_proposal(p: PartitionState | None, proposal: IsrProposal,
                       brokers: Mapping[int, BrokerRegistration]) -> tuple[ErrorCode, PartitionRecord | None]:
    """The error for an AlterPartition proposal, or none and the record to write (None when
    the proposal is the current state already: a retry of an accepted change)."""
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
    return ErrorCode.none, partition_change(p, isr=ordered, leader=p.leader, recovering=proposal.leader_recovering)
