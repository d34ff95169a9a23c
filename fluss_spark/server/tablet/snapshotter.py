"""Taking KV snapshots of PK buckets and registering them with the active coordinator."""

from __future__ import annotations

import logging
import threading
import time

from fluss_spark.clock import Clock, wall_ms
from fluss_spark.errors import ApiError, FlussError, RequestTimeout
from fluss_spark.metadata.layout import SnapshotRecord
from fluss_spark.protocol.messages import CommitKvSnapshotRequest
from fluss_spark.retry import Backoff
from fluss_spark.server.tablet.bucket import Bucket
from fluss_spark.server.snapshot_store import snapshot_location
from fluss_spark.server.tablet.snapshot import BATCH_ROWS, delete_snapshot_file, write_snapshot
# Registering a snapshot makes the tablet a caller of the coordinator, over the transport.
from fluss_spark.transport.client import RpcConnection

log = logging.getLogger(__name__)

#: How long an on-demand snapshot waits for a coordinator to register it.
TRIGGER_DEADLINE_S = 60.0


class Snapshotter:
    """Writes a bucket's state to the snapshot store and commits it through the coordinator.

    One snapshot per bucket at a time (``Bucket.snapshot_lock``). The state is frozen under
    the bucket's write lock (a RocksDB checkpoint plus the log end at that moment); the file is
    written outside it, so writes continue meanwhile.
    """

    def __init__(self, server, *, clock: Clock = wall_ms):
        self.server = server
        self._clock = clock
        self._conn: RpcConnection | None = None
        self._conn_lock = threading.Lock()

    def init_bucket(self, bucket: Bucket) -> None:
        """Learn a newly opened bucket's latest registered snapshot (for "nothing changed")."""
        ids = self.server.store.snapshot_ids(bucket.table_id, bucket.bucket_id,
                                             bucket.partition_id)
        if ids:
            rec = self.server.store.snapshot(bucket.table_id, bucket.bucket_id, ids[-1],
                                             bucket.partition_id)
            if rec is not None:
                bucket.last_snapshot_offset = rec.log_offset

    def snapshot(self, bucket: Bucket, *, force: bool,
                 deadline_s: float | None = None) -> SnapshotRecord | None:
        """Take, write and register one snapshot; None when there is nothing to snapshot."""
        store = self.server.store
        with bucket.snapshot_lock:
            hw = bucket.high_watermark
            if hw == 0 and bucket.last_snapshot_offset is None:
                return None         # never had data
            if not force and hw == (bucket.last_snapshot_offset or 0):
                bucket.last_snapshot_ms = self._clock()
                return None         # nothing changed since the last one
            ids = store.snapshot_ids(bucket.table_id, bucket.bucket_id, bucket.partition_id)
            kv = bucket.kv_store()
            snapshot_id = max(kv.next_snapshot_id(), ids[-1] + 1 if ids else 0)
            kv.set_next_snapshot_id(snapshot_id + 1)
            view, log_offset = bucket.checkpoint()
            location = snapshot_location(self.server.settings.remote_data_dir, bucket.table_id,
                                         bucket.bucket_id, snapshot_id, bucket.partition_id)
            try:
                rows = view.row_count()
                written = write_snapshot(view.iter_batches(bucket.schema, None, BATCH_ROWS),
                                         bucket.schema, rows, location, table_id=bucket.table_id,
                                         bucket=bucket.bucket_id, snapshot_id=snapshot_id,
                                         log_offset=log_offset)
            finally:
                view.close()
            rec = SnapshotRecord(table_id=bucket.table_id, bucket=bucket.bucket_id,
                                 snapshot_id=snapshot_id, path=written.path, log_offset=log_offset,
                                 row_count=written.row_count, size_bytes=written.size_bytes,
                                 created_ms=self._clock(), partition_id=bucket.partition_id)
            try:
                self._commit(rec, deadline_s)
            except ApiError as e:
                if not e.retriable:
                    # The coordinator refused it for good (e.g. the table was dropped).
                    delete_snapshot_file(location)
                raise
            bucket.last_snapshot_offset = log_offset
            bucket.last_snapshot_ms = self._clock()
            log.info("%s: snapshot %d registered (%d rows, log offset %d)", bucket.label,
                     snapshot_id, rec.row_count, log_offset)
            return rec

    def _commit(self, rec: SnapshotRecord, deadline_s: float | None) -> None:
        """COMMIT_KV_SNAPSHOT to the active coordinator, retrying while it is down or moving."""
        request = CommitKvSnapshotRequest(
            table_id=rec.table_id, bucket=rec.bucket, snapshot_id=rec.snapshot_id, path=rec.path,
            log_offset=rec.log_offset, row_count=rec.row_count, size_bytes=rec.size_bytes,
            created_ms=rec.created_ms, partition_id=rec.partition_id)
        deadline = time.monotonic() + deadline_s if deadline_s is not None else None
        last = "no active coordinator is registered"
        # Not retry(): the wait ends early when the server stops, and there may be no deadline.
        for delay in Backoff(first_s=0.1).delays():
            try:
                conn = self._coordinator()
                if conn is not None:
                    conn.call(request, timeout_s=30)
                    return
            except ApiError as e:
                if not e.retriable:
                    raise
                last = str(e)
                self._drop_connection()
            except FlussError as e:     # ZooKeeper unreachable
                last = str(e)
            if self.server.stopping.is_set():
                raise RequestTimeout(f"server stopping before snapshot {rec.snapshot_id} of "
                                     f"table {rec.table_id} bucket {rec.bucket} was registered")
            if deadline is not None and time.monotonic() > deadline:
                raise RequestTimeout(f"could not register snapshot {rec.snapshot_id} of table "
                                     f"{rec.table_id} bucket {rec.bucket} with the coordinator "
                                     f"within {deadline_s:.0f}s: {last}")
            self.server.stopping.wait(delay)

    def _coordinator(self) -> RpcConnection | None:
        active = self.server.store.active_coordinator()
        with self._conn_lock:
            if active is None:
                return None
            if (self._conn is None
                    or (self._conn.host, self._conn.port) != (active.host, active.port)):
                if self._conn is not None:
                    self._conn.close()
                security = self.server.security
                self._conn = RpcConnection(active.host, active.port, connect_timeout_s=2.0,
                                           credentials=security.internal_credentials,
                                           tls=security.internal_tls)
            return self._conn

    def _drop_connection(self) -> None:
        with self._conn_lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def close(self) -> None:
        self._drop_connection()
