"""The Kafka wire protocol: framing, request decoding on kio (behind a length check that keeps
kio's native decoder from aborting on hostile counts), the API version table we advertise,
hand-written encoders for the hot responses (Produce, Fetch), a record-batch builder for the
broker's own records, and a minimal blocking client for probes and status."""
