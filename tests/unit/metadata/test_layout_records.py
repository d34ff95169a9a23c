"""Versioned ZooKeeper records: round trips, old versions decode, newer versions are refused."""

import pytest

from fluss_spark.errors import CorruptMessage, InvalidPartitionSpec, InvalidTable
from fluss_spark.metadata import layout
from fluss_spark.metadata.layout import PartitionRecord, SnapshotRecord, TableRecord
from fluss_spark.protocol.codec import packb


def test_table_record_round_trip():
    rec = TableRecord(table_id=3, name="db.t", schema=b"\x01", primary_key=["id"],
                      bucket_key=["id"], num_buckets=4, properties={"a": "b"}, created_ms=9)
    assert TableRecord.decode(rec.encode()) == rec


def test_v1_snapshot_record_bytes_still_decode():
    # Bytes as a v1 writer produced them: this test pins the stored format.
    data = packb({"v": 1, "table_id": 1, "bucket": 2, "snapshot_id": 3, "path": "/x",
                  "log_offset": 10, "row_count": 5, "size_bytes": 100, "created_ms": 7})
    rec = SnapshotRecord.decode(data)
    assert (rec.bucket, rec.snapshot_id, rec.log_offset, rec.row_count) == (2, 3, 10, 5)


def test_newer_version_is_refused_not_misread():
    with pytest.raises(CorruptMessage, match="newer than this software"):
        SnapshotRecord.decode(packb({"v": 99, "table_id": 1}))


def test_garbage_is_a_corrupt_message():
    with pytest.raises(CorruptMessage):
        TableRecord.decode(b"\xc1\xc1")


@pytest.mark.parametrize("name", ["t", "db.", ".t", "db.t.x", "db/t", "db.t;drop", ""])
def test_bad_table_names(name):
    with pytest.raises(InvalidTable):
        layout.table_path(name)


@pytest.mark.parametrize("name", ["db.t\n", "db.t\r\n"])
def test_names_are_matched_in_full(name):
    with pytest.raises(InvalidTable):
        layout.check_table_name(name)
    with pytest.raises(Exception, match="invalid lease id"):
        layout.check_lease_id("job-1\n")


def test_v1_table_record_bytes_decode_as_an_unpartitioned_table():
    # Bytes as a TableRecord v1 writer produced them (before partition keys).
    data = packb({"v": 1, "table_id": 3, "name": "db.t", "schema": b"\x01",
                  "primary_key": ["id"], "bucket_key": ["id"], "num_buckets": 4,
                  "properties": {"a": "b"}, "created_ms": 9})
    rec = TableRecord.decode(data)
    assert (rec.table_id, rec.primary_key, rec.num_buckets, rec.partition_keys) == (
        3, ["id"], 4, [])
    assert not rec.partitioned


def test_partitioned_table_and_partition_records_round_trip():
    rec = TableRecord(table_id=3, name="db.t", schema=b"\x01", primary_key=["id", "dt"],
                      bucket_key=["id"], partition_keys=["dt"])
    assert TableRecord.decode(rec.encode()) == rec and rec.partitioned
    part = PartitionRecord(table_id=3, partition_id=12, name="2026-11-25$eu",
                           values=["2026-11-25", "eu"], buckets=[1, 2], created_ms=5)
    assert PartitionRecord.decode(part.encode()) == part


@pytest.mark.parametrize("name", ["", "a/b", "__x", "a$", "a b"])
def test_bad_partition_names_never_become_paths(name):
    with pytest.raises(InvalidPartitionSpec):
        layout.partition_path("db.t", name)


def test_v2_table_record_bytes_decode_as_schema_one_without_history():
    data = packb({"v": 2, "table_id": 3, "name": "db.t", "schema": b"\x01", "primary_key": [],
                  "bucket_key": [], "num_buckets": 1, "properties": {}, "created_ms": 9,
                  "partition_keys": []})
    rec = TableRecord.decode(data)
    assert (rec.schema_id, rec.schema_history, rec.schemas()) == (1, [], {1: b"\x01"})


def test_a_table_record_keeps_its_schema_history():
    rec = TableRecord(table_id=3, name="db.t", schema=b"\x03", schema_id=3,
                      schema_history=[[1, b"\x01"], [2, b"\x02"]])
    back = TableRecord.decode(rec.encode())
    assert back == rec and back.schemas() == {1: b"\x01", 2: b"\x02", 3: b"\x03"}
