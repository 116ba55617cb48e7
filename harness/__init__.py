"""The harness: the kernel of a logquake run.

RunSpec (pure data) and Run (runtime handles), Jepsen-style generators, the run loop that
drives workers and the nemesis, the streamed history, the results store, the CLI and the
report. It knows nothing of Kafka internals: Kafka lives in workloads/ (clients) and
cluster/ (the bundled system under test).
"""
