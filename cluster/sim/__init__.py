"""Deterministic simulation of a whole cluster in one process: the real controller and broker
cores on one virtual clock, talking through a virtual network that carries real encoded
frames, with seeded latency, process crashes and network partitions. Same seed, same run."""
