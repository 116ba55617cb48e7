"""Results people can read: report.html for one run, and results/index.html for all runs.

`write_report(run_dir)` renders a run's spec.json, history.jsonl and results.json into one
self-contained HTML file (plotly.js and all data inlined; a Content-Security-Policy forbids
every network request), so it opens from disk, from a CI artifact or from `logquake serve`.
`write_index(results_root)` lists every run, newest first. `browser` drives headless
Chromium for tests and the benchmark; `cli` adds `logquake report`.
"""

from harness.report.index import write_index
from harness.report.page import write_report

__all__ = ["write_report", "write_index"]
