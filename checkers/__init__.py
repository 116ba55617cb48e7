"""Checkers: pure analyses of a history, as a PySpark pipeline.

DataFrames of micro-ops go in, a CheckResult comes out. Checkers never import cluster/,
nemeses/, workloads/ or a Kafka client: they judge what was recorded, nothing else.

pipeline   Parquet in, CheckResult per run out (claims.py decides what is allowed)
fused      the default plan: prepass.py, then one shuffle by (run, key) into perkey.py,
           where every per-key check and the dependency edges run in numpy
kafka, delivery, frames
           the same checks one anomaly at a time as DataFrames: the reference plan
cycles     G0/G1c search on the collected edges (networkx)
"""
