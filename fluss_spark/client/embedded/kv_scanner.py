"""KvScanner: pages through a bucket's KV snapshot (or live state) over tablet scan sessions.

A snapshot is immutable and key-ordered, so a snapshot scan survives anything that loses its
session — a dropped connection, a restarted or replaced tablet server, an evicted session — by
reopening at the next row (``start_row``): no row is yielded twice and none is skipped. A lost
response is first retried with the same ``call_seq_id``, which the server answers with the
identical batch. A live scan reads a point-in-time view that dies with its session, so there a
lost session is an error.

Short-circuit reads: on the tablet server's own host, a snapshot scan asks for the snapshot's
file instead of its rows (``local_read``); where the server answers with it (a local file in the
table's current schema, a client the server sees on its host) the client maps the file and
reads the rows itself, without a socket, as HDFS's short-circuit reads do. The open is checked
like any other (the table's ACLs, the snapshot registered); the lease keeps the file. A file the
client cannot open (another user, another mount) turns short-circuit reads off for the scanner
and the rows come over the connection.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable, Generator, Iterator

import pyarrow as pa

from fluss_spark import config
from fluss_spark.client.cluster import LiveScanStart
from fluss_spark.client.embedded import partitions
from fluss_spark.client.embedded.pages_ahead import DEFAULT_DEPTH, PagesAhead
from fluss_spark.errors import (ApiError, ConfigError, FlussError, KvSnapshotNotExist,
                                LiveScanLost, NetworkError, ScannerExpired, TooManyScanners,
                                UnknownScannerId)
from fluss_spark.protocol.arrow_ipc import bytes_to_table
from fluss_spark.protocol.ipc_limits import CLIENT_IPC_LIMITS, IpcLimits
from fluss_spark.protocol.messages import (CloseScan, ContinueScan, ListKvSnapshotsRequest,
                                           OpenScan, ScanKvResponse, SnapshotInfo)
from fluss_spark.protocol.snapshot_file import SnapshotFile
from fluss_spark.retry import Backoff

log = logging.getLogger(__name__)

DEFAULT_BATCH_SIZE_BYTES = 4 << 20
#: A close is a courtesy: never wait long for it (the server evicts idle sessions anyway).
_CLOSE_TIMEOUT_S = 5.0


_PREFETCHER: ThreadPoolExecutor | None = None
_PREFETCHER_LOCK = threading.Lock()


def _prefetcher() -> ThreadPoolExecutor:
    """The process's threads that fetch scan batches ahead (they wait on sockets, not the GIL)."""
    global _PREFETCHER
    with _PREFETCHER_LOCK:
        if _PREFETCHER is None:
            _PREFETCHER = ThreadPoolExecutor(max_workers=32, thread_name_prefix="kv-prefetch")
        return _PREFETCHER


def _settle(ahead: Future | None, scanner_id: str | None) -> str | None:
    """Wait for a fetch ahead that a stopped scan no longer needs; the session id to close
    (None when that fetch was the last batch, which closed the session on the server)."""
    if ahead is None:
        return scanner_id
    try:
        resp = ahead.result()
    except Exception:  # noqa: BLE001 - the scan is over; its session is closed below anyway
        return scanner_id
    return scanner_id if resp is not None and resp.has_more else None


class KvScan:
    """One scan of one bucket: iterate it for ``pyarrow.RecordBatch`` es.

    After (or during) iteration, ``snapshot_id`` and ``log_offset`` say what was read: the
    changelog continues at ``log_offset``. ``rows`` counts the rows yielded, ``resumes`` how
    often the scan reopened after losing its session. Closing it (or dropping it, or leaving a
    ``with`` block) closes the server session.
    """

    def __init__(self, gen_factory: Callable[["KvScan"], Generator[pa.RecordBatch, None, None]],
                 *, bucket: int, snapshot_id: int | None, live: bool):
        self.bucket = bucket
        self.snapshot_id = snapshot_id
        self.live = live
        self.log_offset: int | None = None
        self.schema: pa.Schema | None = None
        self.rows = 0
        self.resumes = 0
        self._gen = gen_factory(self)

    def __iter__(self) -> "KvScan":
        return self

    def __next__(self) -> pa.RecordBatch:
        return next(self._gen)

    def read_all(self) -> pa.Table:
        """Every remaining row as one table."""
        batches = list(self)
        if batches:
            return pa.Table.from_batches(batches)
        return (self.schema or pa.schema([])).empty_table()

    def close(self) -> None:
        self._gen.close()

    def __enter__(self) -> "KvScan":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        try:
            self._gen.close()
        except Exception:  # noqa: BLE001 - best effort at garbage collection
            pass


class KvScanner:
    """Scans the KV state of a primary-key table, one bucket at a time.

    Parameters
    ----------
    conn:
        A ``FlussConnection``.
    table_info:
        The table (``TableInfo``).
    partition:
        The partition of a partitioned table to scan (its name or spec, ``dt=2026-11-25``).
    continue_retries:
        How many times a continue is repeated after a lost response before the session is
        considered lost.
    open_timeout_s:
        How long an open keeps retrying ``TooManyScanners`` (on top of the connection's own
        retries).
    prefetch:
        Ask for a session's next batches while the current one is consumed: a snapshot scan
        keeps two requests in flight on a connection of its own (``PagesAhead``), a live scan
        one on the shared connection.
    """

    def __init__(self, conn, table_info, *, continue_retries: int = 2,
                 open_timeout_s: float = 60.0, sleep: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.monotonic, prefetch: bool = True,
                 partition: str | None = None, short_circuit: bool | None = None):
        self._conn = conn
        self.table = table_info
        part = partitions.lookup(conn, table_info, partition)
        self.partition_id = None if part is None else part.partition_id
        #: Names the scan's place in messages: ``db.t`` or ``db.t partition p``.
        self.where = (table_info.name if part is None
                      else f"{table_info.name} partition {part.name}")
        # What a server's response may make this client decode (a test's stand-in for the
        # connection may carry no limits of its own).
        self.ipc_limits: IpcLimits = getattr(conn, "ipc_limits", CLIENT_IPC_LIMITS)
        self.prefetch = prefetch
        #: Ask for snapshot files on the tablet's host (see the module docstring); by default
        #: as the connection says.
        self.short_circuit = (bool(getattr(conn, "short_circuit_reads", False))
                              if short_circuit is None else short_circuit)
        self.continue_retries = continue_retries
        self.open_timeout_s = open_timeout_s
        self._sleep, self._clock = sleep, clock

    def latest_snapshot(self, bucket: int) -> SnapshotInfo:
        """The bucket's newest registered snapshot, or KvSnapshotNotExist."""
        resp = self._conn.call_coordinator(ListKvSnapshotsRequest(
            table_id=self.table.table_id, bucket=bucket, latest_only=True,
            partition_id=self.partition_id))
        mine = [s for s in resp.snapshots if s.bucket == bucket]
        if not mine:
            raise KvSnapshotNotExist(
                f"bucket {bucket} of table {self.where} has no KV snapshot yet; trigger "
                "one (fluss-spark snapshot trigger) or scan the live state (live=True)")
        return max(mine, key=lambda s: s.snapshot_id)

    def scan(self, bucket: int, snapshot_id: int | None = None, live: bool = False,
             projection: list[str] | None = None, limit: int | None = None, start_row: int = 0,
             batch_size_bytes: int = DEFAULT_BATCH_SIZE_BYTES) -> KvScan:
        """Page through one bucket; returns an iterator of Arrow record batches (a ``KvScan``).

        Parameters
        ----------
        bucket:
            The bucket to read.
        snapshot_id:
            The KV snapshot to read; None (and not ``live``) reads the bucket's latest snapshot.
        live:
            Read a point-in-time view of the current state instead of a snapshot.
        projection:
            Column names to read (server-side projection); None reads every column.
        limit:
            Most rows to return; None for all.
        start_row:
            First row (in key order) to return; a snapshot scan resumes exactly here.
        batch_size_bytes:
            Target size of each batch the server sends (it clamps it to its maximum).
        """
        if live and snapshot_id is not None:
            raise ConfigError("give either snapshot_id or live=True, not both")
        for name, value, low in (("limit", limit, 0), ("start_row", start_row, 0),
                                 ("batch_size_bytes", batch_size_bytes, 1)):
            if value is not None and (not isinstance(value, int) or isinstance(value, bool)
                                      or value < low):
                raise ConfigError(f"{name} must be an integer >= {low}, got {value!r}")
        if projection is not None:
            projection = list(projection)
        if not 0 <= bucket < self.table.num_buckets:
            raise ConfigError(f"table {self.where} has buckets 0..{self.table.num_buckets - 1}"
                              f", not {bucket}")
        return KvScan(lambda scan: self._pages(scan, projection, limit, start_row,
                                               batch_size_bytes),
                      bucket=bucket, snapshot_id=snapshot_id, live=live)

    # -- the pager ------------------------------------------------------------------------------
    def _pages(self, scan: KvScan, projection, limit, start_row,
               batch_size) -> Generator[pa.RecordBatch, None, None]:
        if not scan.live and scan.snapshot_id is None:
            latest = self.latest_snapshot(scan.bucket)
            scan.snapshot_id = latest.snapshot_id
            scan.log_offset = latest.log_offset
        rpc, scanner_id, seq, has_more, lost = None, None, 0, True, None
        ahead: Future | None = None
        pages: PagesAhead | None = None
        # A snapshot scan paging ahead opens on the connection its pages then come on.
        own = _OwnChannel(self._window(batch_size)) if self.prefetch and not scan.live else None
        try:
            while has_more:
                expected = start_row + scan.rows
                if scanner_id is None:
                    if pages is not None:             # its requests were for the lost session
                        assert own is not None
                        own.close()
                        pages = None
                    remaining = None if limit is None else limit - scan.rows
                    local_read = self.short_circuit and not scan.live
                    rpc, resp = self._open(scan.bucket, scan.snapshot_id, scan.live, projection,
                                           remaining, expected, batch_size,
                                           local_read=local_read,
                                           channel=None if local_read else own)
                    seq = 0
                    if lost is not None:              # the server may still hold it: free it
                        self._close_session(*lost)
                        lost = None
                    if resp.local_file is not None:
                        local = self._local_batches(scan, resp, projection)
                        if local is None:             # not readable here: over the connection
                            continue
                        has_more = False
                        for batch in local:
                            scan.rows += batch.num_rows
                            yield batch
                        continue
                else:
                    seq += 1
                    if pages is not None:
                        resp = pages.take(seq)
                    elif ahead is not None:
                        resp, ahead = ahead.result(), None
                    else:
                        resp = self._continue(scan, rpc, scanner_id, seq, batch_size)
                    if resp is None:                  # session lost: reopen at the next row
                        lost, scanner_id = (rpc, scanner_id), None
                        scan.resumes += 1
                        continue
                has_more = resp.has_more
                scanner_id = resp.scanner_id if has_more else None
                if resp.log_offset is not None:
                    scan.log_offset = resp.log_offset
                if scanner_id is not None and self.prefetch:
                    # The server cuts the next batch while this one is consumed.
                    if pages is None and own is not None:
                        pages = self._pages_ahead(rpc, own, scanner_id, seq + 1, batch_size)
                    if pages is None:
                        ahead = _prefetcher().submit(self._continue, scan, rpc, scanner_id,
                                                     seq + 1, batch_size)
                batches = self._batches(scan, resp, expected)
                del resp                              # its page's buffer is free once consumed
                for batch in batches:
                    scan.rows += batch.num_rows
                    yield batch
        finally:
            if own is not None:
                own.close()                           # with the pages still in flight on it
            scanner_id = _settle(ahead, scanner_id)
            if scanner_id is not None and rpc is not None:
                self._close_session(rpc, scanner_id)

    @staticmethod
    def _window(batch_size: int) -> int:
        """What the pages in flight add up to (a server clamps larger asks, by default to
        kv.scanner.max-batch-size, and cuts pages a little under what is asked)."""
        return DEFAULT_DEPTH * min(batch_size, config.SCANNER_MAX_BATCH_SIZE.default)

    def _pages_ahead(self, rpc, own: "_OwnChannel", scanner_id: str, first_seq: int,
                     batch_size: int) -> PagesAhead | None:
        """The session's next pages asked for on the scan's own connection; None where the
        connection cannot make one (then a thread fetches one page ahead)."""
        channel = own.to(rpc)
        if channel is None:
            return None
        return PagesAhead(channel, scanner_id, first_seq, batch_size,
                          retries=self.continue_retries, sleep=self._sleep)

    def _close_session(self, rpc, scanner_id: str) -> None:
        """Best effort: a session left open is evicted by the server after kv.scanner.ttl."""
        try:
            rpc.call(CloseScan(scanner_id=scanner_id), timeout_s=_CLOSE_TIMEOUT_S)
        except Exception as e:  # noqa: BLE001
            log.debug("closing scan session %s failed: %s", scanner_id, e)

    # -- live scans opened in one place and read in another ---------------------------------------
    def open_live(self, bucket: int, batch_size_bytes: int = 1) -> LiveScanStart:
        """Open a live scan and return where it stands (``read_live`` reads the rest)."""
        _, resp = self._open(bucket, None, True, None, None, 0, batch_size_bytes)
        if resp.log_offset is None:
            raise FlussError(f"live scan of {self.where} bucket {bucket}: the tablet "
                             "server did not say which changelog offset the scan reflects")
        return LiveScanStart(log_offset=resp.log_offset,
                             scanner_id=resp.scanner_id if resp.has_more else None,
                             records=resp.records or b"", has_more=resp.has_more)

    def read_live(self, bucket: int, start: LiveScanStart, projection: list[str] | None = None,
                  batch_size_bytes: int = DEFAULT_BATCH_SIZE_BYTES) -> KvScan:
        """The rows of the live scan ``start`` opened (perhaps in another process): its first
        rows, then its session to the end; ``LiveScanLost`` when the session is gone."""
        return KvScan(lambda scan: self._live_pages(scan, start, projection, batch_size_bytes),
                      bucket=bucket, snapshot_id=None, live=True)

    def _live_pages(self, scan: KvScan, start: LiveScanStart, projection,
                    batch_size: int) -> Generator[pa.RecordBatch, None, None]:
        scan.log_offset = start.log_offset
        scanner_id = start.scanner_id if start.has_more else None
        rpc = (self._conn.tablet_for(self.table.table_id, scan.bucket, self.partition_id)
               if scanner_id else None)

        def fetch(sid: str, seq: int) -> ScanKvResponse:
            try:
                resp = self._continue(scan, rpc, sid, seq, batch_size)
            except ApiError as e:          # any failure of a continue ends a live session
                raise LiveScanLost(
                    f"live scan of table {self.where} bucket {scan.bucket} lost its "
                    f"session {sid} at call {seq} ({type(e).__name__}: {e})") from e
            assert resp is not None        # a live scan raises instead of asking to reopen
            return resp

        seq = 0
        ahead: Future | None = None
        records = start.records
        try:
            while True:
                if scanner_id is not None and self.prefetch:
                    ahead = _prefetcher().submit(fetch, scanner_id, seq + 1)
                if records:
                    for batch in self._decode(records, scan.bucket).to_batches():
                        if batch.num_rows:
                            batch = batch.select(projection) if projection else batch
                            scan.rows += batch.num_rows
                            yield batch
                if scanner_id is None:
                    return
                seq += 1
                if ahead is not None:
                    resp, ahead = ahead.result(), None
                else:
                    resp = fetch(scanner_id, seq)
                records = resp.records
                if not resp.has_more:
                    scanner_id = None
        finally:
            scanner_id = _settle(ahead, scanner_id)
            if scanner_id is not None and rpc is not None:
                self._close_session(rpc, scanner_id)

    def _open(self, bucket: int, snapshot_id: int | None, live: bool, projection, limit,
              start_row, batch_size, local_read: bool = False,
              channel: "_OwnChannel | None" = None):
        """(the tablet's connection, the open's response); with ``channel``, the open goes on
        the scan's own connection to that tablet where it can make one."""
        request = OpenScan(
            table_id=self.table.table_id, bucket=bucket, batch_size_bytes=batch_size,
            call_seq_id=0, snapshot_id=None if live else snapshot_id, live=live,
            projection=tuple(projection) if projection is not None else None, limit=limit,
            start_row=start_row, partition_id=self.partition_id, local_read=local_read or None)

        def attempt():
            rpc = self._conn.tablet_for(self.table.table_id, bucket, self.partition_id)
            own = channel.to(rpc) if channel is not None else None
            if own is None:
                return rpc, rpc.call(request)
            # No turn on the shared connection (a fresh one starts with a small window and
            # reads a page into a new buffer): the first page comes the way the rest will.
            own.send(request)
            return rpc, own.receive()

        # Past the connection's own retries, a full server is waited for a while longer: its
        # sessions end as their scans finish or go idle.
        deadline = self._clock() + self.open_timeout_s
        for delay in Backoff().delays():
            try:
                return self._conn.retry(attempt, lambda: self._conn.refresh_table(self.table.name))
            except TooManyScanners:
                if self._clock() + delay > deadline:
                    raise
            self._sleep(delay)

    def _continue(self, scan: KvScan, rpc, scanner_id: str, seq: int,
                  batch_size) -> ScanKvResponse | None:
        """The next batch; None when the session is lost and a snapshot scan should reopen."""
        request = ContinueScan(scanner_id=scanner_id, call_seq_id=seq,
                               batch_size_bytes=batch_size)
        error: ApiError            # set by every attempt that does not return
        for attempt in range(self.continue_retries + 1):
            try:
                return rpc.call(request)
            except NetworkError as e:
                error = e
                if attempt < self.continue_retries:
                    # The same call_seq_id again: the server repeats the batch if it had served it.
                    self._sleep(0.05 * (attempt + 1))
            except (ScannerExpired, UnknownScannerId) as e:
                error = e
                break
        if scan.live:
            raise LiveScanLost(
                f"live scan of table {self.where} bucket {scan.bucket} lost its session "
                f"after {scan.rows} rows ({type(error).__name__}: {error}); live scans are not "
                "resumable: start the scan again, or scan a snapshot, which resumes by row")
        log.info("scan of %s bucket %d snapshot %s lost its session after %d rows (%s); "
                 "reopening at the next row", self.where, scan.bucket, scan.snapshot_id,
                 scan.rows, type(error).__name__)
        return None

    def _local_batches(self, scan: KvScan, resp: ScanKvResponse,
                       projection) -> Iterator[pa.RecordBatch] | None:
        """The rows a short-circuit open named, read from the mapped snapshot file; None (and
        short-circuit reads off) when this process cannot open that file as that snapshot."""
        path = resp.local_file
        assert path is not None
        try:
            snapshot = SnapshotFile.open_local(path)
        except (OSError, FlussError) as e:
            log.info("reading %s directly failed (%s); reading its rows over the connection",
                     path, e)
            self.short_circuit = False
            return None
        if (snapshot.table_id, snapshot.bucket, snapshot.snapshot_id) != (
                self.table.table_id, scan.bucket, scan.snapshot_id):
            snapshot.close()
            raise FlussError(f"the tablet server named {path} as snapshot {scan.snapshot_id} of "
                             f"{self.where} bucket {scan.bucket}, but it holds snapshot "
                             f"{snapshot.snapshot_id} of table id {snapshot.table_id} bucket "
                             f"{snapshot.bucket}")
        scan.log_offset = resp.log_offset
        if scan.schema is None:
            scan.schema = (snapshot.schema if projection is None
                           else pa.schema([snapshot.schema.field(c) for c in projection]))
        assert resp.row_start is not None
        return self._file_rows(snapshot, resp.row_start, resp.row_count, projection)

    @staticmethod
    def _file_rows(snapshot: SnapshotFile, start: int, count: int,
                   projection) -> Iterator[pa.RecordBatch]:
        """Rows [start, start + count) of the file, a record batch of it at a time (slices of
        the mapped file: nothing is copied)."""
        with snapshot:
            for batch in snapshot.read_slice(start, count, projection).to_batches():
                if batch.num_rows:
                    yield batch

    def _decode(self, records: bytes | memoryview, bucket: int) -> pa.Table:
        return bytes_to_table(records, limits=self.ipc_limits,
                              what=f"SCAN_KV response for table {self.where} bucket {bucket}")

    def _batches(self, scan: KvScan, resp: ScanKvResponse,
                 expected: int) -> Iterator[pa.RecordBatch]:
        """The response's record batches, trimmed so the scan stays gapless and duplicate-free."""
        records = resp.records
        if not records:
            return
        table = self._decode(records, scan.bucket)
        if scan.schema is None:
            scan.schema = table.schema
        row_start = resp.row_start if resp.row_start is not None else expected
        if row_start > expected:
            raise FlussError(f"scan of {self.where} bucket {scan.bucket} got rows from "
                             f"{row_start}, expected {expected}: rows would be skipped")
        if row_start < expected:       # already yielded: drop the overlap
            table = table.slice(expected - row_start)
        for batch in table.to_batches():
            if batch.num_rows:
                yield batch


class _OwnChannel:
    """A scan's own pipelined connection to the tablet it reads from: made on first use,
    replaced when the bucket moves to another tablet or the session is lost, closed with the
    scan."""

    def __init__(self, window_bytes: int):
        self.window_bytes = window_bytes
        self._rpc = None
        self._channel = None

    def to(self, rpc):
        """The connection to ``rpc``'s server; None where ``rpc`` cannot make one."""
        if rpc is not self._rpc:
            self.close()
            pipeline = getattr(rpc, "pipeline", None)
            self._rpc = rpc
            self._channel = None if pipeline is None else pipeline(self.window_bytes)
        return self._channel

    def close(self) -> None:
        """Close the connection and the requests in flight on it; the next use makes another."""
        if self._channel is not None:
            self._channel.close()
        self._rpc = self._channel = None
