"""Workloads: what clients do during a run, and the claims each workload tests.

queue (Jepsen's Kafka queue), delivery (group consumers with commit modes), transactional.
clients/ holds the Kafka client adapters (confluent-kafka in real mode, our own in sim mode).
"""
