"""Executor-side split readers: snapshot pages, changelog ranges, and folded batch reads.

Clients are opened lazily inside ``read()`` and cached per worker process (Spark reuses Python
workers), one ``FlussConnection`` per bootstrap-servers string.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Callable, Iterator

import pyarrow as pa
import pyarrow.compute as pc

from fluss_spark.connector.options import SourceOptions
from fluss_spark.connector.schema import CHANGE_TYPE, Layout, with_snapshot_metadata
from fluss_spark.connector.splits import LogSplit, MergedBucketSplit, SnapshotSplit
from fluss_spark.errors import KvSnapshotNotExist, LogOffsetOutOfRange

log = logging.getLogger(__name__)

_CONNECTIONS: dict[tuple[str, int], Any] = {}
_CONNECTIONS_LOCK = threading.Lock()


def connection(options: SourceOptions) -> Any:
    """The worker process's cached connection to ``options.bootstrap_servers``."""

    key = (options.bootstrap_servers, options.request_timeout_ms, options.sasl_username,
           options.sasl_password)
    with _CONNECTIONS_LOCK:
        conn = _CONNECTIONS.get(key)
        if conn is None:
            conn = _CONNECTIONS[key] = options.connect()
        return conn


def drop_cached_connection(options: SourceOptions) -> None:
    with _CONNECTIONS_LOCK:
        conn = _CONNECTIONS.pop((options.bootstrap_servers, options.request_timeout_ms), None)
    if conn is not None:
        try:
            conn.close()
        except Exception:  # noqa: BLE001 - a broken connection is being thrown away anyway
            pass


class SplitReader:
    """Reads any split into batches of the output layout; ``conn_factory`` is injectable."""

    def __init__(self, options: SourceOptions, layout: Layout,
                 conn_factory: Callable[[SourceOptions], Any] = connection):
        self.options = options
        self.layout = layout
        self.conn_factory = conn_factory

    def read(self, split) -> Iterator[pa.RecordBatch]:
        target = self.layout.arrow_schema
        if isinstance(split, SnapshotSplit):
            raw = self.snapshot_rows(split)
        elif isinstance(split, LogSplit):
            raw = self.log_records(split)
        elif isinstance(split, MergedBucketSplit):
            raw = self.merged_rows(split)
        elif getattr(split, "value", "") is None:
            return  # Spark's stand-in partition when planning found nothing to read
        else:
            raise TypeError(f"not a fluss split: {split!r}")
        for batch in raw:
            if batch.num_rows:
                # The layout picks the read columns (a user schema may be narrower) and casts.
                yield self.layout.shape(split.table, batch, target)

    def columns(self, table: str, key: tuple[str, ...] = ()) -> list[str] | None:
        """The columns to ask the servers for: what the output shows, plus ``key`` (projection
        happens server-side, so unread columns never cross the wire). None (every column) when
        the output shows no table column: the servers refuse an empty projection."""
        cols = self.layout.table_columns(table)
        return (cols + [k for k in key if k not in cols]) or None

    # -- snapshot splits ----------------------------------------------------------------------
    def snapshot_rows(self, split: SnapshotSplit) -> Iterator[pa.RecordBatch]:
        kv = self.conn_factory(self.options).kv_scanner(split.table)
        seen = 0
        scan = kv.scan(split.bucket, snapshot_id=split.snapshot_id, start_row=split.row_start,
                       limit=split.rows, batch_size_bytes=self.options.scan_batch_bytes,
                       projection=self.columns(split.table))
        try:
            for batch in scan:
                if seen + batch.num_rows > split.rows:
                    batch = batch.slice(0, split.rows - seen)
                seen += batch.num_rows
                yield with_snapshot_metadata(batch, split.log_offset)
                if seen >= split.rows:
                    break
        except KvSnapshotNotExist:
            what = (f"table {split.table!r} bucket {split.bucket}: KV snapshot "
                    f"{split.snapshot_id} (lease {split.lease_id!r}) no longer exists while "
                    f"rows [{split.row_start + seen}, {split.row_end}) were still to be read")
            if self.options.fail_on_data_loss:
                raise KvSnapshotNotExist(f"{what}. Restart with a new checkpointLocation, or set "
                                         "failOnDataLoss=false to continue from the latest "
                                         "snapshot") from None
            log.warning("%s; skipped (failOnDataLoss=false)", what)
            return
        finally:
            close = getattr(scan, "close", None)
            if close is not None:
                close()
        if seen != split.rows:
            raise KvSnapshotNotExist(
                f"table {split.table!r} bucket {split.bucket}: KV snapshot {split.snapshot_id} "
                f"returned {seen} rows from row {split.row_start}, expected {split.rows}; the "
                f"snapshot is not the one this query planned")

    # -- changelog splits ---------------------------------------------------------------------
    def log_records(self, split: LogSplit) -> Iterator[pa.RecordBatch]:
        scanner = self.conn_factory(self.options).log_scanner(split.table,
                                                              self.columns(split.table))
        start = split.start
        try:
            yield from scanner.read(split.bucket, start, split.end)
            return
        except LogOffsetOutOfRange:
            if self.options.fail_on_data_loss:
                raise LogOffsetOutOfRange(
                    f"table {split.table!r} bucket {split.bucket}: changelog records "
                    f"[{split.start}, {split.end}) are no longer retained (table.log.ttl); set "
                    f"failOnDataLoss=false to skip what was deleted") from None
        admin = self.conn_factory(self.options).admin()
        earliest = admin.list_offsets(split.table, buckets=[split.bucket],
                                      spec="earliest").get(split.bucket, split.end)
        log.warning("table %r bucket %d: changelog records [%d, %d) were deleted before they "
                    "were read; skipped (failOnDataLoss=false)", split.table, split.bucket,
                    split.start, min(earliest, split.end))
        if earliest < split.end:
            yield from scanner.read(split.bucket, max(earliest, start), split.end)

    # -- batch reads --------------------------------------------------------------------------
    def merged_rows(self, split: MergedBucketSplit) -> Iterator[pa.RecordBatch]:
        """A PK bucket as of ``log_end``: snapshot + changelog, latest row per key, deletes applied.

        Batch reads take no lease: if the planned snapshot was removed before it was read, the
        bucket is re-planned from its latest snapshot (and its changelog up to ``log_end``; if that
        snapshot is already past ``log_end`` the bucket is read as of that snapshot instead).
        """
        conn = self.conn_factory(self.options)
        columns = self.columns(split.table, tuple(split.primary_key))
        snapshot_id, log_start = split.snapshot_id, split.snapshot_log_offset
        for _ in range(3):
            try:
                snap = self._snapshot_table(conn, split, snapshot_id, log_start, columns)
                break
            except KvSnapshotNotExist:
                latest = conn.admin().latest_kv_snapshots(split.table).get(split.bucket)
                if latest is None:
                    raise
                snapshot_id, log_start = latest.snapshot_id, latest.log_offset
        else:
            raise KvSnapshotNotExist(f"table {split.table!r} bucket {split.bucket}: its KV "
                                     f"snapshots kept disappearing while being read; retry the "
                                     f"read")
        parts = [snap] if snap is not None else []
        if split.log_end > log_start:
            batches = list(conn.log_scanner(split.table, columns).read(split.bucket, log_start,
                                                                       split.log_end))
            if batches:
                parts.append(pa.Table.from_batches(batches))
        if not parts:
            return
        yield from fold_latest(parts, list(split.primary_key)).to_batches()

    def _snapshot_table(self, conn, split: MergedBucketSplit, snapshot_id: int | None,
                        log_offset: int, columns: list[str] | None) -> pa.Table | None:
        if snapshot_id is None:
            return None
        batches = [with_snapshot_metadata(b, log_offset) for b in conn.kv_scanner(split.table).scan(
            split.bucket, snapshot_id=snapshot_id, batch_size_bytes=self.options.scan_batch_bytes,
            projection=columns)]
        return pa.Table.from_batches(batches) if batches else None


def fold_latest(parts: list[pa.Table], key: list[str]) -> pa.Table:
    """Concatenate (snapshot first, then changelog in order) and keep each key's last record
    unless it deletes the key; change types of kept rows are as last written."""
    schemas = [p.schema for p in parts]
    common = [n for n in schemas[0].names if all(n in s.names for s in schemas)]
    aligned = []
    for p in parts:
        cols = []
        for n in common:
            col = p.column(n)
            want = parts[0].schema.field(n).type
            cols.append(col if col.type == want else col.cast(want))
        aligned.append(pa.table(cols, names=common))
    table = pa.concat_tables(aligned)
    seq = pa.array(range(table.num_rows), pa.int64())
    table = table.append_column("__seq", seq)
    last = table.group_by(key, use_threads=False).aggregate([("__seq", "max")])
    keep = pc.sort_indices(last.column("__seq_max"))
    idx = pc.take(last.column("__seq_max"), keep)
    rows = table.take(idx).drop_columns(["__seq"])
    alive = pc.invert(pc.is_in(rows.column(CHANGE_TYPE), pa.array(["-D", "-U"])))
    rows = rows.filter(alive)
    return rows


__all__ = ["SplitReader", "connection", "drop_cached_connection", "fold_latest"]
