"""results/index.html: every run, newest first, with its verdict colour, anomaly counts and
links to its report and files.

The page is static and self-contained like the reports, so it works from disk and from
`logquake serve`. Zip downloads only exist when served, so their links are hidden when the
page is opened from disk.
"""

from __future__ import annotations

import html
import os
import threading
from collections import Counter
from pathlib import Path
from urllib.parse import quote

from harness import store
from harness.report.htmlpage import render_page

# Hides the zip links under file:// (the server makes the zips on the fly).
_INDEX_SCRIPT = (
    "if (location.protocol === 'file:') {"
    " document.querySelectorAll('.served-only').forEach(function (n) { n.hidden = true; }); }"
)


def _esc(value: object) -> str:
    return html.escape(str(value), quote=True)


def _anomaly_cell(run: store.RunSummary) -> str:
    seen = [a for a in run.anomalies if a.count > 0]
    if not seen and not run.checker_errors:
        return "none" if run.verdict != "incomplete" else ""
    parts = [
        f'<span class="{"allowed" if a.allowed else "bad"}" title="{"allowed" if a.allowed else "breaks a claim"}">'
        f"{_esc(a.name)} {a.count:,}</span>"
        for a in sorted(seen, key=lambda a: (a.allowed, a.name))
    ]
    if run.checker_errors:
        parts.append(f'<span class="bad">{run.checker_errors} checker error(s)</span>')
    return ", ".join(parts)


def _row(run: store.RunSummary) -> str:
    base = "/".join(quote(part) for part in run.relative_path.split("/"))
    links = []
    if run.has_report:
        links.append(f'<a href="{base}/report.html"><b>report</b></a>')
    for name, label in ((store.RESULTS_FILE, "results"), (store.HISTORY_FILE, "history"), (store.HARNESS_LOG_FILE, "log")):
        if (run.path / name).exists():
            links.append(f'<a href="{base}/{name}">{label}</a>')
    links.append(f'<a class="served-only" href="{base}.zip" title="download the run directory">zip</a>')
    problems = "".join(f'<div class="problem">{_esc(p)}</div>' for p in run.problems)
    name_cell = f'<a href="{base}/report.html">{_esc(run.name)}</a>' if run.has_report else _esc(run.name)
    return (
        f'<tr data-run="{_esc(run.relative_path)}" data-verdict="{run.verdict}">'
        f'<td class="verdict-cell verdict-{run.verdict}">{run.verdict}</td>'
        f"<td>{name_cell}{problems}</td>"
        f'<td class="mono" title="{_esc(run.timestamp)}">{run.started_at:%Y-%m-%d %H:%M:%S}</td>'
        f"<td>{_esc(run.workload or '')}</td>"
        f"<td>{_esc(', '.join(run.nemeses) or 'none')}</td>"
        f'<td class="anomaly-counts">{_anomaly_cell(run)}</td>'
        f'<td class="links">{"".join(links)}</td></tr>'
    )


def render_index(runs: list[store.RunSummary]) -> str:
    counts = Counter(run.verdict for run in runs)
    summary = ", ".join(f"{counts[v]} {v}" for v in ("valid", "invalid", "unknown", "incomplete") if counts[v])
    rows = "".join(_row(run) for run in runs)
    table = (
        "<table><thead><tr><th>verdict</th><th>test</th><th>started (UTC)</th><th>workload</th><th>nemeses</th>"
        f"<th>anomalies</th><th>files</th></tr></thead><tbody>{rows}</tbody></table>"
        if runs
        else "<p>No runs yet.</p>"
    )
    body = (
        '<header class="run"><h1>logquake results</h1>'
        f'<p class="facts">{len(runs)} run{"s" if len(runs) != 1 else ""}{": " + summary if summary else ""}. Newest first.</p></header>'
        f"<main>{table}</main>"
    )
    return render_page(title="logquake results", body=body, scripts=[_INDEX_SCRIPT])


def write_index(results_root: str | os.PathLike[str]) -> Path:
    """Rebuild `<results_root>/index.html` from every run under it and return its path."""
    root = Path(results_root)
    root.mkdir(parents=True, exist_ok=True)
    text = render_index(store.list_runs(root))
    target = root / store.INDEX_FILE
    temporary = root / f".{store.INDEX_FILE}.{os.getpid()}.{threading.get_ident()}.tmp"
    temporary.write_text(text, encoding="utf-8")
    os.replace(temporary, target)
    return target
