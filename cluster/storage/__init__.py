"""Durable partition logs: segment files, offset index, leader-epoch cache, recovery, retention,
flush policy, and a crash mode that loses everything after the last fsync. File access goes
through an injected Disk so the same code runs on real files and in the simulator.

Modules:
  batch     RecordBatch v2 headers: parse, CRC-32C check, restamp
  disk      the Disk interface; OsDisk (real files, optional lose-unflushed crash mode) and
            MemoryDisk (simulator; crash() drops what was not fsynced)
  config    LogConfig, from Kafka's broker and topic properties
  index     the sparse per-segment offset/timestamp index
  segment   one <base>.log file with its index: append, lookups, load and validation
  epochs    the leader-epoch cache (OffsetForLeaderEpoch answers), checkpointed
  log       PartitionLog: the partition's log over its segments (the broker's entry point)
"""
