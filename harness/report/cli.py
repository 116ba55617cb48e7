"""`logquake report RUN_DIR`: render (again) the report of a run, e.g. after the report code
changed or a run was re-checked; when the run lives in a results store, the store's
index.html is rebuilt too."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness import store
from harness.history import HistoryFormatError

EXIT_OK = 0
EXIT_BAD_ARGUMENTS = 254
EXIT_HARNESS_ERROR = 255


def _run(args: argparse.Namespace) -> int:
    from harness.report import write_index, write_report

    run_dir = Path(args.run_dir).resolve()
    try:
        report = write_report(run_dir)
    except store.StoreError as exc:
        print(f"logquake report: {exc}", file=sys.stderr)
        return EXIT_BAD_ARGUMENTS
    except (OSError, HistoryFormatError) as exc:
        print(f"logquake report: could not write the report of {run_dir}: {exc}", file=sys.stderr)
        return EXIT_HARNESS_ERROR
    print(f"report: {report}")
    root = store.results_root_of(run_dir)
    if root is not None and not args.no_index:
        print(f"index: {write_index(root)}")
    return EXIT_OK


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "report",
        help="render report.html of a run directory",
        description="Render RUN_DIR/report.html from its spec.json, history.jsonl and results.json. "
        "If RUN_DIR is inside a results store, its index.html is rebuilt too.",
    )
    parser.add_argument("run_dir", metavar="RUN_DIR", help="a run directory, e.g. results/latest")
    parser.add_argument("--no-index", action="store_true", help="do not rebuild the results index")
    parser.set_defaults(handler=_run)
