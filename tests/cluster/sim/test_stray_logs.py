"""A broker that loads the controllers' snapshot on restart removes the logs of topics deleted
while it was down (Kafka 3.7+ removes stray partitions at startup): the snapshot holds no
RemoveTopic record to tell it, so without the check their directories stayed on its disk
for good."""

from __future__ import annotations

import datetime

from kio.schema.errors import ErrorCode

from cluster.protocol.versions import ApiKey
from tests.cluster.sim.test_broker_metadata_snapshot import log_start, make_topics, same_metadata, start


def _delete_topic(sim, broker: int, name: str) -> None:
    body = sim.call(broker, ApiKey.DELETE_TOPICS, 4, topic_names=(name,), timeout=datetime.timedelta(seconds=10))
    assert body.responses[0].error_code == ErrorCode.none, body


def test_a_broker_loading_a_snapshot_removes_logs_of_topics_deleted_while_it_was_down() -> None:
    sim = start(seed=5, controllers=1)
    make_topics(sim, ["doomed", "kept"])
    sim.run_until(lambda: all(sim.broker(2).partition(t, i) is not None for t in ("doomed", "kept") for i in (0, 1)), 10_000,
                  what="broker 2 hosting both topics")
    data_dir = sim.broker_config(2).data_dir
    sim.kill(2)
    _delete_topic(sim, 0, "doomed")
    make_topics(sim, [f"a{i}" for i in range(6)])  # enough metadata for a snapshot past the deletion
    sim.run_until(lambda: log_start(sim) > 0, 10_000, what="a snapshot moved the controller's log start")
    restarted = sim.start_broker(2)
    active = sim.controller
    assert active is not None
    sim.run_until(lambda: restarted.controller_client.snapshots_loaded >= 1 and restarted.ready
                  and same_metadata(restarted.controller_client.image, active.committed_image)
                  and restarted.partition("kept", 0) is not None, 30_000,
                  what="broker 2 loaded the snapshot, registered again and applied it")
    disk = restarted.disk
    assert not disk.exists(f"{data_dir}/doomed-0") and not disk.exists(f"{data_dir}/doomed-1"), disk.listdir(data_dir)
    assert disk.exists(f"{data_dir}/kept-0") and restarted.partition("kept", 0) is not None
