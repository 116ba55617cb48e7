"""flaky: connections on chosen links that break (Toxiproxy's reset_peer, timeout and slicer).

Each fault draws one kind from `flaky_kinds` and adds it to the chosen (link, direction)
pairs, applying to each connection with probability `flaky_toxicity_percent` (drawn by the
proxy per connection, seeded):
    reset_peer  a TCP RST to both ends, 0-2 s after the connection's first data (drawn per
                fault): requests in flight fail and clients reconnect, into the same draw
    timeout     data is swallowed and the connection closed after 0.5-3 s without data
                (drawn per fault): a black hole that ends in a close, as a dead middlebox
    slicer      every chunk cut into pieces of ~64 ± 32 bytes, 0.1-1 ms apart: framing code
                must reassemble requests and answers from many small reads
Stop removes it (a removed timeout closes the connections it held, as Toxiproxy does).
"""

from __future__ import annotations

import random
from typing import Any

from nemeses.base import COLORS
from nemeses.toxics import ToxicPackage

RESET_AFTER_MS = (0, 2000)
TIMEOUT_MS = (500, 3000)
SLICE_DELAY_US = (100, 1000)


class FlakyPackage(ToxicPackage):
    name = "flaky"
    color = COLORS["flaky"]

    def draw_toxic(self, rng: random.Random) -> dict[str, Any]:
        kind = rng.choice(self.options.flaky_kinds)
        toxicity = self.options.flaky_toxicity_percent / 100.0
        if kind == "reset_peer":
            attributes = {"timeout": rng.randint(*RESET_AFTER_MS)}
        elif kind == "timeout":
            attributes = {"timeout": rng.randint(*TIMEOUT_MS)}
        else:
            attributes = {"average_size": 64, "size_variation": 32, "delay": rng.randint(*SLICE_DELAY_US)}
            toxicity = 1.0  # slicing breaks nothing by itself: it applies to every connection
        return {"type": kind, "attributes": attributes, "toxicity": toxicity}
