"""report.html for one run: verdict and claims first, then each anomaly with its witnesses,
the plots, the timeline, and the configuration with the exact command that reproduces it.

Every part renders from whatever the run directory holds: a run without results.json is
"incomplete", a checker error makes the verdict unknown and is shown, a missing or corrupt
history leaves out the plots and says why. Nothing here raises for the contents of a run.
"""

from __future__ import annotations

import html
import json
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

from checkers.result import Anomaly, CheckResult
from harness.history import HistoryFormatError, Op
from harness.report.digest import OUTCOMES, HistoryDigest, digest_history
from harness.report.figures import FigureSpec, all_figures
from harness.report.htmlpage import asset_text, json_block, plotly_js, render_page
from harness.report.opformat import describe_action, describe_micro_op, describe_op
from harness import store
from harness.cluster_settings import CLUSTER_CONFIG_FILE

MAX_WITNESSES_SHOWN = 12
WITNESSES_OPEN = 3  # the rest of the shown witnesses are folded under "more witnesses"
TIMELINE_BUDGET_OPS = 2000
_VERDICT_WORDS = {"valid": "Valid", "invalid": "Invalid", "unknown": "Unknown", "incomplete": "Incomplete"}


def esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


@dataclass
class RunMaterial:
    """What a run directory holds, each part either loaded or with the reason it is not."""

    run_dir: Path
    spec: dict[str, Any] | None
    result: CheckResult | None
    digest: HistoryDigest | None
    problems: list[str] = field(default_factory=list)
    results_unreadable: bool = False  # results.json exists but could not be used
    # cluster-config.json of a run against an external cluster: what the cluster reported.
    cluster_settings: dict[str, Any] | None = None

    @property
    def verdict(self) -> store.Verdict:
        if self.result is None:
            return "unknown" if self.results_unreadable else "incomplete"
        return store.verdict_of(self.result.valid)


def load_run(run_dir: Path) -> RunMaterial:
    problems: list[str] = []
    spec, problem = store.read_json_object(run_dir / store.SPEC_FILE)
    if problem:
        problems.append(problem)
    result = None
    results_unreadable = False
    raw_result, problem = store.read_json_object(run_dir / store.RESULTS_FILE)
    if raw_result is not None:
        try:
            result = CheckResult.from_json(raw_result)
        except (KeyError, TypeError, ValueError) as exc:
            problems.append(f"results.json does not follow the CheckResult schema: {exc!r}")
            results_unreadable = True
    elif (run_dir / store.RESULTS_FILE).exists():
        problems.append(problem or "results.json is unreadable")
        results_unreadable = True
    focus = _focus_indices(result)
    digest = None
    history_path = run_dir / store.HISTORY_FILE
    if history_path.is_file():
        try:
            digest = digest_history(
                history_path, focus_indices=focus, window_centres=_witness_centres(result), timeline_budget_ops=TIMELINE_BUDGET_OPS
            )
        except HistoryFormatError as exc:
            problems.append(f"history.jsonl is corrupt, so there are no plots: {exc}")
        except (TypeError, ValueError, KeyError) as exc:  # well-formed lines, unexpected values
            problems.append(f"history.jsonl could not be summarised, so there are no plots: {type(exc).__name__}: {exc}")
    else:
        problems.append("history.jsonl is missing, so there are no plots or timeline")
    cluster_settings = None
    if (run_dir / CLUSTER_CONFIG_FILE).exists():
        cluster_settings, problem = store.read_json_object(run_dir / CLUSTER_CONFIG_FILE)
        if problem:
            problems.append(f"{CLUSTER_CONFIG_FILE}: {problem}")
    return RunMaterial(run_dir, spec, result, digest, problems, results_unreadable, cluster_settings)


def _shown_witnesses(result: CheckResult | None) -> list[list[int]]:
    """The op indices of each witness the page shows, most important first: the first
    witness of each anomaly that breaks a claim, then of the allowed ones, then the rest."""
    if result is None:
        return []
    ordered = sorted(result.anomalies, key=lambda a: a.allowed)
    firsts = [w.op_indices for a in ordered for w in a.witnesses[:1]]
    rest = [w.op_indices for a in ordered for w in a.witnesses[1:MAX_WITNESSES_SHOWN]]
    return [[i for i in ops if isinstance(i, int)] for ops in firsts + rest]


def _focus_indices(result: CheckResult | None) -> list[int]:
    return [i for ops in _shown_witnesses(result) for i in ops]


def _witness_centres(result: CheckResult | None) -> list[int]:
    """One timeline window per witness, at its earliest op."""
    return [min(ops) for ops in _shown_witnesses(result) if ops]


# ---- sections -------------------------------------------------------------------------


def _header(material: RunMaterial) -> str:
    run = material.run_dir
    spec = material.spec or {}
    started = store.parse_timestamp(run.name)
    facts = []
    if started:
        facts.append(f"started {started:%Y-%m-%d %H:%M:%S} UTC")
    if spec.get("workload"):
        facts.append(f"workload <b>{esc(spec['workload'])}</b>")
    nemeses = spec.get("nemeses")
    if isinstance(nemeses, list):
        facts.append("nemeses <b>" + (esc(", ".join(map(str, nemeses))) or "none") + "</b>")
    if "seed" in spec:
        facts.append(f"seed <b>{esc(spec['seed'])}</b>")
    simulation = (material.result.stats or {}).get("simulation") if material.result is not None else None
    if isinstance(simulation, dict) and simulation.get("simulated"):
        # `logquake test --sim`: phase lengths and op times are virtual; say so, and how fast.
        facts.append(f"<b>simulated</b>: {esc(simulation.get('simulated_s'))} s in {esc(simulation.get('wall_s'))} s "
                     f"of wall time ({esc(simulation.get('speed'))}× simulated s per wall s)")
    digest = material.digest
    if digest:
        facts.append(f"{digest.op_count:,} history ops over {digest.duration_s:.1f} s")
        outcomes = digest.client_ops.outcome
        counts = [(name, int((outcomes == code).sum())) for code, name in enumerate(OUTCOMES)]
        facts.append(
            f"{len(outcomes):,} client operations: "
            + ", ".join(f"{count:,} {'never completed' if name == 'open' else name}" for name, count in counts if count)
        )
    name = spec.get("name") or run.parent.name
    return (
        f'<header class="run"><h1>logquake: {esc(name)}</h1>'
        f'<p class="facts">{" · ".join(facts)}</p>'
        f'<p class="facts mono">{esc(run)}</p></header>'
    )


def _nav(figures: list[FigureSpec]) -> str:
    entries = [("verdict", "Verdict"), ("claims", "Claims"), ("anomalies", "Anomalies")]
    entries += [(f"section-{f.figure_id}", f.title) for f in figures if f.figure_id != "timeline"]
    entries += [("timeline", "Timeline"), ("faults", "Faults"), ("configuration", "Configuration"), ("files", "Files")]
    links = "".join(f'<li><a href="#{anchor}">{esc(label)}</a></li>' for anchor, label in entries)
    return f'<nav class="sections"><ul>{links}</ul></nav>'


def _verdict(material: RunMaterial) -> str:
    verdict = material.verdict
    result = material.result
    if result is None:
        if verdict == "incomplete":
            sentence = "There is no results.json: this run has not been checked yet (it is still running, or it stopped before the check)."
        else:
            sentence = "results.json could not be read, so the verdict is unknown."
    elif verdict == "invalid":
        bad = [a for a in result.anomalies if not a.allowed]
        listing = ", ".join(f"{a.name} ({a.count:,})" for a in bad) or "see the checker output"
        sentence = f"The history breaks claims this configuration makes: {listing}."
    elif verdict == "valid":
        allowed = [a for a in result.anomalies if a.allowed and a.count > 0]
        sentence = "No anomaly breaks a claim this configuration makes."
        if allowed:
            sentence += " Allowed anomalies seen: " + ", ".join(f"{a.name} ({a.count:,})" for a in allowed) + "."
    else:
        sentence = "The checkers could not decide."
        if result.errors:
            sentence += " " + f"{len(result.errors)} checker error(s), shown below."
    errors = ""
    if result is not None and result.errors:
        errors = "".join(
            f'<div class="problem"><b>checker {esc(e.checker)} failed:</b> <span class="mono">{esc(e.error)}</span></div>'
            for e in result.errors
        )
    problems = "".join(f'<div class="problem">{esc(p)}</div>' for p in material.problems)
    return (
        f'<section id="verdict" class="verdict verdict-{verdict}" data-verdict="{verdict}">'
        f'<div class="word">{_VERDICT_WORDS[verdict].upper()}</div><p>{esc(sentence)}</p></section>'
        f"{errors}{problems}"
    )


def _claims(result: CheckResult | None) -> str:
    if result is None:
        return '<section id="claims"><h2>Claims</h2><p class="note">Not checked yet, so no claims were tested.</p></section>'
    if not result.claims:
        return '<section id="claims"><h2>Claims</h2><p class="note">The checkers recorded no claims.</p></section>'
    broken_by: dict[str, list[str]] = {}
    for anomaly in result.anomalies:
        if not anomaly.allowed:
            for claim in anomaly.violates:
                broken_by.setdefault(claim, []).append(anomaly.name)
    decided = result.valid != "unknown"
    rows = []
    for claim in result.claims:
        if not claim.holds:
            status = '<span class="tag tag-off">not claimed</span>'
        elif claim.name in broken_by:
            status = '<span class="tag tag-bad">broken by ' + esc(", ".join(broken_by[claim.name])) + "</span>"
        elif decided:
            status = '<span class="tag tag-held">no violation found</span>'
        else:
            status = '<span class="tag tag-allowed">undecided</span>'
        rows.append(
            f"<tr><td><b>{esc(claim.name)}</b><br>{esc(claim.description)}</td>"
            f"<td>{status}</td><td>{esc(claim.reason)}</td></tr>"
        )
    return (
        '<section id="claims"><h2>Claims this configuration makes</h2>'
        "<table><thead><tr><th>claim</th><th>outcome</th><th>why (configuration)</th></tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table></section>"
    )


def _op_link(index: int, kept: dict[int, Op]) -> str:
    op = kept.get(index)
    text = describe_op(op) if op else f"#{index} (not in history.jsonl)"
    return f'<li><a class="op-link" href="#op-{index}" data-op="{index}">{esc(text)}</a></li>'


_RELATION_WORDS = {
    "ww": "wrote to k{key} just before {b} wrote {value} there (version order)",
    "wr": "wrote k{key}={value}, which {b} read",
    "rt": "completed before {b} was invoked (real time)",
}


def _cycle_text(steps: Any) -> str:
    """Elle-style prose for a dependency cycle: each step says why one op precedes the next."""
    if not isinstance(steps, list) or not all(isinstance(s, dict) and {"from", "to", "rel"} <= set(s) for s in steps):
        return ""
    names = {}
    for step in steps:
        for end in (step["from"], step["to"]):
            names.setdefault(end, f"T{len(names) + 1}")
    let = ", ".join(
        f'{names[i]} = <a class="op-link" href="#op-{esc(i)}" data-op="{esc(i)}">#{esc(i)}</a>' for i in names
    )
    lines = []
    for step in steps:
        words = _RELATION_WORDS.get(step["rel"], "precedes {b} (" + esc(step["rel"]) + ")")
        lines.append(
            f"<li>{names[step['from']]} &lt; {names[step['to']]}: {names[step['from']]} "
            + esc(words.format(key=step.get("key"), value=step.get("value"), b="§")).replace("§", names[step["to"]])
            + "</li>"
        )
    return (
        f'<p class="cycle">Let {let}.</p><ol class="cycle">{"".join(lines)}</ol>'
        "<p class=\"cycle\">Each step orders one operation before the next and the last leads back to the first: "
        "a cycle, so no order of these operations explains what was observed.</p>"
    )


def _witness_op(index: int, kept: dict[int, Op]) -> str:
    """A witness's op; an op of several micro-ops (a transaction) also lists every micro-op on
    a line of its own, since the one-line text is shortened and a transaction's anomaly often
    lies in its later micro-ops."""
    link = _op_link(index, kept)
    op = kept.get(index)
    mops = op.value if op is not None and isinstance(op.value, list) else []
    if len(mops) < 2 or not all(isinstance(m, list) and m and m[0] in ("send", "poll") for m in mops):
        return link
    items = "".join(f"<li>{esc(describe_micro_op(m))}</li>" for m in mops)
    return f'{link.removesuffix("</li>")}<ol class="mops">{items}</ol></li>'


def _witness(anomaly: Anomaly, number: int, kept: dict[int, Op]) -> str:
    witness = anomaly.witnesses[number]
    ops = "".join(_witness_op(i, kept) for i in witness.op_indices)
    cycle = _cycle_text(witness.detail.get("steps"))
    details = "".join(
        f"<dt>{esc(key)}</dt><dd>{esc(value if isinstance(value, str) else json.dumps(value, default=str))}</dd>"
        for key, value in witness.detail.items()
        if not (key == "steps" and cycle)
    )
    return (
        f'<div class="witness"><b>Witness {number + 1}</b>'
        f"{f'<ol>{ops}</ol>' if ops else ''}{cycle}{f'<dl>{details}</dl>' if details else ''}</div>"
    )


def _anomalies(material: RunMaterial) -> str:
    result = material.result
    if result is None:
        return '<section id="anomalies"><h2>Anomalies</h2><p class="note">Not checked yet.</p></section>'
    stats = ""
    if result.stats:
        rows = "".join(
            f"<tr><td>{esc(k)}</td><td class='mono'>{esc(v if isinstance(v, (str, int, float)) else json.dumps(v, default=str))}</td></tr>"
            for k, v in result.stats.items()
        )
        stats = f"<h3>Checker statistics</h3><table><tbody>{rows}</tbody></table>"
    seen = [a for a in result.anomalies if a.count > 0 or a.witnesses]
    absent = sorted(a.name for a in result.anomalies if a not in seen)
    absent_line = f'<p class="note">Looked for and not found: {esc(", ".join(absent))}.</p>' if absent else ""
    if not seen:
        return f'<section id="anomalies"><h2>Anomalies</h2><p>None found.</p>{absent_line}{stats}</section>'
    kept = material.digest.kept_ops if material.digest else {}
    cards = []
    for anomaly in sorted(seen, key=lambda a: (a.allowed, -a.count, a.name)):
        tag = (
            '<span class="tag tag-allowed">allowed by this configuration</span>'
            if anomaly.allowed
            else '<span class="tag tag-bad">breaks a claim</span>'
        )
        violates = (
            f'<p class="violates">Breaks: {esc(", ".join(anomaly.violates))}</p>' if anomaly.violates and not anomaly.allowed else ""
        )
        shown = min(len(anomaly.witnesses), MAX_WITNESSES_SHOWN)
        witnesses = "".join(_witness(anomaly, n, kept) for n in range(min(shown, WITNESSES_OPEN)))
        if shown > WITNESSES_OPEN:
            folded = "".join(_witness(anomaly, n, kept) for n in range(WITNESSES_OPEN, shown))
            witnesses += f"<details><summary>{shown - WITNESSES_OPEN} more witnesses</summary>{folded}</details>"
        more = (
            f'<p class="note">{shown} of {len(anomaly.witnesses)} witnesses shown; all are in results.json.</p>'
            if shown < len(anomaly.witnesses)
            else ""
        )
        cards.append(
            f'<div class="anomaly{" allowed" if anomaly.allowed else ""}" data-anomaly="{esc(anomaly.name)}">'
            f"<h3>{esc(anomaly.name)} × {anomaly.count:,} {tag}</h3>"
            f'<p class="explanation">{esc(anomaly.explanation)}</p>{violates}{witnesses}{more}</div>'
        )
    return f'<section id="anomalies"><h2>Anomalies</h2>{"".join(cards)}{absent_line}{stats}</section>'


def _figure_html(figure: FigureSpec) -> str:
    notes = "".join(f'<p class="note sampled">{esc(n)}</p>' for n in figure.notes)
    caption = f'<p class="note">{esc(figure.caption)}</p>' if figure.caption else ""
    return (
        # The explicit height keeps plotly's responsive resizing (which fills the container)
        # from shrinking the figure to its default height when the window changes size.
        f'{caption}<div class="figure" id="fig-{figure.figure_id}" style="height: {int(figure.layout["height"])}px"></div>{notes}'
        + json_block(f"data-{figure.figure_id}", figure.to_plotly(), data_figure=f"fig-{figure.figure_id}")
    )


def _plots(figures: list[FigureSpec]) -> str:
    parts = []
    for figure in figures:
        if figure.figure_id == "timeline":
            continue
        parts.append(f'<section id="section-{figure.figure_id}"><h2>{esc(figure.title)}</h2>{_figure_html(figure)}</section>')
    return "".join(parts)


def _history_excerpt(material: RunMaterial) -> str:
    digest = material.digest
    if digest is None or not digest.kept_ops:
        return ""
    witness_indices = set(_focus_indices(material.result))
    rows = []
    previous = None
    for index in sorted(digest.kept_ops):
        op = digest.kept_ops[index]
        if previous is not None and index > previous + 1:
            rows.append(f'<tr class="gap"><td colspan="5">… {index - previous - 1:,} ops …</td></tr>')
        previous = index
        time_s = (op.time_ns - digest.first_time_ns) / 1e9
        css = ' class="witness-op"' if index in witness_indices else ""
        rows.append(
            f'<tr id="op-{index}"{css}><td class="num">{index}</td><td class="num">{time_s:.6f}</td>'
            f"<td>{esc(op.process)}</td><td>{esc(op.type)}</td><td>{esc(describe_action(op))}</td></tr>"
        )
    return (
        "<h3>History around the witnesses</h3>"
        '<p class="note">Witness ops are highlighted; each witness link above jumps here and zooms the timeline to the op.</p>'
        '<table class="history-excerpt"><thead><tr><th class="num">index</th><th class="num">time (s)</th>'
        f"<th>process</th><th>type</th><th>operation</th></tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )


def _timeline(material: RunMaterial, figures: list[FigureSpec]) -> str:
    timeline = next((f for f in figures if f.figure_id == "timeline"), None)
    figure = _figure_html(timeline) if timeline else '<p class="note">No history, so no timeline.</p>'
    return f'<section id="timeline"><h2>Timeline of operations</h2>{figure}{_history_excerpt(material)}</section>'


def _faults(digest: HistoryDigest | None) -> str:
    if digest is None:
        return ""
    if not digest.fault_periods and not digest.nemesis_events:
        return '<section id="faults"><h2>Faults</h2><p>No faults were injected.</p></section>'
    rows = "".join(
        f"<tr><td>{esc(p.kind)}</td><td class='num'>{p.start_s:.3f}</td><td class='num'>{p.end_s:.3f}</td>"
        f"<td class='num'>{p.end_s - p.start_s:.3f}</td><td>{'healed' if p.healed else '<b>not healed</b> by the end of the history'}</td>"
        f"<td class='mono'>{esc(p.description)}</td></tr>"
        for p in digest.fault_periods
    )
    events = "".join(
        f"<tr><td>{esc(e.f)}</td><td class='num'>{e.time_s:.3f}</td><td class='num'></td><td class='num'></td>"
        f"<td>instant</td><td class='mono'>{esc(e.description)}</td></tr>"
        for e in digest.nemesis_events
    )
    return (
        '<section id="faults"><h2>Faults</h2><table><thead><tr><th>fault</th><th class="num">start (s)</th>'
        '<th class="num">end (s)</th><th class="num">duration (s)</th><th>state</th><th>targets</th></tr></thead>'
        f"<tbody>{rows}{events}</tbody></table></section>"
    )


def _config_table(mapping: Any, overridden: Any = None) -> str:
    """Settings, one a row; those the user set on the command line are marked."""
    if not isinstance(mapping, dict) or not mapping:
        return '<p class="note">none set</p>'
    by_user = overridden if isinstance(overridden, dict) else {}
    mark = '<span class="tag tag-allowed">set by you</span>'
    rows = "".join(
        f"<tr><td class='mono'>{esc(k)}</td><td class='mono'>{esc(v)}</td><td>{mark if k in by_user else ''}</td></tr>"
        for k, v in sorted(mapping.items())
    )
    return f"<table><tbody>{rows}</tbody></table>"


def _reported_settings(settings: dict[str, Any] | None) -> str:
    """An external cluster's own settings (cluster-config.json): the claims rest on these,
    not on what was typed, so the report shows them next to the typed ones."""
    if not settings:
        return ""
    rows = []
    for reading in settings.get("readings") or []:
        if not isinstance(reading, dict):
            continue
        when = esc(reading.get("when", "?"))
        for name, topic in sorted((reading.get("topics") or {}).items()):
            if not isinstance(topic, dict):
                continue
            values = {"replication factor": topic.get("replication_factor"), **(topic.get("configs") or {})}
            shown = ", ".join(f"{k}={v}" for k, v in values.items() if v is not None)
            rows.append(f"<tr><td>{when}</td><td class='mono'>topic {esc(name)}</td><td class='mono'>{esc(shown)}</td></tr>")
        for name, broker in sorted((reading.get("brokers") or {}).items()):
            if isinstance(broker, dict) and broker.get("configs"):
                shown = ", ".join(f"{k}={v}" for k, v in broker["configs"].items())
                rows.append(f"<tr><td>{when}</td><td class='mono'>broker {esc(name)}</td><td class='mono'>{esc(shown)}</td></tr>")
        for error in reading.get("errors") or []:
            rows.append(f"<tr><td>{when}</td><td colspan='2' class='problem'>{esc(error)}</td></tr>")
    warnings = "".join(f"<li>{esc(w)}</li>" for w in settings.get("warnings") or [])
    return ("<h3>Settings the external cluster reported (the claims use these)</h3>"
            f"<table><tbody>{''.join(rows) or '<tr><td>no reading</td></tr>'}</tbody></table>"
            + (f"<ul class='problem'>{warnings}</ul>" if warnings else ""))


def _configuration(spec: dict[str, Any] | None, cluster_settings: dict[str, Any] | None = None) -> str:
    if spec is None:
        return '<section id="configuration"><h2>Configuration</h2><p class="problem">spec.json is missing or unreadable.</p></section>'
    command = spec.get("command")
    command_html = (
        f'<p><button class="copy" data-copy="reproduce-command">copy</button> Run this to reproduce:</p>'
        f'<pre class="command" id="reproduce-command">{esc(command)}</pre>'
        if command
        else '<p class="problem">spec.json has no reproduce command.</p>'
    )
    main_keys = [k for k in spec if k not in ("client_config", "client_config_overrides", "cluster_config", "command")]
    main_rows = "".join(
        f"<tr><td>{esc(k)}</td><td class='mono'>{esc(v if isinstance(v, str) else json.dumps(v, default=str))}</td></tr>"
        for k in main_keys
        for v in [spec[k]]
    )
    return (
        '<section id="configuration"><h2>Configuration</h2>'
        f"{command_html}<table><tbody>{main_rows}</tbody></table>"
        '<div class="grid2"><div><h3>Client configuration (librdkafka names)</h3>'
        f"{_config_table(spec.get('client_config'), spec.get('client_config_overrides'))}</div>"
        f"<div><h3>Cluster configuration</h3>{_config_table(spec.get('cluster_config'))}</div></div>"
        f"{_reported_settings(cluster_settings)}</section>"
    )


def _files(run_dir: Path) -> str:
    entries = []
    for name in (store.SPEC_FILE, CLUSTER_CONFIG_FILE, store.HISTORY_FILE, "history.parquet", store.RESULTS_FILE, store.HARNESS_LOG_FILE):
        path = run_dir / name
        if path.exists():
            entries.append(name + ("/" if path.is_dir() else ""))
    brokers = run_dir / "brokers"
    if brokers.is_dir():
        entries += [f"brokers/{p.name}" for p in sorted(brokers.iterdir()) if p.is_file()]
    links = "".join(f'<li><a href="{quote(e)}">{esc(e)}</a></li>' for e in entries)
    return f'<section id="files"><h2>Files of this run</h2><ul>{links or "<li>none</li>"}</ul></section>'


def _throughput(result: CheckResult | None) -> str:
    """Per-phase ok rates, availability and recovery, as the run recorded them in
    results.json (harness/report/phases.py computes them)."""
    raw = (result.stats or {}).get("throughput") if result is not None else None
    if not raw or not raw.get("phases"):
        return ""
    pre = raw.get("pre_fault_ok_per_s")
    rows = []
    for p in raw["phases"]:
        availability = "" if p.get("availability") is None else f"{p['availability']:.0%}"
        recovery = ""
        if p.get("kind") == "after-heal":
            recovery = "not within the phase" if p.get("recovery_s") is None else f"{p['recovery_s']:g}"
        rows.append(
            f"<tr><td>{esc(p.get('kind'))}</td><td>{esc(p.get('faults'))}</td><td class='num'>{p.get('start_s', 0):.1f}</td>"
            f"<td class='num'>{p.get('end_s', 0):.1f}</td><td class='num'>{p.get('invoked')}</td><td class='num'>{p.get('ok')}</td>"
            f"<td class='num'>{p.get('ok_per_s', 0):.1f}</td><td class='num'>{availability}</td><td class='num'>{esc(recovery)}</td></tr>")
    note = (f"Pre-fault rate {pre:g} ok ops/s. Recovery: seconds from the heal to the first whole "
            f"{raw.get('recovery_window_s', 1):g}-s window with at least {raw.get('recovery_fraction', 0):.0%} of the pre-fault rate. "
            "Availability: of the ops invoked in the phase, the share that completed ok."
            if pre is not None else "The run had no fault-free start, so there is no pre-fault rate and no recovery time.")
    return (
        '<section id="throughput"><h2>Throughput by phase</h2><table><thead><tr><th>phase</th><th>faults</th>'
        '<th class="num">start (s)</th><th class="num">end (s)</th><th class="num">invoked</th><th class="num">ok</th>'
        '<th class="num">ok/s</th><th class="num">availability</th><th class="num">recovery (s)</th></tr></thead>'
        f'<tbody>{"".join(rows)}</tbody></table><p class="note">{esc(note)}</p></section>'
    )


def _op_times(digest: HistoryDigest | None) -> dict[str, list[float]]:
    """For the witness links: op index -> [invoke time, completion time] in seconds."""
    if digest is None:
        return {}
    times: dict[str, list[float]] = {}
    for pair in digest.timeline_pairs:
        start = (pair.invoke.time_ns - digest.first_time_ns) / 1e9
        end = (pair.completion.time_ns - digest.first_time_ns) / 1e9 if pair.completion else digest.duration_s
        times[str(pair.invoke.index)] = [start, end]
        if pair.completion:
            times[str(pair.completion.index)] = [start, end]
    for index, op in digest.kept_ops.items():
        if str(index) not in times:
            moment = (op.time_ns - digest.first_time_ns) / 1e9
            times[str(index)] = [moment, moment]
    return times


def render_report(material: RunMaterial) -> str:
    figures: list[FigureSpec] = []
    if material.digest:
        try:
            figures = all_figures(material.digest)
        except Exception as exc:  # a history shape the plots do not handle: keep the rest of the page
            material.problems.append(f"the plots could not be drawn: {type(exc).__name__}: {exc}")
    body = "".join(
        (
            _header(material),
            _nav(figures),
            "<main>",
            _verdict(material),
            _claims(material.result),
            _anomalies(material),
            _plots(figures),
            _timeline(material, figures),
            _faults(material.digest),
            _throughput(material.result),
            _configuration(material.spec, material.cluster_settings),
            _files(material.run_dir),
            json_block("op-times", _op_times(material.digest)),
            "</main>",
        )
    )
    title = f"{_VERDICT_WORDS[material.verdict]}: {(material.spec or {}).get('name') or material.run_dir.parent.name} — logquake"
    return render_page(title=esc(title), body=body, scripts=[plotly_js(), asset_text("report.js")])


def write_report(run_dir: str | os.PathLike[str]) -> Path:
    """Render `<run_dir>/report.html` from the run's files and return its path."""
    run = Path(run_dir)
    if not run.is_dir():
        raise store.StoreError(f"{run} is not a directory")
    if not (run / store.SPEC_FILE).exists() and not (run / store.HISTORY_FILE).exists():
        raise store.StoreError(f"{run} holds neither spec.json nor history.jsonl: it is not a run directory")
    text = render_report(load_run(run))
    target = run / store.REPORT_FILE
    temporary = run / f".{store.REPORT_FILE}.{os.getpid()}.{threading.get_ident()}.tmp"
    temporary.write_text(text, encoding="utf-8")
    os.replace(temporary, target)
    return target
