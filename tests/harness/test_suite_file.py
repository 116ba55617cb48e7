"""Suite files (harness/suite_file.py): the matrix they expand to, and the errors that name the
file and the key before anything runs. Also checks the suites the project ships."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from harness.suite_file import SuiteFileError, load_suite

PROJECT = Path(__file__).resolve().parents[2]

MATRIX = """
[suite]
name = "m"
description = "a matrix"

[defaults]
time_limit_s = 5
client_config = { "acks" = "all", "linger.ms" = 1 }

[configurations.durable]
cluster_config = { "min.insync.replicas" = 2 }
client_config = { "enable.idempotence" = true }

[configurations.jepsen]
client_config = { "enable.idempotence" = false }

[[test]]
name = "q"
workloads = ["queue", "delivery"]
nemeses = [["kill", "partition"], "pause", []]
configurations = ["durable", "jepsen"]
seeds = [1, 2]
time_limit_s = 7

[[test]]
name = "unclean"
nemesis = ["brokers-down"]
seed = 1000
cluster_config = { "unclean.leader.election.enable" = true }
workload_options = { sub_via = ["assign", "subscribe"] }
expect = "invalid"
anomalies = ["lost-write", "unseen"]
"""


def write(tmp_path: Path, text: str, name: str = "suite.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_a_matrix_expands_to_workloads_x_nemeses_x_configurations_x_seeds_in_order(tmp_path):
    suite = load_suite(write(tmp_path, MATRIX), results_dir=tmp_path / "results")
    assert suite.name == "m" and suite.description == "a matrix" and suite.results_dir == tmp_path / "results"
    assert len(suite.runs) == 2 * 3 * 2 * 2 + 1
    assert [r.index for r in suite.runs] == list(range(1, 26))
    first, second = suite.runs[0], suite.runs[1]
    assert first.id == "q-queue-kill+partition-durable-seed1" and second.id == "q-queue-kill+partition-durable-seed2"
    assert suite.runs[4].run_name == "q-queue-pause-durable"
    assert suite.runs[8].run_name == "q-queue-no-faults-durable" and suite.runs[8].spec.nemesis == ()
    assert suite.runs[12].spec.workload == "delivery"
    spec = first.spec
    # defaults < configuration < test, config tables merged key by key, values as strings
    assert spec.time_limit_s == 7 and spec.nemesis == ("kill", "partition") and spec.seed == 1
    assert dict(spec.client_config) == {"acks": "all", "linger.ms": "1", "enable.idempotence": "true"}
    assert dict(spec.cluster_config) == {"min.insync.replicas": "2"}
    jepsen = suite.runs[2]
    assert jepsen.configuration == "jepsen" and dict(jepsen.spec.client_config)["enable.idempotence"] == "false"
    assert "--client-config enable.idempotence=false" in jepsen.command
    assert first.command.startswith("logquake test --workload queue --nemesis kill,partition")
    unclean = suite.runs[-1]
    assert unclean.id == "unclean-seed1000" and unclean.expectation.verdict == "invalid"
    assert unclean.expectation.anomalies == ("lost-write", "unseen")
    assert dict(unclean.spec.workload_options) == {"sub_via": "assign,subscribe"}
    assert dict(unclean.spec.cluster_config) == {"unclean.leader.election.enable": "true"}
    assert first.expectation.verdict == "valid"


def test_a_test_without_seeds_gets_one_random_seed_fixed_up_front(tmp_path):
    suite = load_suite(write(tmp_path, '[[test]]\nname = "t"\n'))
    [run] = suite.runs
    assert isinstance(run.spec.seed, int) and f"--seed {run.spec.seed}" in run.command
    assert suite.name == "suite" and suite.results_dir == Path("results")  # the file's stem; ./results


@pytest.mark.parametrize("text, message", [
    ("[[test]\nname = 1", "not valid TOML: "),
    ('[[test]]\nname = "t"\ntime_limit = 5\n', "[[test]] 't': unknown key 'time_limit'; known keys: "),
    ('[suite]\nnme = "x"\n[[test]]\nname = "t"\n', "[suite]: unknown key 'nme'"),
    ('[defaults]\nworkload = "queue"\nconfiguration = "x"\n[[test]]\nname = "t"\n', "[defaults]: unknown key 'configuration'"),
    ('[configurations.c]\nseed = 1\n[[test]]\nname = "t"\n', "[configurations.c]: unknown key 'seed'"),
    ('[[tests]]\nname = "t"\n', "the top level: unknown key 'tests'"),
    ('[suite]\nname = "s"\n', "no tests: add at least one [[test]] table"),
    ('[[test]]\nworkload = "queue"\n', "[[test]] #1: key 'name' is missing"),
    ('[[test]]\nname = "t"\n[[test]]\nname = "t"\n', "[[test]] 't': the name is used by another [[test]]"),
    ('[[test]]\nname = "t"\nseed = 1\nseeds = [2]\n', "give 'seed' or 'seeds', not both"),
    ('[[test]]\nname = "t"\nseeds = []\n', "key 'seeds' must be a non-empty list"),
    ('[[test]]\nname = "t"\nseed = "1"\n', "key 'seed': '1' is not an integer"),
    ('[[test]]\nname = "t"\nconfiguration = "fast"\n', "configuration 'fast' is not defined"),
    ('[[test]]\nname = "t"\nworkload = "kv"\n', "[[test]] 't' (t, seed "),
    ('[[test]]\nname = "t"\nnemesis = ["kill", "meteor"]\n', "unknown nemesis 'meteor'"),
    ('[[test]]\nname = "t"\nrate_hz = -1\n', "--rate"),
    ('[[test]]\nname = "t"\ntime_limit_s = "long"\n', "key 'time_limit_s': 'long' is not a number"),
    ('[[test]]\nname = "t"\nexpect = "broken"\n', "key 'expect' must be one of valid, invalid"),
    ('[[test]]\nname = "t"\nanomalies = ["lost-writes"]\n', "anomalies: 'lost-writes' is not an anomaly"),
    ('[[test]]\nname = "t"\ncluster_config = { a = [1] }\n', "cluster_config.a must be a string, number or boolean"),
    ('[suite]\nname = "a/b"\n[[test]]\nname = "t"\n', "[suite] name: test name 'a/b' must not contain"),
])
def test_a_bad_suite_file_names_the_file_and_the_key(tmp_path, text, message):
    path = write(tmp_path, text)
    with pytest.raises(SuiteFileError) as error:
        load_suite(path)
    assert str(error.value).startswith(f"{path}: ")
    assert message in str(error.value)


def test_the_command_refuses_a_bad_file_with_254_before_running_anything(tmp_path):
    path = write(tmp_path, '[[test]]\nname = "t"\nnemeses = [["kill"], ["pause"]]\ntime_limt_s = 1\n')
    out = subprocess.run([sys.executable, "-m", "harness.cli", "suite", str(path), "--results-dir",
                          str(tmp_path / "results")], capture_output=True, text=True, timeout=120, cwd=PROJECT)
    assert out.returncode == 254
    assert out.stderr.strip() == (f"logquake suite: {path}: [[test]] 't': unknown key 'time_limt_s'; known keys: "
                                  + out.stderr.split("known keys: ")[1].strip())
    assert "time_limit_s" in out.stderr.split("known keys: ")[1]
    assert not (tmp_path / "results").exists()


@pytest.mark.parametrize("name", ["ci.toml", "nightly.toml"])
def test_the_shipped_suites_are_valid(name):
    suite = load_suite(PROJECT / "suites" / name)
    assert suite.runs and suite.description
    ids = [run.id for run in suite.runs]
    assert len(ids) == len(set(ids))
    out = subprocess.run([sys.executable, "-m", "harness.cli", "suite", f"suites/{name}", "--list"],
                         capture_output=True, text=True, timeout=120, cwd=PROJECT)
    assert out.returncode == 0, out.stderr
    assert len(out.stdout.splitlines()) == len(suite.runs)


def test_the_nightly_suite_covers_every_nemesis_and_every_unsafe_switch():
    from harness.spec import NEMESIS_NAMES

    suite = load_suite(PROJECT / "suites" / "nightly.toml")
    nemeses = {n for run in suite.runs for n in run.spec.nemesis}
    assert nemeses == set(NEMESIS_NAMES)
    switches = {"unclean.leader.election.enable": "true", "log.crash.lose.unflushed": "true",
                "replica.truncate.to.high.watermark": "true", "fetch.read.past.high.watermark": "true",
                "min.insync.replicas": "1"}
    for key, value in switches.items():
        assert any(run.spec.cluster_config.get(key) == value for run in suite.runs), key
    entries = {run.entry: run for run in suite.runs}
    # A switch that reproduces a bug is expected to be flagged, and says for what; one whose
    # loss Kafka documents (unflushed crashes of every in-sync copy at once included) is
    # expected valid, naming the allowed anomalies. Each has its mix
    # on the safe cluster next to it, expected valid.
    for entry, verdict in (("lose-unflushed", "valid"), ("truncate-to-hwm", "invalid"), ("read-past-hwm", "invalid"),
                           ("unclean-election", "valid"), ("min-isr-1", "valid")):
        assert entries[entry].expectation.verdict == verdict and entries[entry].expectation.anomalies, entry
        safe = entries[f"{entry}-mix-safe"]
        assert safe.expectation.verdict == "valid" and safe.spec.nemesis == entries[entry].spec.nemesis, entry
        assert not any(safe.spec.cluster_config.get(k) == "true" for k in switches if k != "log.crash.lose.unflushed")


@pytest.mark.parametrize("example", ["github-actions.yml", "gitlab-ci.yml"])
def test_the_ci_examples_run_the_ci_suite_with_a_junit_file_they_publish(example):
    text = (PROJECT / "examples" / "ci" / example).read_text()
    command = ".venv/bin/logquake suite suites/ci.toml --junit-xml reports/logquake-junit.xml"
    assert command in text and "pip install -q -e ." in text
    assert text.count("reports/logquake-junit.xml") >= 2  # written, then published as test results
    assert "results/*/*/report.html" in text and "results/suites/" in text
    out = subprocess.run([sys.executable, "-m", "harness.cli", "suite", "suites/ci.toml", "--list",
                          "--junit-xml", "reports/logquake-junit.xml"],
                         capture_output=True, text=True, timeout=120, cwd=PROJECT)
    assert out.returncode == 0, out.stderr
