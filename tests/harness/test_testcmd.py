"""`logquake test` argument handling: every bad input exits 254 with a one-line reason."""

import itertools
import socket
import subprocess
import sys

import pytest

from harness import testcmd
from harness.cli import EXIT_BAD_ARGUMENTS


def run_cli(capsys, *argv):
    with pytest.raises(SystemExit) as exc:
        sys.exit(testcmd.main(list(argv)))
    captured = capsys.readouterr()
    return exc.value.code, captured.out, captured.err


def closed_port():
    """A loopback port nobody listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("argv, reason", [
    (["--workload", "nope"], "unknown workload 'nope'"),
    (["--nemesis", "kill,meteor"], "unknown nemesis 'meteor'"),
    (["--client-config", "acks"], "--client-config: 'acks' is not key=value"),
    (["--cluster-config", "=3"], "--cluster-config: '=3' is not key=value"),
    (["--workload-option", "sub_via=carrier-pigeon"], "sub_via"),
    (["--workload-option", "no_such_option=1"], "unknown queue workload option"),
    (["--time-limit", "-5"], "--time-limit"),
    (["--rate", "0"], "--rate"),
    (["--concurrency", "0"], "--concurrency"),
    (["--test-count", "0"], "--test-count"),
    (["--name", "../escape"], "--name"),
    (["--workload", "delivery", "--concurrency", "1"], "leave at least one consumer"),
    (["--bootstrap-servers", "127.0.0.1:9092", "--nemesis", "kill"], "needs control of the broker processes"),
    (["--bootstrap-servers", "no-port-here"], "is not host:port"),
    (["--nemesis", "partition", "--nemesis-option", "partition_targets=primaries,leader"],
     "--nemesis-option: unknown partition_targets value 'leader'; known: one,"),
    (["--nemesis", "partition", "--nemesis-option", "partition_targets=,"], "--nemesis-option: partition_targets is empty"),
    (["--nemesis", "kill", "--nemesis-option", "kill_targets=one"], "--nemesis-option: unknown nemesis option 'kill_targets'"),
    (["--nemesis", "clock", "--nemesis-option", "strobe_min_period_exponent=two"], "strobe_min_period_exponent 'two' is not an integer"),
    (["--nemesis", "partition", "--nemesis-option", "partition_targets"], "--nemesis-option: 'partition_targets' is not key=value"),
])
def test_bad_input_exits_254_with_a_one_line_reason(capsys, tmp_path, argv, reason):
    code, out, err = run_cli(capsys, *argv, "--results-dir", str(tmp_path))
    assert code == EXIT_BAD_ARGUMENTS
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("logquake test: ") and reason in lines[0]
    assert out == ""
    assert list(tmp_path.iterdir()) == []  # nothing was started or written


def test_unreachable_bootstrap_servers_exit_254(capsys, tmp_path):
    port = closed_port()
    code, out, err = run_cli(capsys, "--bootstrap-servers", f"127.0.0.1:{port}", "--results-dir", str(tmp_path))
    assert code == EXIT_BAD_ARGUMENTS
    assert err.strip().splitlines() == [f"logquake test: cannot reach any bootstrap server (127.0.0.1:{port}: Connection refused)"]


def test_malformed_numbers_exit_254_through_argparse(capsys):
    code, _, err = run_cli(capsys, "--concurrency", "many")
    assert code == EXIT_BAD_ARGUMENTS
    assert "invalid int value: 'many'" in err


def test_reproduce_command_names_every_choice_and_parses_back(capsys):
    from harness.cli import ArgumentParser

    parser = ArgumentParser(prog="logquake")
    testcmd.register(parser.add_subparsers(dest="command", required=True, parser_class=ArgumentParser))
    args = parser.parse_args(["test", "--workload", "delivery", "--nemesis", "kill", "--client-config", "acks=1",
                              "--workload-option", "commit_mode=before", "--concurrency", "4", "--seed", "99"])
    spec = testcmd.build_spec(args, 99)
    assert spec.client_config["acks"] == "1" and spec.client_config_overrides == {"acks": "1"}
    assert spec.client_config["enable.auto.commit"] == "false"  # the workload's default, recorded
    import shlex

    again = parser.parse_args(shlex.split(spec.command)[1:])
    assert testcmd.build_spec(again, again.seed) == spec


def test_nemesis_options_reach_the_fault_packages_and_the_reproduce_command():
    import json
    import random
    import shlex

    from harness.cli import ArgumentParser
    from harness.spec import RunSpec
    from nemeses.base import NemesisOptions
    from nemeses.partition import partition_schedule

    parser = ArgumentParser(prog="logquake")
    testcmd.register(parser.add_subparsers(dest="command", required=True, parser_class=ArgumentParser))
    args = parser.parse_args(["test", "--nemesis", "partition,kill", "--nemesis-option", "partition_targets=primaries",
                              "--nemesis-option", "db_targets=one, all", "--seed", "7"])
    spec = testcmd.build_spec(args, 7)
    assert spec.nemesis_options == {"partition_targets": "primaries", "db_targets": "one, all"}
    # spec.json keeps them verbatim, and the command repeats them.
    assert RunSpec.from_json(json.loads(json.dumps(spec.to_json()))) == spec
    again = parser.parse_args(shlex.split(spec.command)[1:])
    assert testcmd.build_spec(again, again.seed) == spec
    # What the packages are built from (harness.run.build_packages passes the spec).
    options = NemesisOptions.from_object(spec)
    assert options.partition_targets == ("primaries",) and options.db_targets == ("one", "all")
    assert options.clock_kinds == NemesisOptions().clock_kinds
    starts = [op["value"] for op in itertools.islice(partition_schedule([0, 1, 2], options, random.Random(7)), 0, 20, 2)]
    assert starts == [{"topology": "primaries"}] * 10
    # Without the option every topology stays in the mix.
    plain = testcmd.build_spec(parser.parse_args(["test", "--nemesis", "partition"]), 7)
    assert plain.nemesis_options == {} and NemesisOptions.from_object(plain) == NemesisOptions()


def test_module_entry_point_reports_bad_input_in_a_subprocess(tmp_path):
    out = subprocess.run([sys.executable, "-m", "harness.testcmd", "--nemesis", "meteor"], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == EXIT_BAD_ARGUMENTS
    assert out.stderr.strip() == "logquake test: unknown nemesis 'meteor'; known: kill, pause, partition, clock, brokers-down, lone-leader-crash, latency, bandwidth, flaky, disk"


def test_progress_line_counts_outcomes_and_tracks_active_faults():
    import io

    from harness.history import Op
    from harness.progress import Progress

    stream = io.StringIO()
    progress = Progress(stream=stream)
    progress.phase = "main"
    ops = [Op(0, 0, "invoke", 0, "send"), Op(1, 1, "ok", 0, "send"), Op(2, 2, "invoke", 1, "poll"),
           Op(3, 3, "info", 1, "poll"), Op(4, 4, "info", "nemesis", "start-partition"),
           Op(5, 5, "info", "nemesis", "start-partition"), Op(6, 6, "info", "nemesis", "start-kill"),
           Op(7, 7, "info", "nemesis", "start-kill"), Op(8, 8, "invoke", 2, "send"), Op(9, 9, "fail", 2, "send")]
    for op in ops:
        progress.observe(op)
    line = progress.line()
    assert " main " in line and "ok 1  fail 1  info 1" in line and "faults: kill,partition" in line
    progress.observe(Op(10, 10, "info", "nemesis", "stop-kill"))
    progress.observe(Op(11, 11, "info", "nemesis", "stop-kill"))
    assert progress.line().endswith("faults: partition")


def _spec(*argv):
    from harness.cli import ArgumentParser

    parser = ArgumentParser(prog="logquake")
    testcmd.register(parser.add_subparsers(dest="command", required=True, parser_class=ArgumentParser))
    args = parser.parse_args(["test", *argv, "--seed", "1"])
    return testcmd.build_spec(args, 1)


@pytest.mark.parametrize("switch", ["enable.idempotence=true", "transactional.id=t1"])
def test_an_idempotent_producer_gets_at_most_5_requests_in_flight_and_librdkafka_accepts_it(switch):
    from confluent_kafka import Producer

    from workloads.clients.confluent import producer_config

    spec = _spec("--client-config", switch)
    assert spec.client_config["max.in.flight.requests.per.connection"] == "5"
    # Jepsen's unbounded default next to idempotence is a config librdkafka refuses outright;
    # the effective one must build a real producer.
    Producer(producer_config(dict(spec.client_config), "127.0.0.1:9")).flush(0)


def test_an_explicit_in_flight_setting_is_left_to_the_user():
    spec = _spec("--client-config", "enable.idempotence=true", "--client-config", "max.in.flight=3")
    assert spec.client_config["max.in.flight"] == "3"
    assert spec.client_config["max.in.flight.requests.per.connection"] == "5"  # the default, untouched
    jepsen = _spec("--client-config", "enable.idempotence=false")
    assert jepsen.client_config["max.in.flight.requests.per.connection"] == "1000000"


def test_the_default_producer_is_idempotent_as_kafkas_since_3_0_and_librdkafka_accepts_it():
    from confluent_kafka import Producer

    from workloads.clients.confluent import producer_config

    plain = _spec()
    assert (plain.client_config["acks"], plain.client_config["enable.idempotence"]) == ("all", "true")
    assert plain.client_config["max.in.flight.requests.per.connection"] == "5"
    Producer(producer_config(dict(plain.client_config), "127.0.0.1:9")).flush(0)


@pytest.mark.parametrize("switch", ["acks=1", "acks=0", "retries=0", "max.in.flight.requests.per.connection=10"])
def test_the_default_idempotence_gives_way_to_settings_it_cannot_serve_as_in_kafkas_java_client(switch):
    from confluent_kafka import Producer

    from workloads.clients.confluent import producer_config

    spec = _spec("--client-config", switch)
    assert spec.client_config["enable.idempotence"] == "false"
    Producer(producer_config(dict(spec.client_config), "127.0.0.1:9")).flush(0)  # librdkafka accepts it
    explicit = _spec("--client-config", switch, "--client-config", "enable.idempotence=true")
    assert explicit.client_config["enable.idempotence"] == "true"  # the user's own choice stays


def test_reproduce_command_of_an_external_run_keeps_the_broker_count() -> None:
    # --brokers sizes the external run's topics (replication factor min(3, brokers)): a
    # reproduce command without it would create them with 3 replicas on a 1-broker cluster.
    from harness.cli import build_parser
    from harness.testcmd import build_spec

    args = build_parser().parse_args(["test", "--bootstrap-servers", "127.0.0.1:9092", "--brokers", "1"])
    spec = build_spec(args, seed=5)
    assert "--brokers 1 " in spec.command
    assert build_spec(build_parser().parse_args(spec.command.split()[1:]), seed=5) == spec


def test_every_bench_detection_mix_is_a_command_logquake_test_accepts():
    # The README's table of fault mixes is bench_detection's SWITCHES: each mix, with its
    # switch on and with the safe setting, must stay a valid `logquake test` command.
    from bench.bench_detection import SWITCHES
    from harness.cli import ArgumentParser

    parser = ArgumentParser(prog="logquake")
    testcmd.register(parser.add_subparsers(dest="command", required=True, parser_class=ArgumentParser))
    for switch in SWITCHES:
        for setting in (switch.setting, switch.safe_setting):
            extra = ["--cluster-config", setting] if setting else []
            args = parser.parse_args(["test", "--time-limit", "60", *switch.mix, *extra, "--seed", "1000"])
            spec = testcmd.build_spec(args, 1000)
            assert spec.nemeses, switch.setting
    read_past = next(s for s in SWITCHES if s.setting.startswith("fetch.read.past.high.watermark"))
    spec = testcmd.build_spec(parser.parse_args(["test", *read_past.mix]), 1)
    # A read_committed fetch stops at the last stable offset, never past the HWM: the mix must read uncommitted.
    assert spec.client_config["isolation.level"] == "read_uncommitted"
    assert spec.nemesis_options == {"partition_targets": "primary"}
