"""The pytest plugin, through pytest's own pytester: users' test files run in a pytest of
their own (a subprocess, so a crash there cannot take this session down) with the plugin
loaded from its pytest11 entry point, as an installed logquake gives it."""

from __future__ import annotations

import json

import re
from pathlib import Path
from xml.etree import ElementTree

import psutil
import pytest

from checkers.result import Anomaly, Witness
from logquake.api import Result
from logquake.pytest_plugin import judge

pytest_plugins = ["pytester"]

# Short runs: 5 s of workload, 1 s of quiet, the final drain, then the check.
SHORT = "time_limit_s=5, quiet_period_s=1, final_time_limit_s=20"


def _processes_under(path: Path) -> list[psutil.Process]:
    """Live processes whose command line names `path` (the inner session's brokers, controller
    and `logquake test` children all do: their data and results live under it)."""
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        try:
            if proc.info["status"] != psutil.STATUS_ZOMBIE and any(str(path) in arg for arg in proc.info["cmdline"] or ()):
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def _run_inner(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    try:
        return pytester.runpytest_subprocess(f"--logquake-results={pytester.path / 'results'}", "-p", "no:cacheprovider",
                                             *args, timeout=240)
    finally:
        left = _processes_under(pytester.path)
        for proc in left:
            proc.kill()
        assert left == [], f"processes outlived the inner pytest session: {[p.info['cmdline'] for p in left]}"


def test_a_valid_run_passes_and_prints_its_seed(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_user=f"""
        import pytest

        @pytest.mark.logquake_cluster(brokers=1)
        def test_queue_is_safe(logquake_runner, logquake_cluster):
            result = logquake_runner.run({SHORT})
            assert result.valid and result.seed == 1234
            assert result.reproduce_command.startswith("logquake test ")
            assert logquake_cluster.bootstrap_servers in result.reproduce_command
    """)
    junit = pytester.path / "junit.xml"
    result = _run_inner(pytester, "--logquake-seed=1234", f"--junit-xml={junit}")
    result.assert_outcomes(passed=1)
    out = result.stdout.str()
    properties = {p.get("name"): p.get("value") for p in ElementTree.parse(junit).iter("property")}
    assert properties["logquake_seed"] == "1234" and properties["logquake_report"].endswith("report.html")
    assert "logquake seeds" in out
    assert re.search(r"test_user.py::test_queue_is_safe: seed 1234: valid; report \S+report.html; "
                     r"reproduce with: logquake test .*--seed 1234 ", out), out


def test_an_unsafe_cluster_fails_the_test_with_anomalies_witnesses_report_and_command(pytester: pytest.Pytester) -> None:
    # Half the Produce responses are dropped after the append, and the producer is not
    # idempotent: its retries write values twice (allowed without idempotence) and consumers
    # then see offsets go backwards and skip (forbidden: per-partition order).
    pytester.makepyfile(test_user=f"""
        import pytest

        @pytest.mark.logquake_cluster(brokers=1, config={{"test.drop.produce.response.probability": "0.5"}})
        def test_queue_without_idempotence(logquake_runner):
            logquake_runner.run({SHORT}, client_config={{"enable.idempotence": "false"}})
    """)
    result = _run_inner(pytester, "--logquake-seed=99")
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "logquake verdict: invalid" in out
    assert re.search(r"  (poll-skip|nonmonotonic-poll|int-poll-skip|int-nonmonotonic-poll) x\d+ \(breaks per-partition-order\)", out), out
    assert "    witness: history ops [" in out
    report = re.search(r"  report: (\S+report\.html)", out)
    assert report and Path(report.group(1)).is_file()
    # Whether a dropped response's retry lands a duplicate depends on timing; whatever the
    # run's results.json allowed is what the message lists as allowed.
    results = json.loads((Path(report.group(1)).parent / "results.json").read_text())
    allowed = [f"{a['name']} x{a['count']}" for a in results["anomalies"] if a["allowed"]]
    if allowed:
        assert f"allowed by the run's claims: {', '.join(allowed)}" in out, out
    assert str(pytester.path / "results") in report.group(1)
    command = re.search(r"reproduce with: (logquake test .*)$", out, re.MULTILINE)
    assert command and "--seed 99 " in command.group(1)
    assert "--client-config enable.idempotence=false" in command.group(1)
    assert "logquake seeds" in out and "seed 99: invalid" in out
    # The command names the session's cluster, which is gone: the message says how to get both back.
    assert "rerun this test: pytest test_user.py::test_queue_without_idempotence --logquake-seed 99" in out
    assert ("logquake cluster start --data-dir DIR --brokers 1 --config test.drop.produce.response.probability=0.5"
            in out)


def test_the_cluster_marker_sizes_configures_and_scopes_the_cluster(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_user="""
        import psutil
        import pytest

        seen = {}

        @pytest.mark.logquake_cluster(brokers=1)
        def test_first(logquake_cluster):
            seen["module"] = logquake_cluster.bootstrap_servers

        @pytest.mark.logquake_cluster(brokers=1)
        def test_same_marker_shares_the_module_cluster(logquake_cluster):
            assert logquake_cluster.bootstrap_servers == seen["module"]

        @pytest.mark.logquake_cluster(brokers=1, scope="function")
        def test_function_scope_gets_its_own(logquake_cluster):
            assert logquake_cluster.bootstrap_servers != seen["module"]
            seen["function_pids"] = logquake_cluster.pids()

        @pytest.mark.logquake_cluster(brokers=2, config={"min.insync.replicas": "2"})
        def test_size_and_config(logquake_cluster):
            assert len(logquake_cluster.brokers) == 2 and logquake_cluster.config["min.insync.replicas"] == "2"
            assert logquake_cluster.bootstrap_servers != seen["module"]
            assert not any(psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
                           for pid in seen["function_pids"]), "a function-scoped cluster stops with its test"

        @pytest.mark.logquake_cluster(size=3)
        def test_bad_marker(logquake_cluster):
            pass
    """)
    result = _run_inner(pytester)
    result.assert_outcomes(passed=4, errors=1)
    assert "has unknown argument(s) ['size']" in result.stdout.str()


def test_the_plugin_is_registered_and_leaves_other_tests_alone(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_plain="def test_plain():\n    assert True\n")
    result = _run_inner(pytester, "-v")
    result.assert_outcomes(passed=1)
    out = result.stdout.str().replace(str(pytester.path), "")
    assert re.search(r"^plugins: .*logquake-", out, re.MULTILINE), "loaded from the pytest11 entry point"
    assert "logquake" not in re.sub(r"logquake-[0-9.]+", "", out), "no header line, section or summary of its own"
    help_text = pytester.runpytest_subprocess("--help").stdout.str()
    for option in ("--logquake-seed", "--logquake-results", "--logquake-bootstrap-servers", "--logquake-unknown"):
        assert option in help_text


def _result(verdict: str, anomalies: list[Anomaly]) -> Result:
    return Result(verdict=verdict, message=f"valid={verdict}", run_dir=Path("/r/run"), seed=5,  # type: ignore[arg-type]
                  reproduce_command="logquake test --seed 5", anomalies=anomalies)


LOST = Anomaly(name="lost-write", count=2, allowed=False, explanation="an acknowledged write was never read",
               witnesses=[Witness(op_indices=[3, 9], detail={"key": 1, "value": 4})], violates=["acked-writes-durable"])


def test_judge_fails_an_invalid_verdict_with_what_a_person_needs() -> None:
    with pytest.raises(pytest.fail.Exception) as failed:
        judge(_result("invalid", [LOST]), "skip")
    text = str(failed.value)
    assert "lost-write x2 (breaks acked-writes-durable): an acknowledged write was never read" in text
    assert "witness: history ops [3, 9] {'key': 1, 'value': 4}" in text
    assert "report: /r/run/report.html" in text and "seed 5; reproduce with: logquake test --seed 5" in text


@pytest.mark.parametrize("option, outcome", [("skip", pytest.skip.Exception), ("xfail", pytest.xfail.Exception),
                                             ("fail", pytest.fail.Exception)])
def test_judge_reports_unknown_as_the_option_says(option: str, outcome: type[BaseException]) -> None:
    with pytest.raises(outcome, match="logquake verdict unknown"):
        judge(_result("unknown", []), option)


def test_judge_lets_a_valid_verdict_pass() -> None:
    judge(_result("valid", []), "fail")
