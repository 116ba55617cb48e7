"""An idempotent producer's retry after a failover: the followers recorded the producer state
from the batches they copied, so the new leader recognises the retry and answers with the
original offset instead of writing the record twice."""

from __future__ import annotations

import datetime

from kio.schema.errors import ErrorCode

from cluster.protocol.versions import ApiKey
from tests.cluster.replication.scenario import TOPIC, answer, leader, produce, replica, start
from tests.cluster.sim.sim_requests import read_all


def test_a_retry_after_failover_is_deduplicated_by_the_new_leader() -> None:
    sim = start(min_isr=2)
    old = leader(sim)
    ids = sim.call(old, ApiKey.INIT_PRODUCER_ID, 4, transactional_id=None, transaction_timeout=datetime.timedelta(seconds=60),
                   producer_id=-1, producer_epoch=-1)
    assert ids.error_code == ErrorCode.none
    producer = {"producer_id": ids.producer_id, "producer_epoch": ids.producer_epoch}
    assert answer(sim, produce(sim, old, b"first", base_sequence=0, **producer)) == (ErrorCode.none, 0)
    assert answer(sim, produce(sim, old, b"once", base_sequence=1, **producer)) == (ErrorCode.none, 1)
    sim.kill(old)  # the client saw no answer for "once" (say) and retries it
    new = leader(sim)
    assert new != old
    assert answer(sim, produce(sim, new, b"once", base_sequence=1, **producer)) == (ErrorCode.none, 1)
    assert answer(sim, produce(sim, new, b"next", base_sequence=2, **producer)) == (ErrorCode.none, 2)
    assert [v for _, v in read_all(sim, new, TOPIC)] == [b"first", b"once", b"next"]
    assert replica(sim, new).log_end_offset == 3


def test_a_sequence_gap_on_the_new_leader_is_refused() -> None:
    sim = start(min_isr=2)
    old = leader(sim)
    ids = sim.call(old, ApiKey.INIT_PRODUCER_ID, 4, transactional_id=None, transaction_timeout=datetime.timedelta(seconds=60),
                   producer_id=-1, producer_epoch=-1)
    producer = {"producer_id": ids.producer_id, "producer_epoch": ids.producer_epoch}
    assert answer(sim, produce(sim, old, b"first", base_sequence=0, **producer)) == (ErrorCode.none, 0)
    sim.kill(old)
    new = leader(sim)
    assert answer(sim, produce(sim, new, b"skips-one", base_sequence=2, **producer))[0] == ErrorCode.out_of_order_sequence_number
