"""Jepsen-style generators: pure, seeded schedules of operations.

A generator answers two questions, and nothing else:

* `op(ctx)` — what is the next operation, given the time and which threads are free?
  It returns None (exhausted), `(PENDING, gen)` (nothing now, ask again after something
  completes), or `(invocation, gen')` where `gen'` is the generator that follows. Calling
  `op` twice with the same context gives the same answer: the caller may ask, decide not to
  act yet (the op is in the future, or a completion arrived first), and ask again.
* `update(ctx, event)` — an invocation or completion happened; return the generator that
  knows it.

Generators never sleep, read clocks, spawn threads or do I/O, so `simulate()` runs any of
them with fake completion times and no cluster, and every random decision flows from the
run seed through `prng.derive_seed`. The run loop (`harness.interpreter`) drives the same
objects against real clients.
"""

from harness.generator.core import (
    PENDING,
    Completion,
    Context,
    Event,
    Generator,
    Invocation,
    lift,
)
from harness.generator.combinators import (
    Any,
    Cycle,
    Delay,
    EachThread,
    FlipFlop,
    Limit,
    Log,
    Map,
    Mix,
    Observe,
    OnThreads,
    Phases,
    Repeat,
    Seq,
    Sleep,
    Stagger,
    Stream,
    Synchronize,
    TimeLimit,
    clients,
    nemesis,
    once,
    with_nemesis,
)
from harness.generator.prng import Rand, derive_seed
from harness.generator.simulate import simulate

__all__ = [
    "PENDING", "Completion", "Context", "Event", "Generator", "Invocation", "lift",
    "Any", "Cycle", "Delay", "EachThread", "FlipFlop", "Limit", "Log", "Map", "Mix",
    "Observe", "OnThreads", "Phases", "Repeat", "Seq", "Sleep", "Stagger", "Stream",
    "Synchronize", "TimeLimit", "clients", "nemesis", "once", "with_nemesis",
    "Rand", "derive_seed", "simulate",
]
