"""Client against a real cluster: tables, writes, changelog, offsets, snapshots, errors."""

from __future__ import annotations

import time

import pyarrow as pa
import pytest

from fluss_spark.errors import (ConfigError, InvalidTable, NonPrimaryKeyTable, TableAlreadyExist,
                                TableNotExist)


def changelog(conn, info, bucket=0, start=0, end=None, projection=None):
    end = conn.admin().list_offsets(info, [bucket])[bucket] if end is None else end
    batches = list(conn.log_scanner(info, projection).read(bucket, start, end))
    return pa.Table.from_batches(batches, schema=conn.log_scanner(info, projection).schema)


def test_table_lifecycle(conn, table_name):
    admin = conn.admin()
    info = admin.create_table(table_name, "id BIGINT NOT NULL, name STRING, amount DOUBLE",
                              primary_key=["id"], num_buckets=3,
                              properties={"kv.snapshot.num-retained": "3"})
    assert info.name == table_name and info.primary_key == ("id",) and info.bucket_key == ("id",)
    assert info.num_buckets == 3 and info.properties == {"kv.snapshot.num-retained": "3"}
    assert info.schema.names == ["id", "name", "amount"] and not info.schema.field("id").nullable
    assert sorted(info.assignment) == [0, 1, 2]
    assert set(info.assignment.values()) <= {0, 1}
    assert table_name in admin.list_tables()
    assert admin.get_table(table_name).table_id == info.table_id
    with pytest.raises(TableAlreadyExist):
        admin.create_table(table_name, "id BIGINT", primary_key=["id"])
    assert admin.create_table(table_name, "id BIGINT",
                              ignore_if_exists=True).table_id == info.table_id
    admin.drop_table(table_name)
    assert table_name not in admin.list_tables()
    with pytest.raises(TableNotExist):
        admin.get_table(table_name)
    with pytest.raises(TableNotExist):
        admin.drop_table(table_name)
    admin.drop_table(table_name, ignore_if_not_exists=True)


def test_bad_table_definitions_are_refused_before_sending(conn, table_name):
    admin = conn.admin()
    with pytest.raises(ConfigError, match="primary key column 'nope'"):
        admin.create_table(table_name, "id BIGINT", primary_key=["nope"])
    with pytest.raises(ConfigError, match="unknown column type"):
        admin.create_table(table_name, "id WIBBLE")
    with pytest.raises(ConfigError, match="unknown table property"):
        admin.create_table(table_name, "id BIGINT", properties={"no.such": "1"})
    with pytest.raises((InvalidTable, ConfigError)):
        admin.create_table("no_database_part", "id BIGINT")


def test_log_table_append_and_read(conn, table_name):
    info = conn.admin().create_table(table_name, "id BIGINT, name STRING", num_buckets=2)
    w = conn.writer(info)
    written = {}
    for i in range(4):
        for b, (base, end) in w.append([(i * 10 + j, f"r{i}-{j}") for j in range(10)]).items():
            assert base == written.get(b, 0) and end == base + 10
            written[b] = end
    assert sum(written.values()) == 40 and set(written) == {0, 1}   # sticky, rotating
    offsets = conn.admin().list_offsets(info)
    assert offsets == {0: written[0], 1: written[1]}
    assert conn.admin().list_offsets(info, spec="earliest") == {0: 0, 1: 0}
    rows = []
    for b in (0, 1):
        t = changelog(conn, info, b)
        assert t.column("_log_offset").to_pylist() == list(range(written[b]))
        assert set(t.column("_change_type").to_pylist()) == {"+A"}
        rows += t.select(["id", "name"]).to_pylist()
    assert sorted(r["id"] for r in rows) == list(range(40))
    assert {r["name"] for r in rows if r["id"] == 23} == {"r2-3"}


def test_pk_table_changelog_semantics(conn, table_name):
    info = conn.admin().create_table(table_name, "id BIGINT, name STRING", primary_key=["id"])
    w = conn.writer(info)
    before_ms = int(time.time() * 1000) - 5000
    assert w.upsert([(1, "a"), (2, "b")]) == {0: (0, 2)}
    assert w.upsert(pa.table({"name": ["c"], "id": [1]})) == {0: (2, 4)}
    assert w.delete([{"id": 2}]) == {0: (4, 5)}
    missing = w.delete([(99,)])
    assert missing in ({}, {0: (5, 5)})   # a missing key writes nothing
    t = changelog(conn, info)
    assert [(r["_change_type"], r["id"], r["name"]) for r in t.to_pylist()] == [
        ("+I", 1, "a"), ("+I", 2, "b"), ("-U", 1, "a"), ("+U", 1, "c"), ("-D", 2, "b")]
    assert t.column("_log_offset").to_pylist() == [0, 1, 2, 3, 4]
    ts = [v.timestamp() * 1000 for v in t.column("_commit_timestamp").to_pylist()]
    assert all(before_ms <= v <= time.time() * 1000 + 5000 for v in ts)
    assert ts == sorted(ts)
    projected = changelog(conn, info, projection=["name"])
    assert projected.schema.names == ["name", "_change_type", "_log_offset", "_commit_timestamp"]
    assert projected.column("name").to_pylist() == ["a", "b", "a", "c", "b"]
    batch = conn.log_scanner(info).fetch(0, 3, end_offset=4)
    assert batch.records.column("_log_offset").to_pylist() == [3]
    assert batch.high_watermark == 5


def test_list_offsets_by_timestamp(conn, table_name):
    info = conn.admin().create_table(table_name, "id BIGINT", num_buckets=1)
    w = conn.writer(info)
    w.append([(1,), (2,)])
    time.sleep(0.05)
    mid = int(time.time() * 1000)
    time.sleep(0.05)
    w.append([(3,)])
    admin = conn.admin()
    assert admin.list_offsets(info, spec="timestamp", timestamp_ms=mid) == {0: 2}
    assert admin.list_offsets(info, spec="timestamp", timestamp_ms=0) == {0: 0}
    with pytest.raises(ConfigError, match="timestamp_ms"):
        admin.list_offsets(info, spec="timestamp")


def test_trigger_snapshot_and_list(conn, table_name):
    info = conn.admin().create_table(table_name, "id BIGINT, v DOUBLE", primary_key=["id"],
                                     num_buckets=2)
    w = conn.writer(info)
    w.upsert(pa.table({"id": list(range(100)), "v": [float(i) for i in range(100)]}))
    w.upsert([(5, -1.0)])
    w.delete([(7,)])
    admin = conn.admin()
    snaps = admin.trigger_kv_snapshot(info)
    assert sorted(snaps) == [0, 1] and all(s is not None for s in snaps.values())
    assert sum(s.row_count for s in snaps.values()) == 99
    latest = admin.list_offsets(info)
    assert {b: s.log_offset for b, s in snaps.items()} == latest
    listed = admin.list_kv_snapshots(info)
    assert {(s.bucket, s.snapshot_id) for s in listed} >= \
        {(b, s.snapshot_id) for b, s in snaps.items()}
    assert admin.latest_kv_snapshots(info) == snaps
    assert [s.bucket for s in admin.list_kv_snapshots(info, bucket=1)] == [1] * len(
        [s for s in listed if s.bucket == 1])


def test_empty_pk_table_snapshot_is_none(conn, table_name):
    info = conn.admin().create_table(table_name, "id BIGINT", primary_key=["id"], num_buckets=2)
    assert conn.admin().trigger_kv_snapshot(info) == {0: None, 1: None}
    assert conn.admin().latest_kv_snapshots(info) == {}


def test_unknown_table_errors(conn):
    with pytest.raises(TableNotExist, match="db.no_such_table"):
        conn.table("db.no_such_table")
    with pytest.raises(TableNotExist):
        conn.writer("db.no_such_table")
    with pytest.raises(TableNotExist):
        conn.admin().list_offsets("db.no_such_table")


def test_schema_mismatch_errors(conn, table_name):
    info = conn.admin().create_table(table_name, "id BIGINT, name STRING", primary_key=["id"])
    w = conn.writer(info)
    with pytest.raises(ConfigError, match="missing column.*name"):
        w.upsert(pa.table({"id": [1]}))
    with pytest.raises(ConfigError, match="unknown column.*extra"):
        w.upsert([{"id": 1, "name": "a", "extra": 2}])
    with pytest.raises(ConfigError, match="column 'id'"):
        w.upsert([("one", "a")])
    with pytest.raises(NonPrimaryKeyTable):
        conn.writer(conn.admin().create_table(table_name + "_log", "id BIGINT")).upsert([(1,)])
    assert conn.admin().list_offsets(info) == {0: 0}   # nothing was written


def test_dropped_table_is_not_written_by_a_stale_writer(conn, table_name):
    admin = conn.admin()
    info = admin.create_table(table_name, "id BIGINT", primary_key=["id"])
    w = conn.writer(info)
    w.upsert([(1,)])
    admin.drop_table(table_name)
    fresh = admin.create_table(table_name, "id BIGINT", primary_key=["id"])
    assert fresh.table_id != info.table_id
    # A tablet that has not yet seen the drop may still accept the write into the old table;
    # either way the rows never land in the new table of the same name.
    try:
        w.upsert([(2,)])
    except TableNotExist as e:
        assert "was dropped" in str(e) or table_name in str(e)
    assert admin.list_offsets(fresh) == {0: 0}
    deadline = time.monotonic() + 15
    while True:   # once the tablet has seen the drop, the stale writer is told
        try:
            w.upsert([(3,)])
        except TableNotExist:
            break
        assert time.monotonic() < deadline, "the stale writer was never refused"
        time.sleep(0.1)


def test_metrics_and_scanners(conn, table_name):
    conn.admin().create_table(table_name, "id BIGINT", primary_key=["id"])
    m = conn.admin().metrics()
    assert m["metrics"]["table_count"] >= 1 and table_name in m["tables"]
    assert isinstance(conn.admin().list_scanners(), list)
    assert conn.admin().supports_leases() is True


def test_many_threads_share_one_connection(conn, table_name):
    from concurrent.futures import ThreadPoolExecutor
    info = conn.admin().create_table(table_name, "id BIGINT, t INT", primary_key=["id"],
                                     num_buckets=4)

    def write(t):
        conn.writer(info).upsert([(t * 100 + i, t) for i in range(50)])

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(write, range(8)))
    snaps = conn.admin().trigger_kv_snapshot(info)
    assert sum(s.row_count for s in snaps.values()) == 400
