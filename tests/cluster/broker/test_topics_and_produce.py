"""The broker core through its sans-I/O interface: topics, metadata, produce, idempotence."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from cluster.protocol.versions import ApiKey, SUPPORTED_VERSIONS
from tests.cluster.broker.core_driver import CoreDriver
from tests.cluster.broker.requests import batch, create_topic, init_producer_id, metadata, produce, send_produce, topic_id


def test_api_versions_advertises_the_table() -> None:
    body = CoreDriver().call(ApiKey.API_VERSIONS, 3, client_software_name="t", client_software_version="1")
    assert body.error_code is ErrorCode.none
    assert {k.api_key: (k.min_version, k.max_version) for k in body.api_keys} == {
        int(k): (r.min_version, r.max_version) for k, r in SUPPORTED_VERSIONS.items()
    }


def test_create_topic_then_metadata_shows_ids_and_epochs() -> None:
    driver = CoreDriver()
    created = create_topic(driver, "orders", 4)
    assert created.topics[0].error_code is ErrorCode.none and created.topics[0].num_partitions == 4
    again = create_topic(driver, "orders", 4)
    assert again.topics[0].error_code is ErrorCode.topic_already_exists
    bad = create_topic(driver, "no spaces allowed", 1)
    assert bad.topics[0].error_code is ErrorCode.invalid_topic_exception
    huge = create_topic(driver, "huge", 2**31 - 1)  # must be refused, not built
    assert huge.topics[0].error_code is ErrorCode.invalid_partitions and "10000" in huge.topics[0].error_message
    body = metadata(driver, ["orders"])
    (topic,) = body.topics
    assert topic.topic_id == topic_id(driver, "orders") and topic.topic_id.int != 0
    assert [(p.partition_index, p.leader_id, p.leader_epoch) for p in topic.partitions] == [(i, 0, 0) for i in range(4)]
    assert body.brokers[0].host == "127.0.0.10" and body.brokers[0].port == 9092


def test_every_metadata_version_describes_the_topic() -> None:
    driver = CoreDriver()
    create_topic(driver, "orders", 2)
    for version in range(0, 14):
        body = metadata(driver, ["orders"], version=version)
        assert [len(t.partitions) for t in body.topics if t.name == "orders"] == [2], f"Metadata v{version}"
        assert body.brokers[0].node_id == 0


def test_metadata_auto_creates_only_when_allowed() -> None:
    driver = CoreDriver()
    refused = metadata(driver, ["lazy"], auto_create=False)
    assert refused.topics[0].error_code is ErrorCode.unknown_topic_or_partition
    # The controller creates it; until this broker's image has it the answer is retriable.
    asked = metadata(driver, ["lazy"], auto_create=True)
    assert asked.topics[0].error_code is ErrorCode.leader_not_available and asked.topics[0].partitions == ()
    driver.run_until(lambda: metadata(driver, ["lazy"], auto_create=False).topics[0].error_code is ErrorCode.none, 5000, "lazy created")
    created = metadata(driver, ["lazy"], auto_create=True)
    assert created.topics[0].error_code is ErrorCode.none and len(created.topics[0].partitions) == 1
    assert created.topics[0].partitions[0].leader_id == 0
    driver.await_coordinator()  # FindCoordinator creates the offsets topic
    listed = {t.name for t in metadata(driver, None).topics}
    assert {"lazy", "__consumer_offsets"} <= listed


def test_auto_creation_beyond_the_live_brokers_fails_clearly() -> None:
    driver = CoreDriver({"default.replication.factor": "3"})
    assert metadata(driver, ["wide"]).topics[0].error_code is ErrorCode.leader_not_available
    driver.run_until(lambda: "wide" in driver.broker.auto_create_failures, 5000, "the controller's refusal")
    # Not capped to the one live broker: the client is told why the topic does not exist.
    assert metadata(driver, ["wide"]).topics[0].error_code is ErrorCode.invalid_replication_factor
    assert metadata(driver, ["wide"]).topics[0].error_code is ErrorCode.leader_not_available  # asked again


def test_find_coordinator_creates_the_offsets_topic_then_names_this_broker() -> None:
    driver = CoreDriver()
    assert metadata(driver, ["__consumer_offsets"], auto_create=True).topics[0].error_code is ErrorCode.unknown_topic_or_partition
    first = driver.find_coordinator("g")
    assert (first.error_code, first.node_id) == (ErrorCode.coordinator_not_available, -1)
    driver.await_coordinator("g")
    found = driver.find_coordinator("g")
    assert (found.error_code, found.node_id, found.host, found.port) == (ErrorCode.none, 0, "127.0.0.10", 9092)
    (offsets,) = metadata(driver, ["__consumer_offsets"], auto_create=False).topics
    assert offsets.is_internal and len(offsets.partitions) == 3
    transactional = driver.call(ApiKey.FIND_COORDINATOR, 3, key_type=1, key="txn")
    assert (transactional.error_code, transactional.node_id) == (ErrorCode.coordinator_not_available, -1)


def test_produce_is_refused_for_kafkas_internal_topics_only() -> None:
    """As Kafka: a client append to __consumer_offsets is INVALID_TOPIC_EXCEPTION, while a
    user topic whose name starts with "__" is an ordinary topic (auto-created, written)."""
    driver = CoreDriver()
    driver.await_coordinator()
    refused = produce(driver, "__consumer_offsets", 0, batch([b"forged"]))
    assert refused.error_code is ErrorCode.invalid_topic_exception
    assert driver.broker.partition("__consumer_offsets", 0).log_end_offset == 0
    assert metadata(driver, ["__user"], auto_create=True).topics[0].error_code is ErrorCode.leader_not_available
    driver.run_until(lambda: metadata(driver, ["__user"], auto_create=False).topics[0].error_code is ErrorCode.none, 5000, "__user created")
    written = produce(driver, "__user", 0, batch([b"a", b"b"]))
    assert (written.error_code, written.base_offset) == (ErrorCode.none, 0)
    assert driver.broker.partition("__user", 0).log_end_offset == 2


def test_offsets_topic_replication_beyond_the_live_brokers_leaves_no_coordinator() -> None:
    driver = CoreDriver({"offsets.topic.replication.factor": "3"})
    for _ in range(5):
        assert driver.find_coordinator("g").error_code is ErrorCode.coordinator_not_available
        driver.scheduler.advance(200)
    assert driver.broker.topics.by_name("__consumer_offsets") is None


def test_topics_and_ids_survive_restart_with_bumped_epochs() -> None:
    driver = CoreDriver()
    create_topic(driver, "kept", 2)
    before = topic_id(driver, "kept")
    driver.restart()
    (topic,) = metadata(driver, ["kept"], auto_create=False).topics
    assert topic.topic_id == before
    # The restarted broker's old registration is fenced (leader -1, epoch 1), then the new
    # one is unfenced and elected again (epoch 2): every leader change bumps the epoch.
    assert [p.leader_epoch for p in topic.partitions] == [2, 2]


def test_produce_assigns_consecutive_offsets_and_restamps_epoch() -> None:
    driver = CoreDriver()
    create_topic(driver, "t", 1)
    first = produce(driver, "t", 0, batch([b"a", b"b", b"c"]))
    second = produce(driver, "t", 0, batch([b"d"]))
    assert (first.error_code, first.base_offset, second.base_offset) == (ErrorCode.none, 0, 3)
    partition = driver.broker.partition("t", 0)
    assert partition.high_watermark == partition.log_end_offset == 4
    stored = partition.read(0, 10_000)
    assert [bytes(b)[:8] for b in stored] == [(0).to_bytes(8, "big"), (3).to_bytes(8, "big")]


def test_produce_rejects_corrupt_batches_and_unknown_partitions() -> None:
    driver = CoreDriver()
    create_topic(driver, "t", 1)
    damaged = bytearray(batch([b"payload"]))
    damaged[-1] ^= 0xFF
    assert produce(driver, "t", 0, bytes(damaged)).error_code is ErrorCode.corrupt_message
    assert produce(driver, "t", 5, batch([b"x"])).error_code is ErrorCode.unknown_topic_or_partition
    assert produce(driver, "t", 0, batch([b"x"]) + batch([b"y"])).error_code is ErrorCode.invalid_record
    assert driver.broker.partition("t", 0).log_end_offset == 0


def test_acks_zero_sends_no_response_but_appends() -> None:
    driver = CoreDriver()
    create_topic(driver, "t", 1)
    pending = send_produce(driver, "t", 0, batch([b"x"]), acks=0)
    assert pending.done and pending.response.chunks is None and not pending.response.close_connection
    assert driver.broker.partition("t", 0).log_end_offset == 1


def test_drop_produce_response_fault_closes_after_appending() -> None:
    driver = CoreDriver({"test.drop.produce.response.probability": "1.0"})
    create_topic(driver, "t", 1)
    pending = send_produce(driver, "t", 0, batch([b"x"]))
    assert pending.response.chunks is None and pending.response.close_connection
    assert driver.broker.partition("t", 0).log_end_offset == 1


def test_idempotent_producer_sequence_rules() -> None:
    driver = CoreDriver()
    create_topic(driver, "t", 1)
    ids = init_producer_id(driver)
    pid, epoch = ids.producer_id, ids.producer_epoch
    assert produce(driver, "t", 0, batch([b"a", b"b"], pid, epoch, 0)).base_offset == 0
    assert produce(driver, "t", 0, batch([b"c"], pid, epoch, 2)).base_offset == 2
    duplicate = produce(driver, "t", 0, batch([b"a", b"b"], pid, epoch, 0))
    assert (duplicate.error_code, duplicate.base_offset) == (ErrorCode.none, 0)
    assert produce(driver, "t", 0, batch([b"e"], pid, epoch, 5)).error_code is ErrorCode.out_of_order_sequence_number
    # A higher epoch (as a transactional coordinator's bump would give) restarts sequences at 0.
    assert produce(driver, "t", 0, batch([b"f"], pid, epoch + 1, 0)).error_code is ErrorCode.none
    assert produce(driver, "t", 0, batch([b"g"], pid, epoch, 3)).error_code is ErrorCode.invalid_producer_epoch
    assert produce(driver, "t", 0, batch([b"h"], pid + 1000, 0, 7)).error_code is ErrorCode.unknown_producer_id
    assert produce(driver, "t", 0, batch([b"i"], pid, epoch + 1, 5)).error_code is ErrorCode.out_of_order_sequence_number


def test_init_producer_id_without_transactional_id_always_gives_a_new_id() -> None:
    """Kafka's coordinator ignores the id and epoch a non-transactional producer sends (as
    librdkafka does after an unknown outcome, KIP-360) and allocates a fresh id at epoch 0."""
    driver = CoreDriver()
    first = init_producer_id(driver)
    assert (first.error_code, first.producer_epoch) == (ErrorCode.none, 0)
    again = init_producer_id(driver, first.producer_id, first.producer_epoch)
    assert again.error_code is ErrorCode.none
    assert again.producer_id != first.producer_id and again.producer_epoch == 0
    third = init_producer_id(driver, again.producer_id, 5, version=3)
    assert third.producer_id not in (first.producer_id, again.producer_id) and third.producer_epoch == 0


def test_describe_producers_lists_a_partitions_idempotent_producers() -> None:
    driver = CoreDriver()
    create_topic(driver, "t", 1)
    pid = init_producer_id(driver).producer_id
    produce(driver, "t", 0, batch([b"a", b"b"], pid, 0, 0, timestamp_ms=1_700_000_000_000))
    produce(driver, "t", 0, batch([b"c"], pid, 0, 2, timestamp_ms=1_700_000_005_000))
    produce(driver, "t", 0, batch([b"plain"]))  # no producer id: not listed
    topic_cls = driver.request_class(ApiKey.DESCRIBE_PRODUCERS, 0, "TopicRequest")
    body = driver.call(ApiKey.DESCRIBE_PRODUCERS, 0, topics=(topic_cls(name="t", partition_indexes=(0, 7)), topic_cls(name="nope", partition_indexes=(0,))))
    (here, missing), (unknown,) = body.topics[0].partitions, body.topics[1].partitions
    assert here.error_code is ErrorCode.none
    assert [(p.producer_id, p.producer_epoch, p.last_sequence, p.last_timestamp, p.coordinator_epoch, p.current_txn_start_offset)
            for p in here.active_producers] == [(pid, 0, 2, 1_700_000_005_000, -1, -1)]
    assert missing.error_code is ErrorCode.unknown_topic_or_partition and unknown.error_code is ErrorCode.unknown_topic_or_partition


def test_deduplication_survives_restart_and_crash() -> None:
    driver = CoreDriver({"log.flush.interval.messages": "1"})
    create_topic(driver, "t", 1)
    pid = init_producer_id(driver).producer_id
    for seq in range(3):
        produce(driver, "t", 0, batch([b"v%d" % seq], pid, 0, seq))
    driver.restart()
    retry = produce(driver, "t", 0, batch([b"v1"], pid, 0, 1))
    assert (retry.error_code, retry.base_offset) == (ErrorCode.none, 1)
    driver.restart(crash=True)
    retry = produce(driver, "t", 0, batch([b"v2"], pid, 0, 2))
    assert (retry.error_code, retry.base_offset) == (ErrorCode.none, 2)
    assert produce(driver, "t", 0, batch([b"v3"], pid, 0, 3)).base_offset == 3


def test_producer_ids_are_unique_across_restarts_and_crashes() -> None:
    driver = CoreDriver({"producer.id.block.size": "3"})
    seen = [init_producer_id(driver).producer_id for _ in range(4)]
    driver.restart(crash=True)
    seen += [init_producer_id(driver).producer_id for _ in range(4)]
    driver.restart()
    seen += [init_producer_id(driver).producer_id for _ in range(2)]
    assert len(set(seen)) == len(seen)


def test_crash_keeps_the_fsynced_prefix_only() -> None:
    driver = CoreDriver()
    create_topic(driver, "t", 1, {"flush.messages": "2"})
    for value in (b"a", b"b", b"c"):
        produce(driver, "t", 0, batch([value]))
    driver.restart(crash=True)
    partition = driver.broker.partition("t", 0)
    assert partition.log_end_offset == partition.high_watermark == 2
    assert produce(driver, "t", 0, batch([b"d"])).base_offset == 2


def test_metadata_of_a_replicated_topic_follows_the_controller() -> None:
    """Three brokers: Metadata from any of them shows the image: replicas, ISR, offline
    (fenced) replicas, only usable brokers, and LEADER_NOT_AVAILABLE once no replica can lead."""
    from tests.cluster.coordinator.group_requests import TOPIC, started_cluster
    from tests.cluster.sim.sim_requests import req

    sim = started_cluster()
    topic_cls = req(ApiKey.METADATA, 12, "MetadataRequestTopic")

    def partition_view(ask: int):  # type: ignore[no-untyped-def]
        body = sim.call(ask, ApiKey.METADATA, 12, topics=(topic_cls(name=TOPIC, topic_id=None),), allow_auto_topic_creation=False,
                        include_topic_authorized_operations=False)
        (topic,) = body.topics
        return body, topic, topic.partitions[0]

    _, topic, p = partition_view(0)
    assert (topic.error_code, p.error_code, set(p.replica_nodes), set(p.isr_nodes), p.offline_replicas) == (
        ErrorCode.none, ErrorCode.none, {0, 1, 2}, {0, 1, 2}, ())
    leader = p.leader_id
    victim = next(b for b in sim.broker_ids if b != leader)
    sim.kill(victim)
    watcher = leader
    sim.run_until(lambda: partition_view(watcher)[2].offline_replicas == (victim,), 10_000, what="the dead follower offline")
    body, _, p = partition_view(watcher)
    assert victim not in p.isr_nodes and victim in p.replica_nodes and p.leader_id == leader
    assert sorted(b.node_id for b in body.brokers) == sorted(set(sim.broker_ids) - {victim})
    for b in [b for b in sim.broker_ids if b != watcher and sim.is_running(b)]:
        sim.kill(b)
    sim.kill(watcher)
    sim.start_broker(victim)  # out of the ISR: with unclean election off it must not lead
    sim.run_until(lambda: sim.broker(victim).ready, 10_000, what="the stale replica back")
    sim.run_until(lambda: len(partition_view(victim)[0].brokers) == 1, 10_000, what="the dead brokers fenced")
    sim.run_for(2000)  # any election would have happened by now
    _, _, p = partition_view(victim)
    assert (p.error_code, p.leader_id) == (ErrorCode.leader_not_available, -1)
    assert victim not in p.isr_nodes and set(p.offline_replicas) == set(sim.broker_ids) - {victim}
