"""Virtual time and seeded randomness for a client library's own modules.

An asyncio client does not take all its time from `loop.time()`: aiokafka 0.14 also calls
`time.monotonic()` (request, heartbeat, linger and idle deadlines) and `time.time()`
(metadata age, record timestamps) and draws from the `random` module's shared, unseeded
generator (which bootstrap node to ask, node and partition shuffles). Inside the simulation
those are a second clock and a second source of chance. `virtual_environment` replaces the
`time` and `random` names in the package's imported modules, for the duration of a run,
with a module whose clocks read the simulation's and a `random.Random` seeded from it. The
library's code is untouched; only what its names point to changes, and it changes back.

Seeding is not enough where the library draws from a collection it got by iterating a set:
aiokafka picks "a random node" with `random.choice(list(set_of_brokers))`, and the order of
that list depends on string hashing, so on PYTHONHASHSEED. `CanonicalRandom` puts such input
in sorted order before choosing or shuffling: the draw depends on the seed and the members,
not on the order they came in (each member stays equally likely).

The same string hashing orders aiokafka's sets of `TopicPartition` (a consumer's assignment
is a frozenset, iterated to build its Fetch and ListOffsets requests, node by node) and of
`BrokerMetadata`: the order of requests on the wire then changed with PYTHONHASHSEED. While
inside, those classes hash by a digest of their fields that does not depend on it
(`stable_hash`), so their sets iterate in one order in every process. Sets of plain strings
(a subscription to several topics) cannot be fixed this way: they reach the wire where
aiokafka lists a set of topic names in a request, in its Metadata request
(`aiokafka.client` builds it from its set of wanted topics) and in its group membership
metadata (each assignor's `metadata(topics)`, from the subscription's set). While inside,
those two builders get the topic names sorted (`CANONICAL_TOPIC_LISTS`), so the bytes of
the requests, and the order of what the answers fill in, are the same in every process.

A module that imported a clock or random function by name (`from time import monotonic`)
cannot be redirected this way: that is refused with the module and name, rather than left
to leak real time into the run.
"""

from __future__ import annotations

import importlib
import random
import sys
import time
import types
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from cluster.broker.env import Clock

_REAL_TIME_FUNCTIONS = {getattr(time, n) for n in ("time", "time_ns", "monotonic", "monotonic_ns", "perf_counter", "perf_counter_ns")}
_REAL_RANDOM_FUNCTIONS = {getattr(random, n) for n in ("random", "choice", "choices", "shuffle", "sample", "randint", "randrange",
                                                        "getrandbits", "uniform", "seed")}


class VirtualTimeModule(types.ModuleType):
    """Stands in for `time`: its clocks read the simulation's; everything else (formatting,
    constants) is the real module's. Sleeping would block the whole simulation: refused."""

    def __init__(self, clock: Clock) -> None:
        super().__init__("time", "the time module, on the simulation's virtual clock")
        self._clock = clock

    def monotonic(self) -> float:
        return self._clock.monotonic_ns() / 1e9

    def monotonic_ns(self) -> int:
        return self._clock.monotonic_ns()

    perf_counter = monotonic
    perf_counter_ns = monotonic_ns

    def time(self) -> float:
        return self._clock.wall_ms() / 1000

    def time_ns(self) -> int:
        return self._clock.wall_ms() * 1_000_000

    def sleep(self, seconds: float) -> None:
        raise RuntimeError("time.sleep() inside the simulation would block every node; use asyncio.sleep")

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)


class CanonicalRandom(random.Random):
    """A seeded `random.Random` whose choice, shuffle and sample ignore the order of their
    input (it is sorted first), so iteration order of a set cannot leak into a draw."""

    def choice(self, seq: Any) -> Any:
        return super().choice(_sorted(seq))

    def shuffle(self, x: Any) -> None:  # type: ignore[override]
        x[:] = _sorted(x)
        super().shuffle(x)

    def sample(self, population: Any, k: int, *, counts: Any = None) -> list[Any]:
        if counts is not None:
            raise RuntimeError("random.sample(counts=...) is not supported in the simulation")
        return super().sample(_sorted(population), k)


def _sorted(seq: Any) -> list[Any]:
    items = list(seq)
    try:
        return sorted(items)
    except TypeError:
        raise RuntimeError(f"cannot put {[type(i).__name__ for i in items[:3]]} in a canonical order for a deterministic draw") from None


def stable_hash(value: Any) -> int:
    """A hash of str, bytes, int, bool, None, float and tuples of them that is the same in
    every process (str's is salted per process unless PYTHONHASHSEED is fixed)."""
    if isinstance(value, str):
        return zlib.crc32(value.encode("utf-8", "surrogatepass"))
    if isinstance(value, (bytes, bytearray)):
        return zlib.crc32(value)
    if isinstance(value, tuple):
        return hash(tuple(stable_hash(v) for v in value))
    if value is None or isinstance(value, (int, float)):
        return hash(value)
    raise TypeError(f"no process-independent hash for {type(value).__name__}")


# The tuple types aiokafka keeps in sets: by "package.module.Class".
STABLE_HASH_CLASSES = ("aiokafka.structs.TopicPartition", "aiokafka.structs.BrokerMetadata")
# Where aiokafka 0.14 turns a set of topic names into a list on the wire: the Metadata
# request class as aiokafka.client names it, and the assignors' membership metadata.
CANONICAL_TOPIC_LISTS = ("aiokafka.client.MetadataRequest",
                         "aiokafka.coordinator.assignors.range.RangePartitionAssignor.metadata",
                         "aiokafka.coordinator.assignors.roundrobin.RoundRobinPartitionAssignor.metadata")
_active = False


def _package_modules(package: str) -> list[types.ModuleType]:
    return [m for name, m in sorted(sys.modules.items())
            if m is not None and (name == package or name.startswith(package + "."))]


@contextmanager
def virtual_environment(clock: Clock, rng: CanonicalRandom, packages: tuple[str, ...] = ("aiokafka",),
                        stable_hash_classes: tuple[str, ...] = STABLE_HASH_CLASSES) -> Iterator[None]:
    """While inside, the named packages' modules (those imported so far: import the client
    first) see `clock` through `time` and draw from `rng` through `random`, and the named
    classes hash by `stable_hash`. Only one at a time: two simulations would share the
    replaced names."""
    global _active
    if _active:
        raise RuntimeError("a simulated client environment is already active in this process")
    _active = True
    fake_time = VirtualTimeModule(clock)
    swapped: list[tuple[types.ModuleType, str, Any]] = []
    rehashed: list[tuple[type, Any]] = []
    sorted_lists: list[tuple[Any, str, Any]] = []
    try:
        sorted_lists.extend(_sort_topic_lists(CANONICAL_TOPIC_LISTS))
        for dotted in stable_hash_classes:
            module_name, _, class_name = dotted.rpartition(".")
            cls = getattr(importlib.import_module(module_name), class_name)
            rehashed.append((cls, cls.__dict__.get("__hash__")))
            cls.__hash__ = _hash_fields  # type: ignore[method-assign]
        for package in packages:
            modules = _package_modules(package)
            if not modules:
                raise RuntimeError(f"{package} is not imported: import it before entering the simulation")
            for module in modules:
                for name, value in list(vars(module).items()):
                    if value is time:
                        swapped.append((module, name, value))
                        setattr(module, name, fake_time)
                    elif value is random:
                        swapped.append((module, name, value))
                        setattr(module, name, rng)
                    elif _is_real_clock_or_chance(value):
                        raise RuntimeError(f"{module.__name__}.{name} is the real {getattr(value, '__name__', value)}, imported by name:"
                                           " it cannot be pointed at the simulation")
        yield
    finally:
        for owner, name, original in reversed(sorted_lists):
            setattr(owner, name, original)
        for module, name, value in reversed(swapped):
            setattr(module, name, value)
        for cls, original in reversed(rehashed):
            if original is None:
                del cls.__hash__
            else:
                cls.__hash__ = original  # type: ignore[method-assign]
        _active = False


def _sort_topic_lists(targets: tuple[str, ...]) -> list[tuple[Any, str, Any]]:
    """Wrap each target (a request class a module names, or an assignor's `metadata`
    classmethod) so the topic names it is given are sorted; returns what to put back."""
    replaced: list[tuple[Any, str, Any]] = []
    for dotted in targets:
        owner_path, _, name = dotted.rpartition(".")
        owner: Any
        try:
            owner = importlib.import_module(owner_path)
        except ImportError:
            module_name, _, class_name = owner_path.rpartition(".")
            owner = getattr(importlib.import_module(module_name), class_name)
        original = owner.__dict__[name] if isinstance(owner, type) else getattr(owner, name)
        if isinstance(original, classmethod):
            function = original.__func__
            wrapped: Any = classmethod(lambda cls, topics, _f=function: _f(cls, sorted(topics)))
        else:
            request_class = original

            class SortedTopics(request_class):  # type: ignore[misc, valid-type]
                def __init__(self, topics: Any = None, *args: Any, **kwargs: Any) -> None:
                    super().__init__(sorted(topics) if topics else topics, *args, **kwargs)

            SortedTopics.__name__ = SortedTopics.__qualname__ = request_class.__name__
            wrapped = SortedTopics
        setattr(owner, name, wrapped)
        replaced.append((owner, name, original))
    return replaced


_str_hashes: dict[str, int] = {}  # looked up, never iterated: its own order does not matter


def _hash_fields(self: tuple[Any, ...]) -> int:
    # Hot (every set and dict operation on a partition): topic names' digests are cached.
    if len(self) == 2:
        # A TopicPartition (topic, partition), nearly every call: the same hash as the loop
        # below gives it, without building a list.
        topic, partition = self
        if topic.__class__ is str and partition.__class__ is int:
            digest = _str_hashes.get(topic)
            if digest is None:
                digest = _str_hashes[topic] = stable_hash(topic)
            return hash((digest, partition))
    fields = []
    for value in self:
        cls = value.__class__
        if cls is str:
            digest = _str_hashes.get(value)
            if digest is None:
                digest = _str_hashes[value] = stable_hash(value)
            fields.append(digest)
        elif cls is int:
            fields.append(value)  # an int hashes alike in every process: the tuple's hash is the same
        else:
            fields.append(stable_hash(value))
    return hash(tuple(fields))


def _is_real_clock_or_chance(value: Any) -> bool:
    try:
        return value in _REAL_TIME_FUNCTIONS or value in _REAL_RANDOM_FUNCTIONS
    except TypeError:  # unhashable
        return False
