"""Seeded choices shared by the workloads: which key an op touches, and how long a key lives.

Follows Elle's write/read transaction generator as Jepsen's Kafka test uses it: keys come
from an active pool in which earlier keys are drawn more often (exponential, base 2); each
key gets a write budget of 1 + zipf(max_writes_per_key); a key whose budget is spent is
replaced by a fresh one, so partitions rotate through the test.
"""

from __future__ import annotations

import bisect
import random
from itertools import accumulate


class KeyPool:
    def __init__(self, rng: random.Random, *, key_count: int, max_writes_per_key: int):
        if key_count < 1:
            raise ValueError(f"key_count must be at least 1, got {key_count}")
        if max_writes_per_key < 1:
            raise ValueError(f"max_writes_per_key must be at least 1, got {max_writes_per_key}")
        self.rng = rng
        self.active = list(range(key_count))
        self._key_weights = list(accumulate(2.0 ** -i for i in range(key_count)))
        self._zipf_weights = list(accumulate(1.0 / i for i in range(1, max_writes_per_key + 1)))
        self.budget = {k: self._new_budget() for k in self.active}

    def _new_budget(self) -> int:
        total = self._zipf_weights[-1]
        return 2 + bisect.bisect_left(self._zipf_weights, self.rng.random() * total)  # 1 + zipf, zipf ≥ 1

    def pick(self) -> int:
        total = self._key_weights[-1]
        index = bisect.bisect_left(self._key_weights, self.rng.random() * total)
        return self.active[min(index, len(self.active) - 1)]

    def wrote(self, key: int) -> None:
        """Spend one write of `key`; retire it for a fresh key once its budget is gone."""
        self.budget[key] -= 1
        if self.budget[key] <= 0:
            fresh = max(self.active) + 1
            self.active[self.active.index(key)] = fresh
            del self.budget[key]
            self.budget[fresh] = self._new_budget()


def unique_value(count: int, thread: int, concurrency: int) -> int:
    """The count-th value a thread writes to a key, unique per key across every thread."""
    return count * concurrency + thread + 1
