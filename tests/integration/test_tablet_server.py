"""Tablet server processes against a real ZooKeeper and a real coordinator process."""

from __future__ import annotations

import threading
import time

import pyarrow as pa
import pytest

from fluss_spark.errors import (InvalidRequest, LogOffsetOutOfRange, NonPrimaryKeyTable,
                                NotLeaderOrFollower, UnknownTableOrBucket)
from fluss_spark.protocol.api import ApiKey
from fluss_spark.protocol.arrow_ipc import bytes_to_table, table_to_bytes
from fluss_spark.server.tablet.snapshot import SnapshotFile
from fluss_spark.testing.coordinator import call_until_leader
from fluss_spark.local.ports import wait_until
from fluss_spark.testing.tablet import TabletCluster


@pytest.fixture
def tc(zk_address, tmp_path, request):
    failed_before = request.session.testsfailed
    c = TabletCluster(zk_address, tmp_path)
    yield c
    c.close()
    if request.session.testsfailed > failed_before:
        print(c.logs())


def _rows(ids, names=None) -> bytes:
    names = names or [f"n{i}" for i in ids]
    return table_to_bytes(pa.table({"id": pa.array(ids, pa.int64()), "name": names}))


def _produce(conn, tid, bucket, op, ids, names=None) -> dict:
    return conn.call_raw(ApiKey.PRODUCE, {"table_id": tid, "bucket": bucket, "op": op,
                                      "records": _rows(ids, names)})


def _fetch(conn, tid, bucket, offset, **kw) -> tuple[list, dict]:
    body = {"table_id": tid, "bucket": bucket, "offset": offset, "max_bytes": 1 << 20,
            "max_wait_ms": 0, **kw}
    r = conn.call_raw(ApiKey.FETCH_LOG, body)
    if r["records"] is None:
        return [], r
    t = bytes_to_table(r["records"])
    return list(zip(t.column("_change_type").to_pylist(), t.column("id").to_pylist())), r


def test_log_table_produce_fetch_and_list_offsets(tc):
    conn = tc.conns[0]
    tid = tc.create("db.events", buckets=2)
    assert _produce(conn, tid, 0, "append", [1, 2, 3]) == {"base_offset": 0, "end_offset": 3}
    # Strictly after the first batch's commit time (it may share the millisecond it returned in).
    before = int(time.time() * 1000) + 1
    time.sleep(0.01)
    assert _produce(conn, tid, 0, "append", [4]) == {"base_offset": 3, "end_offset": 4}
    assert _produce(conn, tid, 1, "append", [9]) == {"base_offset": 0, "end_offset": 1}
    recs, r = _fetch(conn, tid, 0, 1, end_offset=3)
    assert recs == [("+A", 2), ("+A", 3)] and r["next_offset"] == 3 and r["high_watermark"] == 4
    offsets = lambda spec, **kw: conn.call_raw(ApiKey.LIST_OFFSETS, {  # noqa: E731
        "table_id": tid, "buckets": [0, 1], "spec": spec, **kw})["offsets"]
    assert offsets("earliest") == {0: 0, 1: 0}
    assert offsets("latest") == {0: 4, 1: 1}
    assert offsets("timestamp", timestamp_ms=before) == {0: 3, 1: 0}
    assert offsets("timestamp", timestamp_ms=before + 3_600_000) == {0: 4, 1: 1}
    # A parked fetch is answered as soon as a record arrives.
    got = {}
    t = threading.Thread(target=lambda: got.update(r=_fetch(tc.tablets[0].connection(),
                                                            tid, 1, 1, max_wait_ms=10_000)))
    t.start()
    time.sleep(0.3)
    _produce(conn, tid, 1, "append", [10])
    t.join(5)
    assert got["r"][0] == [("+A", 10)]
    with pytest.raises(LogOffsetOutOfRange, match="past the end"):
        _fetch(conn, tid, 0, 99)


def test_pk_table_changelog_state_and_triggered_snapshot(tc):
    conn = tc.conns[0]
    tid = tc.create("db.users", pk=["id"], buckets=2)
    _produce(conn, tid, 0, "upsert", [1, 2], ["a", "b"])
    _produce(conn, tid, 0, "upsert", [1], ["a2"])
    assert _produce(conn, tid, 0, "delete", [2, 8]) == {"base_offset": 4, "end_offset": 5}
    recs, _ = _fetch(conn, tid, 0, 0)
    assert recs == [("+I", 1), ("+I", 2), ("-U", 1), ("+U", 1), ("-D", 2)]
    snaps = conn.call_raw(ApiKey.TRIGGER_KV_SNAPSHOT,
                          {"table_id": tid, "buckets": [0, 1]})["snapshots"]
    assert snaps[1] is None                      # bucket 1 never had data
    info = snaps[0]
    assert (info["snapshot_id"], info["log_offset"], info["row_count"]) == (0, 5, 1)
    with SnapshotFile.open(info["path"]) as f:
        assert f.read_slice(0, 10).to_pydict() == {"id": [1], "name": ["a2"]}
        assert f.log_offset == 5
    listed = call_until_leader(tc.coord, ApiKey.LIST_KV_SNAPSHOTS, {"table_id": tid})
    assert [(s["bucket"], s["snapshot_id"]) for s in listed["snapshots"]] == [(0, 0)]
    again = conn.call_raw(ApiKey.TRIGGER_KV_SNAPSHOT, {"table_id": tid})["snapshots"]
    assert again[0]["snapshot_id"] == 1 and again[1] is None
    with pytest.raises(NonPrimaryKeyTable):
        tid2 = tc.create("db.plain")
        conn.call_raw(ApiKey.TRIGGER_KV_SNAPSHOT, {"table_id": tid2})


def test_bad_requests_get_typed_errors_and_the_server_keeps_serving(tc):
    conn = tc.conns[0]
    tid = tc.create("db.t", buckets=1)
    with pytest.raises(UnknownTableOrBucket, match="table id 999"):
        _produce(conn, 999, 0, "append", [1])
    with pytest.raises(UnknownTableOrBucket, match="buckets 0..0"):
        _produce(conn, tid, 5, "append", [1])
    with pytest.raises(InvalidRequest, match="table_id"):
        conn.call_raw(ApiKey.PRODUCE,
                      {"table_id": "x", "bucket": 0, "op": "append", "records": b""})
    with pytest.raises(InvalidRequest, match="records"):
        conn.call_raw(ApiKey.PRODUCE, {"table_id": tid, "bucket": 0, "op": "append", "records": 5})
    from fluss_spark.errors import CorruptMessage
    with pytest.raises(CorruptMessage):
        conn.call_raw(ApiKey.PRODUCE, {"table_id": tid, "bucket": 0, "op": "append",
                                   "records": b"garbage"})
    bad = table_to_bytes(pa.table({"id": pa.array([1], pa.int64()), "nam": ["x"]}))
    with pytest.raises(InvalidRequest, match="name"):
        conn.call_raw(ApiKey.PRODUCE,
                      {"table_id": tid, "bucket": 0, "op": "append", "records": bad})
    with pytest.raises(InvalidRequest):
        conn.call_raw(ApiKey.FETCH_LOG,
                      {"table_id": tid, "bucket": 0, "offset": 0, "projection": 3})
    with pytest.raises(InvalidRequest):
        conn.call_raw(ApiKey.LIST_OFFSETS, {"table_id": tid, "buckets": ["a"], "spec": "latest"})
    with pytest.raises(InvalidRequest, match="spec"):
        conn.call_raw(ApiKey.LIST_OFFSETS, {"table_id": tid, "buckets": [0], "spec": "soon"})
    assert _produce(conn, tid, 0, "append", [1])["end_offset"] == 1
    meta = conn.call_raw(ApiKey.GET_METADATA, {"tables": ["db.t"]})
    assert meta["tables"][0]["table_id"] == tid and meta["tablets"][0]["id"] == 0


def test_a_table_created_just_now_is_served_at_once(tc):
    conn = tc.conns[0]
    for i in range(3):
        tid = tc.create(f"db.fresh{i}", buckets=1)
        # No wait for the 0.5 s poll: an unknown table triggers a synchronous refresh.
        assert _produce(conn, tid, 0, "append", [i])["end_offset"] == 1


def test_drop_table_closes_buckets_and_deletes_local_data(tc):
    conn = tc.conns[0]
    tid = tc.create("db.gone", pk=["id"], buckets=1)
    _produce(conn, tid, 0, "upsert", [1, 2])
    conn.call_raw(ApiKey.TRIGGER_KV_SNAPSHOT, {"table_id": tid})
    table_dir = tc.tablets[0].data_dir / "tables" / str(tid)
    assert table_dir.is_dir()
    call_until_leader(tc.coord, ApiKey.DROP_TABLE, {"name": "db.gone"})
    wait_until(lambda: not table_dir.exists(), 10, "the dropped table's local data to go")
    with pytest.raises(UnknownTableOrBucket):
        _produce(conn, tid, 0, "upsert", [3])


def test_not_leader_for_a_bucket_of_another_tablet(zk_address, tmp_path):
    c = TabletCluster(zk_address, tmp_path, tablets=2)
    try:
        tid = c.create("db.two", buckets=2)
        meta = c.conns[0].call_raw(ApiKey.GET_METADATA, {"tables": ["db.two"]})
        owners = meta["tables"][0]["assignment"]
        assert sorted(owners.values()) == [0, 1]
        for bucket, owner in owners.items():
            assert _produce(c.conns[owner], tid, bucket, "append", [bucket])["end_offset"] == 1
            with pytest.raises(NotLeaderOrFollower, match=f"hosted by tablet server {owner}"):
                _produce(c.conns[1 - owner], tid, bucket, "append", [bucket])
    finally:
        c.close()
