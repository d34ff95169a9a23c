"""KvScanner's pager against a real ScannerManager behind an in-process, faulty transport."""

from __future__ import annotations

import gc

import pyarrow as pa
import pytest

from fluss_spark.client.embedded.kv_scanner import KvScanner, LiveScanLost
from fluss_spark.client import TableInfo
from fluss_spark.errors import (ApiError, ConfigError, KvSnapshotNotExist, NetworkError,
                                TooManyScanners)
from fluss_spark.metadata.layout import SnapshotRecord, TableRecord
from fluss_spark.protocol.api import ApiKey
from fluss_spark.protocol.arrow_ipc import serialize_schema
from fluss_spark.protocol.codec import packb, unpackb
from fluss_spark.protocol.messages import (CloseScan, ListKvSnapshotsRequest,
                                           ListKvSnapshotsResponse, ListScannersRequest, OpenScan,
                                           ScanKvRequest)
from fluss_spark.server.metadata_view import snapshot_info
from fluss_spark.server.tablet.bucket import Bucket
from fluss_spark.server.tablet.scanner import ScannerManager
from fluss_spark.server.snapshot_store import snapshot_location
from fluss_spark.server.tablet.snapshot import SnapshotFile, write_snapshot
from fluss_spark.testing.clock import FakeClock

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string()), ("amount", pa.float64())])
TABLE_ID = 3
INFO = TableInfo(table_id=TABLE_ID, name="db.kv", schema=SCHEMA, primary_key=("id",),
                 bucket_key=("id",), num_buckets=2)


class Tablet:
    """A tablet server in a box: real buckets, a real ScannerManager, injectable faults."""

    server_id = 1

    def __init__(self, root):
        self.root = root
        self.clock = FakeClock(0)
        self.buckets, self.snapshots = {}, {}
        # One bucket per record: every test row may go to any bucket (routing is not tested here).
        rec = TableRecord(table_id=TABLE_ID, name="db.kv", schema=serialize_schema(SCHEMA),
                          primary_key=["id"], bucket_key=["id"], num_buckets=1)
        for b in (0, 1):
            self.buckets[b] = Bucket(rec, b, root / f"b{b}")
        self.options = {"kv.scanner.ttl": 10_000}
        self.manager = ScannerManager(self, self.options, clock=self.clock)
        self.calls: list[dict] = []
        self.fail_next = 0          # calls that fail before reaching the server
        self.lose_next = 0          # calls served whose response is lost
        self.on_call = None

    # -- what ScannerManager needs -------------------------------------------------------------
    def bucket(self, table_id, bucket, partition_id=None):
        return self.buckets[bucket]

    def snapshot_record(self, table_id, bucket, snapshot_id, partition_id=None):
        return self.snapshots.get((bucket, snapshot_id))

    def authorize(self, operation, table_id, action) -> None:
        """Everything is allowed (a PLAINTEXT server): ACLs are tested in test_authorizer.py."""

    def learn_columns(self, bucket, names) -> None:
        """The table definitions never change here."""

    # -- test controls -------------------------------------------------------------------------
    def snapshot(self, bucket: int) -> SnapshotRecord:
        sid = len(self.snapshots) + 1
        with self.buckets[bucket].open_live_view() as view:
            n = view.row_count()
            loc = snapshot_location(str(self.root / "remote"), TABLE_ID, bucket, sid)
            w = write_snapshot(view.iter_batches(None, 500), SCHEMA, n, loc, table_id=TABLE_ID,
                               bucket=bucket, snapshot_id=sid, log_offset=view.log_offset)
            rec = SnapshotRecord(TABLE_ID, bucket, sid, w.path, view.log_offset, n)
        self.snapshots[(bucket, sid)] = rec
        return rec

    def restart(self) -> None:
        """Every session is lost, as after kill -9 and restart."""
        self.manager.close_all()
        self.manager = ScannerManager(self, self.options, clock=self.clock)

    def call(self, request, timeout_s=None):
        body = unpackb(packb(request.to_wire()))        # what the wire would carry
        self.calls.append(body)
        if self.on_call is not None:
            self.on_call(self, body)
        if self.fail_next:
            self.fail_next -= 1
            raise NetworkError("connection refused (injected)")
        if request.API_KEY == ApiKey.SCAN_KV:
            answer = self.manager.handle_scan(ScanKvRequest.decode(body))
        else:
            answer = self.manager.handle_list(ListScannersRequest.decode(body))
        resp = request.decode_response(unpackb(packb(answer.to_wire())))
        if self.lose_next:
            self.lose_next -= 1
            raise NetworkError("connection reset before the response (injected)")
        return resp

    def close(self):
        self.manager.close_all()
        for b in self.buckets.values():
            b.close()


class FakeConn:
    """The FlussConnection methods KvScanner uses, routed to one in-process tablet."""

    def __init__(self, tablet):
        self.tablet = tablet
        self.retries = 0

    def tablet_for(self, table_id, bucket, partition_id=None):
        return self.tablet

    def refresh_table(self, name):
        return INFO

    def retry(self, op, refresh):
        for _ in range(50):
            try:
                return op()
            except ApiError as e:
                if not e.retriable or isinstance(e, TooManyScanners):
                    raise
                self.retries += 1
                refresh()
        return op()

    def call_coordinator(self, request):
        assert isinstance(request, ListKvSnapshotsRequest) and request.latest_only
        recs = [r for (b, _), r in self.tablet.snapshots.items() if b == request.bucket]
        latest = max(recs, key=lambda r: r.snapshot_id) if recs else None
        return ListKvSnapshotsResponse(() if latest is None else (snapshot_info(latest),))


def rows(ids):
    ids = list(ids)
    return pa.table({"id": ids, "name": [f"row-{i}" for i in ids],
                     "amount": [float(i) for i in ids]}, schema=SCHEMA)


@pytest.fixture
def tablet(tmp_path):
    t = Tablet(tmp_path)
    t.buckets[0].write("upsert", rows(range(2000)))
    yield t
    t.close()


@pytest.fixture
def scanner(tablet):
    # No fetching ahead: these tests inject faults at exact calls of a session.
    return KvScanner(FakeConn(tablet), INFO, sleep=lambda s: None, prefetch=False)


def file_rows(rec) -> pa.Table:
    with SnapshotFile.open(rec.path) as f:
        return f.read_slice(0, f.num_rows)


def test_pages_through_the_latest_snapshot_and_reports_its_offsets(tablet, scanner):
    tablet.snapshot(0)
    tablet.buckets[0].write("upsert", rows(range(2000, 2100)))
    rec = tablet.snapshot(0)
    scan = scanner.scan(0, batch_size_bytes=4096)
    table = scan.read_all()
    assert table.equals(file_rows(rec))
    assert table.num_rows == 2100
    assert (scan.snapshot_id, scan.log_offset, scan.rows) == (rec.snapshot_id, rec.log_offset,
                                                              2100)
    assert len([c for c in tablet.calls if "scanner_id" in c]) > 5     # really paged
    assert tablet.manager.session_count() == 0


def test_no_snapshot_yet_is_a_clear_error(tablet, scanner):
    with pytest.raises(KvSnapshotNotExist, match="bucket 1 of table db.kv has no KV snapshot"):
        list(scanner.scan(1))


def test_lost_response_is_retried_with_the_same_sequence(tablet, scanner):
    rec = tablet.snapshot(0)
    scan = scanner.scan(0, snapshot_id=rec.snapshot_id, batch_size_bytes=4096)
    got = [next(scan), next(scan)]
    tablet.lose_next = 1
    got.extend(scan)
    assert pa.Table.from_batches(got).equals(file_rows(rec))
    seqs = [c["call_seq_id"] for c in tablet.calls if "scanner_id" in c]
    assert seqs[:4] == [1, 2, 2, 3]                     # the repeat got the identical batch
    assert scan.resumes == 0


@pytest.mark.parametrize("fault", ["restart", "evicted", "network-down", "restart-after-loss"])
def test_snapshot_scan_resumes_at_the_next_row_without_duplicates_or_gaps(tablet, scanner, fault):
    rec = tablet.snapshot(0)
    scan = scanner.scan(0, snapshot_id=rec.snapshot_id, batch_size_bytes=2048)
    got = [next(scan) for _ in range(3)]
    if fault == "restart":
        tablet.restart()                                # -> UnknownScannerId
    elif fault == "evicted":
        tablet.clock.advance(20_000)
        tablet.manager.evict_expired()                  # -> ScannerExpired
    elif fault == "network-down":
        tablet.fail_next = 5                            # continues fail, then the open retries
    else:
        tablet.lose_next = 1                            # a response is lost, then the server

        def restart_before_the_repeat(t, body):         # restarts before the repeat arrives
            if t.lose_next == 0:
                t.on_call = None
                t.restart()
        tablet.on_call = restart_before_the_repeat
    got.extend(scan)
    table = pa.Table.from_batches(got)
    assert table.equals(file_rows(rec))
    assert scan.resumes == 1
    reopen = [c for c in tablet.calls if c.get("start_row")]
    assert reopen[0]["start_row"] == sum(b.num_rows for b in got[:3])
    assert tablet.manager.session_count() == 0


def test_resume_keeps_start_row_limit_and_projection(tablet, scanner):
    rec = tablet.snapshot(0)
    scan = scanner.scan(0, snapshot_id=rec.snapshot_id, start_row=100, limit=900,
                        projection=["name"], batch_size_bytes=1024)
    got = [next(scan), next(scan)]
    done = sum(b.num_rows for b in got)
    tablet.restart()
    got.extend(scan)
    assert pa.Table.from_batches(got).equals(file_rows(rec).select(["name"]).slice(100, 900))
    reopen = [c for c in tablet.calls if c.get("start_row", 0) > 100][0]
    assert (reopen["start_row"], reopen["limit"]) == (100 + done, 900 - done)
    assert reopen["snapshot_id"] == rec.snapshot_id and reopen["projection"] == ["name"]


def test_live_scan_loss_is_a_clear_error(tablet, scanner):
    scan = scanner.scan(0, live=True, batch_size_bytes=2048)
    next(scan)
    assert scan.snapshot_id is None and scan.log_offset == tablet.buckets[0].high_watermark
    tablet.restart()
    with pytest.raises(LiveScanLost, match="live scans are not resumable"):
        list(scan)


def test_live_scan_reads_current_state(tablet, scanner):
    tablet.buckets[0].write("delete", rows(range(0, 1500)))
    table = scanner.scan(0, live=True, batch_size_bytes=1024).read_all()
    assert sorted(table.column("id").to_pylist()) == list(range(1500, 2000))


def test_open_retries_too_many_scanners_with_backoff(tablet):
    tablet.options["kv.scanner.max-per-bucket"] = 1
    tablet.restart()
    rec = tablet.snapshot(0)
    sleeps = []
    blocker = tablet.manager.handle_scan(OpenScan(table_id=TABLE_ID, bucket=0, call_seq_id=0,
                                                  snapshot_id=rec.snapshot_id,
                                                  batch_size_bytes=1024))

    def sleep(s):
        sleeps.append(s)
        if len(sleeps) == 3:                            # the other reader finishes
            tablet.manager.handle_scan(CloseScan(scanner_id=blocker.scanner_id))

    scanner = KvScanner(FakeConn(tablet), INFO, sleep=sleep, prefetch=False)
    assert scanner.scan(0, snapshot_id=rec.snapshot_id).read_all().num_rows == 2000
    assert sleeps == [0.05, 0.1, 0.2]


def test_too_many_scanners_gives_up_after_the_open_timeout(tablet):
    tablet.options["kv.scanner.max-per-bucket"] = 1
    tablet.restart()
    rec = tablet.snapshot(0)
    tablet.manager.handle_scan(OpenScan(table_id=TABLE_ID, bucket=0, call_seq_id=0,
                                        snapshot_id=rec.snapshot_id, batch_size_bytes=1024))
    clock = FakeClock(0)
    scanner = KvScanner(FakeConn(tablet), INFO, open_timeout_s=2, sleep=clock.sleep,
                        clock=clock.seconds)
    with pytest.raises(TooManyScanners):
        list(scanner.scan(0, snapshot_id=rec.snapshot_id))
    assert 1 <= clock.seconds() <= 2


def test_abandoned_scan_closes_its_session(tablet, scanner):
    rec = tablet.snapshot(0)
    with scanner.scan(0, snapshot_id=rec.snapshot_id, batch_size_bytes=1024) as scan:
        next(scan)
        assert tablet.manager.session_count() == 1
    assert tablet.manager.session_count() == 0
    assert tablet.calls[-1]["close"] is True
    scan = scanner.scan(0, snapshot_id=rec.snapshot_id, batch_size_bytes=1024)
    next(scan)
    del scan
    gc.collect()
    assert tablet.manager.session_count() == 0


def test_empty_bucket_yields_nothing_but_reports_offsets(tablet, scanner):
    rec = tablet.snapshot(1)
    scan = scanner.scan(1)
    table = scan.read_all()
    assert table.num_rows == 0 and table.schema == SCHEMA
    assert (scan.snapshot_id, scan.log_offset) == (rec.snapshot_id, 0)


def test_bad_arguments_fail_before_any_call(tablet, scanner):
    for kwargs in ({"live": True, "snapshot_id": 1}, {"limit": -1}, {"start_row": -1},
                   {"batch_size_bytes": 0}, {"batch_size_bytes": "4mb"}):
        with pytest.raises(ConfigError):
            scanner.scan(0, **kwargs)
    with pytest.raises(ConfigError, match="buckets 0..1"):
        scanner.scan(2)
    assert tablet.calls == []


def test_fetching_ahead_returns_the_same_rows_and_closes_a_session_left_early(tablet):
    rec = tablet.snapshot(0)
    ahead = KvScanner(FakeConn(tablet), INFO, sleep=lambda s: None, prefetch=True)
    scan = ahead.scan(0, snapshot_id=rec.snapshot_id, batch_size_bytes=2048)
    assert scan.read_all().equals(file_rows(rec))
    assert tablet.manager.session_count() == 0
    early = ahead.scan(0, snapshot_id=rec.snapshot_id, batch_size_bytes=2048)
    next(early)
    next(early)                      # the third batch is being fetched meanwhile
    early.close()
    assert tablet.manager.session_count() == 0
    seqs = [c["call_seq_id"] for c in tablet.calls if "scanner_id" in c and "close" not in c]
    assert seqs[-2:] == [1, 2]       # nothing asked twice


class Pipelining:
    """The tablet behind a connection that can open pipelined connections of its own."""

    def __init__(self, tablet):
        self.tablet = tablet
        self.pipelines: list[FakePipeline] = []
        self.shared: list = []                          # requests on the shared connection

    def call(self, request, timeout_s=None):
        self.shared.append(request)
        return self.tablet.call(request, timeout_s)

    def pipeline(self, window_bytes=None):
        assert window_bytes >= 2 * 2048                 # two pages in flight
        self.pipelines.append(FakePipeline(self.tablet))
        return self.pipelines[-1]


class FakePipeline:
    """A connection of its own to the tablet: each request is served as it is sent (a server
    answers it once the previous reply is out), its response read later, in order; a lost
    response loses the connection and every response after it."""

    def __init__(self, tablet):
        self.tablet = tablet
        self.answers: list = []
        self.sent: list = []
        self.most_in_flight = 0
        self.closed = False

    def send(self, request):
        assert not self.closed
        self.sent.append(request)
        try:
            self.answers.append(self.tablet.call(request))
        except ApiError as e:
            self.answers.append(e)
        self.most_in_flight = max(self.most_in_flight, len(self.answers))

    def receive(self):
        answer = self.answers.pop(0)
        if isinstance(answer, NetworkError):
            self.answers.clear()
            raise answer
        if isinstance(answer, ApiError):
            raise answer
        return answer

    def close(self):
        self.closed = True


def pipelining_scanner(tablet, pipelining=None):
    conn = FakeConn(tablet)
    pipelining = pipelining or Pipelining(tablet)
    conn.tablet_for = lambda *a: pipelining
    return KvScanner(conn, INFO, sleep=lambda s: None, prefetch=True)


def test_pages_asked_ahead_are_the_file_in_order_and_never_past_two_in_flight(tablet):
    rec = tablet.snapshot(0)
    pipelining = Pipelining(tablet)
    scanner = pipelining_scanner(tablet, pipelining)
    scan = scanner.scan(0, snapshot_id=rec.snapshot_id, batch_size_bytes=2048)
    assert scan.read_all().equals(file_rows(rec))
    pages = [c["call_seq_id"] for c in tablet.calls if "scanner_id" in c]
    # Every page asked for once, in order, one past the last (answered "already finished").
    assert pages == list(range(1, len(pages) + 1)) and len(pages) > 5
    assert [p.most_in_flight for p in pipelining.pipelines] == [2]
    assert pipelining.pipelines[0].closed
    # The open went on the scan's own connection too: nothing on the shared one.
    assert isinstance(pipelining.pipelines[0].sent[0], OpenScan) and pipelining.shared == []
    assert tablet.manager.session_count() == 0
    early = scanner.scan(0, snapshot_id=rec.snapshot_id, batch_size_bytes=2048)
    next(early)
    next(early)
    early.close()                   # its connection is dropped and its session closed
    assert tablet.manager.session_count() == 0
    assert tablet.calls[-1].get("close") is True


def test_a_connection_lost_after_the_server_served_ahead_resumes_by_row(tablet):
    rec = tablet.snapshot(0)
    pipelining = Pipelining(tablet)
    scanner = pipelining_scanner(tablet, pipelining)
    scan = scanner.scan(0, snapshot_id=rec.snapshot_id, batch_size_bytes=2048)
    got = [next(scan), next(scan)]
    # Page 2's response is lost with the connection, after page 3 was served: asking for page 2
    # again is refused (the server moved on), so the scan reopens at its next row.
    tablet.lose_next = 1
    got.extend(scan)
    assert pa.Table.from_batches(got).equals(file_rows(rec))
    assert scan.resumes == 1
    # The reopen went on a new connection of the scan's own; the lost one was closed.
    first, second = pipelining.pipelines
    assert first.closed and second.closed and isinstance(second.sent[0], OpenScan)
    assert [type(r) for r in pipelining.shared] == [CloseScan]      # the lost session freed
    assert tablet.manager.session_count() == 0
