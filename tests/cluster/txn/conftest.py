"""A Spark session for the unsafe-switch scenarios, which check their histories with the real
checker pipeline (one session per pytest worker)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def spark():
    from checkers.spark import make_spark

    session = make_spark()
    try:
        yield session
    finally:
        session.stop()
