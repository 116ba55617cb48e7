"""ElectLeaders decided by the controller for one partition: preferred election (type 0: the
first replica leads again if it is usable and in the ISR) or unclean election (type 1: a
partition without a usable leader takes one from its ISR, else any usable replica, which may
lose acknowledged records: the same rule as unclean.leader.election.enable)."""

from __future__ import annotations

from collections.abc import Callable

from kio.schema.errors import ErrorCode

from cluster.controller.elections import choose_leader, partition_change
from cluster.metadata.image import PartitionState
from cluster.metadata.records import NO_LEADER, PartitionRecord

PREFERRED, UNCLEAN = 0, 1


def plan_election(p: PartitionState, election_type: int, usable: Callable[[int], bool]) -> tuple[ErrorCode, str | None, PartitionRecord | None]:
    if election_type == PREFERRED:
        preferred = p.replicas[0]
        if p.leader == preferred:
            return ErrorCode.election_not_needed, f"broker {preferred} already leads", None
        if preferred not in p.isr or not usable(preferred):
            return ErrorCode.preferred_leader_not_available, f"preferred replica {preferred} is not a usable ISR member (ISR {list(p.isr)})", None
        return ErrorCode.none, None, partition_change(p, isr=p.isr, leader=preferred, recovering=False)
    if election_type == UNCLEAN:
        if p.leader != NO_LEADER and usable(p.leader):
            return ErrorCode.election_not_needed, f"broker {p.leader} leads", None
        choice = choose_leader(p, p.isr, usable, unclean_allowed=True, elr=p.elr)
        if choice.leader == NO_LEADER:
            return ErrorCode.eligible_leaders_not_available, f"no replica of {list(p.replicas)} is usable", None
        return ErrorCode.none, None, partition_change(p, isr=choice.isr, leader=choice.leader, recovering=choice.recovering,
                                                      elr=choice.elr, last_known_leader=NO_LEADER)
    return ErrorCode.invalid_request, f"unknown election type {election_type} (0 preferred, 1 unclean)", None
