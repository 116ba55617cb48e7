"""The shape kill and pause share: a fault applied to a set of brokers chosen by a node
spec, and a stop that undoes it for every broker the package faulted."""

from __future__ import annotations

import random
import threading
from abc import ABC, abstractmethod
from collections.abc import Iterator
from typing import Any

from cluster.control import ClusterControl
from nemeses.base import NemesisOptions, alternate, fault_nodes, live_controller, live_leaders
from nemeses.targets import CONTROLLER_SPECS, choose_nodes


class NodeFaultPackage(ABC):
    name = ""
    color = ""

    def __init__(self, control: ClusterControl, options: NemesisOptions) -> None:
        self.control = control
        self.options = options
        self.faulted: set[int] = set()
        self._lock = threading.Lock()

    # -- schedule ----------------------------------------------------------------------
    def schedule(self, rng: random.Random) -> Iterator[dict]:
        nodes = fault_nodes(self.control, self.options)
        targets = self.options.db_targets

        def starts() -> Iterator[dict]:
            while True:
                spec = rng.choice(targets)
                yield {"targets": spec, "nodes": choose_nodes(spec, nodes, rng)}

        return alternate(f"start-{self.name}", f"stop-{self.name}", starts())

    # -- acting ------------------------------------------------------------------------
    def invoke(self, f: str, value: Any) -> object:
        if f == f"start-{self.name}":
            return self.start(value)
        if f == f"stop-{self.name}":
            return self.stop()
        raise ValueError(f"the {self.name} nemesis has no op {f!r}")

    def resolve(self, value: Any) -> tuple[list[int], dict]:
        if not isinstance(value, dict) or "targets" not in value:
            raise ValueError(f"start-{self.name} needs a value like {{'targets': 'one', 'nodes': [0]}}, got {value!r}")
        if value.get("nodes") is not None:
            return sorted(int(n) for n in value["nodes"]), {}
        if value["targets"] in CONTROLLER_SPECS:
            return live_controller(self.control, value["targets"])
        return live_leaders(self.control, value["targets"], self.options.primary_topics)

    def start(self, value: Any) -> dict:
        nodes, seen = self.resolve(value)
        done, errors = [], {}
        with self._lock:
            for node in nodes:
                try:
                    detail = self.fault(node)
                except Exception as error:  # one broker failing must not hide what happened to the rest
                    errors[str(node)] = f"{type(error).__name__}: {error}"
                    continue
                self.faulted.add(node)
                done.append(detail)
        result: dict = {"targets": value["targets"], "nodes": nodes, self.past_tense: done, **seen}
        if errors:
            result["errors"] = errors
        return result

    def stop(self) -> dict:
        with self._lock:
            nodes = sorted(self.faulted)
            done, errors = [], {}
            for node in nodes:
                try:
                    done.append(self.undo(node))
                except Exception as error:
                    errors[str(node)] = f"{type(error).__name__}: {error}"
                    continue
                self.faulted.discard(node)
        result: dict = {self.undo_past_tense: done}
        if errors:
            result["errors"] = errors
        return result

    def heal(self) -> None:
        result = self.stop()
        if "errors" in result:
            raise RuntimeError(f"{self.name} heal failed for brokers {result['errors']}")

    # -- per package -------------------------------------------------------------------
    past_tense = ""
    undo_past_tense = ""

    @abstractmethod
    def fault(self, node: int) -> Any:
        """Apply the fault to one broker; returns what was done."""

    @abstractmethod
    def undo(self, node: int) -> Any:
        """Undo the fault on one broker; returns what was done."""
