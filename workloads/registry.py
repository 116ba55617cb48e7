"""The names of the workloads `logquake test` accepts, and where each one lives.

Kept free of heavy imports so that argument validation does not load Kafka clients.
"""

from __future__ import annotations

import importlib
from types import ModuleType

WORKLOAD_MODULES: dict[str, str] = {
    "queue": "workloads.queue",
    "delivery": "workloads.delivery",
    "eos": "workloads.eos",
}
WORKLOAD_NAMES: tuple[str, ...] = tuple(WORKLOAD_MODULES)


def load(name: str) -> ModuleType:
    """The module of workload `name`; it exposes `build(spec) -> Workload`."""
    if name not in WORKLOAD_MODULES:
        raise ValueError(f"unknown workload {name!r}; known: {', '.join(WORKLOAD_NAMES)}")
    return importlib.import_module(WORKLOAD_MODULES[name])
