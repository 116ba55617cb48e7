"""No group (re)join from an aiokafka consumer that is being closed.

aiokafka 0.14 runs its group membership in a background task (`__coordination_routine`). Its
`stop()` marks the coordinator closing and then waits for that task before it sends
LeaveGroup. The task checks the mark only at the top of its loop: a consumer closed while
it was looking up its coordinator (every broker paused) finds the coordinator, then sends a
JoinGroup anyway. A coordinator parks that JoinGroup until the rebalance completes (up to
the rebalance timeout, or until the dead members' sessions expire), so the close waits for
it, the caller's close timeout ends it first (workloads.clients.aiokafka_queue
CLOSE_TIMEOUT_S) and no LeaveGroup is sent. The member stays in the group without a
process behind it; made the next generation's leader, it never sends the assignment
(SyncGroup), and the group waits another rebalance timeout for nothing.

Kafka's Java consumer joins only from poll(), which a closing consumer no longer calls, and
its close() sends LeaveGroup; librdkafka (the client of real runs) leaves on close too. A
simulated eos run showed the difference (tests/harness/test_eos_safe_replay.py, seed 1 of
the long form): after a 27-s pause of every broker a copier that had just died rejoined 8
ms after its close began, became the leader of the final phase's generation, and the live
copiers got no partition for the whole copy window.

`no_rejoin_while_closing` gives one started consumer the Java rule: once closing, its
coordination task starts no join (it ends its loop instead, and stop() sends LeaveGroup).
It wraps the coordinator's own methods (instance attributes), so aiokafka's code is unchanged.
"""

from __future__ import annotations

from typing import Any

from aiokafka import AIOKafkaConsumer


def no_rejoin_while_closing(consumer: AIOKafkaConsumer) -> None:
    """After `consumer.start()`: a closing consumer's coordinator starts no (re)join. A
    consumer without a group (manual assignment) is left as it is."""
    coordinator = getattr(consumer, "_coordinator", None)  # noqa: SLF001 - the glue pins aiokafka 0.14
    if coordinator is None:
        raise RuntimeError("no_rejoin_while_closing: the consumer is not started (it has no coordinator yet)")
    closing = getattr(coordinator, "_closing", None)  # only a group's coordinator has one
    if closing is None or getattr(coordinator, "_logquake_no_closing_rejoin", False):
        return
    ensure_active_group = coordinator.ensure_active_group
    do_rejoin = coordinator._do_rejoin_group  # noqa: SLF001

    async def guarded_ensure_active_group(subscription: Any, prev_assignment: Any) -> Any:
        if closing.done():
            return None  # the routine then ends its loop: closing
        return await ensure_active_group(subscription, prev_assignment)

    async def guarded_rejoin(subscription: Any) -> bool:
        # Closed while the revocation callback ran (ensure_active_group calls it first).
        if closing.done():
            return False
        return bool(await do_rejoin(subscription))

    coordinator.ensure_active_group = guarded_ensure_active_group
    coordinator._do_rejoin_group = guarded_rejoin  # noqa: SLF001
    coordinator._logquake_no_closing_rejoin = True  # noqa: SLF001
