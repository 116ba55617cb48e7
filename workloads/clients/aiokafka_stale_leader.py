"""A metadata refresh when an aiokafka consumer's offset reset meets a stale leader.

A consumer with no committed offset for a partition it was given (or told to reset) asks the
partition's leader, as its metadata names it, for the earliest or latest offset (ListOffsets).
aiokafka 0.14 does that in `Fetcher._update_fetch_positions`, and when the answer is
NOT_LEADER_OR_FOLLOWER (the leadership moved) it logs "Failed fetch offsets from N", waits
retry_backoff_ms and asks the same broker again: nothing there requests new metadata (its
other ListOffsets path, `_retrieve_offsets`, and its Fetch path do). The consumer then asks
the old leader until its metadata ages out (metadata_max_age_ms, 5 minutes by default) and
reads nothing from the partition meanwhile. Kafka's Java consumer requests a metadata update
on these errors (KAFKA-9535), and so does librdkafka, the client of real runs; a simulated
eos run showed the difference: a copier given input partition 0 after a pause had moved its
leader (broker 1 to broker 2) asked broker 1 for 15 simulated seconds, the partition was
never copied, and the safe cluster was judged eos-missing.

`refresh_metadata_on_stale_leader` gives one started consumer the Java client's rule: a
ListOffsets error that says the metadata is stale (aiokafka's own `invalid_metadata` flag:
not leader, leader not available, unknown topic or partition, storage error) requests a
metadata update before the error goes on to aiokafka's retry. It wraps the consumer's own
fetcher (an instance attribute, looked up at each call), so aiokafka's code is unchanged.
"""

from __future__ import annotations

from typing import Any

from aiokafka import AIOKafkaConsumer
from aiokafka.errors import KafkaError


def refresh_metadata_on_stale_leader(consumer: AIOKafkaConsumer) -> None:
    """After `consumer.start()` (which makes its fetcher): ListOffsets answers that name the
    metadata stale request a metadata update, as KAFKA-9535 does in the Java consumer."""
    fetcher = getattr(consumer, "_fetcher", None)  # noqa: SLF001 - the glue pins aiokafka 0.14
    if fetcher is None:
        raise RuntimeError("refresh_metadata_on_stale_leader: the consumer is not started (it has no fetcher yet)")
    if getattr(fetcher, "_logquake_stale_leader_refresh", False):
        return
    request = fetcher._proc_offset_request  # noqa: SLF001
    client = fetcher._client  # noqa: SLF001

    async def offset_request(node_id: int, topic_data: Any) -> Any:
        try:
            return await request(node_id, topic_data)
        except KafkaError as exc:
            if exc.invalid_metadata:
                client.force_metadata_update()
            raise

    fetcher._proc_offset_request = offset_request  # noqa: SLF001
    fetcher._logquake_stale_leader_refresh = True  # noqa: SLF001
