"""Changelog segments: dense offsets, reads, torn-tail recovery, rolling and retention."""

from __future__ import annotations

import pyarrow as pa
import pytest

from fluss_spark.server.tablet.changelog import FILE_HEADER, Changelog


def _batch(start: int, n: int) -> pa.Table:
    ids = list(range(start, start + n))
    return pa.table({"id": pa.array(ids, pa.int64()), "_change_type": ["+A"] * n,
                     "_commit_timestamp": pa.array([0] * n, pa.int64())})


def _ids(table) -> list[int]:
    return table.column("id").to_pylist() if table is not None else []


def test_append_assigns_dense_offsets_and_reads_back(tmp_path):
    log = Changelog(tmp_path)
    assert log.append(_batch(0, 3), 1000) == (0, 3)
    assert log.append(_batch(3, 2), 1001) == (3, 5)
    assert log.append(_batch(5, 0), 1002) == (5, 5)
    table, nxt = log.read(0)
    assert _ids(table) == [0, 1, 2, 3, 4] and nxt == 5
    table, nxt = log.read(1, end_offset=4)
    assert _ids(table) == [1, 2, 3] and nxt == 4
    assert log.read(5) == (None, 5)


def test_max_bytes_returns_at_least_one_record(tmp_path):
    log = Changelog(tmp_path)
    log.append(_batch(0, 1000), 1)
    log.append(_batch(1000, 10), 2)
    table, nxt = log.read(0, max_bytes=1)
    assert table.num_rows >= 1 and nxt == table.num_rows and nxt < 1000
    assert _ids(table) == list(range(nxt))
    # Whole entries are preferred when they fit: the cap stops before the second entry.
    table, nxt = log.read(0, max_bytes=10_000_000)
    assert nxt == 1010


def test_reopen_keeps_records_and_timestamps(tmp_path):
    log = Changelog(tmp_path)
    log.append(_batch(0, 2), 500)
    log.append(_batch(2, 2), 700)
    log.close()
    log = Changelog(tmp_path)
    assert log.end_offset == 4 and log.last_timestamp == 700
    assert log.offset_for_timestamp(600) == 2
    assert log.offset_for_timestamp(100) == 0
    assert log.offset_for_timestamp(800) == 4
    assert log.append(_batch(4, 1), 100) == (4, 5)
    # Commit timestamps never go backwards, so timestamp lookups stay monotonic.
    assert log.last_timestamp == 700


@pytest.mark.parametrize("cut", [1, 10, 30])
def test_recovery_truncates_a_torn_tail(tmp_path, cut):
    log = Changelog(tmp_path)
    log.append(_batch(0, 3), 1)
    log.append(_batch(3, 3), 2)
    seg = log.entries_from(3).__next__()[0].path
    size = seg.stat().st_size
    log.close()
    with open(seg, "r+b") as f:
        f.truncate(size - cut)
    log = Changelog(tmp_path)
    assert log.end_offset == 3
    assert _ids(log.read(0)[0]) == [0, 1, 2]
    assert log.append(_batch(100, 2), 3) == (3, 5)
    log.close()
    assert _ids(Changelog(tmp_path).read(0)[0]) == [0, 1, 2, 100, 101]


def test_recovery_drops_an_entry_with_a_bad_checksum(tmp_path):
    log = Changelog(tmp_path)
    log.append(_batch(0, 3), 1)
    log.append(_batch(3, 3), 2)
    path = next(log.entries_from(0))[0].path
    log.close()
    data = bytearray(path.read_bytes())
    data[-5] ^= 0xFF
    path.write_bytes(bytes(data))
    log = Changelog(tmp_path)
    assert log.end_offset == 3


def test_recovery_of_garbage_appended_after_the_header(tmp_path):
    log = Changelog(tmp_path)
    path = log._segments[0].path
    log.close()
    with open(path, "ab") as f:
        f.write(b"\x00\x00\x00\x05garbage")
    log = Changelog(tmp_path)
    assert log.end_offset == 0 and path.stat().st_size == FILE_HEADER.size
    assert log.append(_batch(0, 1), 1) == (0, 1)


def test_segments_roll_and_survive_reopen(tmp_path):
    log = Changelog(tmp_path, segment_bytes=1)
    for i in range(5):
        log.append(_batch(i * 2, 2), 10 + i)
    assert log.segment_count() == 5
    assert sorted(p.name for p in tmp_path.iterdir())[1] == "00000000000000000002.log"
    log.close()
    log = Changelog(tmp_path, segment_bytes=1)
    assert log.segment_count() == 5 and log.end_offset == 10
    assert _ids(log.read(3, end_offset=8)[0]) == [3, 4, 5, 6, 7]


def test_retention_deletes_whole_old_segments_but_never_the_active_one(tmp_path):
    log = Changelog(tmp_path, segment_bytes=1)
    for i in range(4):
        log.append(_batch(i * 2, 2), 100 * (i + 1))   # segments with max ts 100..400
    assert log.delete_segments_before(250) == 2
    assert log.log_start_offset == 4
    assert _ids(log.read(4)[0]) == [4, 5, 6, 7]
    assert log.delete_segments_before(10_000) == 1     # the active segment stays
    assert log.log_start_offset == 6 and log.end_offset == 8
    log.close()
    log = Changelog(tmp_path, segment_bytes=1)
    assert log.log_start_offset == 6 and log.end_offset == 8
    assert log.append(_batch(8, 1), 500) == (8, 9)


def test_corrupt_magic_is_refused(tmp_path):
    (tmp_path / "00000000000000000000.log").write_bytes(b"NOPE\x00\x01")
    from fluss_spark.errors import LogStorageError
    with pytest.raises(LogStorageError, match="not a changelog segment"):
        Changelog(tmp_path)
