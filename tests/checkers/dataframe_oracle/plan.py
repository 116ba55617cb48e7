"""The DataFrame oracle: every check as its own DataFrame over the shared frames (frames.py),
all checks in one ranked Spark action, the graph and the statistics in two more; a check that
fails there is retried alone. Not the product (checkers/fused.py is): the reference the fused
per-key pass is tested against, many times slower. Pass `findings` as check_runs'
`findings_of`.
"""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any, Callable

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from checkers.findings import Findings
from checkers.frames import RUN
from checkers.pipeline import MAX_WITNESSES, _describe
from checkers.result import CheckerError, Witness

from . import graph
from .delivery import DELIVERY_CHECKS
from .frames import Frames, build_frames, persist, unpersist
from .kafka import KAFKA_CHECKS

CheckFn = Callable[[Frames], "DataFrame | list[DataFrame]"]
ALL_CHECKS: dict[str, CheckFn] = {**KAFKA_CHECKS, **DELIVERY_CHECKS}


def _ranked(frames: list[DataFrame]) -> DataFrame:
    union = frames[0]
    for df in frames[1:]:
        union = union.unionByName(df)
    # The union has (checks × shuffle partitions) partitions of mostly nothing; merge them
    # before ranking rather than schedule a task for each.
    union = union.coalesce(max(1, union.sparkSession.sparkContext.defaultParallelism))
    w = Window.partitionBy(RUN, "anomaly")
    # op_indices last: rows equal in sort and detail still rank the same on every run.
    ordered = w.orderBy("sort", "detail", "op_indices")
    return (union.select("*", F.row_number().over(ordered).alias("rank"), F.count(F.lit(1)).over(w).alias("count"))
            .where(F.col("rank") <= MAX_WITNESSES))


def _build(name: str, fn: CheckFn, fr: Frames) -> list[DataFrame]:
    out = fn(fr)
    return out if isinstance(out, list) else [out]


def _collect_anomalies(fr: Frames, errors: list[CheckerError]) -> list[Any]:
    built: dict[str, list[DataFrame]] = {}
    for name, fn in ALL_CHECKS.items():
        try:
            built[name] = _build(name, fn, fr)
        except Exception as exc:  # a check that cannot even be planned
            errors.append(CheckerError(name, _describe(exc)))
    if not built:
        return []
    try:
        return _ranked([df for dfs in built.values() for df in dfs]).collect()
    except Exception:
        rows: list[Any] = []
        for name, dfs in built.items():
            try:
                rows.extend(_ranked(dfs).collect())
            except Exception as exc:
                errors.append(CheckerError(name, _describe(exc)))
        return rows


def findings(history: DataFrame) -> Findings:
    """Every check as its own DataFrame over the shared frames of frames.py."""
    fr = persist(build_frames(history))
    try:
        out = Findings()
        for row in (history.groupBy(RUN, "f", "type")
                    .agg(F.countDistinct("op_index").alias("ops"), F.count(F.lit(1)).alias("rows")).collect()):
            out.add_stat(row["run"], row["f"], row["type"], row["ops"], row["rows"])
        rows = _collect_anomalies(fr, out.errors_all_runs)
        by_run: dict[str, dict[str, list[Any]]] = defaultdict(lambda: defaultdict(list))
        for row in rows:
            by_run[row["run"]][row["anomaly"]].append(row)
        for run, by_anomaly in by_run.items():
            for name, anomaly_rows in by_anomaly.items():
                anomaly_rows.sort(key=lambda r: r["rank"])
                out.found[run][name] = (anomaly_rows[0]["count"],
                                        [Witness(op_indices=list(r["op_indices"]), detail=json.loads(r["detail"]))
                                         for r in anomaly_rows])
        try:
            out.graphs = graph.collect_graphs(fr)
        except Exception as exc:
            out.graph_errors.append(CheckerError("cycles", _describe(exc)))
        return out
    finally:
        unpersist(fr)
