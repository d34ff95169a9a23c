"""Tablet server durability: kill -9 and restart, retention, periodic snapshots, coordinator
loss."""

from __future__ import annotations

import threading
import time

import pyarrow as pa
import pytest

from fluss_spark.errors import ApiError, LogOffsetOutOfRange
from fluss_spark.protocol.api import ApiKey
from fluss_spark.protocol.arrow_ipc import bytes_to_table, table_to_bytes
from fluss_spark.server.tablet.snapshot import SnapshotFile
from fluss_spark.local.ports import wait_until
from fluss_spark.testing.tablet import TabletCluster


@pytest.fixture
def make_cluster(zk_address, tmp_path, request):
    made = []
    failed_before = request.session.testsfailed

    def make(**kw) -> TabletCluster:
        made.append(TabletCluster(zk_address, tmp_path, **kw))
        return made[-1]

    yield make
    for c in made:
        c.close()
        if request.session.testsfailed > failed_before:
            print(c.logs())


def _rows(ids, names) -> bytes:
    return table_to_bytes(pa.table({"id": pa.array(ids, pa.int64()), "name": names}))


def _read_log(conn, tid, bucket, start=0) -> pa.Table:
    parts, offset = [], start
    while True:
        r = conn.call_raw(ApiKey.FETCH_LOG, {"table_id": tid, "bucket": bucket, "offset": offset,
                                         "max_bytes": 1 << 20, "max_wait_ms": 0})
        if r["records"] is None:
            break
        parts.append(bytes_to_table(r["records"]))
        offset = r["next_offset"]
    return pa.concat_tables(parts) if parts else None


def test_kill_9_loses_no_acknowledged_write(make_cluster):
    c = make_cluster()
    tid = c.create("db.durable", pk=["id"], buckets=1)
    tablet = c.tablets[0]
    acked: dict[int, str] = {}
    acked_offsets: list[tuple[int, int]] = []
    stop = threading.Event()

    def writer():
        conn = tablet.connection(timeout_s=5)
        i = 0
        while not stop.is_set():
            ids = [i % 300 + k for k in range(5)]
            names = [f"v{i}-{k}" for k in range(5)]
            try:
                r = conn.call_raw(ApiKey.PRODUCE, {"table_id": tid, "bucket": 0, "op": "upsert",
                                               "records": _rows(ids, names)})
            except ApiError:
                return          # the server died under us: this write was not acknowledged
            acked.update(zip(ids, names))
            acked_offsets.append((r["base_offset"], r["end_offset"]))
            i += 1

    t = threading.Thread(target=writer)
    t.start()
    wait_until(lambda: len(acked_offsets) >= 50, 30, "50 acknowledged writes")
    tablet.kill()
    t.join(10)
    assert not t.is_alive()
    tablet.start()
    conn = tablet.connection()
    log = _read_log(conn, tid, 0)
    # Offsets are dense and every acknowledged range is present.
    assert log.num_rows >= acked_offsets[-1][1]
    for (base, end), (nbase, _) in zip(acked_offsets, acked_offsets[1:]):
        assert end == nbase
    # The KV state (read through a fresh snapshot) holds the last acknowledged value of every
    # key, unless a write that was in flight at the kill reached the log after the last ack.
    snap = conn.call_raw(ApiKey.TRIGGER_KV_SNAPSHOT, {"table_id": tid})["snapshots"][0]
    with SnapshotFile.open(snap["path"]) as f:
        state = dict(zip(*f.read_slice(0, f.num_rows).to_pydict().values()))
    in_flight = log.slice(acked_offsets[-1][1])
    late = set(in_flight.column("id").to_pylist())
    for key, name in acked.items():
        if key not in late:
            assert state[key] == name, key
    assert snap["log_offset"] == log.num_rows
    # Writing continues at the next offset after recovery.
    r = conn.call_raw(ApiKey.PRODUCE, {"table_id": tid, "bucket": 0, "op": "upsert",
                                   "records": _rows([10_000], ["after"])})
    assert r["base_offset"] == log.num_rows


def test_retention_deletes_old_segments_and_reports_data_loss(make_cluster):
    c = make_cluster(options=["log.segment.bytes=1", "log.retention.check-interval=100ms"])
    tid = c.create("db.ttl", buckets=1, props={"table.log.ttl": "500ms"})
    conn = c.conns[0]
    for i in range(4):
        conn.call_raw(ApiKey.PRODUCE, {"table_id": tid, "bucket": 0, "op": "append",
                                   "records": _rows([i], [f"n{i}"])})
    earliest = lambda: conn.call_raw(ApiKey.LIST_OFFSETS, {  # noqa: E731
        "table_id": tid, "buckets": [0], "spec": "earliest"})["offsets"][0]
    wait_until(lambda: earliest() == 3, 10, "retention to delete the old segments")
    with pytest.raises(LogOffsetOutOfRange,
                       match=r"db.ttl.*bucket 0.*offset 1.*earliest retained offset 3"):
        conn.call_raw(ApiKey.FETCH_LOG, {"table_id": tid, "bucket": 0, "offset": 1,
                                     "max_bytes": 100, "max_wait_ms": 0})
    assert _read_log(conn, tid, 0, 3).column("id").to_pylist() == [3]


def test_periodic_snapshots_skip_when_nothing_changed(make_cluster):
    c = make_cluster()
    tid = c.create("db.periodic", pk=["id"], buckets=1, props={"kv.snapshot.interval": "300ms"})
    conn = c.conns[0]
    conn.call_raw(ApiKey.PRODUCE, {"table_id": tid, "bucket": 0, "op": "upsert",
                               "records": _rows([1, 2], ["a", "b"])})
    wait_until(lambda: c.store.snapshot_ids(tid, 0) == [0], 10, "the first periodic snapshot")
    time.sleep(1.0)
    assert c.store.snapshot_ids(tid, 0) == [0]          # nothing changed: no new snapshot
    conn.call_raw(ApiKey.PRODUCE, {"table_id": tid, "bucket": 0, "op": "delete",
                               "records": _rows([1], ["a"])})
    wait_until(lambda: 1 in c.store.snapshot_ids(tid, 0), 10, "a snapshot after the change")
    rec = c.store.snapshot(tid, 0, 1)
    assert (rec.log_offset, rec.row_count) == (3, 1)


@pytest.mark.slow
def test_snapshot_waits_for_a_coordinator_and_ids_survive_restart(make_cluster):
    c = make_cluster()
    tid = c.create("db.waits", pk=["id"], buckets=1)
    conn = c.conns[0]
    conn.call_raw(ApiKey.PRODUCE, {"table_id": tid, "bucket": 0, "op": "upsert",
                               "records": _rows([1], ["a"])})
    assert conn.call_raw(ApiKey.TRIGGER_KV_SNAPSHOT, {"table_id": tid})["snapshots"][0][
        "snapshot_id"] == 0
    c.coordinator.kill()
    got = {}
    t = threading.Thread(target=lambda: got.update(r=c.tablets[0].connection().call_raw(
        ApiKey.TRIGGER_KV_SNAPSHOT, {"table_id": tid})))
    t.start()
    time.sleep(1.0)
    assert t.is_alive() and c.store.snapshot_ids(tid, 0) == [0]
    c.coordinator.start()
    t.join(30)
    assert got["r"]["snapshots"][0]["snapshot_id"] == 1
    assert c.store.snapshot_ids(tid, 0) == [0, 1]
    # After a restart the next id continues from the registered ones.
    c.tablets[0].stop()
    c.tablets[0].start()
    snap = c.tablets[0].connection().call_raw(ApiKey.TRIGGER_KV_SNAPSHOT, {"table_id": tid})
    assert snap["snapshots"][0]["snapshot_id"] == 2


def test_a_table_dropped_while_the_tablet_was_down_is_cleaned_up_at_start(make_cluster):
    c = make_cluster()
    keep = c.create("db.keep", pk=["id"], buckets=1)
    gone = c.create("db.gone", buckets=1)
    for tid, op in ((keep, "upsert"), (gone, "append")):
        c.conns[0].call_raw(ApiKey.PRODUCE, {"table_id": tid, "bucket": 0, "op": op,
                                         "records": _rows([1], ["a"])})
    tables = c.tablets[0].data_dir / "tables"
    assert sorted(p.name for p in tables.iterdir()) == sorted([str(keep), str(gone)])
    c.tablets[0].stop()
    from fluss_spark.testing.coordinator import call_until_leader
    call_until_leader(c.coord, ApiKey.DROP_TABLE, {"name": "db.gone"})
    c.tablets[0].start()
    assert sorted(p.name for p in tables.iterdir()) == [str(keep)]
    log = _read_log(c.tablets[0].connection(), keep, 0)
    assert log.column("_change_type").to_pylist() == ["+I"]
