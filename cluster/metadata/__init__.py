"""Cluster metadata: the records the controller appends to its metadata log, their encoding,
and the image every node builds by applying them in log order (KRaft's design, one
controller)."""
