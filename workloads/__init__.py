"""Workloads: what clients do during a run, and the claims each workload tests.

queue (Jepsen's Kafka queue: send/poll/assign/subscribe over rotating keys) and delivery
(group consumers that process and commit, at-most-once or at-least-once). registry names
them; each exposes build(spec, bootstrap_servers) -> base.Workload. clients/ holds the
confluent-kafka adapters that turn micro-ops into client calls and Kafka errors into
Jepsen outcomes.
"""
