"""Claims of a run against an external cluster come from what the cluster reports.

The unit tests check the split of `--cluster-config` into topic configs and broker-only
settings, and how claims are derived from cluster-config.json (weakest over topics, fail
closed on what the cluster did not report). The slow tests start the bundled cluster as an
"external" one with its own broker settings and run `logquake test --bootstrap-servers`
against it, then re-analyse a copy of the run directory.
"""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from checkers.claims import DURABLE, ClaimInputs, claims_for
from workloads.topic_settings import TopicSettingError, split_cluster_config
from tests.run_logquake import run_command

PROJECT = Path(__file__).resolve().parents[2]
EXTERNAL_SPEC = {"workload": "queue", "bootstrap_servers": "127.0.0.1:9092", "brokers": 3}


@pytest.fixture
def make_cluster(tmp_path):
    """LocalClusters playing the external cluster, closed even when the test fails (the
    fixture of tests/cluster/conftest.py, which this directory does not see)."""
    from cluster.launcher import LocalCluster
    from tests.cluster.conftest import TEST_BROKER_CONFIG

    started = []

    def make(**kwargs):
        kwargs.setdefault("base_dir", tmp_path / f"external-{len(started)}")
        kwargs["config"] = {**TEST_BROKER_CONFIG, **kwargs.get("config", {})}
        cluster = LocalCluster(**kwargs)
        started.append(cluster)
        return cluster.__enter__()

    try:
        yield make
    finally:
        for cluster in reversed(started):
            cluster.close()


def reading(when, topics, brokers=None):
    return {"when": when, "errors": [],
            "topics": {name: {"replication_factor": rf, "partitions": 2, "configs": configs, "errors": []}
                       for name, (rf, configs) in topics.items()},
            "brokers": {b: {"configs": c, "errors": []} for b, c in (brokers or {}).items()}}


# -- --cluster-config against an external cluster ----------------------------------------

def test_topic_level_settings_are_split_from_broker_only_ones_and_renamed_to_topic_configs():
    split = split_cluster_config({"min.insync.replicas": "2", "log.flush.interval.messages": "1",
                                  "log.retention.hours": "2", "num.replica.fetchers": "4",
                                  "unclean.leader.election.enable": "false"})
    assert split.topic_config == {"min.insync.replicas": "2", "flush.messages": "1", "retention.ms": "7200000",
                                  "unclean.leader.election.enable": "false"}
    assert split.applied_from["flush.messages"] == "log.flush.interval.messages"
    assert split.broker_only == {"num.replica.fetchers": "4"}


def test_the_finest_retention_unit_wins_and_a_topic_config_typed_by_name_beats_its_synonym():
    split = split_cluster_config({"log.retention.hours": "1", "log.retention.ms": "5000"})
    assert split.topic_config == {"retention.ms": "5000"}
    split = split_cluster_config({"retention.ms": "42", "log.retention.minutes": "1"})
    assert split.topic_config == {"retention.ms": "42"}


def test_a_scaled_value_that_is_not_a_number_is_refused():
    with pytest.raises(TopicSettingError, match="log.retention.hours"):
        split_cluster_config({"log.retention.hours": "two"})


def test_a_bad_unit_value_is_a_bad_argument_of_logquake_test(tmp_path):
    out = subprocess.run([sys.executable, "-m", "harness.testcmd", "--bootstrap-servers", "127.0.0.1:1",
                          "--cluster-config", "log.retention.hours=two", "--results-dir", str(tmp_path)],
                         capture_output=True, text=True, timeout=120, cwd=PROJECT)
    assert out.returncode == 254 and "log.retention.hours" in out.stderr, out.stderr


# -- claims from cluster-config.json ------------------------------------------------------

def test_external_claims_ignore_typed_settings_and_take_the_weakest_topic_over_every_reading():
    settings = {"readings": [
        reading("after-setup", {"t0": (3, {"min.insync.replicas": "2", "unclean.leader.election.enable": "false"}),
                                "t1": (3, {"min.insync.replicas": "2", "unclean.leader.election.enable": "false"})}),
        # an admin lowered t1's min ISR and replication during the run
        reading("end", {"t0": (3, {"min.insync.replicas": "2", "unclean.leader.election.enable": "false"}),
                        "t1": (2, {"min.insync.replicas": "1", "unclean.leader.election.enable": "true"})}),
    ]}
    spec = {**EXTERNAL_SPEC, "cluster_config": {"min.insync.replicas": "3", "unclean.leader.election.enable": "false"}}
    inputs = ClaimInputs.from_spec_json(spec, settings)
    assert (inputs.min_insync_replicas, inputs.replication_factor, inputs.unclean_leader_election) == (1, 2, True)
    reason = {c.name: c for c in claims_for(inputs)}[DURABLE].reason
    assert "min.insync.replicas=1" in reason and "unclean.leader.election.enable=true" in reason
    assert "reported by the external cluster" in reason and "after-setup, end" in reason


def test_values_the_cluster_did_not_report_take_the_reading_that_excuses_nothing():
    settings = {"readings": [reading("after-setup", {
        "t0": (1, {"min.insync.replicas": "1", "unclean.leader.election.enable": "false"}),
        "t1": (None, {}),  # DescribeConfigs and Metadata refused (e.g. an authorisation error)
    })]}
    spec = {**EXTERNAL_SPEC, "workload_options": {"replication_factor": "3"}}
    inputs = ClaimInputs.from_spec_json(spec, settings)
    # t0's reported values are weaker than the assumptions and stand; t1's unknown unclean
    # election is not taken to be on.
    assert (inputs.min_insync_replicas, inputs.replication_factor, inputs.unclean_leader_election) == (1, 1, False)
    reason = {c.name: c for c in claims_for(inputs)}[DURABLE].reason
    assert "unclean.leader.election.enable of t1 not reported, assumed false" in reason
    assert "never a false pass" in reason


def test_without_any_reading_an_external_run_assumes_safe_settings_and_says_so():
    for settings in (None, {"readings": [{"when": "after-setup", "topics": {}, "brokers": {}, "errors": ["boom"]}]}):
        spec = {**EXTERNAL_SPEC, "cluster_config": {"min.insync.replicas": "1", "unclean.leader.election.enable": "true"}}
        inputs = ClaimInputs.from_spec_json(spec, settings)
        # The typed unclean=true would excuse a loss: it is not believed; min ISR 2 excuses
        # nothing either.
        assert inputs.unclean_leader_election is False and inputs.min_insync_replicas == 2
        assert "not reported by the external cluster" in inputs.settings_source


def test_bundled_runs_still_claim_from_their_typed_broker_settings():
    inputs = ClaimInputs.from_spec_json({"workload": "queue", "cluster_config": {"min.insync.replicas": "2"}},
                                        {"readings": [reading("x", {"t0": (1, {"min.insync.replicas": "1"})})]})
    assert inputs.min_insync_replicas == 2 and inputs.settings_source == ""


# -- end to end against a real cluster -----------------------------------------------------

def logquake(*argv):
    return run_command([sys.executable, "-m", "harness.cli", *argv], timeout_s=300)


def only_run_dir(results):
    from harness.store import find_runs

    runs = find_runs(results)
    assert len(runs) == 1, runs
    return runs[0]


def durable_reason(results_json):
    return next(c for c in results_json["claims"] if c["name"] == DURABLE)["reason"]


@pytest.mark.slow
def test_an_external_clusters_unclean_election_reaches_the_claims_and_a_copied_run_dir_gives_the_same_verdict(
        make_cluster, tmp_path):
    external = make_cluster(brokers=1, seed=5, config={"unclean.leader.election.enable": "true"})
    results = tmp_path / "results"
    out = logquake("test", "--workload", "delivery", "--bootstrap-servers", external.bootstrap_servers,
                   "--workload-option", "replication_factor=1", "--cluster-config", "num.replica.fetchers=2",
                   "--concurrency", "3", "--time-limit", "5", "--quiet-period", "0", "--final-time-limit", "30",
                   "--seed", "7", "--results-dir", str(results))
    run_dir = only_run_dir(results)
    verdict = json.loads((run_dir / "results.json").read_text())
    assert out.returncode == {True: 0, False: 1, "unknown": 2}[verdict["valid"]], out.stderr[-3000:]
    recorded = json.loads((run_dir / "cluster-config.json").read_text())
    assert [r["when"] for r in recorded["readings"]] == ["after-setup", "end"]
    for r in recorded["readings"]:
        assert r["topics"]["delivery"]["configs"]["unclean.leader.election.enable"] == "true"
        assert r["topics"]["delivery"]["replication_factor"] == 1
    # Typed nowhere, yet the claim reasons show the cluster's value and where it came from.
    reason = durable_reason(verdict)
    assert "unclean.leader.election.enable=true" in reason and "reported by the external cluster" in reason
    settings = verdict["stats"]["cluster_settings"]
    assert settings["unclean.leader.election.enable"] is True
    # A broker-only setting cannot be applied to an external cluster: said, never claimed.
    assert settings["not_applied"] == {"num.replica.fetchers": "2"}
    assert any("num.replica.fetchers=2" in w for w in settings["warnings"])
    assert "num.replica.fetchers=2 is a broker setting" in (run_dir / "harness.log").read_text()
    assert "num.replica.fetchers=2 is a broker setting" in out.stderr

    # The run directory is self-contained: a copy elsewhere, the cluster gone, same verdict.
    external.close()
    copy = tmp_path / "elsewhere" / "copied-run"
    shutil.copytree(run_dir, copy)
    again = logquake("analyze", str(copy))
    rechecked = json.loads((copy / "results.json").read_text())
    assert again.returncode == out.returncode, again.stdout + again.stderr[-3000:]
    assert rechecked["valid"] == verdict["valid"]
    assert rechecked["claims"] == verdict["claims"]
    assert rechecked["stats"]["cluster_settings"] == settings


@pytest.mark.slow
def test_typed_min_isr_is_applied_to_created_topics_but_a_pre_existing_topic_decides_the_claim(
        make_cluster, tmp_path):
    from workloads.clients.confluent import TopicCreator

    external = make_cluster(brokers=2, seed=6)
    # t1 predates the run with min ISR 1 (the cluster's default): the run's CreateTopics gets
    # TOPIC_ALREADY_EXISTS and the topic keeps its settings.
    TopicCreator(external.bootstrap_servers, {}, 2, 2).ensure(["t1"])
    results = tmp_path / "results"
    out = logquake("test", "--workload", "queue", "--bootstrap-servers", external.bootstrap_servers,
                   "--workload-option", "replication_factor=2", "--workload-option", "key_count=4",
                   "--workload-option", "partitions_per_topic=2", "--cluster-config", "min.insync.replicas=2",
                   "--concurrency", "3", "--rate", "30", "--time-limit", "5", "--quiet-period", "0",
                   "--final-time-limit", "30", "--seed", "8", "--results-dir", str(results))
    run_dir = only_run_dir(results)
    verdict = json.loads((run_dir / "results.json").read_text())
    assert out.returncode == {True: 0, False: 1, "unknown": 2}[verdict["valid"]], out.stderr[-3000:]
    recorded = json.loads((run_dir / "cluster-config.json").read_text())
    assert recorded["requested_topic_config"] == {"min.insync.replicas": "2"}
    first = recorded["readings"][0]
    assert first["when"] == "after-setup"
    # DescribeConfigs confirms the typed min ISR on the topic the run created...
    assert first["topics"]["t0"]["configs"]["min.insync.replicas"] == "2"
    assert first["topics"]["t0"]["replication_factor"] == 2
    # ...and reports the pre-existing topic as it is.
    assert first["topics"]["t1"]["configs"]["min.insync.replicas"] == "1"
    settings = verdict["stats"]["cluster_settings"]
    assert settings["min.insync.replicas"] == 1 and settings["replication_factor"] == 2
    reason = durable_reason(verdict)
    assert "min.insync.replicas=1" in reason and "reported by the external cluster" in reason
    assert "t1 has min.insync.replicas=1 although 2 was asked for" in (run_dir / "harness.log").read_text()
