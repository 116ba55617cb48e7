"""Headless Chromium driven over the DevTools protocol on a pipe, for checking what a person
would see: open a page, wait until it has rendered, read the DOM, take a screenshot, and
list every request the page made.

Chromium's `--remote-debugging-pipe` reads NUL-terminated JSON commands on fd 3 and writes
replies and events on fd 4, so this needs no port, no WebSocket library and no browser
download: Debian's `chromium` package is enough. The flags are the ones this machine needs:
no sandbox (we are root), no GPU, and no background networking (Chromium would otherwise
try to reach Google's services at every start). Each browser gets a fresh profile directory,
removed with the process.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CHROMIUM_CANDIDATES = ("chromium", "chromium-browser", "google-chrome")
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--disable-dev-shm-usage",
    "--hide-scrollbars",
    "--mute-audio",
)


class BrowserError(RuntimeError):
    """Chromium is missing, died, or did not answer in time."""


def find_chromium() -> str:
    for name in CHROMIUM_CANDIDATES:
        path = shutil.which(name)
        if path:
            return path
    raise BrowserError("no Chromium found on PATH (install Debian's 'chromium' package: make setup does)")


@dataclass
class PageLoad:
    """What happened while a page loaded."""

    url: str
    render_ms: float | None  # performance.now() when the page said it had rendered
    wall_ms: float  # from the navigate command to the rendered signal, measured here
    main_thread_cpu_ms: float | None = None  # CPU time of the page's main thread: does not count waiting for a core
    requests: list[str] = field(default_factory=list)  # every URL the page requested
    console_errors: list[str] = field(default_factory=list)  # JS exceptions, CSP violations, errors


def _pipe_above_4() -> tuple[int, int]:
    """A pipe whose fds are not 3 or 4, which the browser's end of the pipe must occupy."""
    read_end, write_end = os.pipe()
    moved = (fcntl.fcntl(read_end, fcntl.F_DUPFD_CLOEXEC, 10), fcntl.fcntl(write_end, fcntl.F_DUPFD_CLOEXEC, 10))
    os.close(read_end)
    os.close(write_end)
    return moved


class HeadlessChromium:
    """`with HeadlessChromium() as browser: load = browser.open(url)`."""

    def __init__(self, *, width: int = 1400, height: int = 1000, timeout_s: float = 60.0):
        self.width = width
        self.height = height
        self.timeout_s = timeout_s
        self._process: subprocess.Popen[bytes] | None = None
        self._profile: str | None = None
        self._to_browser: int | None = None
        self._from_browser: int | None = None
        self._buffer = b""
        self._next_id = 0
        self._events: list[dict[str, Any]] = []
        self._session: str | None = None

    # ---- process ----------------------------------------------------------------------

    def __enter__(self) -> "HeadlessChromium":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        executable = find_chromium()
        self._profile = tempfile.mkdtemp(prefix="logquake-chromium-")
        commands_read, commands_write = _pipe_above_4()
        replies_read, replies_write = _pipe_above_4()
        # The browser wants the pipe on fds 3 and 4; bash moves ours there before exec.
        launcher = f'exec "$0" "$@" 3<&{commands_read} 4>&{replies_write} {commands_read}<&- {replies_write}>&-'
        try:
            self._process = subprocess.Popen(
                ["/bin/bash", "-c", launcher, executable, *CHROMIUM_FLAGS, "--remote-debugging-pipe",
                 f"--user-data-dir={self._profile}", f"--window-size={self.width},{self.height}", "about:blank"],
                pass_fds=(commands_read, replies_write),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
        finally:
            os.close(commands_read)
            os.close(replies_write)
        self._to_browser, self._from_browser = commands_write, replies_read
        try:
            target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
            self._session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
            for domain in ("Page", "Network", "Runtime", "Log", "Performance"):
                self.call(f"{domain}.enable", session=True)
            self.set_viewport(self.width, self.height)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        process = self._process
        if process is not None and process.poll() is None:
            try:
                self.call("Browser.close", timeout_s=5)
            except (BrowserError, OSError):
                pass
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, 9)
                process.wait(timeout=10)
        for fd in (self._to_browser, self._from_browser):
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self._to_browser = self._from_browser = None
        self._process = None
        if self._profile:
            shutil.rmtree(self._profile, ignore_errors=True)
            self._profile = None

    # ---- protocol ---------------------------------------------------------------------

    def call(self, method: str, params: dict[str, Any] | None = None, *, session: bool = False, timeout_s: float | None = None) -> dict[str, Any]:
        if self._to_browser is None:
            raise BrowserError("the browser is not running")
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = self._session
        data = json.dumps(message).encode() + b"\0"
        while data:
            written = os.write(self._to_browser, data)
            data = data[written:]
        deadline = time.monotonic() + (timeout_s or self.timeout_s)
        while True:
            reply = self._receive(deadline)
            if reply.get("id") == message["id"]:
                if "error" in reply:
                    raise BrowserError(f"{method} failed: {reply['error']}")
                return reply.get("result", {})
            if "method" in reply:
                self._events.append(reply)

    def _receive(self, deadline: float) -> dict[str, Any]:
        assert self._from_browser is not None
        while b"\0" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise BrowserError("Chromium did not answer in time")
            ready, _, _ = select.select([self._from_browser], [], [], remaining)
            if not ready:
                continue
            chunk = os.read(self._from_browser, 1 << 20)
            if not chunk:
                raise BrowserError("Chromium closed the DevTools pipe (it exited)")
            self._buffer += chunk
        raw, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(raw)

    def _drain_events(self, wait_s: float = 0.0) -> None:
        deadline = time.monotonic() + wait_s
        while True:
            if b"\0" not in self._buffer:
                assert self._from_browser is not None
                ready, _, _ = select.select([self._from_browser], [], [], max(deadline - time.monotonic(), 0))
                if not ready:
                    return
            message = self._receive(time.monotonic() + 5)
            if "method" in message:
                self._events.append(message)

    # ---- pages ------------------------------------------------------------------------

    def evaluate(self, expression: str) -> Any:
        reply = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True}, session=True)
        if "exceptionDetails" in reply:
            raise BrowserError(f"evaluating {expression!r} failed: {reply['exceptionDetails'].get('text')}")
        return reply["result"].get("value")

    def open(self, url: str, *, ready_expression: str = "document.body && document.body.getAttribute('data-rendered')") -> PageLoad:
        """Navigate and wait until `ready_expression` is non-empty (the report sets
        data-rendered on <body> once every figure is drawn)."""
        self._events.clear()
        started = time.monotonic()
        self.call("Page.navigate", {"url": url}, session=True)
        deadline = started + self.timeout_s
        state = None
        while time.monotonic() < deadline:
            state = self.evaluate(ready_expression)
            if state:
                break
            self._drain_events(0.05)
        wall_ms = (time.monotonic() - started) * 1000
        if not state:
            raise BrowserError(f"{url} did not finish rendering within {self.timeout_s:.0f} s")
        render_ms = self.evaluate("window.logquakeRenderedMs || null")
        cpu_ms = self._main_thread_cpu_s() * 1000
        self._drain_events(0.3)  # late console messages and requests
        return PageLoad(url, render_ms, wall_ms, cpu_ms, self._requests(), self._console_errors())

    def _main_thread_cpu_s(self) -> float:
        """ThreadTime: the CPU time of the renderer's main thread since the document began."""
        metrics = self.call("Performance.getMetrics", session=True)["metrics"]
        return next((m["value"] for m in metrics if m["name"] == "ThreadTime"), 0.0)

    def _requests(self) -> list[str]:
        return [e["params"]["request"]["url"] for e in self._events if e.get("method") == "Network.requestWillBeSent"]

    def _console_errors(self) -> list[str]:
        errors = []
        for event in self._events:
            method, params = event.get("method"), event.get("params", {})
            if method == "Runtime.exceptionThrown":
                details = params.get("exceptionDetails", {})
                errors.append("exception: " + str(details.get("exception", {}).get("description") or details.get("text")))
            elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
                errors.append("log: " + params["entry"].get("text", ""))
            elif method == "Runtime.consoleAPICalled" and params.get("type") == "error":
                errors.append("console: " + " ".join(str(a.get("value", a.get("description"))) for a in params.get("args", [])))
        return errors

    def screenshot(self, path: str | Path, *, full_page: bool = False, top_px: float | None = None, height_px: float | None = None) -> Path:
        """The viewport; or the whole page; or a band of the page from `top_px`.

        For the page beyond the viewport, the viewport is first made as tall as the page and
        the page given time to settle (plotly redraws responsive plots on a resize), so the
        capture never catches a plot half redrawn."""
        params: dict[str, Any] = {"format": "png"}
        resized = False
        if full_page or top_px is not None:
            size = self.call("Page.getLayoutMetrics", session=True)["cssContentSize"]
            page_height = int(size["height"]) + 1
            self.set_viewport(self.width, max(page_height, self.height))
            resized = True
            self.evaluate("new Promise(done => requestAnimationFrame(() => requestAnimationFrame(() => setTimeout(done, 500))))")
            top = top_px or 0
            height = height_px if height_px is not None else page_height - top
            params["clip"] = {"x": 0, "y": top, "width": self.width, "height": max(min(height, page_height - top), 1), "scale": 1}
        try:
            data = self.call("Page.captureScreenshot", params, session=True)["data"]
        finally:
            if resized:
                self.set_viewport(self.width, self.height)
        target = Path(path)
        target.write_bytes(base64.b64decode(data))
        return target

    def set_viewport(self, width: int, height: int) -> None:
        self.call(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
            session=True,
        )
