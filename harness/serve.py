"""`logquake serve`: browse results/ in a web browser, on 127.0.0.1 only.

Serves the results tree as static files (reports, histories, logs) with a fresh index at
`/`, and `GET /<test>/<timestamp>.zip` streams a zip of that run directory (built while it
is sent, so a large run needs no temporary file). Paths are resolved, links included, and
anything that lands outside the results root is refused with 403.
"""

from __future__ import annotations

import argparse
import os
import posixpath
import sys
import zipfile
from functools import partial
from http import HTTPStatus
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

from harness import store

DEFAULT_PORT = 8080
BIND_ADDRESS = "127.0.0.1"


class _ZipStream:
    """A write-only, unseekable file for zipfile that sends what it is given to the client."""

    def __init__(self, sink):
        self._sink = sink
        self._written = 0

    def write(self, data: bytes) -> int:
        self._sink.write(data)
        self._written += len(data)
        return len(data)

    def tell(self) -> int:
        return self._written

    def flush(self) -> None:
        self._sink.flush()


class ResultsHandler(SimpleHTTPRequestHandler):
    """Static files under the results root, an index rebuilt on request, and run zips."""

    server_version = "logquake-serve"
    extensions_map = {**SimpleHTTPRequestHandler.extensions_map, ".jsonl": "application/x-ndjson; charset=utf-8",
                      ".log": "text/plain; charset=utf-8", ".json": "application/json"}

    def __init__(self, *args, results_root: Path, **kwargs):
        self.results_root = results_root
        super().__init__(*args, directory=str(results_root), **kwargs)

    def _inside_root(self, url_path: str) -> Path | None:
        """The real file an URL path names, or None if it resolves outside the root."""
        relative = posixpath.normpath(unquote(url_path)).lstrip("/")
        if relative in ("", "."):
            return self.results_root
        candidate = (self.results_root / relative).resolve()
        return candidate if candidate.is_relative_to(self.results_root) else None

    def _refuse_outside(self) -> bool:
        path = urlsplit(self.path).path
        if ".." in unquote(path).split("/") or self._inside_root(path) is None:
            self.send_error(HTTPStatus.FORBIDDEN, "outside the results directory")
            return True
        return False

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        if self._refuse_outside():
            return
        path = unquote(urlsplit(self.path).path)
        if path in ("/", "/index.html"):
            from harness.report import write_index  # the report package imports plotly: load lazily

            write_index(self.results_root)
        if path.endswith(".zip"):
            run_dir = self._inside_root(path[: -len(".zip")])
            if run_dir is not None and run_dir.is_dir() and store.parse_timestamp(run_dir.name) is not None:
                self._send_zip(run_dir)
                return
        super().do_GET()

    def do_HEAD(self) -> None:  # noqa: N802
        if self._refuse_outside():
            return
        super().do_HEAD()

    def translate_path(self, path: str) -> str:
        resolved = self._inside_root(urlsplit(path).path)
        # Never hand the base class a path outside the root (it would happily serve it).
        return str(resolved) if resolved is not None else "/nonexistent/logquake-refused"

    def _send_zip(self, run_dir: Path) -> None:
        name = f"{run_dir.parent.name}-{run_dir.name}.zip"
        self.send_response(HTTPStatus.OK)
        self.send_header("Content-Type", "application/zip")
        self.send_header("Content-Disposition", f'attachment; filename="{name}"')
        self.send_header("Connection", "close")  # no length: the end of the body is the close
        self.end_headers()
        self.close_connection = True
        prefix = Path(f"{run_dir.parent.name}-{run_dir.name}")
        with zipfile.ZipFile(_ZipStream(self.wfile), "w", compression=zipfile.ZIP_DEFLATED, compresslevel=6) as archive:
            for path in sorted(run_dir.rglob("*")):
                if path.is_file() and path.resolve().is_relative_to(self.results_root):
                    archive.write(path, str(prefix / path.relative_to(run_dir)))

    def log_message(self, format: str, *args) -> None:  # noqa: A002 - base class signature
        sys.stderr.write(f"logquake serve: {self.address_string()} {format % args}\n")


def make_server(results_root: str | os.PathLike[str], port: int = DEFAULT_PORT) -> ThreadingHTTPServer:
    root = Path(results_root).resolve()
    if not root.is_dir():
        raise store.StoreError(f"results directory {results_root} does not exist")
    server = ThreadingHTTPServer((BIND_ADDRESS, port), partial(ResultsHandler, results_root=root))
    server.daemon_threads = True
    return server


def _run(args: argparse.Namespace) -> int:
    try:
        server = make_server(args.results, args.port)
    except store.StoreError as exc:
        print(f"logquake serve: {exc}", file=sys.stderr)
        return 254
    except OSError as exc:
        print(f"logquake serve: cannot listen on {BIND_ADDRESS}:{args.port}: {exc.strerror}", file=sys.stderr)
        return 254
    host, port = server.server_address[:2]
    print(f"logquake serve: {Path(args.results).resolve()} at http://{host}:{port}/", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"port {text!r} is not a number") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"port {port} is not between 0 and 65535")
    return port


_DESCRIPTION = (
    "Serve the results directory on 127.0.0.1: the index of runs, every report and file, "
    "and <run>.zip downloads. --port 0 picks a free port."
)


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--port", type=_port, default=DEFAULT_PORT, help=f"port to listen on (default {DEFAULT_PORT})")
    parser.add_argument("--results", default="results", help="results directory (default ./results)")
    parser.set_defaults(handler=_run)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("serve", help="browse results/ in a web browser (127.0.0.1 only)", description=_DESCRIPTION)
    _add_arguments(parser)


def main(argv: list[str] | None = None) -> int:
    """`python -m harness.serve`: the same as `logquake serve`."""
    from harness.cli import ArgumentParser

    parser = ArgumentParser(prog="logquake serve", description=_DESCRIPTION)
    _add_arguments(parser)
    return _run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
