"""RunSpec: pure data that round-trips through spec.json and names whatever is wrong."""

import json

import pytest

from harness.spec import RunSpec, SpecError, parse_key_values


def spec(**changes):
    fields = dict(name="queue-kill", workload="queue", seed=42, nemeses=("kill",), client_config={"acks": "all"},
                  cluster_config={"min.insync.replicas": "2"}, command="logquake test --seed 42")
    fields.update(changes)
    return RunSpec(**fields)


def test_round_trips_through_spec_json(tmp_path):
    original = spec(workload_options={"sub_via": "subscribe"}, nemesis_options={"partition_targets": "primaries"})
    path = tmp_path / "spec.json"
    original.save(path)
    raw = json.loads(path.read_text())
    for field in ("name", "workload", "workload_options", "nemeses", "nemesis_interval_s", "nemesis_options", "seed", "time_limit_s",
                  "concurrency", "rate_hz", "brokers", "bootstrap_servers", "client_config", "cluster_config",
                  "command"):
        assert field in raw, field
    assert raw["nemeses"] == ["kill"] and raw["bootstrap_servers"] is None
    assert RunSpec.load(path) == original


def test_is_immutable():
    with pytest.raises(AttributeError):
        spec().seed = 1


@pytest.mark.parametrize("changes, message", [
    ({"workload": "bank"}, "workload: unknown workload 'bank'"),
    ({"nemeses": ("kill", "kill")}, "names a nemesis twice"),
    ({"nemeses": ("flood",)}, "unknown nemesis 'flood'"),
    ({"seed": -1}, "seed:"),
    ({"seed": True}, "seed:"),
    ({"concurrency": 0}, "concurrency:"),
    ({"rate_hz": float("nan")}, "rate_hz:"),
    ({"time_limit_s": 0}, "time_limit_s:"),
    ({"brokers": 0}, "brokers:"),
    ({"brokers": 9}, "brokers: 9 brokers: the bundled cluster runs at most 7"),
    ({"name": "a/b"}, "name:"),
    ({"client_config": {"acks": 1}}, "client_config:"),
    ({"bootstrap_servers": "localhost"}, "bootstrap_servers: 'localhost' is not host:port"),
    ({"bootstrap_servers": "127.0.0.1:9092"}, "cannot run against an external cluster"),
])
def test_validation_names_the_field(changes, message):
    with pytest.raises(SpecError, match=message.replace("(", r"\(")):
        spec(**changes)


def test_external_cluster_without_faults_is_fine():
    s = spec(nemeses=(), bootstrap_servers="127.0.0.1:9092,127.0.0.2:9092")
    assert s.external_cluster
    # An external cluster may have more brokers than the bundled one can run.
    assert spec(nemeses=(), brokers=9, bootstrap_servers="127.0.0.1:9092").brokers == 9


def test_loading_rejects_unknown_and_missing_fields(tmp_path):
    path = tmp_path / "spec.json"
    raw = spec().to_json()
    raw["colour"] = "blue"
    path.write_text(json.dumps(raw))
    with pytest.raises(SpecError, match="unknown field.*colour"):
        RunSpec.load(path)
    del raw["colour"], raw["seed"]
    path.write_text(json.dumps(raw))
    with pytest.raises(SpecError, match="missing field 'seed'"):
        RunSpec.load(path)
    path.write_text("{not json")
    with pytest.raises(SpecError, match="not valid JSON"):
        RunSpec.load(path)


def test_key_values():
    assert parse_key_values(["acks=all", " linger.ms = 5 ", "a=b=c"], "x") == {"acks": "all", "linger.ms": "5", "a": "b=c"}
    for bad in ("acks", "=1", "acks=", "my key=1"):
        with pytest.raises(SpecError, match="x:"):
            parse_key_values([bad], "x")
