"""The Kafka wire protocol: request decoding and response encoding on kio, the API version
table we advertise, and hand-written encoders for the hot responses (Produce, Fetch)."""
