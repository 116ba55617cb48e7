"""Durable partition logs: segment files, offset index, leader-epoch cache, recovery, retention,
flush policy, and a crash mode that loses everything after the last fsync. File access goes
through an injected Disk so the same code runs on real files and in the simulator."""
