"""The workloads a simulated run can drive: the real workload's generators, with clients
that run on the simulation's event loop.

The queue workload (`workloads/clients/aiokafka_queue`; with `txn=true`,
`workloads/clients/aiokafka_txn`, every op one transaction) and the eos workload
(`workloads/clients/aiokafka_eos`). Others are refused with the reason.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from harness.generator import Generator
from harness.spec import RunSpec

SIMULATED_WORKLOADS = ("queue", "eos")


class NotSimulated(ValueError):
    """Something a run asks for that the simulation cannot do; the message says what."""


@dataclass
class SimWorkload:
    generator: Generator
    final_generator: Generator | None
    open_client: Callable[[int | str], Any]  # a client whose invoke/close are coroutines
    setup: Callable[[], Any]  # a coroutine function: create what the workload needs
    close: Callable[[], Any]  # a coroutine function: release what setup opened
    topics: tuple[str, ...]
    client_settings: dict[str, Any]  # what each aiokafka client gets, for the run directory


def check_simulated(spec: RunSpec) -> None:
    """Raise NotSimulated naming the first thing in `spec` the simulation cannot run."""
    if spec.workload not in SIMULATED_WORKLOADS:
        raise NotSimulated(f"--workload {spec.workload} has no simulated client yet; simulated: "
                           f"{', '.join(SIMULATED_WORKLOADS)}")
    from workloads.clients.aiokafka_config import UnsupportedClientSetting

    if spec.workload == "eos":
        import workloads.clients.aiokafka_eos  # noqa: F401  # imported before the simulation points aiokafka's names at it
    try:
        _settings(spec)
    except UnsupportedClientSetting as exc:
        raise NotSimulated(str(exc)) from None


def _settings(spec: RunSpec) -> Any:
    """The aiokafka parameters of the run's clients (UnsupportedClientSetting if impossible)."""
    from workloads.clients.aiokafka_config import aiokafka_settings
    from workloads.queue import QueueOptions

    if spec.workload == "eos" or QueueOptions(dict(spec.workload_options), spec.brokers).txn:
        from workloads.clients.aiokafka_txn import txn_settings

        return txn_settings(spec.client_config, spec.client_config_overrides)
    return aiokafka_settings(spec.client_config, spec.client_config_overrides)


def _client_settings(settings: Any, transactional: bool) -> dict[str, Any]:
    """What the clients get, for simulation.json: aiokafka's parameters, and with
    transactions the project's own transactional producer (aiokafka's is not used) and its."""
    described = settings.describe()
    if transactional:
        from workloads.clients.aiokafka_txn import kio_producer_parameters

        described["transactional_producer"] = {
            "client": "KioTxnProducer (workloads/clients/kio_txn_producer.py), not aiokafka's",
            **kio_producer_parameters(settings)}
    return described


def build(spec: RunSpec, bootstrap_servers: str, wall_ms: Callable[[], int]) -> SimWorkload:
    """The queue workload with aiokafka clients. Its generators are the real workload's
    (`workloads.queue.build`), whose confluent-kafka clients are never opened here."""
    check_simulated(spec)
    if spec.workload == "eos":
        return _build_eos(spec, bootstrap_servers, wall_ms)
    from workloads import queue
    from workloads.clients.aiokafka_queue import AioTopicCreator, AiokafkaQueueClient
    from workloads.clients.confluent import KeyMap
    from workloads.topic_settings import requested_topic_config

    opts = queue.QueueOptions(dict(spec.workload_options), spec.brokers)
    settings = _settings(spec)
    real = queue.build(spec, bootstrap_servers)
    keys = KeyMap(opts.topic_prefix, opts.partitions_per_topic)
    topics = AioTopicCreator(bootstrap_servers, settings, opts.partitions_per_topic, opts.replication_factor,
                             topic_config=requested_topic_config(spec))

    def open_client(process: int | str) -> AiokafkaQueueClient:
        common = dict(process=process, bootstrap_servers=bootstrap_servers, settings=settings, keys=keys, topics=topics,
                      wall_ms=wall_ms, max_poll_records=opts.max_poll_records, default_poll_ms=opts.poll_ms)
        if opts.txn:
            from workloads.clients.aiokafka_txn import AiokafkaTxnQueueClient

            # The real run's transactional id per process (workloads/queue.py).
            return AiokafkaTxnQueueClient(transactional_id=f"logquake-txn-{opts.topic_prefix}-{process}", **common)
        return AiokafkaQueueClient(**common)

    async def setup() -> None:
        await topics.ensure(keys.topic(k) for k in range(opts.key_count))

    return SimWorkload(generator=real.generator, final_generator=real.final_generator, open_client=open_client,
                       setup=setup, close=topics.close, topics=real.topics,
                       client_settings=_client_settings(settings, opts.txn))


def _build_eos(spec: RunSpec, bootstrap_servers: str, wall_ms: Callable[[], int]) -> SimWorkload:
    """The eos workload with aiokafka copiers, producers and verifier; its generators are the
    real workload's (`workloads.eos.build`), whose confluent-kafka clients are never opened."""
    import itertools

    from workloads import eos
    from workloads.clients.aiokafka_eos import AiokafkaEosClient
    from workloads.clients.aiokafka_queue import AioTopicCreator
    from workloads.clients.eos import EosKeys
    from workloads.topic_settings import requested_topic_config

    opts = eos.EosOptions(dict(spec.workload_options), spec.brokers, spec.concurrency)
    settings = _settings(spec)
    real = eos.build(spec, bootstrap_servers)
    keys = EosKeys(opts.input_topic, opts.output_topic, opts.partitions)
    topics = AioTopicCreator(bootstrap_servers, settings, opts.partitions, opts.replication_factor,
                             topic_config=requested_topic_config(spec))
    copy_ids = itertools.count(1)  # one count per run: every run of a hunt numbers its copies alike

    def open_client(process: int | str) -> AiokafkaEosClient:
        thread = int(process) % spec.concurrency
        return AiokafkaEosClient(process=process, bootstrap_servers=bootstrap_servers, settings=settings, keys=keys,
                                 topics=topics, wall_ms=wall_ms, default_poll_ms=opts.poll_ms, batch_size=opts.batch_size,
                                 copy_ids=copy_ids,
                                 transactional_id=f"{eos.TXN_ID_PREFIX}-{thread}" if opts.txn else None)

    async def setup() -> None:
        await topics.ensure(list(opts.topics))

    return SimWorkload(generator=real.generator, final_generator=real.final_generator, open_client=open_client,
                       setup=setup, close=topics.close, topics=real.topics, client_settings=_client_settings(settings, opts.txn))
