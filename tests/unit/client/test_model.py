"""Result types decode from their wire form."""

from __future__ import annotations

import pyarrow as pa

from fluss_spark.client.model import LeaseInfo, SnapshotInfo, TableInfo
from fluss_spark.protocol.arrow_ipc import serialize_schema


def test_table_info_from_wire():
    schema = pa.schema([("id", pa.int64()), ("v", pa.decimal128(10, 2))])
    t = TableInfo.from_wire({"table_id": 4, "name": "db.t", "schema": serialize_schema(schema),
                             "primary_key": ["id"], "bucket_key": ["id"], "num_buckets": 3,
                             "properties": {"kv.snapshot.interval": "1min"}, "created_ms": 9,
                             "assignment": {0: 1, 1: 2, 2: 1}})
    assert (t.table_id, t.name, t.schema, t.primary_key, t.num_buckets) == (4, "db.t", schema, ("id",), 3)
    assert t.has_primary_key and t.buckets == [0, 1, 2] and t.assignment == {0: 1, 1: 2, 2: 1}
    assert t.changelog_schema(["v"]).names == ["v", "_change_type", "_log_offset", "_commit_timestamp"]


def test_snapshot_and_lease_from_wire():
    s = SnapshotInfo.from_wire({"table_id": 1, "bucket": 2, "snapshot_id": 3, "path": "p",
                                "log_offset": 40, "row_count": 5, "size_bytes": 6,
                                "created_ms": 7, "pinned_by": ["a", "b"]})
    assert s.pinned_by == ("a", "b") and s.log_offset == 40
    lease = LeaseInfo.from_wire({"lease_id": "L", "expires_at_ms": 10, "created_ms": 1,
                                 "tables": {5: {0: 3, 1: 4}}})
    assert lease.tables == {5: {0: 3, 1: 4}} and lease.pin_count == 2
