"""Kafka client adapters that turn micro-ops into client calls and client errors into ok/fail/info."""
