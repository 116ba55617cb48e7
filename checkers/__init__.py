"""Checkers: pure analyses of a history, as a PySpark pipeline.

DataFrames of micro-ops go in, a CheckResult comes out. Checkers never import cluster/,
nemeses/, workloads/ or a Kafka client: they judge what was recorded, nothing else.
"""
