"""Runtimes that drive the sans-I/O broker core: the asyncio TCP process (connection,
broker_main, real clock and scheduler) and virtual time for deterministic runs (the core's
unit tests now, the simulator later). Real clocks, sockets and files live here and nowhere
in the core."""
