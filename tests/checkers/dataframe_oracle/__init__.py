"""The DataFrame oracle: Jepsen's Kafka and delivery checks one anomaly at a time as Spark
DataFrames (kafka.py, delivery.py over frames.py; graph.py for the cycle edges), an
independent second implementation of every per-key rule of checkers/perkey.py, kept only as
the reference test_fused compares the product against. plan.findings plugs into
checkers.pipeline.check_runs(findings_of=...)."""
