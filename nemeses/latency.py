"""latency: delay the traffic of chosen links (a Toxiproxy `latency` toxic on their proxies).

Each fault adds `latency_ms` ± `jitter_ms` to every chunk crossing the chosen (link,
direction) pairs (nemeses.toxics: targets one broker's links, one link, one direction, all,
or the primary's); stop removes it, and the data it held leaves at once. Chunks wait side by
side, so throughput is unchanged and only time moves: a link slower than a timeout turns into
missed heartbeats, expired requests and elections without any packet being lost.
"""

from __future__ import annotations

import random
from typing import Any

from nemeses.base import COLORS
from nemeses.toxics import ToxicPackage


class LatencyPackage(ToxicPackage):
    name = "latency"
    color = COLORS["latency"]

    def draw_toxic(self, rng: random.Random) -> dict[str, Any]:
        return {"type": "latency", "attributes": {"latency": self.options.latency_ms, "jitter": self.options.jitter_ms},
                "toxicity": 1.0}
