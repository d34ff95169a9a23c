"""Scan sessions: server-side cursors over a KV snapshot or a live view of one bucket.

Contract (messages in ``protocol/messages/scan.py``):

- open (``call_seq_id`` 0) serves the first batch; a result that fits in one batch (or is empty)
  creates no session and carries no ``scanner_id``; the last batch closes the session.
- continue with ``call_seq_id = last + 1`` serves the next batch; repeating the last
  ``call_seq_id`` serves the identical bytes again (only the last batch is kept); any other id is
  ``InvalidScanRequest`` and the session stays usable. No request error destroys a session.
- idle sessions are evicted after ``kv.scanner.ttl`` by a pass every
  ``kv.scanner.expiration-interval``; ids of sessions that were evicted, finished or closed by the
  server (bucket moved away, shutdown) are remembered, so a late continue gets
  ``ScannerExpired`` with the reason; an id never seen gets ``UnknownScannerId``. Both mean the
  same to a client: reopen a snapshot scan at ``start_row``.
"""

from __future__ import annotations

import logging
import os
import threading
import uuid
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from typing import Any

from fluss_spark import config
from fluss_spark.clock import Clock, monotonic_ms
from fluss_spark.errors import (InvalidColumnProjection, InvalidScanRequest, KvSnapshotNotExist,
                                NonPrimaryKeyTable, ScannerExpired, TooManyScanners,
                                UnknownScannerId)
from fluss_spark.protocol.acl import OperationType
from fluss_spark.protocol.messages import (CloseScan, ContinueScan, ListScannersRequest,
                                           ListScannersResponse, OpenScan, ScanKvRequest,
                                           ScanKvResponse, ScannerInfo)
from fluss_spark.server.tablet.open_snapshots import OpenSnapshots
from fluss_spark.server.tablet.scan_cursor import Batch, LiveCursor, SnapshotCursor
from fluss_spark.transport.dispatch import current_peer_address
from fluss_spark.transport.locality import is_local_address

log = logging.getLogger(__name__)

#: How many ids of gone sessions are remembered for ``ScannerExpired``.
_GONE_REMEMBERED = 10_000
#: Finished sessions whose last response is kept a while, so a lost final response can be
#: asked for again (this matters for live scans, which cannot resume by row).
_FINISHED_REMEMBERED = 8


def _open_snapshot_file(path: str):
    from fluss_spark.server.tablet.snapshot import SnapshotFile   # the tablet's snapshot format
    return SnapshotFile.open(path)


@dataclass(eq=False)
class ScanSession:
    """One open session: its cursor, its last call and the last response (for a repeat)."""

    scanner_id: str
    table_id: int
    bucket: int
    live: bool
    batch_size_bytes: int
    created_ms: float
    last_access_ms: float
    cursor: SnapshotCursor | LiveCursor | None = None
    seq: int = 0
    last_response: ScanKvResponse | None = None
    rows_served: int = 0
    closed: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)
    #: The partition of a partitioned table's bucket (None: unpartitioned).
    partition_id: int | None = None

    @property
    def key(self) -> tuple[int, int | None, int]:
        return (self.table_id, self.partition_id, self.bucket)

    def open_cursor(self) -> SnapshotCursor | LiveCursor:
        """The cursor, which every session has from its first batch on (``_open`` sets it
        under the session lock before anyone else can use the session)."""
        assert self.cursor is not None, f"scan session {self.scanner_id} has no cursor"
        return self.cursor

    def close(self) -> None:
        """Release the cursor (file handle or live view); the caller holds ``lock``."""
        if not self.closed:
            self.closed = True
            self.last_response = None
            if self.cursor is not None:
                try:
                    self.cursor.close()
                except Exception:  # noqa: BLE001 - closing must not fail the caller
                    log.exception("closing scan session %s failed", self.scanner_id)


class ScannerManager:
    """Owns every open scan session of a tablet server (SCAN_KV, LIST_SCANNERS).

    Thread-safe: the manager lock guards the session tables and is never held while a batch is
    read; each session's own lock serialises calls on that session.
    """

    def __init__(self, server, options: dict, clock: Clock | None = None, open_snapshot=None):
        self.server = server
        self.options = options
        self.ttl_ms = config.SCANNER_TTL.get(options)
        self.interval_ms = config.SCANNER_EXPIRATION_INTERVAL.get(options)
        self.max_per_bucket = config.SCANNER_MAX_PER_BUCKET.get(options)
        self.max_per_server = config.SCANNER_MAX_PER_SERVER.get(options)
        self.max_batch_bytes = config.SCANNER_MAX_BATCH_SIZE.get(options)
        self._clock = clock or monotonic_ms
        self._open_snapshot = open_snapshot or _open_snapshot_file
        #: Snapshot files shared by the sessions reading them, closed an eviction pass after the
        #: last one ended.
        self._files = OpenSnapshots(self._open_snapshot, self.interval_ms, self._clock)
        self._lock = threading.Lock()
        self._sessions: dict[str, ScanSession] = {}
        self._by_bucket: dict[tuple[int, int | None, int], set[str]] = {}
        self._gone: OrderedDict[str, str] = OrderedDict()
        self._finished: OrderedDict[str, tuple[int, ScanKvResponse, float]] = OrderedDict()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- lifecycle ------------------------------------------------------------------------------
    def register(self, rpc) -> None:
        """Register the SCAN_KV and LIST_SCANNERS handlers on ``rpc``."""
        rpc.register(ScanKvRequest, self.handle_scan)
        rpc.register(ListScannersRequest, self.handle_list)

    def start(self) -> None:
        """Start the eviction pass (a daemon thread every ``kv.scanner.expiration-interval``)."""
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._evict_loop, name="scanner-expiry",
                                        daemon=True)
        self._thread.start()

    def _evict_loop(self) -> None:
        while not self._stop.wait(self.interval_ms / 1000.0):
            try:
                self.evict_expired()
            except Exception:  # noqa: BLE001 - the pass must keep running
                log.exception("scan session eviction pass failed")

    def close_bucket(self, table_id: int, partition_id: int | None, bucket: int) -> None:
        """Close every session of a bucket that this server no longer hosts."""
        where = "" if partition_id is None else f" partition id {partition_id}"
        with self._lock:
            ids = list(self._by_bucket.get((table_id, partition_id, bucket), ()))
            sessions = [self._remove_locked(
                sid, f"was closed because this server no longer hosts table {table_id}{where} "
                     f"bucket {bucket}") for sid in ids]
        self._close_sessions(sessions)

    def close_all(self) -> None:
        """Close every session and stop the eviction pass (server shutdown)."""
        self._stop.set()
        with self._lock:
            sessions = [self._remove_locked(sid, "was closed because the tablet server stopped")
                        for sid in list(self._sessions)]
            self._finished.clear()
        self._close_sessions(sessions)
        self._files.expire(everything=True)
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5)

    def evict_expired(self) -> int:
        """Close sessions idle longer than ``kv.scanner.ttl``; returns how many were closed.

        Busy sessions (a call in progress) are skipped: they are not idle.
        """
        now = self._clock()
        evicted = []
        with self._lock:
            for sid, s in list(self._sessions.items()):
                idle = now - s.last_access_ms
                # Never wait for a session lock while holding the manager lock.
                if idle > self.ttl_ms and s.lock.acquire(blocking=False):
                    self._remove_locked(sid, f"expired after being idle {int(idle)} ms "
                                             f"(kv.scanner.ttl is {self.ttl_ms} ms)")
                    evicted.append(s)
            for sid, (_, _, at) in list(self._finished.items()):
                if now - at > self.interval_ms:
                    del self._finished[sid]
        self._files.expire()
        for s in evicted:                  # closing does I/O: outside the manager lock
            try:
                s.close()
            finally:
                s.lock.release()
        if evicted:
            log.info("evicted %d idle scan sessions", len(evicted))
        return len(evicted)

    # -- handlers ---------------------------------------------------------------------------------
    def handle_scan(self, req: OpenScan | ContinueScan | CloseScan) -> ScanKvResponse:
        """SCAN_KV: open, continue or close a session (see the module docstring)."""
        if isinstance(req, OpenScan):
            return self._open(req)
        if isinstance(req, ContinueScan):
            return self._continue(req)
        return self._close(req)

    def handle_list(self, req: ListScannersRequest) -> ListScannersResponse:
        """LIST_SCANNERS: every open session with its age, idleness and progress."""
        now = self._clock()
        with self._lock:
            sessions = list(self._sessions.values())
        out = []
        for s in sessions:
            cursor = s.cursor
            out.append(ScannerInfo(scanner_id=s.scanner_id, table_id=s.table_id, bucket=s.bucket,
                                   snapshot_id=getattr(cursor, "snapshot_id", None), live=s.live,
                                   age_ms=int(now - s.created_ms),
                                   idle_ms=int(now - s.last_access_ms),
                                   rows_served=s.rows_served,
                                   next_row=getattr(cursor, "next_row", 0),
                                   partition_id=s.partition_id))
        out.sort(key=lambda r: (r.table_id, r.partition_id or -1, r.bucket, -r.age_ms))
        return ListScannersResponse(tuple(out))

    # -- open -------------------------------------------------------------------------------------
    def _open(self, req: OpenScan) -> ScanKvResponse:
        bucket = self.server.bucket(req.table_id, req.bucket, req.partition_id)
        self.server.authorize(OperationType.READ, req.table_id, "scan")
        name = getattr(bucket.table, "name", req.table_id)
        if not bucket.is_primary_key:
            raise NonPrimaryKeyTable(f"table {name} has no primary key: scan sessions read KV "
                                     "state; read its changelog with FETCH_LOG instead")
        self.server.learn_columns(bucket, req.projection or ())
        columns = _check_projection(req.projection, bucket.schema, name)
        if req.local_read:
            local = self._local_file(req, bucket, name)
            if local is not None:
                return local
        budget = min(req.batch_size_bytes, self.max_batch_bytes)
        now = self._clock()
        session = ScanSession(uuid.uuid4().hex, req.table_id, req.bucket, req.live, budget,
                              created_ms=now, last_access_ms=now, partition_id=req.partition_id)
        with session.lock:
            self._admit(session)           # counts against the limits before any work is done
            try:
                session.cursor = self._cursor(req, bucket, columns, budget, name)
                batch = session.cursor.commit(session.cursor.next_batch(budget))
            except BaseException:
                with self._lock:
                    self._remove_locked(session.scanner_id, None)
                session.close()
                raise
            response = self._serve(session, 0, batch)
            if not batch.has_more:         # everything fitted in one batch: no session needed
                with self._lock:
                    self._remove_locked(session.scanner_id, None)
                session.close()
                response = replace(response, scanner_id=None)
            return response

    def _admit(self, session: ScanSession) -> None:
        key = session.key
        for attempt in (0, 1):
            with self._lock:
                in_bucket = len(self._by_bucket.get(key, ()))
                if in_bucket < self.max_per_bucket and len(self._sessions) < self.max_per_server:
                    self._sessions[session.scanner_id] = session
                    self._by_bucket.setdefault(key, set()).add(session.scanner_id)
                    return
            if attempt == 0 and self.evict_expired():
                continue                   # idle sessions made room
            break
        if in_bucket >= self.max_per_bucket:
            raise TooManyScanners(
                f"table {session.table_id} bucket {session.bucket} already has {in_bucket} open "
                f"scan sessions (kv.scanner.max-per-bucket={self.max_per_bucket}); retry later")
        raise TooManyScanners(
            f"this tablet server already has {self.max_per_server} open scan sessions "
            f"(kv.scanner.max-per-server); retry later")

    def _cursor(self, req: OpenScan, bucket, columns, budget: int, name):
        if req.live:
            view = bucket.open_live_view()
            try:
                # The open's budget may be one row (a driver fixing the offset a scan
                # reflects); the chunk the view is pulled in serves the whole session.
                chunk = max(1, min(65536, max(budget, 1 << 20) // 64))
                return LiveCursor(view, columns, req.start_row, req.limit, chunk)
            except BaseException:
                view.close()
                raise
        record = self._snapshot_record(req, name)
        try:
            # A shared file, or, written under older columns, that file read as the current ones.
            snapshot: Any = self._files.acquire(record.path)
        except FileNotFoundError:
            raise KvSnapshotNotExist(
                f"the file of KV snapshot {req.snapshot_id} of table {name} bucket "
                f"{req.bucket} is gone ({record.path}); list the latest snapshots and retry"
            ) from None
        if snapshot.schema.names != bucket.schema.names:
            # Written before columns were added: those read as null.
            from fluss_spark.server.tablet.snapshot import OlderSchemaSnapshot
            snapshot = OlderSchemaSnapshot(snapshot, bucket.schema)
        try:
            return SnapshotCursor(snapshot, columns, req.start_row, req.limit)
        except BaseException:
            close = getattr(snapshot, "close", None)
            if close is not None:
                close()
            raise

    def _snapshot_record(self, req: OpenScan, name):
        record = self.server.snapshot_record(req.table_id, req.bucket, req.snapshot_id,
                                             req.partition_id)
        if record is None:
            raise KvSnapshotNotExist(
                f"KV snapshot {req.snapshot_id} of table {name} bucket {req.bucket} is not "
                "registered (it may have been garbage-collected; list the latest snapshots and "
                "lease the one you read)")
        return record

    def _local_file(self, req: OpenScan, bucket, name) -> ScanKvResponse | None:
        """The answer to a short-circuit open: the snapshot's file and the rows to read from it,
        when the client is on this host and the file is a local one in the table's current
        schema; None: serve the rows over the connection as usual."""
        if not is_local_address(current_peer_address()):
            return None
        record = self._snapshot_record(req, name)
        if "://" in record.path:
            return None
        try:
            snapshot = self._open_snapshot(record.path)
        except (FileNotFoundError, KvSnapshotNotExist):
            return None            # the usual open reports it
        try:
            if snapshot.schema.names != bucket.schema.names:
                return None        # older columns: the server conforms them
            rows = max(0, snapshot.num_rows - req.start_row)
            if req.limit is not None:
                rows = min(rows, req.limit)
            return ScanKvResponse(local_file=os.path.abspath(record.path), has_more=False,
                                  log_offset=snapshot.log_offset,
                                  snapshot_id=snapshot.snapshot_id, row_start=req.start_row,
                                  row_count=rows)
        finally:
            snapshot.close()

    # -- continue and close ---------------------------------------------------------------------
    def _continue(self, req: ContinueScan) -> ScanKvResponse:
        with self._lock:
            session = self._sessions.get(req.scanner_id)
            finished = self._finished.get(req.scanner_id)
        if session is None:
            if finished is not None and finished[0] == req.call_seq_id:
                return finished[1]           # the final response was lost: serve it again
            raise self._gone_error(req.scanner_id)
        # Checked on every page, so removing an ACL also stops the sessions opened before.
        self.server.authorize(OperationType.READ, session.table_id, "scan")
        with session.lock:
            if session.closed:
                raise self._gone_error(req.scanner_id)
            session.last_access_ms = self._clock()
            if req.call_seq_id == session.seq and session.last_response is not None:
                return session.last_response
            if req.call_seq_id != session.seq + 1:
                raise InvalidScanRequest(
                    f"scan session {req.scanner_id} expected call_seq_id {session.seq + 1} "
                    f"(or {session.seq} to repeat the last batch), got {req.call_seq_id}")
            budget = session.batch_size_bytes
            if req.batch_size_bytes is not None:
                budget = min(req.batch_size_bytes, self.max_batch_bytes)
            cursor = session.open_cursor()
            batch = cursor.commit(cursor.next_batch(budget))
            response = self._serve(session, req.call_seq_id, batch)
            if not batch.has_more:
                with self._lock:
                    self._remove_locked(req.scanner_id, "already finished (its last batch was "
                                                        "served)")
                    self._finished[req.scanner_id] = (req.call_seq_id, response, self._clock())
                    while len(self._finished) > _FINISHED_REMEMBERED:
                        self._finished.popitem(last=False)
                session.close()
            return response

    def _close(self, req: CloseScan) -> ScanKvResponse:
        with self._lock:
            session = self._remove_locked(req.scanner_id, "was closed by the client")
            self._finished.pop(req.scanner_id, None)
        if session is not None:
            self._close_sessions([session])
        return ScanKvResponse(scanner_id=req.scanner_id, has_more=False, row_count=0)

    # -- helpers ----------------------------------------------------------------------------------
    def _serve(self, session: ScanSession, seq: int, batch: Batch) -> ScanKvResponse:
        cursor = session.open_cursor()
        response = ScanKvResponse(scanner_id=session.scanner_id, records=batch.records,
                                  has_more=batch.has_more, log_offset=cursor.log_offset,
                                  snapshot_id=cursor.snapshot_id, row_start=batch.row_start,
                                  row_count=batch.row_count)
        session.seq = seq
        session.last_response = response     # only the last batch's bytes are kept
        session.rows_served += batch.row_count
        return response

    def _remove_locked(self, scanner_id: str, reason: str | None) -> ScanSession | None:
        """Drop a session from the tables (manager lock held); remember why, if a reason."""
        session = self._sessions.pop(scanner_id, None)
        if session is not None:
            key = session.key
            ids = self._by_bucket.get(key)
            if ids is not None:
                ids.discard(scanner_id)
                if not ids:
                    del self._by_bucket[key]
            if reason is not None:
                self._gone[scanner_id] = reason
                while len(self._gone) > _GONE_REMEMBERED:
                    self._gone.popitem(last=False)
        return session

    def _close_sessions(self, sessions) -> None:
        for s in sessions:
            if s is not None:
                with s.lock:               # waits for a batch in progress to finish
                    s.close()

    def _gone_error(self, scanner_id: str) -> Exception:
        with self._lock:
            reason = self._gone.get(scanner_id)
        if reason is not None:
            return ScannerExpired(f"scan session {scanner_id} {reason}; reopen the scan (a "
                                  "snapshot scan resumes exactly with start_row)")
        server_id = getattr(self.server, "server_id", "?")
        return UnknownScannerId(f"scan session {scanner_id} is not known to tablet server "
                                f"{server_id} (opened on another server, or before a restart); "
                                "reopen the scan (a snapshot scan resumes with start_row)")

    def session_count(self) -> int:
        with self._lock:
            return len(self._sessions)


def _check_projection(projection, schema, table_name) -> list[str] | None:
    if projection is None:
        return None
    names = set(schema.names)
    unknown = [c for c in projection if c not in names]
    if unknown:
        raise InvalidColumnProjection(
            f"table {table_name} has no column {', '.join(map(repr, unknown[:10]))}"
            f"{' ...' if len(unknown) > 10 else ''}; "
            f"its columns are {', '.join(schema.names)}")
    return list(projection)
