"""Several packages on one schedule, with quiet periods (`--nemesis kill,partition,...`).

The schedule runs in rounds, like Bufstream's rotating nemesis mix: with probability
`quiet_probability` a round is quiet (one op slot with no fault, so the cluster can settle);
otherwise it starts the next fault of a random nonempty subset of the packages, then stops
them all in reverse order. Overlapping faults (a partition while a broker is paused) are
what find the interesting bugs; quiet rounds keep the cluster from being driven offline
for good. Ops keep their packages' names (start-kill, stop-partition, ...), so the
history and the report's fault bands read the same as with one package.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from typing import Any

from nemeses.base import NemesisPackage

QUIET = "quiet"


class Combined:
    name = "combined"
    color = "#D0D0D0"

    def __init__(self, packages: Sequence[NemesisPackage], quiet_probability: float = 0.25) -> None:
        if not packages:
            raise ValueError("nothing to combine: no nemesis packages")
        if not 0.0 <= quiet_probability < 1.0:
            raise ValueError(f"quiet_probability {quiet_probability!r} must be in [0, 1)")
        self.packages = list(packages)
        self.quiet_probability = quiet_probability
        self._by_f: dict[str, NemesisPackage] = {}
        for package in self.packages:
            for f in (f"start-{package.name}", f"stop-{package.name}"):
                self._by_f[f] = package

    def colors(self) -> dict[str, str]:
        """Plot colour of each package, by package name."""
        return {package.name: package.color for package in self.packages}

    def package_for(self, f: str) -> NemesisPackage:
        try:
            return self._by_f[f]
        except KeyError:
            raise ValueError(f"no combined package performs {f!r}; known: {', '.join(sorted(self._by_f))}") from None

    def schedule(self, rng: random.Random) -> Iterator[dict]:
        # Each package draws from its own stream, so adding a package to the mix does not
        # change what the others would have done.
        streams = {p.name: p.schedule(random.Random(rng.getrandbits(64))) for p in self.packages}
        while True:
            if rng.random() < self.quiet_probability:
                yield {"f": QUIET, "value": None}
                continue
            count = rng.randint(1, len(self.packages))
            chosen = sorted(rng.sample([p.name for p in self.packages], count))
            stops = []
            for name in chosen:
                start, stop = next(streams[name]), next(streams[name])
                yield start
                stops.append(stop)
            yield from reversed(stops)

    def invoke(self, f: str, value: Any) -> object:
        if f == QUIET:
            return {"quiet": True}
        return self.package_for(f).invoke(f, value)

    def heal(self) -> None:
        errors = []
        for package in self.packages:
            try:
                package.heal()
            except Exception as error:  # heal the rest before reporting
                errors.append(f"{package.name}: {error}")
        if errors:
            raise RuntimeError("heal failed: " + "; ".join(errors))
