"""ScannerManager over real buckets and snapshot files, with an injected clock."""

from __future__ import annotations

import random
import socket
import struct
import threading
import time
import uuid
from dataclasses import asdict

import pyarrow as pa
import pytest

from fluss_spark.transport.client import RpcConnection
from fluss_spark.errors import (InvalidColumnProjection, InvalidScanRequest, KvSnapshotNotExist,
                                NonPrimaryKeyTable, NotLeaderOrFollower, ScannerExpired,
                                TooManyScanners, UnknownScannerId)
from fluss_spark.metadata.layout import SnapshotRecord, TableRecord
from fluss_spark.protocol.api import ApiKey
from fluss_spark.protocol.arrow_ipc import bytes_to_table, serialize_schema
from fluss_spark.protocol.codec import packb, unpackb
from fluss_spark.protocol.messages import ListScannersRequest, ScanKvRequest
from fluss_spark.transport.server import RpcServer
from fluss_spark.server.tablet.bucket import Bucket
from fluss_spark.server.tablet.scanner import ScannerManager
from fluss_spark.server.snapshot_store import snapshot_location
from fluss_spark.server.tablet.snapshot import SnapshotFile, write_snapshot
from fluss_spark.testing.clock import FakeClock

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string()), ("amount", pa.float64())])
TABLE, LOG_TABLE = 1, 2


class FakeServer:
    """Hosts real Bucket objects and registers snapshots the way the tablet server does."""

    server_id = 7

    def __init__(self, root):
        self.root = root
        self.buckets: dict[tuple[int, int], Bucket] = {}
        self.snapshots: dict[tuple[int, int, int], SnapshotRecord] = {}
        self.next_snapshot = 1

    def host(self, table_id: int, bucket: int, primary_key=("id",)) -> Bucket:
        rec = TableRecord(table_id=table_id, name=f"db.t{table_id}",
                          schema=serialize_schema(SCHEMA), primary_key=list(primary_key),
                          bucket_key=["id"])
        b = Bucket(rec, bucket, self.root / f"t{table_id}-b{bucket}")
        self.buckets[(table_id, bucket)] = b
        return b

    def learn_columns(self, bucket, names) -> None:
        pass

    def authorize(self, operation, table_id, action) -> None:
        """Everything is allowed (a PLAINTEXT server): ACLs are tested in test_authorizer.py."""

    def unhost(self, table_id: int, bucket: int) -> None:
        self.buckets.pop((table_id, bucket)).close()

    def bucket(self, table_id: int, bucket: int, partition_id=None) -> Bucket:
        try:
            return self.buckets[(table_id, bucket)]
        except KeyError:
            raise NotLeaderOrFollower(f"bucket {bucket} of table {table_id} is not here") from None

    def snapshot_record(self, table_id, bucket, snapshot_id, partition_id=None):
        return self.snapshots.get((table_id, bucket, snapshot_id))

    def take_snapshot(self, table_id: int, bucket: int) -> SnapshotRecord:
        b = self.buckets[(table_id, bucket)]
        sid, self.next_snapshot = self.next_snapshot, self.next_snapshot + 1
        with b.open_live_view() as view:
            rows = view.row_count()
            loc = snapshot_location(str(self.root / "remote"), table_id, bucket, sid)
            written = write_snapshot(view.iter_batches(None, 1000), SCHEMA, rows, loc,
                                     table_id=table_id, bucket=bucket, snapshot_id=sid,
                                     log_offset=view.log_offset)
            rec = SnapshotRecord(table_id, bucket, sid, written.path, view.log_offset, rows)
        self.snapshots[(table_id, bucket, sid)] = rec
        return rec

    def close(self):
        for b in self.buckets.values():
            b.close()


def rows(ids):
    ids = list(ids)
    return pa.table({"id": ids, "name": [f"name-{i:06d}" for i in ids],
                     "amount": [i * 0.25 for i in ids]}, schema=SCHEMA)


@pytest.fixture
def server(tmp_path):
    srv = FakeServer(tmp_path)
    srv.host(TABLE, 0).write("upsert", rows(range(3000)))
    srv.host(TABLE, 1).write("upsert", rows(range(5)))
    srv.host(LOG_TABLE, 0, primary_key=())
    srv.host(TABLE, 2)                                   # an empty bucket
    yield srv
    srv.close()


@pytest.fixture
def clock():
    return FakeClock(1_000_000)


class WireScannerManager(ScannerManager):
    """The manager as the RPC server drives it, with request and response maps as on the wire."""

    def scan_wire(self, body):
        answer = self.handle_scan(ScanKvRequest.decode(unpackb(packb(body))))
        return unpackb(packb(answer.to_wire()))

    def list_wire(self):
        """Every field of every session, absent ones as None."""
        return asdict(self.handle_list(ListScannersRequest()))


def make_manager(server, clock, **options):
    opts = {"kv.scanner.ttl": 60_000, "kv.scanner.expiration-interval": 1_000}
    opts.update({k.replace("_", "-").replace("kv-scanner-", "kv.scanner."): v
                 for k, v in options.items()})
    return WireScannerManager(server, opts, clock=clock)


@pytest.fixture
def manager(server, clock):
    m = make_manager(server, clock)
    yield m
    m.close_all()


def open_body(snapshot_id=None, *, bucket=0, table_id=TABLE, batch=4096, **extra):
    body = {"table_id": table_id, "bucket": bucket, "call_seq_id": 0, "batch_size_bytes": batch}
    if snapshot_id is not None:
        body["snapshot_id"] = snapshot_id
    body.update(extra)
    return body


def drain(manager, first: dict, batch=None, seq=0) -> tuple[pa.Table, list[dict]]:
    """Continue a session (last call ``seq``) to its end; returns all rows and every response."""
    responses = [first]
    while responses[-1]["has_more"]:
        seq += 1
        body = {"scanner_id": first["scanner_id"], "call_seq_id": seq}
        if batch is not None:
            body["batch_size_bytes"] = batch
        responses.append(manager.scan_wire(body))
    tables = [bytes_to_table(r["records"]) for r in responses]
    return pa.concat_tables(tables), responses


def snapshot_rows(server, rec) -> pa.Table:
    with SnapshotFile.open(rec.path) as f:
        return f.read_slice(0, f.num_rows)


# -- Fluss's scenarios ----------------------------------------------------------------------
def test_new_scan_happy_path_fits_in_one_batch(server, manager):
    rec = server.take_snapshot(TABLE, 1)
    resp = manager.scan_wire(open_body(rec.snapshot_id, bucket=1, batch=1 << 20))
    assert "scanner_id" not in resp                     # nothing left: no session
    assert resp["has_more"] is False
    assert (resp["snapshot_id"], resp["log_offset"]) == (rec.snapshot_id, rec.log_offset)
    assert (resp["row_start"], resp["row_count"]) == (0, 5)
    got = bytes_to_table(resp["records"])
    assert sorted(got.to_pylist(), key=lambda r: r["id"]) == rows(range(5)).to_pylist()
    assert manager.session_count() == 0


def test_multi_batch_continuation_returns_every_row_once_in_key_order(server, manager):
    rec = server.take_snapshot(TABLE, 0)
    first = manager.scan_wire(open_body(rec.snapshot_id, batch=8192))
    assert first["has_more"] and first["scanner_id"]
    assert manager.session_count() == 1
    table, responses = drain(manager, first)
    assert len(responses) > 5
    assert table.equals(snapshot_rows(server, rec))
    starts = [r["row_start"] for r in responses]
    counts = [r["row_count"] for r in responses]
    assert all(c >= 1 for c in counts)
    assert starts == [sum(counts[:i]) for i in range(len(counts))]     # contiguous
    assert all(len(r["records"]) <= 8192 for r in responses)
    assert [r["has_more"] for r in responses] == [True] * (len(responses) - 1) + [False]
    assert manager.session_count() == 0                 # the last batch closed it


def test_explicit_close_ends_the_session(server, manager):
    rec = server.take_snapshot(TABLE, 0)
    first = manager.scan_wire(open_body(rec.snapshot_id, batch=2048))
    sid = first["scanner_id"]
    assert manager.scan_wire({"scanner_id": sid, "close": True})["has_more"] is False
    assert manager.session_count() == 0
    with pytest.raises(ScannerExpired, match="closed by the client"):
        manager.scan_wire({"scanner_id": sid, "call_seq_id": 1})


def test_close_of_gone_or_unknown_scanner_is_a_no_op(server, manager):
    rec = server.take_snapshot(TABLE, 0)
    sid = manager.scan_wire(open_body(rec.snapshot_id, batch=2048))["scanner_id"]
    manager.scan_wire({"scanner_id": sid, "close": True})
    assert manager.scan_wire({"scanner_id": sid, "close": True})["scanner_id"] == sid
    assert manager.scan_wire({"scanner_id": uuid.uuid4().hex, "close": True})["has_more"] is False


def test_unknown_scanner_id(manager):
    with pytest.raises(UnknownScannerId, match="not known to tablet server 7"):
        manager.scan_wire({"scanner_id": "f" * 32, "call_seq_id": 1})


def test_expired_on_recently_evicted_scanner(server, manager, clock):
    rec = server.take_snapshot(TABLE, 0)
    a = manager.scan_wire(open_body(rec.snapshot_id, batch=2048))["scanner_id"]
    b = manager.scan_wire(open_body(rec.snapshot_id, batch=2048))["scanner_id"]
    clock.advance(40_000)
    manager.scan_wire({"scanner_id": b, "call_seq_id": 1})        # b stays active
    clock.advance(30_000)                                           # a idle 70 s > ttl 60 s
    assert manager.evict_expired() == 1
    with pytest.raises(ScannerExpired, match="idle"):
        manager.scan_wire({"scanner_id": a, "call_seq_id": 1})
    assert manager.scan_wire({"scanner_id": b, "call_seq_id": 2})["row_count"] >= 1
    assert [s["scanner_id"] for s in manager.list_wire()["scanners"]] == [b]


def test_bucket_moved_away_mid_scan(server, manager):
    rec = server.take_snapshot(TABLE, 0)
    sid = manager.scan_wire(open_body(rec.snapshot_id, batch=2048))["scanner_id"]
    live = manager.scan_wire(open_body(live=True, batch=2048))["scanner_id"]
    other = server.take_snapshot(TABLE, 1)
    server.unhost(TABLE, 0)
    manager.close_bucket(TABLE, None, 0)
    for s in (sid, live):
        with pytest.raises(ScannerExpired, match="no longer hosts table 1 bucket 0"):
            manager.scan_wire({"scanner_id": s, "call_seq_id": 1})
    with pytest.raises(NotLeaderOrFollower):
        manager.scan_wire(open_body(rec.snapshot_id))
    # Other buckets are untouched.
    assert manager.scan_wire(open_body(other.snapshot_id, bucket=1))["row_count"] == 5


def test_sequence_mismatch_is_rejected_and_the_session_survives(server, manager):
    rec = server.take_snapshot(TABLE, 0)
    first = manager.scan_wire(open_body(rec.snapshot_id, batch=2048))
    sid = first["scanner_id"]
    for bad in (2, 7, 10**6):
        with pytest.raises(InvalidScanRequest, match="expected call_seq_id 1"):
            manager.scan_wire({"scanner_id": sid, "call_seq_id": bad})
    second = manager.scan_wire({"scanner_id": sid, "call_seq_id": 1})
    assert second["row_start"] == first["row_count"]


def test_missing_sequence_is_rejected(server, manager):
    rec = server.take_snapshot(TABLE, 0)
    sid = manager.scan_wire(open_body(rec.snapshot_id, batch=2048))["scanner_id"]
    with pytest.raises(InvalidScanRequest, match="call_seq_id"):
        manager.scan_wire({"scanner_id": sid})
    with pytest.raises(InvalidScanRequest, match="call_seq_id"):
        manager.scan_wire({"scanner_id": sid, "call_seq_id": "1"})
    body = open_body(rec.snapshot_id)
    del body["call_seq_id"]
    with pytest.raises(InvalidScanRequest, match="call_seq_id"):
        manager.scan_wire(body)
    with pytest.raises(InvalidScanRequest, match="call_seq_id 0"):
        manager.scan_wire(open_body(rec.snapshot_id, call_seq_id=1))
    assert manager.scan_wire({"scanner_id": sid, "call_seq_id": 1})["row_count"] >= 1


def test_oversize_batch_is_clamped_to_the_server_maximum(server, clock):
    m = make_manager(server, clock, **{"kv.scanner.max-batch-size": 16 * 1024})
    rec = server.take_snapshot(TABLE, 0)
    first = m.scan_wire(open_body(rec.snapshot_id, batch=10**12))
    table, responses = drain(m, first, batch=2**40)
    assert table.equals(snapshot_rows(server, rec))
    assert len(responses) >= 4
    assert all(len(r["records"]) <= 16 * 1024 for r in responses)
    # Clamped, not shrunk: the batches are filled close to the maximum.
    assert max(len(r["records"]) for r in responses) > 12 * 1024


def test_open_and_scanner_id_together_are_rejected(server, manager):
    rec = server.take_snapshot(TABLE, 0)
    sid = manager.scan_wire(open_body(rec.snapshot_id, batch=2048))["scanner_id"]
    with pytest.raises(InvalidScanRequest, match="not both"):
        manager.scan_wire({**open_body(rec.snapshot_id), "scanner_id": sid})
    with pytest.raises(InvalidScanRequest, match="not both"):
        manager.scan_wire({"scanner_id": sid, "close": True, "table_id": TABLE})
    assert manager.session_count() == 1                 # the session was not touched


def test_too_many_scanners_per_bucket_and_per_server(server, clock):
    m = make_manager(server, clock, **{"kv.scanner.max-per-bucket": 2,
                                       "kv.scanner.max-per-server": 3})
    rec = server.take_snapshot(TABLE, 0)
    live1 = server.take_snapshot(TABLE, 1)
    ids = [m.scan_wire(open_body(rec.snapshot_id, batch=2048))["scanner_id"] for _ in range(2)]
    with pytest.raises(TooManyScanners, match="max-per-bucket=2"):
        m.scan_wire(open_body(rec.snapshot_id, batch=2048))
    # A result that fits in one batch never holds a slot, but is still admitted only with room.
    assert m.scan_wire(open_body(live1.snapshot_id, bucket=1))["row_count"] == 5
    server.buckets[(TABLE, 2)].write("upsert", rows(range(100_000, 103_000)))
    third = m.scan_wire(open_body(live=True, bucket=2, batch=2048))["scanner_id"]
    with pytest.raises(TooManyScanners, match="max-per-server"):
        m.scan_wire(open_body(live=True, bucket=2, batch=2048))
    m.scan_wire({"scanner_id": ids[0], "close": True})
    assert m.scan_wire(open_body(rec.snapshot_id, batch=2048))["has_more"]
    # Idle sessions are evicted to make room when the limit is hit.
    clock.advance(61_000)
    assert m.scan_wire(open_body(rec.snapshot_id, batch=2048))["has_more"]
    with pytest.raises(ScannerExpired):
        m.scan_wire({"scanner_id": third, "call_seq_id": 1})
    m.close_all()


def test_live_scan_is_isolated_from_writes_after_open(server, manager):
    b = server.buckets[(TABLE, 0)]
    before = b.high_watermark
    first = manager.scan_wire(open_body(live=True, batch=4096))
    assert first["log_offset"] == before and first["snapshot_id"] is None
    b.write("upsert", rows(range(2990, 3100)))          # updates and new keys
    b.write("delete", rows(range(0, 1000)))
    table, _ = drain(manager, first)
    assert table.num_rows == 3000
    assert sorted(table.column("id").to_pylist()) == list(range(3000))
    # A new live scan sees the new state and a later log offset.
    resp = manager.scan_wire(open_body(live=True, batch=1 << 20))
    now = bytes_to_table(resp["records"])
    assert sorted(now.column("id").to_pylist()) == list(range(1000, 3100))
    assert resp["log_offset"] == b.high_watermark > before


# -- ours -----------------------------------------------------------------------------------
def test_repeat_of_the_last_sequence_returns_the_identical_batch(server, manager):
    rec = server.take_snapshot(TABLE, 0)
    first = manager.scan_wire(open_body(rec.snapshot_id, batch=2048))
    sid = first["scanner_id"]
    assert manager.scan_wire({"scanner_id": sid, "call_seq_id": 0})["records"] == first["records"]
    one = manager.scan_wire({"scanner_id": sid, "call_seq_id": 1})
    again = manager.scan_wire({"scanner_id": sid, "call_seq_id": 1})
    assert again["records"] == one["records"] and again["row_start"] == one["row_start"]
    with pytest.raises(InvalidScanRequest):             # only the last batch is kept
        manager.scan_wire({"scanner_id": sid, "call_seq_id": 0})
    two = manager.scan_wire({"scanner_id": sid, "call_seq_id": 2})
    assert two["row_start"] == one["row_start"] + one["row_count"]
    # The final batch can be asked for again too (its response may be lost).
    table, responses = drain(manager, {**two, "scanner_id": sid}, seq=2)
    last = responses[-1]
    assert not last["has_more"]
    repeat = manager.scan_wire({"scanner_id": sid, "call_seq_id": 2 + len(responses) - 1})
    assert repeat["records"] == last["records"]


def test_projection_is_applied_on_the_server(server, manager):
    rec = server.take_snapshot(TABLE, 0)
    first = manager.scan_wire(open_body(rec.snapshot_id, batch=4096, projection=["amount", "id"]))
    table, _ = drain(manager, first)
    assert table.schema.names == ["amount", "id"]
    assert table.equals(snapshot_rows(server, rec).select(["amount", "id"]))
    with pytest.raises(InvalidColumnProjection, match="'nope'"):
        manager.scan_wire(open_body(rec.snapshot_id, projection=["id", "nope"]))
    live = manager.scan_wire(open_body(live=True, batch=1 << 20, projection=["name"]))
    assert bytes_to_table(live["records"]).schema.names == ["name"]


def test_limit_caps_rows_across_batches(server, manager):
    rec = server.take_snapshot(TABLE, 0)
    first = manager.scan_wire(open_body(rec.snapshot_id, batch=1024, limit=777))
    table, responses = drain(manager, first)
    assert len(responses) > 2
    assert table.equals(snapshot_rows(server, rec).slice(0, 777))
    empty = manager.scan_wire(open_body(rec.snapshot_id, limit=0))
    assert "scanner_id" not in empty and empty["row_count"] == 0
    assert bytes_to_table(empty["records"]).schema == SCHEMA
    live = manager.scan_wire(open_body(live=True, batch=1024, limit=100, start_row=50))
    table, _ = drain(manager, live)
    assert table.equals(snapshot_rows(server, rec).slice(50, 100))


def test_start_row_resumes_a_snapshot_exactly(server, manager):
    rec = server.take_snapshot(TABLE, 0)
    full = snapshot_rows(server, rec)
    for start in (0, 1, 1234, 2999):
        table, responses = drain(manager, manager.scan_wire(
            open_body(rec.snapshot_id, batch=4096, start_row=start)))
        assert responses[0]["row_start"] == start
        assert table.equals(full.slice(start))
    past = manager.scan_wire(open_body(rec.snapshot_id, start_row=3000))
    assert past["row_count"] == 0 and not past["has_more"] and "scanner_id" not in past


def test_empty_bucket_and_snapshot_errors(server, manager):
    empty = server.take_snapshot(TABLE, 2)
    resp = manager.scan_wire(open_body(empty.snapshot_id, bucket=2))
    assert resp["row_count"] == 0 and "scanner_id" not in resp
    assert manager.scan_wire(open_body(live=True, bucket=2))["row_count"] == 0
    with pytest.raises(KvSnapshotNotExist, match="snapshot 99"):
        manager.scan_wire(open_body(99))
    with pytest.raises(NonPrimaryKeyTable, match="db.t2"):
        manager.scan_wire(open_body(live=True, table_id=LOG_TABLE))
    with pytest.raises(NotLeaderOrFollower):
        manager.scan_wire(open_body(live=True, bucket=5))
    assert manager.session_count() == 0


@pytest.mark.parametrize("body, match", [
    ({}, "either open fields"),
    ([1, 2], "must be a map"),
    ({"call_seq_id": 0, "batch_size_bytes": 10}, "either open fields"),
    (dict(open_body(1), live=True), "not both"),
    ({k: v for k, v in open_body().items()}, "snapshot_id"),
    (open_body(1, batch=0), "positive"),
    (open_body(1, batch=-5), "positive"),
    (open_body(1, batch=2**64 - 1), "too large"),
    (open_body(1, limit=-1), "negative"),
    (open_body(1, start_row=-3), "negative"),
    (open_body(1, start_row=2**60), "too large"),
    (open_body(1, batch="10mb"), "integer"),
    (open_body(1, projection="id"), "list"),
    (open_body(1, projection=[]), "non-empty"),
    (open_body(1, projection=[1]), r"projection\[0\]' must be a string"),
    (open_body(1, projection=["id", "id"]), "twice"),
    (open_body(1, live="yes"), "true or false"),
    (dict(open_body(1), table_id=None), "table_id"),
    (dict(open_body(1), bucket=True), "integer"),
    ({"scanner_id": 12, "call_seq_id": 1}, "scanner_id"),
    ({"scanner_id": "x" * 1000, "call_seq_id": 1}, "scanner_id"),
    ({"scanner_id": "abc", "call_seq_id": -1}, "negative"),
    ({"scanner_id": "abc", "call_seq_id": 1, "batch_size_bytes": 0}, "positive"),
    ({"close": True}, "scanner_id"),
    ({"scanner_id": "abc", "close": "yes"}, "true or false"),
])
def test_hostile_requests_get_invalid_scan_request_and_sessions_keep_working(
        server, manager, body, match):
    rec = server.take_snapshot(TABLE, 0)
    first = manager.scan_wire(open_body(rec.snapshot_id, batch=2048))
    if isinstance(body, dict) and body.get("scanner_id") == "abc":
        body = {**body, "scanner_id": first["scanner_id"]}     # hostile calls on a live session
    with pytest.raises(InvalidScanRequest, match=match):
        manager.scan_wire(body)
    table, _ = drain(manager, first)
    assert table.equals(snapshot_rows(server, rec))


def test_list_scanners_reports_progress(server, manager, clock):
    rec = server.take_snapshot(TABLE, 0)
    first = manager.scan_wire(open_body(rec.snapshot_id, batch=2048))
    clock.advance(500)
    manager.scan_wire({"scanner_id": first["scanner_id"], "call_seq_id": 1})
    clock.advance(200)
    live = manager.scan_wire(open_body(live=True, batch=2048))
    listed = {s["scanner_id"]: s for s in manager.list_wire()["scanners"]}
    s = listed[first["scanner_id"]]
    assert (s["table_id"], s["bucket"], s["snapshot_id"]) == (TABLE, 0, rec.snapshot_id)
    assert (s["age_ms"], s["idle_ms"]) == (700, 200)
    assert s["next_row"] == s["rows_served"] > first["row_count"]
    lv = listed[live["scanner_id"]]
    assert lv["snapshot_id"] is None and lv["live"] and lv["rows_served"] == live["row_count"]


def test_close_all_closes_every_session(server, manager):
    rec = server.take_snapshot(TABLE, 0)
    ids = [manager.scan_wire(open_body(rec.snapshot_id, batch=2048))["scanner_id"],
           manager.scan_wire(open_body(live=True, batch=2048))["scanner_id"]]
    manager.close_all()
    assert manager.session_count() == 0
    for sid in ids:
        with pytest.raises(ScannerExpired, match="stopped"):
            manager.scan_wire({"scanner_id": sid, "call_seq_id": 1})


def test_background_eviction_pass_uses_the_configured_interval(server):
    m = WireScannerManager(server, {"kv.scanner.ttl": "50ms",
                                "kv.scanner.expiration-interval": "20ms"})
    m.start()
    try:
        rec = server.take_snapshot(TABLE, 0)
        sid = m.scan_wire(open_body(rec.snapshot_id, batch=2048))["scanner_id"]
        deadline = time.monotonic() + 5
        while m.session_count() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert m.session_count() == 0
        with pytest.raises(ScannerExpired):
            m.scan_wire({"scanner_id": sid, "call_seq_id": 1})
    finally:
        m.close_all()


def test_concurrent_sessions_are_independent(server, manager):
    rec = server.take_snapshot(TABLE, 0)
    expected = snapshot_rows(server, rec)
    results, errors = {}, []

    def scan(i):
        try:
            live = i % 3 == 0
            first = manager.scan_wire(open_body(None if live else rec.snapshot_id,
                                                  batch=1024 + 512 * i, live=live or None))
            results[i] = drain(manager, first)[0]
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=scan, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors
    assert all(results[i].equals(expected) for i in range(6))
    assert manager.session_count() == 0


def test_garbage_on_the_wire_gets_errors_and_other_sessions_keep_working(server, manager):
    rpc = RpcServer("127.0.0.1", 0, role="tablet", server_id=7)
    manager.register(rpc)
    rpc.start()
    conn = RpcConnection(rpc.host, rpc.port, timeout_s=10)
    try:
        rec = server.take_snapshot(TABLE, 0)
        first = conn.call_raw(ApiKey.SCAN_KV, open_body(rec.snapshot_id, batch=2048))
        rng = random.Random(4)
        for _ in range(20):                             # random frames on their own sockets
            with socket.create_connection((rpc.host, rpc.port), timeout=5) as s:
                junk = rng.randbytes(rng.randint(1, 200))
                s.sendall(struct.pack(">I", len(junk)) + junk)
                s.settimeout(5)
                try:
                    s.recv(1024)
                except OSError:
                    pass
        with pytest.raises(InvalidScanRequest):
            conn.call_raw(ApiKey.SCAN_KV, open_body(rec.snapshot_id, batch=2**64 - 1))
        with pytest.raises(InvalidScanRequest):
            conn.call_raw(ApiKey.SCAN_KV, open_body(rec.snapshot_id, limit=-1))
        seq, parts = 0, [bytes_to_table(first["records"])]
        resp = first
        while resp["has_more"]:
            seq += 1
            resp = conn.call_raw(ApiKey.SCAN_KV, {"scanner_id": first["scanner_id"],
                                              "call_seq_id": seq})
            parts.append(bytes_to_table(resp["records"]))
        assert pa.concat_tables(parts).equals(snapshot_rows(server, rec))
        listed = conn.call_raw(ApiKey.LIST_SCANNERS, {})
        assert listed == {"scanners": []}
    finally:
        conn.close()
        rpc.stop()


def test_closing_a_bucket_while_sessions_are_busy_neither_deadlocks_nor_corrupts(server, clock):
    m = make_manager(server, clock, **{"kv.scanner.max-per-bucket": 50})
    rec = server.take_snapshot(TABLE, 0)
    expected = snapshot_rows(server, rec)
    outcomes, errors = [], []

    def reader(i):
        try:
            first = m.scan_wire(open_body(None if i % 2 else rec.snapshot_id,
                                            live=bool(i % 2) or None, batch=2048))
            table, _ = drain(m, first)
            outcomes.append("done" if table.equals(expected) else "WRONG")
        except (ScannerExpired, NotLeaderOrFollower):
            outcomes.append("closed")
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=reader, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    time.sleep(0.05)
    m.close_bucket(TABLE, None, 0)
    clock.advance(120_000)
    m.evict_expired()
    for t in threads:
        t.join(30)
    assert not any(t.is_alive() for t in threads)
    assert not errors and "WRONG" not in outcomes and len(outcomes) == 8
    assert m.session_count() == 0 or all(o == "done" for o in outcomes)
    m.close_all()


def test_oversized_projection_is_refused_quickly(manager):
    started = time.monotonic()
    with pytest.raises(InvalidScanRequest, match="at most 10000"):
        manager.scan_wire(open_body(1, projection=[f"c{i}" for i in range(200_000)]))
    with pytest.raises(InvalidScanRequest, match="twice: a"):
        manager.scan_wire(open_body(1, projection=["a", "b"] * 4_000))
    assert time.monotonic() - started < 2


# -- short-circuit reads --------------------------------------------------------------------------
def test_a_local_client_gets_the_snapshot_file_and_the_rows_to_read_from_it(server, manager):
    from fluss_spark.transport.dispatch import run_as
    rec = server.take_snapshot(TABLE, 0)
    body = open_body(rec.snapshot_id, start_row=1000, limit=500, local_read=True)
    resp = run_as(None, manager.scan_wire, body, address="127.0.0.1")
    assert resp["local_file"] == rec.path and resp["records"] is None
    assert (resp["row_start"], resp["row_count"], resp["has_more"]) == (1000, 500, False)
    assert (resp["snapshot_id"], resp["log_offset"]) == (rec.snapshot_id, rec.log_offset)
    assert "scanner_id" not in resp and manager.list_wire()["scanners"] == ()
    past_the_end = run_as(None, manager.scan_wire, open_body(rec.snapshot_id, start_row=2990,
                                                             local_read=True),
                          address="127.0.0.1")
    assert past_the_end["row_count"] == 10


def test_a_remote_client_asking_for_the_file_gets_its_rows(server, manager):
    from fluss_spark.transport.dispatch import run_as
    rec = server.take_snapshot(TABLE, 0)
    resp = run_as(None, manager.scan_wire, open_body(rec.snapshot_id, local_read=True),
                  address="192.0.2.7")
    assert "local_file" not in resp and resp["records"] and resp["row_start"] == 0


def test_a_live_scan_cannot_ask_for_a_file(server, manager):
    with pytest.raises(InvalidScanRequest, match="a live scan has none"):
        manager.scan_wire(open_body(live=True, local_read=True))
