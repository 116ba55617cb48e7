"""`logquake cluster status` prints aligned columns: a long host, name, topic or replica
list widens its column rather than shifting the rest of its line (cluster/text_table.py)."""

from __future__ import annotations

from cluster.cli import BrokerRecord, PartitionRow, ReplicaOffsets, partition_lines, process_lines
from cluster.text_table import render


def _starts(line: str, cells: list[str]) -> list[int]:
    """Where each cell begins in `line` (searched left to right)."""
    out, at = [], 0
    for cell in cells:
        at = line.index(cell, at)
        out.append(at)
        at += len(cell)
    return out


def test_columns_start_at_the_same_place_on_every_line() -> None:
    records = [BrokerRecord(0, "127.0.0.1", 9092, 41, "/d/0", "/d/0/broker.log"),
               BrokerRecord(1, "127.0.0.100", 19093, 4242, "/d/1", "/d/1/broker.log"),
               BrokerRecord(1001, "localhost", 9094, 7, "/d/c", "/d/c/controller.log")]
    lines = process_lines(records, {"broker 0": True, "broker 1": False, "controller 1001": True})
    cells = [["broker 0", "pid 41", "127.0.0.1:9092", "alive", "log /d/0/broker.log"],
             ["broker 1", "pid 4242", "127.0.0.100:19093", "DOWN", "log /d/1/broker.log"],
             ["controller 1001", "pid 7", "localhost:9094", "alive", "log /d/c/controller.log"]]
    starts = [_starts(line, row) for line, row in zip(lines, cells)]
    assert starts[0] == starts[1] == starts[2], lines


def test_partition_table_aligns_long_topics_and_replica_lists_and_right_aligns_numbers() -> None:
    rows = [PartitionRow("t", 0, 0, 3, [0, 1, 2], [0, 1, 2], [ReplicaOffsets(0, 5, 5)]),
            PartitionRow("a-rather-long-topic-name-beyond-twenty-eight", 12, -1, 140, [0, 1, 2, 3, 4, 5, 6], [6],
                         [ReplicaOffsets(6, None, None)])]
    header, first, second = partition_lines(rows)
    # Left-aligned columns (topic, replicas, isr, per replica) start where their header does.
    for line, cells in ((first, ["t", "0,1,2", "0,1,2", "b0:5/5"]),
                        (second, ["a-rather-long-topic-name-beyond-twenty-eight", "0,1,2,3,4,5,6", "6", "b6:?/?"])):
        topic, replicas, isr, offsets = _starts(line, cells)
        assert (topic, replicas, isr, offsets) == tuple(_starts(header, ["topic", "replicas", "isr", "log end"])), (header, line)
    # Right-aligned numbers end where their header ends.
    for name, values in (("part", ("0", "12")), ("leader", ("0", "none")), ("epoch", ("3", "140"))):
        end = header.index(name) + len(name)
        for line, value in zip((first, second), values):
            assert line[end - len(value):end] == value, (name, header, line)


def test_render_without_rows_or_with_ragged_rows() -> None:
    assert render([]) == []
    assert render([["a", "bb"], ["ccc"]]) == ["a    bb", "ccc"]
