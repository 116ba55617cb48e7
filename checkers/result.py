"""What a check produces: the verdict, the claims tested, and every anomaly seen.

This is the schema of results.json, shared by the checkers (which write it) and the report
(which reads it). `valid` is three-valued, as in Jepsen: False beats "unknown" beats True.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Literal

Validity = Literal[True, False, "unknown"]


def merge_valid(values: Iterable[Validity]) -> Validity:
    """Combine verdicts: any False is False; else any unknown is unknown; else True."""
    seen_unknown = False
    for value in values:
        if value is False:
            return False
        if value == "unknown":
            seen_unknown = True
    return "unknown" if seen_unknown else True


EXIT_CODES: dict[Any, int] = {True: 0, False: 1, "unknown": 2}


@dataclass
class Claim:
    """A promise the run's configuration makes, e.g. 'acked writes are durable'."""

    name: str
    description: str
    reason: str  # which configuration makes (or does not make) this claim
    holds: bool  # whether the configuration makes the claim at all


@dataclass
class Witness:
    """A minimal example of an anomaly: the ops involved (history indices) and the facts."""

    op_indices: list[int]
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass
class Anomaly:
    name: str  # Jepsen's name: lost-write, duplicate, G1c, ...
    count: int
    allowed: bool  # allowed under the run's claims (listed, does not invalidate)
    explanation: str  # one line of plain language
    witnesses: list[Witness] = field(default_factory=list)
    violates: list[str] = field(default_factory=list)  # names of the claims it breaks


@dataclass
class CheckerError:
    checker: str
    error: str


@dataclass
class CheckResult:
    valid: Validity
    claims: list[Claim] = field(default_factory=list)
    anomalies: list[Anomaly] = field(default_factory=list)
    errors: list[CheckerError] = field(default_factory=list)
    stats: dict[str, Any] = field(default_factory=dict)

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.valid]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> "CheckResult":
        return cls(
            valid=raw["valid"],
            claims=[Claim(**c) for c in raw.get("claims", [])],
            anomalies=[
                Anomaly(**{**a, "witnesses": [Witness(**w) for w in a.get("witnesses", [])]})
                for a in raw.get("anomalies", [])
            ],
            errors=[CheckerError(**e) for e in raw.get("errors", [])],
            stats=raw.get("stats", {}),
        )

    def save(self, path: str | os.PathLike[str]) -> None:
        tmp = f"{path}.tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(self.to_json(), fh, indent=2, default=str)
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> "CheckResult":
        with open(path, encoding="utf-8") as fh:
            return cls.from_json(json.load(fh))
