"""Scan sessions end to end: real ZooKeeper, coordinator and tablet server processes."""

from __future__ import annotations

import random
import socket
import struct
import threading

import pyarrow as pa
import pytest

from fluss_spark.errors import InvalidColumnProjection, InvalidScanRequest, TooManyScanners
from fluss_spark.local.ports import wait_until
from fluss_spark.protocol.api import ApiKey
from fluss_spark.protocol.arrow_ipc import bytes_to_table

SCHEMA = "id BIGINT, name STRING, amount DOUBLE"


def rows(ids) -> pa.Table:
    ids = list(ids)
    return pa.table({"id": pa.array(ids, pa.int64()),
                     "name": [f"name-{i:07d}" for i in ids],
                     "amount": [i * 0.5 for i in ids]})


def snapshot_file_rows(path: str) -> pa.Table:
    """The snapshot's rows read straight from its Arrow file (the reference)."""
    with pa.memory_map(path, "r") as source:
        return pa.ipc.open_file(source).read_all().replace_schema_metadata(None)


@pytest.fixture
def pk_table(conn, table_name):
    """A one-bucket PK table with 20,000 rows and a registered snapshot of them."""
    info = conn.admin().create_table(table_name, SCHEMA, primary_key=["id"], num_buckets=1)
    conn.writer(info).upsert(rows(range(20_000)))
    snap = conn.admin().trigger_kv_snapshot(info)[0]
    yield info, snap
    conn.admin().drop_table(table_name, ignore_if_not_exists=True)


def test_snapshot_scan_pages_and_reports_offsets(conn, pk_table):
    info, snap = pk_table
    scan = conn.kv_scanner(info).scan(0, batch_size_bytes=64 * 1024)
    table = scan.read_all()
    assert table.equals(snapshot_file_rows(snap.path))
    assert (scan.snapshot_id, scan.log_offset) == (snap.snapshot_id, snap.log_offset)
    assert table.num_rows == 20_000


def test_resume_by_start_row_after_kill_9_of_the_tablet_server(cluster, conn, pk_table):
    info, snap = pk_table
    expected = snapshot_file_rows(snap.path)
    tablet_id = info.assignment[0]
    scan = conn.kv_scanner(info).scan(0, snapshot_id=snap.snapshot_id, batch_size_bytes=16 * 1024)
    got = [next(scan) for _ in range(5)]
    cluster.kill("tablet", tablet_id)
    # The tablet comes back while the reader is already retrying.
    restarter = threading.Timer(0.5, cluster.restart, args=("tablet", tablet_id))
    restarter.start()
    try:
        got.extend(scan)
    finally:
        restarter.join(60)
    table = pa.Table.from_batches(got)
    assert scan.resumes >= 1
    assert table.num_rows == expected.num_rows
    assert table.equals(expected)                       # no duplicate, no gap, same order


def test_live_scan_sees_the_state_at_open_only(conn, pk_table):
    info, _ = pk_table
    writer = conn.writer(info)
    end_before = conn.admin().list_offsets(info, spec="latest")[0]
    scan = conn.kv_scanner(info).scan(0, live=True, batch_size_bytes=16 * 1024)
    first = next(scan)
    writer.upsert(rows(range(19_990, 21_000)))
    writer.delete(rows(range(0, 5_000)))
    table = pa.Table.from_batches([first] + list(scan))
    assert scan.log_offset == end_before and scan.snapshot_id is None
    assert sorted(table.column("id").to_pylist()) == list(range(20_000))
    assert table.filter(pa.compute.equal(table["id"], 19_995)).column("name")[0].as_py() \
        == "name-0019995"
    after = conn.kv_scanner(info).scan(0, live=True, batch_size_bytes=1 << 20).read_all()
    assert sorted(after.column("id").to_pylist()) == list(range(5_000, 21_000))


def test_hostile_requests_get_errors_and_other_sessions_keep_working(conn, pk_table):
    info, snap = pk_table
    expected = snapshot_file_rows(snap.path)
    rpc = conn.tablet_for(info.table_id, 0)
    first = rpc.call_raw(ApiKey.SCAN_KV, {"table_id": info.table_id, "bucket": 0, "call_seq_id": 0,
                                      "snapshot_id": snap.snapshot_id,
                                      "batch_size_bytes": 32 * 1024})
    sid = first["scanner_id"]
    base = {"table_id": info.table_id, "bucket": 0, "call_seq_id": 0,
            "snapshot_id": snap.snapshot_id, "batch_size_bytes": 1024}
    hostile = [dict(base, batch_size_bytes=2**64 - 1), dict(base, limit=-1),
               dict(base, start_row=-5), dict(base, batch_size_bytes=0), {},
               dict(base, scanner_id=sid), {"scanner_id": sid, "call_seq_id": 9},
               {"scanner_id": sid}, {"scanner_id": sid, "call_seq_id": 1, "batch_size_bytes": -1},
               dict(base, projection="id"), dict(base, live=True)]
    for body in hostile:
        with pytest.raises(InvalidScanRequest):
            rpc.call_raw(ApiKey.SCAN_KV, body)
    with pytest.raises(InvalidColumnProjection, match="nope"):
        rpc.call_raw(ApiKey.SCAN_KV, dict(base, projection=["nope"]))
    rng = random.Random(7)
    for _ in range(10):                                 # random bytes on fresh sockets
        with socket.create_connection((rpc.host, rpc.port), timeout=5) as s:
            junk = rng.randbytes(rng.randint(1, 300))
            s.sendall(struct.pack(">I", len(junk)) + junk)
            s.settimeout(5)
            try:
                s.recv(4096)
            except OSError:
                pass
    parts, resp, seq = [bytes_to_table(first["records"])], first, 0
    while resp["has_more"]:
        seq += 1
        resp = rpc.call_raw(ApiKey.SCAN_KV, {"scanner_id": sid, "call_seq_id": seq})
        parts.append(bytes_to_table(resp["records"]))
    assert pa.concat_tables(parts).equals(expected)


def test_list_scanners_and_the_per_bucket_limit(conn, pk_table):
    info, snap = pk_table
    rpc = conn.tablet_for(info.table_id, 0)
    body = {"table_id": info.table_id, "bucket": 0, "call_seq_id": 0,
            "snapshot_id": snap.snapshot_id, "batch_size_bytes": 1024}
    ids = [rpc.call_raw(ApiKey.SCAN_KV, body)["scanner_id"] for _ in range(8)]   # the default max
    try:
        with pytest.raises(TooManyScanners, match="max-per-bucket=8"):
            rpc.call_raw(ApiKey.SCAN_KV, body)
        listed = [s for s in conn.admin().list_scanners() if s["table_id"] == info.table_id]
        assert sorted(s["scanner_id"] for s in listed) == sorted(ids)
        assert all(s["snapshot_id"] == snap.snapshot_id and s["rows_served"] > 0
                   for s in listed)
    finally:
        for sid in ids:
            rpc.call_raw(ApiKey.SCAN_KV, {"scanner_id": sid, "close": True})
    assert not [s for s in conn.admin().list_scanners() if s["table_id"] == info.table_id]


def test_projection_limit_and_start_row_through_the_client(conn, pk_table):
    info, snap = pk_table
    expected = snapshot_file_rows(snap.path)
    scan = conn.kv_scanner(info).scan(0, projection=["name", "id"], start_row=1_000,
                                      limit=5_000, batch_size_bytes=8 * 1024)
    assert scan.read_all().equals(expected.select(["name", "id"]).slice(1_000, 5_000))


def test_an_abandoned_scan_closes_its_session(conn, pk_table):
    info, snap = pk_table

    def mine():
        return [s for s in conn.admin().list_scanners() if s["table_id"] == info.table_id]

    with conn.kv_scanner(info).scan(0, batch_size_bytes=4096) as scan:
        first = next(scan)
        assert first.num_rows >= 1
        # The next batch is fetched while the first is consumed: the session is one batch on.
        wait_until(lambda: mine() and mine()[0]["rows_served"] > first.num_rows, 10,
                   "the batch fetched ahead")
        [session] = mine()
        assert session["next_row"] == session["rows_served"]
    assert mine() == []


def test_a_short_circuit_read_maps_the_file_and_falls_back_when_it_cannot(conn, pk_table,
                                                                          monkeypatch):
    """On the tablet's host a scan reads the snapshot file itself (no session on the server);
    a file this process cannot open is read over the connection instead, exactly."""
    from fluss_spark.client.embedded.kv_scanner import KvScanner
    from fluss_spark.protocol.snapshot_file import SnapshotFile
    info, snap = pk_table
    expected = snapshot_file_rows(snap.path)
    opened, real = [], SnapshotFile.open_local
    monkeypatch.setattr(SnapshotFile, "open_local",
                        classmethod(lambda cls, path: opened.append(path) or real(path)))
    scanner = KvScanner(conn, info, short_circuit=True)
    with scanner.scan(0, projection=["name", "id"], start_row=1_000, limit=15_000) as scan:
        first = next(scan)
        assert not [s for s in conn.admin().list_scanners() if s["table_id"] == info.table_id]
        got = pa.Table.from_batches([first, *scan])
    assert got.equals(expected.select(["name", "id"]).slice(1_000, 15_000))
    assert opened == [snap.path] and scan.log_offset == snap.log_offset

    def refused(cls, path):
        raise PermissionError(13, "Permission denied", path)
    monkeypatch.setattr(SnapshotFile, "open_local", classmethod(refused))
    scan = scanner.scan(0, batch_size_bytes=64 * 1024)
    assert scan.read_all().equals(expected)
    assert scanner.short_circuit is False
