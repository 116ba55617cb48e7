"""A suite run's index: index.json for programs and index.html for people, in the suite
directory, one row per test with its verdict against the expectation and a link to its
report. Links are relative, so the results tree can be moved or published as one artifact."""

from __future__ import annotations

import html
import json
import os
import tempfile
from datetime import datetime
from pathlib import Path
from typing import Any

from harness.junit import now_utc

INDEX_JSON = "index.json"
INDEX_HTML = "index.html"


def _relative(path: Path | None, start: Path) -> str | None:
    if path is None:
        return None
    return Path(os.path.relpath(Path(path).resolve(), start.resolve())).as_posix()


def index_document(suite_dir: Path, *, suite: Any, started_at: datetime, finished: list[Any], interrupted: bool,
                   exit_code: int | None) -> dict[str, Any]:
    rows = []
    for item in finished:
        record, run = item.record, item.run
        report = record.report_path if record.report_path is not None and record.report_path.exists() else None
        rows.append({
            "index": run.index, "id": run.id, "test": run.entry, "name": run.run_name,
            "workload": run.spec.workload, "nemesis": list(run.spec.nemesis), "configuration": run.configuration,
            "seed": run.spec.seed, "expect": run.expectation.verdict, "expected_anomalies": list(run.expectation.anomalies),
            "also_allowed": list(run.expectation.also_allowed),
            "verdict": record.verdict, "outcome": item.outcome, "exit_code": item.exit_code,
            "elapsed_s": round(record.elapsed_s, 1), "anomalies": item.anomalies,
            "run_dir": _relative(record.run_dir, suite_dir), "report": _relative(report, suite_dir),
            "log": _relative(item.log_path, suite_dir), "reproduce_command": run.command,
        })
    return {
        "suite": suite.name, "description": suite.description, "file": str(suite.path),
        "started_at": started_at.isoformat(timespec="seconds"), "updated_at": now_utc().isoformat(timespec="seconds"),
        "tests": len(suite.runs), "finished": len(finished), "interrupted": interrupted,
        "exit_code": exit_code, "junit": "junit.xml", "runs": rows,
    }


def write_index(suite_dir: Path, **kwargs: Any) -> None:
    document = index_document(suite_dir, **kwargs)
    _atomic_write(suite_dir / INDEX_JSON, json.dumps(document, indent=2) + "\n")
    _atomic_write(suite_dir / INDEX_HTML, render_html(document))


def render_html(doc: dict[str, Any]) -> str:
    e = html.escape
    state = ("interrupted" if doc["interrupted"] else
             "running" if doc["exit_code"] is None else f"exit {doc['exit_code']}")
    rows = []
    for row in doc["runs"]:
        cls = "ok" if row["exit_code"] == 0 else "bad" if row["exit_code"] == 1 else "other"
        report = (f'<a href="{e(row["report"])}">report</a>' if row["report"] else "no report")
        log = f'<a href="{e(row["log"])}">log</a>' if row["log"] else ""
        rows.append(
            f'<tr class="{cls}"><td>{row["index"]}</td><td>{e(row["id"])}</td><td>{e(row["workload"])}</td>'
            f'<td>{e(", ".join(row["nemesis"]) or "none")}</td><td>{e(row["configuration"] or "")}</td>'
            f'<td>{row["seed"]}</td><td>{e(row["expect"])}</td><td>{e(row["outcome"])}</td>'
            f'<td>{row["elapsed_s"]}</td><td>{report} {log}</td>'
            f'<td><code>{e(row["reproduce_command"])}</code></td></tr>')
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>logquake suite {e(doc['suite'])}</title>
<style>
body {{ font-family: sans-serif; margin: 1.5em; }}
table {{ border-collapse: collapse; }} td, th {{ border: 1px solid #ccc; padding: 0.3em 0.5em; vertical-align: top; }}
tr.ok td:nth-child(8) {{ color: #176617; }} tr.bad td:nth-child(8) {{ color: #b00020; font-weight: bold; }}
tr.other td:nth-child(8) {{ color: #a65e00; font-weight: bold; }} code {{ font-size: 0.85em; }}
td:nth-child(2) {{ white-space: nowrap; }}
</style></head><body>
<h1>logquake suite {e(doc['suite'])}</h1>
<p>{e(doc['description'])}</p>
<p>File <code>{e(doc['file'])}</code>; started {e(doc['started_at'])}; {doc['finished']} of {doc['tests']} test(s)
finished; {e(state)}. <a href="{e(doc['junit'])}">JUnit XML</a>, <a href="index.json">index.json</a>.</p>
<table><tr><th>#</th><th>test</th><th>workload</th><th>nemesis</th><th>configuration</th><th>seed</th>
<th>expect</th><th>outcome</th><th>s</th><th>results</th><th>reproduce</th></tr>
{chr(10).join(rows)}
</table></body></html>
"""


def _atomic_write(path: Path, text: str) -> None:
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.chmod(temporary, 0o644)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
