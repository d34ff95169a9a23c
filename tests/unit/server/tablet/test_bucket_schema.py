"""A bucket whose table gained a column: records, KV values and snapshot files of the older
schema read with the new column null; writers of either schema are taken."""

from __future__ import annotations

from dataclasses import replace

import pyarrow as pa

from fluss_spark.metadata.layout import TableRecord
from fluss_spark.protocol.arrow_ipc import bytes_to_table, serialize_schema
from fluss_spark.server.tablet.bucket import Bucket
from fluss_spark.server.tablet.snapshot import OlderSchemaSnapshot, SnapshotFile, write_snapshot

V1 = pa.schema([pa.field("id", pa.int64(), nullable=False), ("name", pa.string())])
V2 = pa.schema(list(V1) + [pa.field("note", pa.string())])


def _table(pk: bool) -> TableRecord:
    return TableRecord(table_id=7, name="db.t", schema=serialize_schema(V1),
                       primary_key=["id"] if pk else [], bucket_key=["id"] if pk else [])


def _altered(rec: TableRecord) -> TableRecord:
    return replace(rec, schema=serialize_schema(V2), schema_id=2,
                   schema_history=[[1, rec.schema]])


def _fetch(bucket: Bucket, projection=None) -> list[dict]:
    t = bytes_to_table(bucket.fetch(0, None, 1 << 30, 0, projection).records)
    return t.drop_columns(["_commit_timestamp"]).to_pylist()


def test_log_records_of_the_older_schema_read_the_added_column_as_null(tmp_path):
    rec = _table(pk=False)
    bucket = Bucket(rec, 0, tmp_path / "b")
    try:
        bucket.write("append", pa.table({"id": pa.array([1], pa.int64()), "name": ["a"]}))
        bucket.update_table(_altered(rec))
        bucket.write("append", pa.table({"id": pa.array([2], pa.int64()), "name": ["b"],
                                         "note": ["n"]}))
        # A writer that started before the change sends no note: null.
        bucket.write("append", pa.table({"id": pa.array([3], pa.int64()), "name": ["c"]}))
        assert _fetch(bucket) == [
            {"id": 1, "name": "a", "note": None, "_change_type": "+A"},
            {"id": 2, "name": "b", "note": "n", "_change_type": "+A"},
            {"id": 3, "name": "c", "note": None, "_change_type": "+A"}]
        assert [r["note"] for r in _fetch(bucket, ["note", "id"])] == [None, "n", None]
    finally:
        bucket.close()


def test_kv_values_of_the_older_schema_decode_and_replay(tmp_path):
    rec = _table(pk=True)
    bucket = Bucket(rec, 0, tmp_path / "b")
    bucket.write("upsert", pa.table({"id": pa.array([1, 2], pa.int64()), "name": ["a", "b"]}))
    bucket.update_table(_altered(rec))
    bucket.write("upsert", pa.table({"id": pa.array([2], pa.int64()), "name": ["b2"],
                                     "note": ["n"]}))
    bucket.write("delete", pa.table({"id": pa.array([1], pa.int64())}))
    assert _fetch(bucket) == [
        {"id": 1, "name": "a", "note": None, "_change_type": "+I"},
        {"id": 2, "name": "b", "note": None, "_change_type": "+I"},
        {"id": 2, "name": "b", "note": None, "_change_type": "-U"},
        {"id": 2, "name": "b2", "note": "n", "_change_type": "+U"},
        {"id": 1, "name": "a", "note": None, "_change_type": "-D"}]
    bucket.kv_store().write({}, 0)      # forget what was applied: reopening replays it all
    bucket.close()
    reopened = Bucket(_altered(rec), 0, tmp_path / "b")
    try:
        with reopened.open_live_view() as view:
            rows = [r for b in view.iter_batches(None, 10) for r in b.to_pylist()]
        assert rows == [{"id": 2, "name": "b2", "note": "n"}]
    finally:
        reopened.close()


def test_a_snapshot_file_of_the_older_schema_reads_as_the_current_one(tmp_path):
    loc = str(tmp_path / "s.arrow")
    batch = pa.record_batch({"id": pa.array([1, 2], pa.int64()), "name": ["a", "b"]},
                            schema=V1)
    write_snapshot([batch], V1, 2, loc, table_id=7, bucket=0, snapshot_id=3, log_offset=2)
    snap = OlderSchemaSnapshot(SnapshotFile.open(loc), V2)
    try:
        assert snap.read_slice(1, 5).to_pylist() == [{"id": 2, "name": "b", "note": None}]
        assert snap.read_slice(0, 2, ["note"]).to_pylist() == [{"note": None}] * 2
        assert (snap.snapshot_id, snap.log_offset, snap.num_rows) == (3, 2, 2)
    finally:
        snap.close()
