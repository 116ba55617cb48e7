"""`controller`: a fresh controller core on a MemoryDisk (see driver.py); `make_controller`
for one with particular properties. Both are shut down after the test."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.cluster.controller.driver import ControllerDriver


@pytest.fixture
def make_controller() -> Iterator[Callable[..., ControllerDriver]]:
    made: list[ControllerDriver] = []

    def make(**kwargs: Any) -> ControllerDriver:
        driver = ControllerDriver(**kwargs)
        made.append(driver)
        return driver

    try:
        yield make
    finally:
        for driver in made:
            driver.close()


@pytest.fixture
def controller(make_controller: Callable[..., ControllerDriver]) -> ControllerDriver:
    return make_controller()
