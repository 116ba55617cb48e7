"""The seeded randomness every generator draws from.

One run seed is the root. `derive_seed(seed, "client", 3)` names an independent stream for
one purpose, so adding a draw in one place never shifts the draws anywhere else (the
TigerBeetle habit: a seed is a tree, not a tape). Streams are derived by hashing, which is
stable across Python versions and platforms, unlike `hash()`.

`Rand` is an immutable SplitMix64 state: each draw returns the value and the next state.
Combinators that must stay pure (stagger, mix) carry one in their state; workload code
that is easier to write as a plain Python iterator takes a `random.Random(derive_seed(...))`.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Sequence, TypeVar

T = TypeVar("T")
_MASK64 = (1 << 64) - 1


def derive_seed(seed: int, *labels: object) -> int:
    """A 63-bit seed for the stream named by `labels` under the run seed."""
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"seed must be an int, not {type(seed).__name__}")
    text = "\x1f".join([str(seed), *(repr(label) for label in labels)])
    digest = hashlib.blake2b(text.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1


@dataclass(frozen=True, slots=True)
class Rand:
    state: int

    @classmethod
    def from_seed(cls, seed: int, *labels: object) -> "Rand":
        return cls(derive_seed(seed, *labels))

    def next_u64(self) -> tuple[int, "Rand"]:
        state = (self.state + 0x9E3779B97F4A7C15) & _MASK64
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
        return z ^ (z >> 31), Rand(state)

    def random(self) -> tuple[float, "Rand"]:
        """A float in [0, 1)."""
        value, nxt = self.next_u64()
        return (value >> 11) / float(1 << 53), nxt

    def below(self, bound: int) -> tuple[int, "Rand"]:
        """An int in [0, bound); bound must be positive."""
        if bound <= 0:
            raise ValueError(f"bound must be positive, got {bound}")
        value, nxt = self.next_u64()
        return value % bound, nxt

    def choice(self, items: Sequence[T]) -> tuple[T, "Rand"]:
        index, nxt = self.below(len(items))
        return items[index], nxt
