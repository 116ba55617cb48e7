"""The controller: the single authority on cluster metadata (KRaft's active controller, one
voter). It registers brokers, fences them when their heartbeats stop, assigns partitions,
elects leaders and validates ISR changes, writing every decision to a durable metadata log
that brokers pull. `core` is sans-I/O; `main` runs it as a process."""
