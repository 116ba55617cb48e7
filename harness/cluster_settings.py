"""cluster-config.json: the settings an external cluster really ran a test with.

Against `--bootstrap-servers` the harness configures nothing but its own topics, so the
claims cannot come from what the user typed. After set-up, and again at the end of the run
(an operator may alter a topic meanwhile), the test topics' replication factors and
effective configs and the brokers' durability settings are read from the cluster
(workloads/clients/effective_config.py) and written beside spec.json, with what was asked
for and what could not be applied. `logquake analyze` derives the claims from this file
(checkers/claims.py), so a copied run directory gives the same verdict without the cluster.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

CLUSTER_CONFIG_FILE = "cluster-config.json"
CLUSTER_CONFIG_VERSION = 1
# Broker settings the claims depend on, read back from an external cluster's brokers: the
# bundled cluster's own (a bundled cluster tested from outside is judged as it runs) and the
# bug switches (checkers/claims.py), one of which, partition verification, is Kafka's too.
BUNDLED_BROKER_KEYS = ("log.crash.lose.unflushed", "replica.truncate.to.high.watermark",
                       "fetch.read.past.high.watermark", "transaction.partition.verification.enable",
                       "transaction.lso.ignore.open.transactions", "transaction.offset.commit.skip.generation.check")


def not_applied_warning(key: str, value: str) -> str:
    return (f"--cluster-config {key}={value} is a broker setting: the harness does not configure an external "
            "cluster's brokers, so it was not applied and no claim rests on it (the brokers' own value, if they "
            f"report one, is in {CLUSTER_CONFIG_FILE})")


@dataclass
class ClusterSettingsRecord:
    requested_topic_config: dict[str, str]
    applied_from: dict[str, str]
    not_applied: dict[str, str]
    warnings: list[str] = field(default_factory=list)
    readings: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"version": CLUSTER_CONFIG_VERSION, "source": "cluster", "requested_topic_config": self.requested_topic_config,
                "applied_from": self.applied_from, "not_applied": self.not_applied, "warnings": self.warnings,
                "readings": self.readings}

    def save(self, run_dir: Path) -> None:
        path = run_dir / CLUSTER_CONFIG_FILE
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(self.to_json(), indent=2, sort_keys=True) + "\n", encoding="utf-8")
        tmp.replace(path)


def start_record(cluster_config: Mapping[str, str]) -> ClusterSettingsRecord:
    from workloads.topic_settings import split_cluster_config

    split = split_cluster_config(cluster_config)
    record = ClusterSettingsRecord(dict(split.topic_config), dict(split.applied_from), dict(split.broker_only))
    record.warnings = [not_applied_warning(k, v) for k, v in sorted(split.broker_only.items())]
    return record


def read_into(record: ClusterSettingsRecord, *, when: str, bootstrap_servers: str, client_config: Mapping[str, str],
              topics: tuple[str, ...], owns_topic: Callable[[str], bool] | None, log: Any) -> None:
    """Append one reading of the cluster. Never raises: a read that fails is recorded as the
    error it was, and the claims then take the conservative reading (checkers/claims.py)."""
    from workloads.clients.effective_config import admin_client, read_cluster

    try:
        admin = admin_client(bootstrap_servers, dict(client_config))
        reading = read_cluster(admin, when=when, topics=topics, owns_topic=owns_topic,
                               extra_topic_keys=record.requested_topic_config,
                               extra_broker_keys=(*record.not_applied, *BUNDLED_BROKER_KEYS)).to_json()
    except Exception as exc:
        reading = {"when": when, "topics": {}, "brokers": {}, "errors": [f"{type(exc).__name__}: {exc}"]}
    record.readings.append(reading)
    problems = list(reading["errors"])
    for kind in ("topics", "brokers"):
        for name, item in reading[kind].items():
            problems += [f"{kind[:-1]} {name}: {e}" for e in item["errors"]]
    for name, topic in reading["topics"].items():
        for key, asked in record.requested_topic_config.items():
            got = topic["configs"].get(key)
            if got is not None and got != asked:
                log.warning("topic %s has %s=%s although %s was asked for (it existed before the run, or an admin "
                            "changed it): the claims follow the topic", name, key, got, asked)
    if problems:
        log.warning("reading the cluster's effective settings (%s) left values unknown; the claims assume the "
                    "conservative value for each: %s", when, "; ".join(problems))
    log.info("cluster's effective settings (%s): %s", when,
             json.dumps({n: {"replication_factor": t["replication_factor"], **t["configs"]}
                         for n, t in reading["topics"].items()}, sort_keys=True))
