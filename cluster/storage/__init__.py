"""Durable partition logs: segment files, offset index, leader-epoch cache, aborted-transaction
index and producer-state snapshots, recovery, retention, flush policy, and a crash mode that
loses everything after the last fsync. File access goes through an injected Disk so the same
code runs on real files and in the simulator.

Modules:
  batch     RecordBatch v2 headers: parse, CRC-32C check, restamp
  disk      the Disk interface; OsDisk (real files, optional lose-unflushed crash mode) and
            MemoryDisk (simulator; crash() drops what was not fsynced)
  config    LogConfig, from Kafka's broker and topic properties
  index     the sparse per-segment offset/timestamp index
  segment   one <base>.log file with its index: append, lookups, load and validation
  epochs    the leader-epoch cache (OffsetForLeaderEpoch answers), checkpointed
  txn_index the per-segment aborted-transaction index (`.txnindex`)
  producer_snapshot  snapshots of the state a log replays from its batches (the broker's
            producer state) and the interface that state offers the log
  log       PartitionLog: the partition's log over its segments (the broker's entry point)
"""
