"""Runtimes that drive the sans-I/O broker core: the asyncio TCP process, and (later) the
deterministic simulation. Real clocks, sockets and files live here and nowhere in the core."""
