"""KV snapshot files: write from a bucket's state, read back by row slices."""

from __future__ import annotations

import pyarrow as pa
import pytest

from fluss_spark.errors import KvSnapshotNotExist, StorageError
from fluss_spark.metadata.layout import TableRecord
from fluss_spark.protocol.arrow_ipc import serialize_schema
from fluss_spark.server.tablet.bucket import Bucket
from fluss_spark.server.snapshot_store import snapshot_location
from fluss_spark.server.tablet.snapshot import SnapshotFile, write_snapshot

SCHEMA = pa.schema([("k", pa.string()), ("v", pa.int64()), ("d", pa.decimal128(10, 2)),
                    ("ts", pa.timestamp("us"))])


def _write(tmp_path, batches, rows, **kw) -> str:
    loc = snapshot_location(str(tmp_path / "remote"), 5, 1, kw.get("snapshot_id", 3))
    return write_snapshot(batches, SCHEMA, rows, loc, table_id=5, bucket=1,
                          snapshot_id=kw.get("snapshot_id", 3), log_offset=77).path


def _batch(start, n):
    import datetime
    import decimal
    return pa.record_batch([
        pa.array([f"k{i:05d}" for i in range(start, start + n)]),
        pa.array(range(start, start + n), pa.int64()),
        pa.array([decimal.Decimal(i) / 100 for i in range(start, start + n)], pa.decimal128(10, 2)),
        pa.array([datetime.datetime(2024, 1, 1) for _ in range(n)], pa.timestamp("us")),
    ], schema=SCHEMA)


def test_round_trip_metadata_and_slices_across_batches(tmp_path):
    path = _write(tmp_path, [_batch(0, 10), _batch(10, 10), _batch(20, 5)], 25)
    assert path.endswith("/5/1/snapshot-3.arrow")
    with SnapshotFile.open(path) as f:
        assert (f.num_rows, f.snapshot_id, f.log_offset, f.table_id, f.bucket) == (25, 3, 77, 5, 1)
        assert f.schema == SCHEMA and f.schema.metadata is None
        assert f.avg_row_bytes > 0
        t = f.read_slice(8, 14)
        assert t.column("v").to_pylist() == list(range(8, 22))
        assert t.schema == SCHEMA
        assert f.read_slice(20, 100, columns=["v"]).column("v").to_pylist() == list(range(20, 25))
        assert f.read_slice(20, 100, columns=["v"]).schema.names == ["v"]
        assert f.read_slice(25, 10).num_rows == 0
        whole = pa.concat_tables([f.read_slice(i, 4) for i in range(0, 25, 4)])
        assert whole.column("k").to_pylist() == [f"k{i:05d}" for i in range(25)]


def test_no_temp_file_is_left_and_a_mismatched_count_fails(tmp_path):
    _write(tmp_path, [_batch(0, 3)], 3)
    assert sorted(p.name for p in (tmp_path / "remote" / "5" / "1").iterdir()) == \
        ["snapshot-3.arrow"]
    with pytest.raises(StorageError, match="wrote 3 rows, expected 4"):
        _write(tmp_path, [_batch(0, 3)], 4, snapshot_id=4)
    assert sorted(p.name for p in (tmp_path / "remote" / "5" / "1").iterdir()) == \
        ["snapshot-3.arrow"]


def test_missing_file_is_kv_snapshot_not_exist(tmp_path):
    with pytest.raises(KvSnapshotNotExist):
        SnapshotFile.open(str(tmp_path / "nothing.arrow"))


def test_uri_locations_work(tmp_path):
    uri = f"file://{tmp_path}/remote"
    loc = snapshot_location(uri, 1, 0, 0)
    assert loc.startswith("file://")
    write_snapshot([_batch(0, 2)], SCHEMA, 2, loc, table_id=1, bucket=0, snapshot_id=0,
                   log_offset=2)
    with SnapshotFile.open(loc) as f:
        assert f.read_slice(0, 2).column("v").to_pylist() == [0, 1]


def test_snapshot_of_a_bucket_state_is_key_ordered(tmp_path):
    schema = pa.schema([("id", pa.int64()), ("name", pa.string())])
    rec = TableRecord(9, "db.s", serialize_schema(schema), ["id"], ["id"], 1, {})
    b = Bucket(rec, 0, tmp_path / "b")
    ids = [5, 3, 9, 1, 7]
    b.write("upsert", pa.table({"id": pa.array(ids, pa.int64()), "name": [str(i) for i in ids]}))
    view, offset = b.checkpoint()
    loc = snapshot_location(str(tmp_path / "remote"), 9, 0, 0)
    write_snapshot(view.iter_batches(schema, None, 2), schema, 5, loc, table_id=9, bucket=0,
                   snapshot_id=0, log_offset=offset)
    view.close()
    with SnapshotFile.open(loc) as f:
        # Keys are msgpack-encoded; small non-negative ints sort numerically.
        assert f.read_slice(0, 5).column("id").to_pylist() == [1, 3, 5, 7, 9]
        assert f.log_offset == 5
    b.close()
