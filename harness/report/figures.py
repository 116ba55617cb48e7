"""The report's plots, as Plotly figure specs (plain data, rendered by the inlined plotly.js).

Every plot of time shades the fault periods: a faint band per period over the data, and a
lane per fault kind above the data (Jepsen's nemesis bands), one colour per kind, named in
the legend. Big histories are downsampled for drawing, and every figure that drops points
carries a note with the counts; aggregates (quantile lines, rates, unseen counts) are always
computed from every op.

Arrays go into the page as Plotly typed arrays (base64 of little-endian numbers), which keeps
a report of a million ops small.
"""

from __future__ import annotations

import base64
import html
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from harness.report.digest import OUTCOMES, HistoryDigest, PartitionFacts, TimelinePair
from harness.report.faults import FaultPeriod, fault_colours
from harness.report.opformat import describe_value

# Jepsen's outcome colours, so people who know Jepsen's plots read ours at once.
OUTCOME_COLOURS = {"ok": "#6DB6FE", "fail": "#FEB5DA", "info": "#FFAA26", "open": "#FFAA26"}
OUTCOME_LINE_COLOURS = {"ok": "#2b7bd6", "fail": "#d6338a", "info": "#d98200", "open": "#d98200"}
_SYMBOLS = ("circle", "square", "diamond", "triangle-up", "cross", "x", "star", "hexagon")
MAX_LATENCY_POINTS = 4000
MAX_OFFSET_POINTS_PER_SERIES = 400
MAX_NEVER_READ_MARKERS = 2000
MAX_PARTITIONS_PLOTTED = 12
MAX_BUCKETS = 240  # for step plots (unseen)
MAX_RATE_BUCKETS = 60  # for rates and latency quantiles: enough ops per bucket to mean something
QUANTILE_LINES_SHOWN_FROM_OPS = 2000  # below this, every point is drawn and the lines are opt-in


@dataclass
class FigureSpec:
    figure_id: str
    title: str
    data: list[dict[str, Any]]
    layout: dict[str, Any]
    notes: list[str] = field(default_factory=list)  # what was downsampled, with counts
    caption: str = ""  # how to read the figure

    def to_plotly(self) -> dict[str, Any]:
        return {"data": self.data, "layout": self.layout}


def typed_array(values: np.ndarray, dtype: str) -> dict[str, str]:
    """A Plotly typed-array spec: {"dtype": "f4", "bdata": base64 of the raw values}."""
    array = np.ascontiguousarray(np.asarray(values).astype("<" + dtype, copy=False))
    return {"dtype": dtype, "bdata": base64.b64encode(array.tobytes()).decode("ascii")}


def bucket_width_s(duration_s: float, max_buckets: int = MAX_BUCKETS) -> float:
    """A round bucket width giving at most `max_buckets` buckets over the run."""
    for width in (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 1800, 3600):
        if duration_s / width <= max_buckets:
            return float(width)
    return float(np.ceil(duration_s / max_buckets / 3600) * 3600)


def _lane_domain(lane_count: int, height_px: int) -> tuple[float, float]:
    """The part of the plot height the fault lanes take: about 16 px per lane."""
    fraction = min(0.35, max(0.06, 16 * lane_count / max(height_px - 120, 100)))
    return 1 - fraction, 1.0


def _base_layout(title: str, *, height: int = 420, lanes: list[str] | None = None) -> dict[str, Any]:
    layout: dict[str, Any] = {
        "title": {"text": title, "x": 0, "xanchor": "left", "font": {"size": 15}},
        "height": height + (16 * len(lanes) if lanes else 0),
        "margin": {"l": 70, "r": 20, "t": 60, "b": 30},
        "paper_bgcolor": "white",
        "plot_bgcolor": "white",
        "font": {"family": "system-ui, -apple-system, Segoe UI, Roboto, DejaVu Sans, sans-serif", "size": 12, "color": "#222"},
        "hovermode": "closest",
        "legend": {"orientation": "h", "y": -0.06, "yanchor": "top", "x": 0, "font": {"size": 11}},
        # "s" on the ticks instead of an axis title, which a long legend below would overlap
        "xaxis": {"ticksuffix": " s", "gridcolor": "#eee", "zeroline": False},
        "yaxis": {"gridcolor": "#eee", "zeroline": False},
    }
    if lanes:
        low, high = _lane_domain(len(lanes), layout["height"])
        layout["yaxis"]["domain"] = [0, low - 0.03]
        layout["yaxis2"] = {
            "domain": [low, high],
            "type": "category",
            "categoryorder": "array",
            "categoryarray": lanes,
            "showgrid": False,
            "tickfont": {"size": 10},
            "fixedrange": True,
        }
    return layout


def fault_decorations(periods: list[FaultPeriod]) -> tuple[list[dict], list[dict], list[str]]:
    """(shapes, lane traces, lane names): faint bands over the data, and one lane per kind.
    The bands span the whole plot height ("paper" coordinates); the data's y axis ends below
    the lanes, and `_finish_bands` trims the bands to it once the layout is known."""
    colours = fault_colours([p.kind for p in periods])
    shapes = [
        {
            "type": "rect",
            "xref": "x",
            "yref": "paper",
            "x0": period.start_s,
            "x1": period.end_s,
            "y0": 0,
            "y1": 1,
            "fillcolor": colours[period.kind],
            "opacity": 0.16,
            "line": {"width": 0},
            "layer": "below",
            "name": f"fault-{period.kind}",
        }
        for period in periods
    ]
    lanes = sorted(colours)
    traces = []
    for kind in lanes:
        xs: list[float | None] = []
        ys: list[str | None] = []
        texts: list[str | None] = []
        for period in (p for p in periods if p.kind == kind):
            label = (
                f"{kind} {period.start_s:.2f}–{period.end_s:.2f} s"
                + ("" if period.healed else " (not healed)")
                + (f"<br>{html.escape(period.description)}" if period.description else "")
            )
            xs += [period.start_s, period.end_s, None]
            ys += [kind, kind, None]
            texts += [label, label, None]
        traces.append(
            {
                "type": "scatter",
                "mode": "lines",
                "x": xs,
                "y": ys,
                "yaxis": "y2",
                "line": {"color": colours[kind], "width": 12},
                "name": f"fault: {kind}",
                "legendgroup": f"fault-{kind}",
                "hovertext": texts,
                "hoverinfo": "text",
            }
        )
    return shapes, traces, lanes


def _with_bands(layout: dict[str, Any], shapes: list[dict]) -> dict[str, Any]:
    """Put the fault bands in the layout, over the data area only (not the lanes)."""
    top = layout["yaxis"].get("domain", [0, 1])[1]
    layout["shapes"] = [{**shape, "y1": top} for shape in shapes]
    return layout


def _sample(indices: np.ndarray, limit: int, rng: np.random.Generator) -> np.ndarray:
    if len(indices) <= limit:
        return indices
    return np.sort(rng.choice(indices, size=limit, replace=False))


def latency_figure(digest: HistoryDigest) -> FigureSpec:
    ops = digest.client_ops
    completed = np.flatnonzero(ops.outcome != OUTCOMES.index("open"))
    latency_ms = (ops.end_s - ops.start_s) * 1000.0
    rng = np.random.default_rng(0)
    is_ok = ops.outcome[completed] == OUTCOMES.index("ok")
    not_ok = completed[~is_ok]
    chosen_not_ok = _sample(not_ok, MAX_LATENCY_POINTS // 2, rng)
    chosen_ok = _sample(completed[is_ok], MAX_LATENCY_POINTS - len(chosen_not_ok), rng)
    chosen = np.concatenate([chosen_ok, chosen_not_ok])
    shapes, lane_traces, lanes = fault_decorations(digest.fault_periods)
    data: list[dict[str, Any]] = []
    for f_code, f_name in enumerate(ops.f_names):
        for outcome in ("ok", "fail", "info"):
            rows = chosen[(ops.f_code[chosen] == f_code) & (ops.outcome[chosen] == OUTCOMES.index(outcome))]
            if not len(rows):
                continue
            data.append(
                {
                    "type": "scatter",
                    "mode": "markers",
                    "name": f"{f_name} {outcome}",
                    "x": typed_array(ops.start_s[rows], "f4"),
                    "y": typed_array(np.maximum(latency_ms[rows], 0.001), "f4"),
                    "customdata": typed_array(ops.invoke_index[rows], "i4"),
                    # Saturated fills and no outlines: outlines cost a third of the drawing time.
                    "marker": {"color": OUTCOME_LINE_COLOURS[outcome], "symbol": _SYMBOLS[f_code % len(_SYMBOLS)], "size": 5, "opacity": 0.8},
                    "hovertemplate": f"op #%{{customdata}} {f_name} {outcome}<br>invoked %{{x:.3f}} s<br>latency %{{y:.2f}} ms<extra></extra>",
                }
            )
    data.extend(_latency_quantile_traces(ops.start_s[completed], latency_ms[completed], digest.duration_s))
    data.extend(lane_traces)
    layout = _base_layout("Latency of each operation, by outcome (fault periods shaded)", height=480, lanes=lanes)
    layout["yaxis"].update({"type": "log", "dtick": 1, "title": {"text": "latency (ms, log scale)"}})
    _with_bands(layout, shapes)
    notes = []
    if len(chosen) < len(completed):
        notes.append(
            f"Latency points: {len(chosen):,} of {len(completed):,} completed operations drawn "
            f"({len(chosen_not_ok):,} of {len(not_ok):,} fail/info, {len(chosen_ok):,} of {int(is_ok.sum()):,} ok, "
            "sampled uniformly at random with a fixed seed). The quantile lines use every operation."
        )
    open_count = len(ops) - len(completed)
    if open_count:
        notes.append(f"{open_count:,} invocations never completed in the history; they have no latency and are not drawn here.")
    caption = (
        "Each point is one operation, at the time it was invoked; its colour is the outcome (ok blue, fail pink, "
        "info orange: unknown outcome, e.g. a timeout) and its shape the function. The grey lines are latency "
        f"quantiles (p50, p95, p99, max) over {bucket_width_s(digest.duration_s, MAX_RATE_BUCKETS):g} s buckets of every operation"
        + ("" if len(completed) >= QUANTILE_LINES_SHOWN_FROM_OPS else "; click them in the legend to show them")
        + ". Shaded bands and the lanes on top are fault periods."
    )
    return FigureSpec("latency", "Latency", data, layout, notes, caption)


def _latency_quantile_traces(start_s: np.ndarray, latency_ms: np.ndarray, duration_s: float) -> list[dict[str, Any]]:
    if len(start_s) == 0:
        return []
    width = bucket_width_s(duration_s, MAX_RATE_BUCKETS)
    bucket = np.floor(start_s / width).astype(np.int64)
    order = np.argsort(bucket, kind="stable")
    bucket_sorted = bucket[order]
    latency_sorted = latency_ms[order]
    edges = np.flatnonzero(np.diff(bucket_sorted)) + 1
    groups = np.split(latency_sorted, edges)
    centres = (bucket_sorted[np.concatenate([[0], edges])] + 0.5) * width
    traces = []
    for quantile, dash in ((0.5, "solid"), (0.95, "dash"), (0.99, "dot"), (1.0, "dashdot")):
        values = np.array([np.quantile(g, quantile) for g in groups])
        label = "max" if quantile == 1.0 else f"p{int(quantile * 100)}"
        traces.append(
            {
                "type": "scatter",
                "mode": "lines",
                "name": f"{label} latency",
                "visible": True if len(start_s) >= QUANTILE_LINES_SHOWN_FROM_OPS else "legendonly",
                "x": typed_array(centres, "f4"),
                "y": typed_array(np.maximum(values, 0.001), "f4"),
                "line": {"color": "#444", "width": 1.2, "dash": dash},
                "hovertemplate": f"{label} %{{y:.2f}} ms in the {width:g} s around %{{x:.1f}} s<extra></extra>",
            }
        )
    return traces


def throughput_figure(digest: HistoryDigest) -> FigureSpec:
    ops = digest.client_ops
    width = bucket_width_s(digest.duration_s, MAX_RATE_BUCKETS)
    bucket_count = int(np.floor(digest.duration_s / width)) + 1
    centres = (np.arange(bucket_count) + 0.5) * width
    shapes, lane_traces, lanes = fault_decorations(digest.fault_periods)
    data: list[dict[str, Any]] = []
    for f_code, f_name in enumerate(ops.f_names):
        for outcome in ("ok", "fail", "info"):
            mask = (ops.f_code == f_code) & (ops.outcome == OUTCOMES.index(outcome))
            if not mask.any():
                continue
            counts = np.bincount(np.floor(ops.end_s[mask] / width).astype(np.int64), minlength=bucket_count)
            data.append(
                {
                    "type": "scatter",
                    "mode": "lines",
                    "name": f"{f_name} {outcome}",
                    "x": typed_array(centres, "f4"),
                    "y": typed_array(counts[:bucket_count] / width, "f4"),
                    "line": {"color": OUTCOME_LINE_COLOURS[outcome], "width": 1.5, "dash": _dash_for(f_code)},
                    "hovertemplate": f"{f_name} {outcome}: %{{y:.1f}} ops/s around %{{x:.1f}} s<extra></extra>",
                }
            )
    data.extend(lane_traces)
    layout = _base_layout(f"Throughput: completions per second ({width:g} s buckets)", height=380, lanes=lanes)
    layout["yaxis"]["title"] = {"text": "operations / s"}
    layout["yaxis"]["rangemode"] = "tozero"
    _with_bands(layout, shapes)
    caption = "Operations completed per second, by function and outcome. A fault that blocks progress shows as a dip inside its band."
    return FigureSpec("throughput", "Throughput", data, layout, [], caption)


def _dash_for(code: int) -> str:
    return ("solid", "dash", "dot", "dashdot", "longdash")[code % 5]


def _partitions_to_plot(digest: HistoryDigest) -> tuple[list[PartitionFacts], list[str]]:
    partitions = digest.partitions
    if len(partitions) <= MAX_PARTITIONS_PLOTTED:
        return partitions, []
    ranked = sorted(partitions, key=lambda p: (-len(p.never_read), -len(p.write_offset), p.key))
    chosen = sorted(ranked[:MAX_PARTITIONS_PLOTTED], key=lambda p: p.key)
    note = (
        f"{len(chosen)} of {len(partitions)} partitions drawn: those with the most acknowledged writes never "
        "read, then the busiest. The others are left out of these two plots only."
    )
    return chosen, [note]


def _stepped_max(times: np.ndarray, values: np.ndarray, limit: int) -> tuple[np.ndarray, np.ndarray, bool]:
    """The running maximum of values over time, thinned to at most `limit` points."""
    if len(times) == 0:
        return times, values, False
    order = np.argsort(times, kind="stable")
    times, running = times[order], np.maximum.accumulate(values[order])
    change = np.concatenate([[True], running[1:] != running[:-1]])
    times, running = times[change], running[change]
    if len(times) <= limit:
        return times, running, False
    keep = np.unique(np.linspace(0, len(times) - 1, limit).astype(np.int64))
    return times[keep], running[keep], True


def offsets_figure(digest: HistoryDigest) -> FigureSpec:
    partitions, notes = _partitions_to_plot(digest)
    shapes, lane_traces, lanes = fault_decorations(digest.fault_periods)
    palette = ("#4e79a7", "#f28e2b", "#59a14f", "#b07aa1", "#76b7b2", "#edc948", "#9c755f", "#e15759", "#bab0ac", "#ff9da7", "#17becf", "#8c564b")
    data: list[dict[str, Any]] = []
    thinned = False
    markers_total = sum(len(p.never_read) for p in partitions)
    marker_budget = MAX_NEVER_READ_MARKERS
    for position, partition in enumerate(partitions):
        colour = palette[position % len(palette)]
        group = f"k{partition.key}"
        for label, times, offsets, dash in (
            ("highest offset acknowledged", partition.write_time_s, partition.write_offset, "solid"),
            ("highest offset read", partition.read_time_s, partition.read_max_offset, "dot"),
        ):
            xs, ys, was_thinned = _stepped_max(times, offsets, MAX_OFFSET_POINTS_PER_SERIES)
            thinned |= was_thinned
            if not len(xs):
                continue
            data.append(
                {
                    "type": "scatter",
                    "mode": "lines",
                    "line": {"shape": "hv", "color": colour, "dash": dash, "width": 1.6},
                    "name": f"k{partition.key} {label}",
                    "legendgroup": group,
                    "x": typed_array(xs, "f4"),
                    "y": typed_array(ys, "f8"),
                    "hovertemplate": f"k{partition.key} {label}: %{{y}} at %{{x:.2f}} s<extra></extra>",
                }
            )
        lost = [item for item in partition.never_read if item[0] is not None][: max(marker_budget, 0)]
        marker_budget -= len(lost)
        if lost:
            data.append(
                {
                    "type": "scatter",
                    "mode": "markers",
                    "name": f"k{partition.key} acknowledged, never read",
                    "legendgroup": group,
                    "x": typed_array(np.array([item[2] for item in lost]), "f4"),
                    "y": typed_array(np.array([item[0] for item in lost]), "f8"),
                    "customdata": [[item[3], str(item[1])] for item in lost],
                    "marker": {"symbol": "x", "size": 9, "color": "#c00000", "line": {"width": 1.5, "color": "#c00000"}},
                    "hovertemplate": f"k{partition.key} offset %{{y}} value %{{customdata[1]}}<br>acknowledged by op #%{{customdata[0]}} at %{{x:.2f}} s, never read<extra></extra>",
                }
            )
    data.extend(lane_traces)
    layout = _base_layout("Offsets per partition: acknowledged vs read (✕ = acknowledged, never read)", height=460, lanes=lanes)
    layout["yaxis"]["title"] = {"text": "offset"}
    _with_bands(layout, shapes)
    if thinned:
        notes.append(
            f"Offset lines are the running maxima, thinned to at most {MAX_OFFSET_POINTS_PER_SERIES} steps per line."
        )
    if markers_total > MAX_NEVER_READ_MARKERS:
        notes.append(f"{MAX_NEVER_READ_MARKERS:,} of {markers_total:,} never-read writes marked.")
    caption = (
        "For each partition, the highest offset acknowledged to a producer (solid) and the highest offset any poll "
        "returned (dotted). A red ✕ is an acknowledged write that no poll ever returned: if later offsets were read, "
        "it is lost. Click a legend entry to hide or show a line."
    )
    return FigureSpec("offsets", "Offsets per partition", data, layout, notes, caption)


def unseen_figure(digest: HistoryDigest) -> FigureSpec:
    partitions, notes = _partitions_to_plot(digest)
    width = bucket_width_s(digest.duration_s)
    grid = np.arange(int(np.floor(digest.duration_s / width)) + 2) * width
    shapes, lane_traces, lanes = fault_decorations(digest.fault_periods)
    data: list[dict[str, Any]] = []
    for partition in partitions:
        if not len(partition.unseen_event_time_s):
            continue
        order = np.argsort(partition.unseen_event_time_s, kind="stable")
        times = partition.unseen_event_time_s[order]
        running = np.cumsum(partition.unseen_event_delta[order])
        positions = np.searchsorted(times, grid, side="right") - 1
        unseen = np.where(positions >= 0, running[np.maximum(positions, 0)], 0)
        data.append(
            {
                "type": "scatter",
                "mode": "lines",
                "stackgroup": "unseen",
                "name": f"k{partition.key}",
                "x": typed_array(grid, "f4"),
                "y": typed_array(unseen, "i4"),
                "hovertemplate": f"k{partition.key}: %{{y}} unseen at %{{x:.1f}} s<extra></extra>",
            }
        )
    data.extend(lane_traces)
    layout = _base_layout(
        f"Unseen: acknowledged writes no poll had returned yet, per partition (stacked, {width:g} s steps)",
        height=380,
        lanes=lanes,
    )
    layout["yaxis"]["title"] = {"text": "unseen writes"}
    layout["yaxis"]["rangemode"] = "tozero"
    _with_bands(layout, shapes)
    caption = (
        "How many acknowledged writes no poll had returned yet, per partition, stacked. It should fall back to zero "
        "after the final polls; what remains at the end was never read."
    )
    return FigureSpec("unseen", "Unseen writes over time", data, layout, notes, caption)


def _process_label(process: object) -> str:
    return f"p{process}"


def timeline_figure(digest: HistoryDigest) -> FigureSpec:
    """Per-process bars from invocation to completion, coloured by outcome (Jepsen's
    timeline), with a lane per fault kind on top."""
    pairs = digest.timeline_pairs
    colours = fault_colours([p.kind for p in digest.fault_periods])
    fault_lanes = [f"fault: {kind}" for kind in sorted(colours)]
    processes = sorted({pair.invoke.process for pair in pairs}, key=lambda p: (not isinstance(p, int), p))
    process_lanes = [_process_label(p) for p in processes]
    first_ns = digest.first_time_ns
    span_start = min(((pair.invoke.time_ns - first_ns) / 1e9 for pair in pairs), default=0.0)
    span_end = max(((pair.completion.time_ns if pair.completion else pair.invoke.time_ns) - first_ns) / 1e9 for pair in pairs) if pairs else digest.duration_s
    min_width = max((span_end - span_start) / 1500, 1e-6)
    data: list[dict[str, Any]] = []
    by_outcome: dict[str, list[TimelinePair]] = {}
    for pair in pairs:
        outcome = pair.completion.type if pair.completion else "open"
        by_outcome.setdefault(outcome, []).append(pair)
    for outcome in OUTCOMES:
        members = by_outcome.get(outcome)
        if not members:
            continue
        starts = np.array([(p.invoke.time_ns - first_ns) / 1e9 for p in members])
        ends = np.array([((p.completion.time_ns if p.completion else digest.first_time_ns + int(digest.duration_s * 1e9)) - first_ns) / 1e9 for p in members])
        data.append(
            {
                "type": "bar",
                "orientation": "h",
                "name": "never completed" if outcome == "open" else outcome,
                "y": [_process_label(p.invoke.process) for p in members],
                "base": typed_array(starts, "f8"),
                "x": typed_array(np.maximum(ends - starts, min_width), "f8"),
                "customdata": [p.invoke.index for p in members],
                "hovertext": [_pair_text(p) for p in members],
                "hoverinfo": "text",
                "marker": {"color": OUTCOME_COLOURS[outcome], "line": {"color": OUTCOME_LINE_COLOURS[outcome], "width": 0.6}},
                "width": 0.7,
            }
        )
    for kind in sorted(colours):
        periods = [p for p in digest.fault_periods if p.kind == kind]
        data.append(
            {
                "type": "bar",
                "orientation": "h",
                "name": f"fault: {kind}",
                "y": [f"fault: {kind}"] * len(periods),
                "base": [p.start_s for p in periods],
                "x": [max(p.end_s - p.start_s, min_width) for p in periods],
                "hovertext": [f"{kind} {p.start_s:.2f}–{p.end_s:.2f} s{'' if p.healed else ' (not healed)'}<br>{html.escape(p.description)}" for p in periods],
                "hoverinfo": "text",
                "marker": {"color": colours[kind], "opacity": 0.75},
                "width": 0.7,
            }
        )
    lanes = fault_lanes + process_lanes
    layout = _base_layout("Timeline: each operation from invocation to completion, per process", height=min(max(160 + 22 * len(lanes), 320), 1400))
    layout["barmode"] = "overlay"
    layout["yaxis"].update(
        {"type": "category", "categoryorder": "array", "categoryarray": list(reversed(lanes)), "title": {"text": "process"}, "automargin": True}
    )
    first_window = _window_time_range(digest, digest.timeline_windows[0]) if digest.timeline_windows else None
    if first_window:
        layout["xaxis"]["range"] = list(first_window)
    notes = []
    client_total = len(digest.client_ops)
    if len(pairs) < client_total:
        ranges = ", ".join(f"#{low}–#{high}" for low, high in digest.timeline_windows)
        notes.append(
            f"Timeline: {len(pairs):,} of {client_total:,} client operations drawn — those overlapping history "
            f"indices {ranges} (around the anomalies' witnesses, or the start of the run when there are none). "
            "Fault periods are all drawn."
        )
    caption = (
        "Each bar is one operation from invocation to completion, in its process's lane; colour is the outcome. "
        "A process whose operation ends in info (unknown outcome) is retired and its worker goes on as a new process. "
        "Hover for the operation; drag to zoom, double-click to zoom out."
    )
    return FigureSpec("timeline", "Timeline", data, layout, notes, caption)


def _window_time_range(digest: HistoryDigest, window: tuple[int, int]) -> tuple[float, float] | None:
    low, high = window
    times = [
        (pair.invoke.time_ns - digest.first_time_ns) / 1e9
        for pair in digest.timeline_pairs
        if low <= pair.invoke.index <= high
    ]
    if not times:
        return None
    start, end = min(times), max(times)
    pad = max((end - start) * 0.02, 1e-3)
    return start - pad, end + pad


def _pair_text(pair: TimelinePair) -> str:
    invoke, completion = pair.invoke, pair.completion
    head = f"op #{invoke.index} p{invoke.process} {invoke.f}"
    if completion is None:
        return f"{head}<br>never completed<br>invoked: {html.escape(describe_value(invoke.f, invoke.value))}"
    latency_ms = (completion.time_ns - invoke.time_ns) / 1e6
    text = f"{head} → {completion.type} (#{completion.index}, {latency_ms:.1f} ms)<br>{html.escape(describe_value(completion.f, completion.value))}"
    if completion.error is not None:
        text += f"<br>error: {html.escape(describe_value('', completion.error))}"
    return text


def all_figures(digest: HistoryDigest) -> list[FigureSpec]:
    figures = [latency_figure(digest), throughput_figure(digest)]
    if digest.partitions:
        figures += [offsets_figure(digest), unseen_figure(digest)]
    figures.append(timeline_figure(digest))
    return figures
