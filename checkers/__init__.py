"""Checkers: pure analyses of a history, as a PySpark pipeline.

DataFrames of micro-ops go in, a CheckResult comes out. Checkers never import cluster/,
nemeses/, workloads/ or a Kafka client: they judge what was recorded, nothing else.

pipeline   Parquet in, CheckResult per run out (claims.py decides what is allowed)
fused      the check job: prepass.py, then perkey.py over each key-bucket file (older layouts:
           one shuffle by (run, key)), where every per-key check and the dependency edges run
           in numpy
cycles     G0/G1c search on the collected edges (networkx)
eos        the exactly-once checks of consume-transform-produce runs (a job after the per-key
           pass, only for runs with copy ops)
frames     reading the history (key-bucket files into Python tasks); findings, result, explain, progress, spark: the plumbing
class_archive  the Spark driver's class-data-sharing archive: its file and the JVM options (a faster start)

Each rule is implemented once, here. Its references live in tests/checkers/ (oracle.py,
dataframe_oracle/, cycle_oracle.py, eos_oracle.py), never in this package.
"""
