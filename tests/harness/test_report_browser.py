"""A report opened from disk in headless Chromium (Debian's package), as a person would:
after its scripts ran, the verdict, the lost-write anomaly with its witnesses and the plots
with shaded fault bands are on the page, witness links lead into the timeline, and the page
makes no request beyond its own file — not even when a script inside it tries."""

from __future__ import annotations

import threading
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from harness import store
from harness.report import write_report
from harness.report.browser import HeadlessChromium
from harness.report.faults import fault_colours
from tests.harness.test_report_support import LOST_KEY, LOST_OFFSET, write_lost_write_run

T0 = datetime(2026, 11, 22, 7, 0, 0, tzinfo=timezone.utc)


@pytest.fixture(scope="module")
def browser():
    with HeadlessChromium(width=1400, height=1000, timeout_s=90) as chromium:
        yield chromium


@pytest.fixture(scope="module")
def opened_report(tmp_path_factory, browser):
    root = tmp_path_factory.mktemp("results")
    run = store.create_run_dir(root, "queue-partition-kill", now=T0)
    witness = write_lost_write_run(run)
    _record_throughput(run)
    report = write_report(run)
    load = browser.open(report.as_uri())
    return run, witness, load


def _record_throughput(run) -> None:
    """As `logquake test` does after the check: the per-phase figures go into results.json."""
    from checkers.result import CheckResult
    from harness.history import read_history
    from harness.report.phases import phase_throughput

    result = CheckResult.load(run / store.RESULTS_FILE)
    result.stats["throughput"] = phase_throughput(read_history(run / store.HISTORY_FILE)).as_json()
    result.save(run / store.RESULTS_FILE)


def _rgb(hex_colour: str) -> str:
    r, g, b = (int(hex_colour[i:i + 2], 16) for i in (1, 3, 5))
    return f"rgb({r}, {g}, {b})"


def test_the_report_renders_from_disk_without_errors_or_requests(opened_report, browser):
    run, _, load = opened_report
    assert browser.evaluate("document.body.getAttribute('data-rendered')") == "true"
    assert load.console_errors == []
    assert load.requests == [(run / "report.html").as_uri()]
    screenshot = browser.screenshot(run / "report-screenshot.png")
    assert screenshot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_verdict_and_the_lost_write_with_its_witnesses_are_shown(opened_report, browser):
    _, witness, _ = opened_report
    verdict = browser.evaluate("document.getElementById('verdict').innerText")
    assert verdict.startswith("INVALID") and "lost-write (1)" in verdict
    card = browser.evaluate("document.querySelector('[data-anomaly=\"lost-write\"]').innerText")
    assert "breaks a claim" in card and f"k{LOST_KEY} offset {LOST_OFFSET}" in card
    links = browser.evaluate("Array.from(document.querySelectorAll('[data-anomaly=\"lost-write\"] a[data-op]')).map(a => a.innerText)")
    assert [link.split(" ")[0] for link in links] == [f"#{witness[0]}", f"#{witness[1]}"]
    assert links[1].endswith(f"→ offset {LOST_OFFSET}")


def test_every_plot_is_drawn_with_fault_bands_in_their_colours(opened_report, browser):
    plots = browser.evaluate("Array.from(document.querySelectorAll('.js-plotly-plot')).map(p => p.id)")
    assert plots == ["fig-latency", "fig-throughput", "fig-offsets", "fig-unseen", "fig-timeline"]
    colours = fault_colours(["partition", "kill"])
    for plot in plots[:4]:
        fills = browser.evaluate(
            f"Array.from(document.querySelectorAll('#{plot} .shapelayer path')).map(p => p.style.fill)"
        )
        assert sorted(fills) == sorted([_rgb(colours["partition"]), _rgb(colours["kill"])]), plot
        points = browser.evaluate(f"document.querySelectorAll('#{plot} .scatterlayer .point, #{plot} .scatterlayer .js-line').length")
        assert points > 0, plot
        legend = browser.evaluate(f"Array.from(document.querySelectorAll('#{plot} .legendtext')).map(t => t.textContent)")
        assert "fault: partition" in legend and "fault: kill" in legend
    bars = browser.evaluate("document.querySelectorAll('#fig-timeline .barlayer .point').length")
    assert bars > 100


def test_a_witness_link_zooms_the_timeline_to_its_op(opened_report, browser):
    _, witness, _ = opened_report
    before = browser.evaluate("document.getElementById('fig-timeline').layout.xaxis.range.slice()")
    browser.evaluate(f"document.querySelector('a[data-op=\"{witness[1]}\"]').click()")
    after = browser.evaluate("document.getElementById('fig-timeline').layout.xaxis.range.slice()")
    assert after[1] - after[0] < (before[1] - before[0]) / 10
    assert browser.evaluate("location.hash") == f"#op-{witness[1]}"
    assert browser.evaluate(f"document.getElementById('op-{witness[1]}').className") == "witness-op target-op"


class _CountingHandler(BaseHTTPRequestHandler):
    hits: list[str] = []

    def do_GET(self):  # noqa: N802
        _CountingHandler.hits.append(self.path)
        self.send_response(200)
        self.send_header("Access-Control-Allow-Origin", "*")
        self.end_headers()
        self.wfile.write(b"x")

    def log_message(self, *args):
        pass


def test_scripts_in_the_page_cannot_reach_a_server(opened_report, browser):
    server = ThreadingHTTPServer(("127.0.0.1", 0), _CountingHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}"
        outcome = browser.evaluate(
            "(async () => {"
            f" const tries = [fetch('{base}/fetch').then(() => 'fetched', () => 'blocked')];"
            f" const img = new Image(); img.src = '{base}/image';"
            f" const s = document.createElement('script'); s.src = '{base}/script'; document.head.appendChild(s);"
            f" const l = document.createElement('link'); l.rel = 'stylesheet'; l.href = '{base}/style'; document.head.appendChild(l);"
            f" navigator.sendBeacon && navigator.sendBeacon('{base}/beacon', 'x');"
            " await new Promise(r => setTimeout(r, 1500));"
            " return (await Promise.all(tries)).join(); })()"
        )
        assert outcome == "blocked"
        assert _CountingHandler.hits == []
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def test_figures_keep_their_height_when_the_window_is_resized(opened_report, browser):
    heights = browser.evaluate(
        "Array.from(document.querySelectorAll('.js-plotly-plot')).map(p => [p.id, p.layout.height])"
    )
    try:
        browser.set_viewport(1100, 4000)  # plotly's responsive mode re-lays out every plot
        browser.evaluate("new Promise(done => setTimeout(done, 800))")
        after = browser.evaluate(
            "Array.from(document.querySelectorAll('.js-plotly-plot')).map(p => "
            "[p.id, p._fullLayout.height, p._fullLayout.width, p.getBoundingClientRect().height])"
        )
    finally:
        browser.set_viewport(browser.width, browser.height)
    for (plot, height), (same, full_height, width, box_height) in zip(heights, after):
        assert plot == same and full_height == height and abs(box_height - height) <= 2, plot
        assert width < 1100


def test_the_throughput_by_phase_table_is_shown(opened_report, browser):
    run, _, _ = opened_report
    from checkers.result import CheckResult

    phases = CheckResult.load(run / store.RESULTS_FILE).stats["throughput"]["phases"]
    assert any(p["kind"] == "fault" for p in phases)
    rows = browser.evaluate("Array.from(document.querySelectorAll('#throughput tbody tr')).map(r => r.cells[0].innerText)")
    assert rows == [p["kind"] for p in phases]
    visible = browser.evaluate("document.getElementById('throughput').getBoundingClientRect().height")
    assert visible > 0
