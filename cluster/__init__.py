"""The bundled cluster: a multi-broker Kafka-compatible system under test, in Python.

protocol/ (wire format on kio), broker/ (the sans-I/O broker core), storage/ (segmented
logs), runtime/ (asyncio processes, simulation), the launcher and the control API. It speaks
the real Kafka protocol, so unmodified clients use it. It never imports the harness,
workloads, checkers or nemeses.
"""
