from __future__ import annotations

import pytest

from checkers.spark import make_spark


@pytest.fixture(scope="session")
def spark():
    session = make_spark()
    try:
        yield session
    finally:
        session.stop()
