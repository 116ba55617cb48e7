from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from cluster.storage.disk import Disk, MemoryDisk, OsDisk


@dataclass
class DiskAndDir:
    disk: Disk
    directory: str


@pytest.fixture(params=["os", "memory"])
def place(request: pytest.FixtureRequest, tmp_path) -> Iterator[DiskAndDir]:
    """A partition directory on real files and on a MemoryDisk: the log must behave the same."""
    if request.param == "os":
        disk = OsDisk()
        try:
            yield DiskAndDir(disk, str(tmp_path / "topic-0"))
        finally:
            disk.close()
    else:
        yield DiskAndDir(MemoryDisk(), "/data/topic-0")
