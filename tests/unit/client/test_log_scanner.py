"""LogScanner: decoding FETCH_LOG answers and reading exact offset ranges (fake connection)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from fluss_spark.client.embedded.log_scanner import LogScanner
from fluss_spark.client import TableInfo
from fluss_spark.errors import ConfigError, LogOffsetOutOfRange
from fluss_spark.protocol.arrow_ipc import table_to_bytes

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string())])
INFO = TableInfo(table_id=3, name="db.log", schema=SCHEMA, num_buckets=1)


class FakeLog:
    """A bucket changelog of ``n`` records starting at ``start``; serves FETCH_LOG."""

    def __init__(self, n=10, start=0, per_fetch=3):
        self.start, self.end, self.per_fetch = start, n, per_fetch
        self.request_timeout_s = 1.0
        self.bodies = []

    def call_bucket(self, table, bucket, request, partition_id=None):
        body = request.to_wire()
        self.bodies.append(body)
        off = body["offset"]
        if off < self.start:
            raise LogOffsetOutOfRange(f"offset {off} below {self.start}")
        stop = min(self.end, off + self.per_fetch, body.get("end_offset") or self.end)
        ids = list(range(off, stop))
        cols = body.get("projection") or ["id", "name"]
        data = {"id": pa.array(ids, pa.int64()), "name": pa.array([f"n{i}" for i in ids])}
        t = pa.table({**{c: data[c] for c in cols},
                      "_change_type": pa.array(["+A"] * len(ids)),
                      "_commit_timestamp": pa.array([1000 + i for i in ids], pa.int64())})
        return request.decode_response({
            "records": table_to_bytes(t) if ids else None, "base_offset": off,
            "next_offset": stop if ids else off, "high_watermark": self.end,
            "log_start_offset": self.start})


def test_fetch_adds_metadata_columns_in_order():
    lb = LogScanner(FakeLog(), INFO).fetch(0, 2)
    assert lb.records.schema.names == ["id", "name", "_change_type", "_log_offset",
                                       "_commit_timestamp"]
    assert lb.records.schema.field("_commit_timestamp").type == pa.timestamp("ms", tz="UTC")
    assert lb.records.column("_log_offset").to_pylist() == [2, 3, 4]
    assert lb.records.column("id").to_pylist() == [2, 3, 4]
    assert lb.next_offset == 5 and lb.high_watermark == 10 and lb.log_start_offset == 0


def test_empty_fetch_has_the_full_schema():
    lb = LogScanner(FakeLog(), INFO).fetch(0, 10)
    assert lb.num_rows == 0
    assert lb.records.schema == INFO.changelog_schema()


def test_projection_is_sent_and_applied():
    fake = FakeLog()
    lb = LogScanner(fake, INFO, projection=["name"]).fetch(0, 0)
    assert fake.bodies[0]["projection"] == ["name"]
    assert lb.records.schema.names == ["name", "_change_type", "_log_offset", "_commit_timestamp"]


def test_unknown_projection_column_is_refused():
    with pytest.raises(ConfigError, match="unknown column.*colour"):
        LogScanner(FakeLog(), INFO, projection=["id", "colour"])


def test_read_returns_exactly_the_range():
    batches = list(LogScanner(FakeLog(n=20), INFO).read(0, 4, 15))
    offsets = [o for b in batches for o in b.column(3).to_pylist()]
    assert offsets == list(range(4, 15))
    assert all(isinstance(b, pa.RecordBatch) for b in batches)


def test_read_of_an_empty_range_yields_nothing():
    assert list(LogScanner(FakeLog(), INFO).read(0, 5, 5)) == []


def test_read_below_log_start_is_data_loss():
    with pytest.raises(LogOffsetOutOfRange):
        list(LogScanner(FakeLog(start=5), INFO).read(0, 2, 8))


def test_read_past_the_high_watermark_fails_after_waiting():
    fake = FakeLog(n=5)
    fake.request_timeout_s = 0.3
    with pytest.raises(LogOffsetOutOfRange, match="high watermark is 5"):
        list(LogScanner(fake, INFO).read(0, 0, 8))
