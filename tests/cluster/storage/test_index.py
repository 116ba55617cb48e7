"""The sparse index: lookups, encoding, and rejection of files that cannot be right."""

from __future__ import annotations

import pytest

from cluster.storage.index import ENTRY, IndexEntry, IndexInvalidError, SparseIndex


def sample() -> SparseIndex:
    index = SparseIndex(1_000)
    index.add(IndexEntry(1_010, 500, 50, 1_000))
    index.add(IndexEntry(1_020, 900, 70, 1_012))
    index.add(IndexEntry(1_030, 1_400, 70, 1_012))
    index.add(IndexEntry(1_045, 2_000, 95, 1_033))
    return index


def test_floor_lookups():
    index = sample()
    assert index.floor_for_offset(1_005) is None
    assert index.floor_for_offset(1_010).position == 500
    assert index.floor_for_offset(1_029).position == 900
    assert index.floor_for_offset(10**9).position == 2_000
    # The last entry before which nothing reaches the timestamp.
    assert index.floor_for_timestamp(50) is None
    assert index.floor_for_timestamp(51).position == 500
    assert index.floor_for_timestamp(70).position == 500
    assert index.floor_for_timestamp(71).position == 1_400
    assert index.floor_for_timestamp(10**6).position == 2_000


def test_round_trip_and_truncation():
    index = sample()
    data = index.encode()
    assert len(data) == 4 * ENTRY.size
    decoded = SparseIndex.decode(1_000, data, segment_size_bytes=3_000)
    assert [decoded.entry(i) for i in range(len(decoded))] == [index.entry(i) for i in range(len(index))]
    assert index.truncate_to_offset(1_030) == 2
    assert index.last() == IndexEntry(1_020, 900, 70, 1_012)
    assert SparseIndex.decode(1_000, b"", segment_size_bytes=0).last() is None


def test_entries_must_advance():
    index = sample()
    with pytest.raises(ValueError):
        index.add(IndexEntry(1_045, 2_500, 95, 1_033))
    with pytest.raises(ValueError):
        index.add(IndexEntry(1_050, 2_000, 95, 1_033))


@pytest.mark.parametrize(
    "entries, size, message",
    [
        ([(10, 500, 50, 0)], 400, "inside a segment of 400 bytes"),
        ([(10, 500, 50, 0), (10, 900, 50, 0)], 3_000, "does not follow"),
        ([(10, 500, 50, 0), (20, 400, 50, 0)], 3_000, "does not follow"),
        ([(0, 500, 50, 0)], 3_000, "does not follow"),
        ([(10, 500, 50, 0), (20, 900, 40, 0)], 3_000, "timestamps go backwards"),
        ([(10, 500, 50, 12)], 3_000, "later batch"),
        ([(10, 500, -1, 3)], 3_000, "later batch"),
    ],
)
def test_decode_rejects_impossible_entries(entries, size, message):
    data = b"".join(ENTRY.pack(*entry) for entry in entries)
    with pytest.raises(IndexInvalidError, match=message):
        SparseIndex.decode(1_000, data, segment_size_bytes=size)


def test_decode_rejects_a_partial_entry():
    with pytest.raises(IndexInvalidError, match="not a multiple"):
        SparseIndex.decode(0, sample().encode()[:-1], segment_size_bytes=3_000)
