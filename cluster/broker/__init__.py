"""The sans-I/O broker core: request handlers, partitions, idempotent producer state, the group
coordinator. Time, transport, disk and randomness are injected; nothing here touches sockets,
clocks or files directly."""
