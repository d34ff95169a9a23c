"""Remote log segments of Apache Fluss: which to read from an offset, their file names, and
their files read in chunks (segment files built by hand in a temporary directory)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.fs as pafs
import pytest

from fluss_spark.client.apache_fluss.remote_log import (RemoteSegment, read_segment,
                                                        remote_batches, segments_to_read)
from fluss_spark.errors import CorruptMessage, LogOffsetOutOfRange
from fluss_spark.protocol.apache_fluss.messages import PbRemoteLogFetchInfo, PbRemoteLogSegment
from tests.unit.protocol.test_apache_fluss_log_batch import make_batch

SCHEMA = pa.schema([("id", pa.int64())])


def rows(first: int, n: int) -> pa.RecordBatch:
    return pa.record_batch([pa.array(range(first, first + n), pa.int64())], schema=SCHEMA)


def segment_bytes(start: int, end: int, per_batch: int = 3) -> bytes:
    """Append-only batches of ``per_batch`` records holding offsets ``[start, end)``."""
    return b"".join(make_batch(o, rows(o, min(per_batch, end - o)), None)
                    for o in range(start, end, per_batch))


def pb(segment_id: str, start: int, end: int) -> PbRemoteLogSegment:
    return PbRemoteLogSegment(remote_log_segment_id=segment_id, remote_log_start_offset=start,
                              remote_log_end_offset=end, segment_size_in_bytes=0)


def info(tablet_dir: str, *segments: PbRemoteLogSegment, pos: int | None = None):
    return PbRemoteLogFetchInfo(remote_log_tablet_dir=tablet_dir,
                                remote_log_segments=list(segments), first_start_pos=pos)


def test_segment_file_is_named_by_id_and_zero_padded_start_offset():
    seg = RemoteSegment("6f1c-uuid", 1234, 2000)
    assert seg.path("s3://bucket/fluss/log/db/t-7/3/") == \
        "s3://bucket/fluss/log/db/t-7/3/6f1c-uuid/00000000000000001234.log"
    assert seg.path("file:/data/log/db/t-7/p1-p9/0") == \
        "file:/data/log/db/t-7/p1-p9/0/6f1c-uuid/00000000000000001234.log"


def test_segments_from_the_offset_on_in_offset_order_with_first_position():
    got = segments_to_read(info("d", pb("b", 100, 200), pb("c", 200, 250), pb("a", 0, 100),
                                pos=777), 150)
    # "b" was listed first: Fluss's start position is a byte of "b"; "a" ends before 150.
    assert got == [RemoteSegment("b", 100, 200, 777), RemoteSegment("c", 200, 250, 0)]


def test_segments_stop_at_a_gap_and_an_offset_in_none_is_out_of_range():
    got = segments_to_read(info("d", pb("a", 0, 10), pb("b", 10, 20), pb("c", 30, 40)), 5)
    assert [s.segment_id for s in got] == ["a", "b"]
    with pytest.raises(LogOffsetOutOfRange, match=r"offset 3 .*segments: \[10, 20\)"):
        segments_to_read(info("d", pb("b", 10, 20)), 3)
    with pytest.raises(LogOffsetOutOfRange, match="segments: none"):
        segments_to_read(info("d"), 3)


def test_a_segment_read_in_chunks_smaller_than_a_batch_yields_every_batch(tmp_path):
    data = segment_bytes(0, 20)
    (tmp_path / "s.log").write_bytes(data)
    fs = pafs.LocalFileSystem()
    for chunk in (7, 100, 1 << 20):
        got = list(read_segment(fs, str(tmp_path / "s.log"), chunk_bytes=chunk))
        assert [(b.base_offset, b.next_offset) for b in got] == \
            [(o, min(o + 3, 20)) for o in range(0, 20, 3)]
    second = len(make_batch(0, rows(0, 3), None))
    assert [b.base_offset for b in read_segment(fs, str(tmp_path / "s.log"), second)] == \
        list(range(3, 20, 3))


def test_a_corrupt_or_cut_segment_is_refused(tmp_path):
    data = bytearray(segment_bytes(0, 6))
    data[-1] ^= 0xFF
    (tmp_path / "bad.log").write_bytes(bytes(data))
    fs = pafs.LocalFileSystem()
    with pytest.raises(CorruptMessage, match="CRC-32C"):
        list(read_segment(fs, str(tmp_path / "bad.log")))
    (tmp_path / "cut.log").write_bytes(segment_bytes(0, 6)[:-5])
    with pytest.raises(CorruptMessage, match="cut.log ends with an incomplete record batch"):
        list(read_segment(fs, str(tmp_path / "cut.log"), chunk_bytes=16))


def test_remote_batches_cross_segments_from_a_position_and_stop_at_each_end(tmp_path):
    tablet = tmp_path / "log" / "db" / "t-1" / "0"
    for seg_id, start, end in (("a", 0, 9), ("b", 9, 15)):
        (tablet / seg_id).mkdir(parents=True)
        # Segment "a" has one stray batch after its end offset: it must not be read.
        extra = segment_bytes(end, end + 3) if seg_id == "a" else b""
        (tablet / seg_id / f"{start:020d}.log").write_bytes(segment_bytes(start, end) + extra)
    pos = len(make_batch(0, rows(0, 3), None))               # the batch of offset 4 starts here
    got = list(remote_batches(info(f"file://{tablet}", pb("a", 0, 9), pb("b", 9, 15), pos=pos),
                              4, "db.t bucket 0", chunk_bytes=50))
    assert [b.base_offset for b in got] == [3, 6, 9, 12]
    assert [r for b in got for r in b.arrow(SCHEMA).column(0).to_pylist()] == list(range(3, 15))


def test_a_segment_gone_from_remote_storage_is_out_of_range(tmp_path):
    with pytest.raises(LogOffsetOutOfRange, match=r"db.t bucket 0 \(offsets \[0, 9\)\) is gone"):
        list(remote_batches(info(str(tmp_path), pb("a", 0, 9)), 0, "db.t bucket 0"))
