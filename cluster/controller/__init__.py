"""The controller: the authority on cluster metadata (KRaft's active controller). It registers
brokers, fences them when their heartbeats stop, assigns partitions, elects leaders and
validates ISR changes, writing every decision to the metadata log the quorum replicates
(cluster/quorum/: Raft over 1, 3 or 5 controllers) and brokers pull from the active one.

`core` serves the requests (sans-I/O) and is the quorum's listener, `elections` holds the
leader and ISR rules, `placement` the replica assignment and topic config checks,
`image_snapshot` the image's snapshot form, `not_controller` the refusal of a controller that
does not lead, `quorum_node` builds a controller's Raft node, `quorum_journal` what each
controller saw (for the checks after a run), `config` the settings, and `main` runs it all
as a process."""
