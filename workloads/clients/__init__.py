"""Kafka client adapters (confluent-kafka / librdkafka): micro-ops in, ok/fail/info out.

errors.py is the one table that decides whether a Kafka error is definite (fail) or
indefinite (info); confluent.py holds the queue client and the pieces the delivery client
(delivery.py) shares with it.
"""
