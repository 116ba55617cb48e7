"""The controller: the single authority on cluster metadata (KRaft's active controller, one
voter). It registers brokers, fences them when their heartbeats stop, assigns partitions,
elects leaders and validates ISR changes, writing every decision to a durable metadata log
that brokers pull.

`core` serves the requests (sans-I/O), `elections` holds the leader and ISR rules,
`placement` the replica assignment and topic config checks, `metadata_log` the fsynced log,
`config` the settings, and `main` runs it all as a process."""
