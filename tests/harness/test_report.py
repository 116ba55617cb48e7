"""report.html and index.html as files: what they contain, that they are self-contained, and
that odd runs (unchecked, checker crashed, corrupt history, huge history) still render.
What a browser shows is in test_report_browser.py."""

from __future__ import annotations

import base64
import hashlib
import json
import re
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pytest

from checkers.result import Anomaly, CheckResult, Witness
from harness import store
from harness.cli import ArgumentParser
from harness.history import HistoryWriter, Op
from harness.report import cli as report_cli
from harness.report import write_index, write_report
from harness.report.digest import digest_history, timeline_windows
from harness.report.faults import FaultTracker
from harness.report.figures import MAX_LATENCY_POINTS
from harness.report.opformat import describe_op
from tests.harness.test_report_support import (
    LOST_KEY,
    LOST_OFFSET,
    SPEC_COMMAND,
    write_checker_error_run,
    write_lost_write_run,
    write_valid_run,
)

T0 = datetime(2026, 11, 22, 7, 0, 0, tzinfo=timezone.utc)


def _figures(html: str) -> dict[str, dict]:
    blocks = re.findall(r'<script type="application/json" id="data-([a-z]+)" data-figure="[^"]+">(.*?)</script>', html, re.S)
    return {name: json.loads(text) for name, text in blocks}


def _decode(array) -> np.ndarray:
    if isinstance(array, dict):
        return np.frombuffer(base64.b64decode(array["bdata"]), dtype="<" + array["dtype"])
    return np.asarray(array)


@pytest.fixture
def lost_write_report(tmp_path):
    run = store.create_run_dir(tmp_path / "results", "queue-partition-kill", now=T0)
    witness = write_lost_write_run(run)
    return run, witness, write_report(run).read_text(encoding="utf-8")


def test_verdict_claims_and_the_lost_write_come_first_with_readable_linked_witnesses(lost_write_report):
    run, witness, html = lost_write_report
    assert 'data-verdict="invalid"' in html and ">INVALID<" in html
    assert html.index('id="verdict"') < html.index('id="claims"') < html.index('id="anomalies"') < html.index('id="section-latency"')
    assert "broken by lost-write" in html and "not claimed" in html
    anomaly = html[html.index('data-anomaly="lost-write"'):html.index("Looked for and not found: duplicate.")]
    assert 'data-anomaly="duplicate"' not in html  # a zero count gets no card
    invoke, ok = witness
    assert f'href="#op-{invoke}" data-op="{invoke}"' in anomaly
    assert f"#{ok} p" in anomaly and f"send k{LOST_KEY}=" in anomaly and f"→ offset {LOST_OFFSET}" in anomaly
    # each witness link has its place in the timeline's history excerpt
    assert f'<tr id="op-{invoke}" class="witness-op">' in html and f'<tr id="op-{ok}" class="witness-op">' in html
    op_times = json.loads(re.search(r'id="op-times">(.*?)</script>', html).group(1))
    assert op_times[str(invoke)][0] < op_times[str(invoke)][1] == op_times[str(ok)][1]


def test_the_page_is_self_contained_and_its_policy_forbids_every_request(lost_write_report):
    _, _, html = lost_write_report
    policy = re.search(r'<meta http-equiv="Content-Security-Policy" content="([^"]+)">', html).group(1)
    assert "default-src 'none'" in policy and "connect-src 'none'" in policy and "unsafe-eval" not in policy
    scripts = re.findall(r"<script>(.*?)</script>", html, re.S)
    assert len(scripts) == 2  # plotly.js once, then the report's own script
    for source in scripts:
        digest = base64.b64encode(hashlib.sha256(source.encode()).digest()).decode()
        assert f"'sha256-{digest}'" in policy
    assert html.count("plotly.js v") == 1
    assert not re.search(r"<(script|img|iframe)[^>]*\ssrc=", html, re.I)
    assert not re.search(r"<link[^>]*href=", html, re.I)
    assert not re.search(r"url\(\s*['\"]?https?:", html, re.I)


def test_fault_periods_are_shaded_in_every_time_plot_one_colour_per_kind(lost_write_report):
    _, _, html = lost_write_report
    figures = _figures(html)
    assert set(figures) == {"latency", "throughput", "offsets", "unseen", "timeline"}
    for name in ("latency", "throughput", "offsets", "unseen"):
        shapes = figures[name]["layout"]["shapes"]
        periods = sorted((s["name"], round(s["x0"], 2), round(s["x1"], 2)) for s in shapes)
        # partition from its first start op to its last stop op; the same for the kill
        assert periods == [("fault-kill", 3.6, 4.8), ("fault-partition", 1.5, 3.01)], name
        colours = {s["name"]: s["fillcolor"] for s in shapes}
        assert colours["fault-kill"] != colours["fault-partition"]
        lanes = [t["name"] for t in figures[name]["data"] if t["name"].startswith("fault: ")]
        assert lanes == ["fault: kill", "fault: partition"]
    assert "Faults" in html and '{&quot;isolated&quot;: [&quot;n1&quot;], &quot;rest&quot;: [&quot;n2&quot;, &quot;n3&quot;]}' in html


def test_latency_points_by_outcome_and_the_never_read_write_is_marked(lost_write_report):
    _, witness, html = lost_write_report
    figures = _figures(html)
    names = {t["name"] for t in figures["latency"]["data"]}
    assert {"send ok", "send info", "poll ok"} <= names
    info = next(t for t in figures["latency"]["data"] if t["name"] == "send info")
    assert np.allclose(_decode(info["y"]), [500.0], rtol=1e-3)  # the 0.5 s timeout
    lost = next(t for t in figures["offsets"]["data"] if t["name"] == f"k{LOST_KEY} acknowledged, never read")
    assert list(_decode(lost["y"])) == [LOST_OFFSET] and lost["customdata"][0][0] == witness[1]
    unseen = {t["name"]: _decode(t["y"]) for t in figures["unseen"]["data"] if "stackgroup" in t}
    assert unseen[f"k{LOST_KEY}"][-1] == 1 and unseen[f"k{1 - LOST_KEY}"][-1] == 0
    timeline = figures["timeline"]
    lanes = timeline["layout"]["yaxis"]["categoryarray"]
    assert {"p0", "p1", "p3", "p5", "fault: kill", "fault: partition"} <= set(lanes)
    assert "info" in {t["name"] for t in timeline["data"]}


def test_the_configuration_and_the_exact_reproduce_command_are_shown(lost_write_report):
    _, _, html = lost_write_report
    assert f'<pre class="command" id="reproduce-command">{SPEC_COMMAND}</pre>' in html
    assert "min.insync.replicas" in html and "enable.idempotence" in html
    # the settings the user chose are marked among the workload's defaults
    assert re.search(r"<td class='mono'>acks</td><td class='mono'>all</td><td><span[^>]*>set by you</span>", html)
    assert "<td class='mono'>enable.idempotence</td><td class='mono'>false</td><td></td>" in html
    assert '<a href="brokers/1.log">' in html and '<a href="history.jsonl">' in html


def test_a_run_without_results_is_incomplete_and_still_has_its_plots(tmp_path):
    run = tmp_path / "queue" / "20261122T070000.000000"
    write_lost_write_run(run, with_results=False)
    html = write_report(run).read_text()
    assert 'data-verdict="incomplete"' in html and "There is no results.json" in html
    assert set(_figures(html)) == {"latency", "throughput", "offsets", "unseen", "timeline"}


def test_a_checker_error_makes_the_verdict_unknown_and_is_shown(tmp_path):
    run = tmp_path / "queue" / "20261122T070000.000000"
    write_checker_error_run(run)
    html = write_report(run).read_text()
    assert 'data-verdict="unknown"' in html
    assert "checker offsets failed:" in html and "Py4JJavaError: executor lost" in html


def test_corrupt_results_and_history_are_reported_not_raised(tmp_path):
    run = tmp_path / "queue" / "20261122T070000.000000"
    write_valid_run(run)
    (run / store.RESULTS_FILE).write_text('{"valid": "unknown", "anomalies": [{"nom": 1}]}')
    with open(run / store.HISTORY_FILE, "a") as fh:
        fh.write('{"index": 99, "type": "ok"}\n{"index": 100}\n')
    html = write_report(run).read_text()
    assert 'data-verdict="unknown"' in html
    assert "results.json does not follow the CheckResult schema" in html
    assert "history.jsonl is corrupt, so there are no plots" in html and "history.jsonl:43" in html
    assert _figures(html) == {}


def test_a_directory_that_is_not_a_run_is_refused(tmp_path):
    with pytest.raises(store.StoreError, match="not a directory"):
        write_report(tmp_path / "missing")
    with pytest.raises(store.StoreError, match="neither spec.json nor history.jsonl"):
        write_report(tmp_path)


def _big_history(path: Path, sends: int) -> None:
    with HistoryWriter(path) as writer:
        index = 0
        for n in range(sends):
            process = n % 4
            t = n * 1_000_000
            kind = "ok" if n % 50 else "fail"
            writer.append(Op(index, t, "invoke", process, "send", [["send", n % 3, n]]))
            value = [["send", n % 3, [n // 3, n]]] if kind == "ok" else [["send", n % 3, n]]
            writer.append(Op(index + 1, t + 400_000 + (n % 7) * 10_000, kind, process, "send", value))
            index += 2
        writer.append(Op(index, sends * 1_000_000, "invoke", "nemesis", "start-pause", ["n1"]))


def test_big_histories_are_downsampled_for_drawing_and_the_report_says_so(tmp_path):
    run = tmp_path / "big" / "20261122T070000.000000"
    run.mkdir(parents=True)
    _big_history(run / store.HISTORY_FILE, 15_000)
    witnesses = [[100, 101], [10_000, 10_001], [29_000, 29_001], [20_000, 20_001]]
    CheckResult(
        valid=False,
        anomalies=[Anomaly("lost-write", 4, False, "lost", [Witness(w) for w in witnesses], ["acked-writes-durable"])],
    ).save(run / store.RESULTS_FILE)
    html = write_report(run).read_text()
    figures = _figures(html)
    points = sum(len(_decode(t["x"])) for t in figures["latency"]["data"] if t.get("mode") == "markers")
    assert points == MAX_LATENCY_POINTS
    assert (
        f"{MAX_LATENCY_POINTS:,} of 15,000 completed operations drawn "
        f"(300 of 300 fail/info, {MAX_LATENCY_POINTS - 300:,} of 14,700 ok"
    ) in html
    assert re.search(r"Timeline: [\d,]+ of 15,000 client operations drawn", html)
    bars = sum(len(t["y"]) for t in figures["timeline"]["data"] if not t["name"].startswith("fault"))
    assert 800 <= bars <= 1050  # windows of at most 2,000 history ops in all (one is clipped at the start)
    drawn = {i for t in figures["timeline"]["data"] if not t["name"].startswith("fault") for i in t["customdata"]}
    assert all(w[0] in drawn for w in witnesses)  # every witness has a window of its own
    # the pause never stopped: shaded to the end of the history and said to be unhealed
    assert "<b>not healed</b> by the end of the history" in html
    # throughput is computed from every op, not the sample
    send_ok = next(t for t in figures["throughput"]["data"] if t["name"] == "send ok")
    width = 0.5  # 15 s of history in at most 60 buckets
    assert round(float(_decode(send_ok["y"]).sum()) * width) == 14_700


def test_fault_periods_pair_start_and_stop_ops_and_keep_odd_ones_as_events():
    tracker = FaultTracker()
    for index, (time_s, type_, f, value) in enumerate([
        (1.0, "invoke", "start-partition", "majority"),
        (1.1, "info", "start-partition", {"cut": ["n1"]}),
        (2.0, "invoke", "stop-partition", None),
        (2.2, "info", "stop-partition", None),
        (3.0, "invoke", "start-partition", "one"),
        (3.5, "info", "stop-clock", None),  # a stop with no start
        (4.0, "info", "bump-clock", {"n2": 300}),
    ]):
        tracker.add(Op(index, int(time_s * 1e9), type_, "nemesis", f, value), time_s)
    periods = tracker.finish(history_end_s=9.0)
    assert [(p.kind, p.start_s, p.end_s, p.healed, p.description) for p in periods] == [
        ("partition", 1.0, 2.2, True, '{"cut": ["n1"]}'),
        ("partition", 3.0, 9.0, False, "one"),
    ]
    assert [(e.f, e.time_s) for e in tracker.events] == [("stop-clock", 3.5), ("bump-clock", 4.0)]


def test_timeline_windows_cover_everything_small_or_centre_on_witnesses():
    assert timeline_windows([5], op_count=100, budget_ops=2000) == [(0, 99)]
    assert timeline_windows([], op_count=10_000, budget_ops=2000) == [(0, 1999)]
    assert timeline_windows([5000, 5100, 9000], op_count=10_000, budget_ops=2400) == [(4600, 5500), (8600, 9400)]


def test_ops_read_like_jepsen_micro_ops():
    assert describe_op(Op(3, 0, "invoke", 1, "send", [["send", 2, 101]])) == "#3 p1 invoke send k2=101"
    assert describe_op(Op(4, 0, "ok", 1, "send", [["send", 2, [14, 101]]])) == "#4 p1 ok send k2=101 → offset 14"
    many = [[o, o + 100] for o in range(10)]
    text = describe_op(Op(5, 0, "ok", 2, "poll", [["poll", {2: many, 3: []}]]))
    assert text == "#5 p2 ok poll → k2: 0=100 1=101 2=102 3=103 4=104 5=105 … (+4 more); k3: nothing"
    assert describe_op(Op(6, 0, "info", 2, "txn", [["send", 1, 5], ["poll"]], error="timed out")) == (
        "#6 p2 info txn send k1=5, poll (error: timed out)"
    )
    assert describe_op(Op(7, 0, "info", "nemesis", "start-kill", ["n1"])) == '#7 nemesis info start-kill ["n1"]'


def test_digest_keeps_witnesses_with_their_partners_and_context(tmp_path):
    run = tmp_path / "run"
    witness = write_lost_write_run(run)
    digest = digest_history(run / store.HISTORY_FILE, focus_indices=[witness[0]], context_ops=1)
    assert {witness[0] - 1, witness[0], witness[0] + 1, witness[1]} <= set(digest.kept_ops)
    assert digest.fault_periods[0].kind == "partition" and digest.fault_periods[1].kind == "kill"
    assert len(digest.client_ops) == sum(1 for _ in open(run / store.HISTORY_FILE) if '"invoke"' in _ and "nemesis" not in _)


def test_index_lists_runs_newest_first_with_verdict_colours_and_links(tmp_path):
    root = tmp_path / "results"
    runs = []
    for minutes, (name, writer) in enumerate(
        [("queue-none", write_valid_run), ("queue-partition-kill", write_lost_write_run), ("queue-crashed-checker", write_checker_error_run)]
    ):
        run = store.create_run_dir(root, name, now=T0 + timedelta(minutes=minutes))
        writer(run)
        write_report(run)
        runs.append(run)
    unchecked = store.create_run_dir(root, "queue-partition-kill", now=T0 + timedelta(minutes=5))
    write_lost_write_run(unchecked, with_results=False)

    html = write_index(root).read_text()
    rows = re.findall(r'<tr data-run="([^"]+)" data-verdict="([a-z]+)">(.*?)</tr>', html, re.S)
    assert [(run, verdict) for run, verdict, _ in rows] == [
        (f"queue-partition-kill/{unchecked.name}", "incomplete"),
        (f"queue-crashed-checker/{runs[2].name}", "unknown"),
        (f"queue-partition-kill/{runs[1].name}", "invalid"),
        (f"queue-none/{runs[0].name}", "valid"),
    ]
    invalid_row = rows[2][2]
    assert 'class="verdict-cell verdict-invalid"' in invalid_row
    assert '<span class="bad" title="breaks a claim">lost-write 1</span>' in invalid_row
    assert f'href="queue-partition-kill/{runs[1].name}/report.html"' in invalid_row
    assert f'class="served-only" href="queue-partition-kill/{runs[1].name}.zip"' in invalid_row
    assert "partition, kill" in invalid_row and "2026-11-22 07:01:00" in invalid_row
    assert "checker error" in rows[1][2]
    assert "4 runs: 1 valid, 1 invalid, 1 unknown, 1 incomplete" in html


def _report_parser() -> ArgumentParser:
    parser = ArgumentParser(prog="logquake")
    report_cli.register(parser.add_subparsers(dest="command", parser_class=ArgumentParser))
    return parser


def test_logquake_report_rerenders_a_run_and_its_store_index(tmp_path, capsys):
    root = tmp_path / "results"
    run = store.create_run_dir(root, "queue-partition-kill", now=T0)
    write_lost_write_run(run)
    args = _report_parser().parse_args(["report", str(root / "latest")])
    assert args.handler(args) == 0
    assert (run / "report.html").is_file() and (root / "index.html").is_file()
    assert f"report: {run.resolve()}/report.html" in capsys.readouterr().out


def test_logquake_report_on_something_that_is_not_a_run_exits_254(tmp_path, capsys):
    args = _report_parser().parse_args(["report", str(tmp_path / "nope")])
    assert args.handler(args) == 254
    assert "is not a directory" in capsys.readouterr().err


def test_degenerate_histories_still_render(tmp_path):
    empty = tmp_path / "empty" / "20261122T070000.000000"
    empty.mkdir(parents=True)
    (empty / store.HISTORY_FILE).write_text("")
    html = write_report(empty).read_text()
    assert 'data-verdict="incomplete"' in html and "spec.json is missing" in html
    assert "No faults were injected." in html

    odd = tmp_path / "odd" / "20261122T070000.000000"
    odd.mkdir(parents=True)
    with HistoryWriter(odd / store.HISTORY_FILE) as writer:
        writer.append(Op(0, 5, "invoke", 0, "send", [["send", 0, {"payload": [1, 2]}]]))
        writer.append(Op(1, 9, "ok", 0, "send", [["send", 0, [0, {"payload": [1, 2]}]]]))
        writer.append(Op(2, 12, "invoke", 1, "poll", [["poll"]]))  # never completes
        writer.append(Op(3, 20, "ok", 7, "poll", [["poll", {}]]))  # a completion without an invoke
    html = write_report(odd).read_text()
    figures = _figures(html)
    assert "1 invocations never completed in the history" in html
    never = next(t for t in figures["timeline"]["data"] if t["name"] == "never completed")
    assert never["y"] == ["p1"]
    lost = next(t for t in figures["offsets"]["data"] if "never read" in t["name"])
    assert lost["customdata"] == [[1, '{"payload": [1, 2]}']]


def test_cycle_witnesses_read_like_elle_explanations(tmp_path):
    run = tmp_path / "txn" / "20261122T070000.000000"
    write_valid_run(run)
    steps = [{"from": 3, "to": 9, "rel": "wr", "key": 1, "value": 5}, {"from": 9, "to": 3, "rel": "ww", "key": 2, "value": 7}]
    CheckResult(
        valid=False,
        anomalies=[Anomaly("G1c", 1, False, "a cycle of writes and reads", [Witness([3, 9], {"steps": steps})], ["serializable"])],
    ).save(run / store.RESULTS_FILE)
    html = write_report(run).read_text()
    assert 'Let T1 = <a class="op-link" href="#op-3" data-op="3">#3</a>, T2 = <a class="op-link" href="#op-9" data-op="9">#9</a>.' in html
    assert "<li>T1 &lt; T2: T1 wrote k1=5, which T2 read</li>" in html
    assert "<li>T2 &lt; T1: T2 wrote to k2 just before T1 wrote 7 there (version order)</li>" in html
    assert "<dt>steps</dt>" not in html


def test_the_header_counts_operations_by_outcome(lost_write_report):
    _, _, html = lost_write_report
    facts = re.search(r'<p class="facts">(.*?)</p>', html).group(1)
    assert re.search(r"[\d,]+ client operations: [\d,]+ ok, 1 info$", facts), facts


def test_unexpected_values_in_a_well_formed_history_do_not_stop_the_report(tmp_path):
    run = tmp_path / "odd" / "20261122T070000.000000"
    run.mkdir(parents=True)
    with HistoryWriter(run / store.HISTORY_FILE) as writer:
        writer.append(Op(0, 0, "invoke", 0, "send", [["send", "topic-a", 1]]))
        writer.append(Op(1, 5, "ok", 0, "send", [["send", "topic-a", [0, 1]]]))
        writer.append(Op(2, 6, "invoke", 1, "send", [["send", 2, 2]]))
        writer.append(Op(3, 9, "ok", 1, "send", [["send", 2, [0, 2]]]))
        writer.append(Op(4, 10, "invoke", 1, "poll", "not a list"))
        writer.append(Op(5, 12, "ok", 1, "poll", {"odd": True}))
    html = write_report(run).read_text()
    offsets = _figures(html)["offsets"]
    assert [t["name"] for t in offsets["data"] if "acknowledged, never read" in t["name"]] == [
        "k2 acknowledged, never read", "ktopic-a acknowledged, never read"
    ]


def test_an_external_runs_reported_settings_are_shown_beside_the_typed_ones(tmp_path):
    from harness.cluster_settings import ClusterSettingsRecord

    run = tmp_path / "queue" / "20261122T070000.000000"
    write_valid_run(run)
    record = ClusterSettingsRecord({"min.insync.replicas": "2"}, {"min.insync.replicas": "min.insync.replicas"},
                                   {"num.replica.fetchers": "2"}, warnings=["num.replica.fetchers is a broker setting: not applied"])
    record.readings.append({"when": "after set-up", "errors": ["DescribeConfigs of broker 1 refused"],
                            "topics": {"t0": {"replication_factor": 2, "errors": [],
                                              "configs": {"min.insync.replicas": "1", "unclean.leader.election.enable": "true"}}},
                            "brokers": {"0": {"errors": [], "configs": {"log.crash.lose.unflushed": "false"}}}})
    record.save(run)
    html = write_report(run).read_text()
    assert "Settings the external cluster reported (the claims use these)" in html
    assert "replication factor=2, min.insync.replicas=1, unclean.leader.election.enable=true" in html
    assert "log.crash.lose.unflushed=false" in html and "DescribeConfigs of broker 1 refused" in html
    assert "num.replica.fetchers is a broker setting: not applied" in html
    assert '<a href="cluster-config.json">' in html


def test_a_transactions_witness_lists_every_micro_op(tmp_path):
    """A G1a between an aborted transaction and the poll that read it: each op's one-line text
    is shortened, so the witness also lists every micro-op of each transaction in full."""
    from tests.harness.test_report_support import HistoryBuilder, write_spec

    run = tmp_path / "queue-txn" / "20261125T070000.000000"
    run.mkdir(parents=True)
    write_spec(run, name="queue-txn", nemeses=[])
    h = HistoryBuilder()
    long_poll = ["poll", {k: [[o, 1000 + o] for o in range(8)] for k in range(5, 12)}]
    writer_value = [long_poll, ["send", 3, [40, 7]], ["send", 4, [12, 9]], ["poll", {}]]
    h.op(0.1, "invoke", 0, "txn", [["poll"], ["send", 3, 7], ["send", 4, 9], ["poll"]])
    h.op(0.2, "fail", 0, "txn", writer_value, ["abort", "intentional"], tag="writer")
    h.op(0.3, "invoke", 1, "poll", [["poll"]])
    h.op(0.4, "ok", 1, "poll", [["poll", {3: [[40, 7]]}]], tag="reader")
    tagged = h.write(run / store.HISTORY_FILE)
    witness = Witness([tagged["writer"], tagged["reader"]], {"key": 3, "value": 7})
    CheckResult(valid=False, anomalies=[Anomaly("G1a", 1, False, "aborted read", [witness], ["no-aborted-reads"])]).save(
        run / store.RESULTS_FILE)
    html = write_report(run).read_text()
    card = html[html.index('<div class="witness">'):]
    card = card[:card.index("</div>")]
    mops = re.findall(r'<ol class="mops">(.*?)</ol>', card)
    assert len(mops) == 1  # the reader's single poll needs no list
    items = re.findall(r"<li>(.*?)</li>", mops[0])
    assert items[1:] == ["send k3=7 → offset 40", "send k4=9 → offset 12", "poll → nothing"]
    assert items[0].startswith("poll → k10: ") and all(f"k{k}: " in items[0] for k in range(5, 12))
    assert "intentional" in card  # the transaction's abort, from the op's error
