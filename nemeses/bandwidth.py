"""bandwidth: throttle chosen links (a Toxiproxy `bandwidth` toxic on their proxies).

Each fault caps the chosen (link, direction) pairs at `bandwidth_kb_per_s` KB/s (Toxiproxy's
KB: 1000 bytes; 0 holds all data until the fault stops); stop removes the cap and what was
held flows on. Large answers (a follower's fetch after a lag, a consumer's catch-up) then take
seconds, while small requests still pass.
"""

from __future__ import annotations

import random
from typing import Any

from nemeses.base import COLORS
from nemeses.toxics import ToxicPackage


class BandwidthPackage(ToxicPackage):
    name = "bandwidth"
    color = COLORS["bandwidth"]

    def draw_toxic(self, rng: random.Random) -> dict[str, Any]:
        return {"type": "bandwidth", "attributes": {"rate": self.options.bandwidth_kb_per_s}, "toxicity": 1.0}
