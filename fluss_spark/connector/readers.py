"""Executor-side split readers: snapshot pages, changelog ranges, and folded batch reads.

Clusters are opened lazily inside ``read()`` and cached per worker process (Spark reuses Python
workers), one per bootstrap servers, timeout and credentials.
"""

from __future__ import annotations

import logging
import threading
from typing import Callable, Iterator

import pyarrow as pa
import pyarrow.compute as pc

from fluss_spark.client.cluster import CHANGE_TYPE, RETRACTIONS, Cluster
from fluss_spark.connector.options import SourceOptions
from fluss_spark.connector.schema import Layout, with_snapshot_metadata
from fluss_spark.connector.splits import LogSplit, MergedBucketSplit, SnapshotSplit
from fluss_spark.errors import KvSnapshotNotExist, LogOffsetOutOfRange

log = logging.getLogger(__name__)

_ClusterKey = tuple[str, int, str | None, str | None]
_CLUSTERS: dict[_ClusterKey, Cluster] = {}
_CLUSTERS_LOCK = threading.Lock()


def _key(options: SourceOptions) -> _ClusterKey:
    return (options.bootstrap_servers, options.request_timeout_ms, options.sasl_username,
            options.sasl_password)


def cached_cluster(options: SourceOptions) -> Cluster:
    """The worker process's cached cluster for ``options`` (servers, timeout, credentials)."""
    with _CLUSTERS_LOCK:
        cluster = _CLUSTERS.get(_key(options))
        if cluster is None:
            cluster = _CLUSTERS[_key(options)] = options.connect()
        return cluster


def drop_cached_cluster(options: SourceOptions) -> None:
    with _CLUSTERS_LOCK:
        cluster = _CLUSTERS.pop(_key(options), None)
    if cluster is not None:
        try:
            cluster.close()
        except Exception:  # noqa: BLE001 - a broken connection is being thrown away anyway
            pass


class SplitReader:
    """Reads any split into batches of the output layout; ``cluster_factory`` is injectable."""

    def __init__(self, options: SourceOptions, layout: Layout,
                 cluster_factory: Callable[[SourceOptions], Cluster] = cached_cluster):
        self.options = options
        self.layout = layout
        self.cluster_factory = cluster_factory

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
        seen = 0
        scan = self.cluster_factory(self.options).read_snapshot(
            split.table, split.bucket, split.snapshot_id, start_row=split.row_start,
            limit=split.rows, projection=self.columns(split.table),
            batch_size_bytes=self.options.scan_batch_bytes)
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
            scan.close()      # frees the server's scan session when the split ends early
        if seen != split.rows:
            raise KvSnapshotNotExist(
                f"table {split.table!r} bucket {split.bucket}: KV snapshot {split.snapshot_id} "
                f"returned {seen} rows from row {split.row_start}, expected {split.rows}; the "
                f"snapshot is not the one this query planned")

    # -- changelog splits ---------------------------------------------------------------------
    def log_records(self, split: LogSplit) -> Iterator[pa.RecordBatch]:
        cluster = self.cluster_factory(self.options)
        columns = self.columns(split.table)
        start = split.start
        try:
            yield from cluster.read_log(split.table, split.bucket, start, split.end, columns)
            return
        except LogOffsetOutOfRange:
            if self.options.fail_on_data_loss:
                raise LogOffsetOutOfRange(
                    f"table {split.table!r} bucket {split.bucket}: changelog records "
                    f"[{split.start}, {split.end}) are no longer retained (table.log.ttl); set "
                    f"failOnDataLoss=false to skip what was deleted") from None
        earliest = cluster.list_offsets(split.table, buckets=[split.bucket],
                                        spec="earliest").get(split.bucket, split.end)
        log.warning("table %r bucket %d: changelog records [%d, %d) were deleted before they "
                    "were read; skipped (failOnDataLoss=false)", split.table, split.bucket,
                    split.start, min(earliest, split.end))
        if earliest < split.end:
            yield from cluster.read_log(split.table, split.bucket, max(earliest, start),
                                        split.end, columns)

    # -- batch reads --------------------------------------------------------------------------
    def merged_rows(self, split: MergedBucketSplit) -> Iterator[pa.RecordBatch]:
        """A PK bucket as of ``log_end``: snapshot + changelog, latest row per key, deletes applied.

        Batch reads take no lease: if the planned snapshot was removed before it was read, the
        bucket is re-planned from its latest snapshot (and its changelog up to ``log_end``; if that
        snapshot is already past ``log_end`` the bucket is read as of that snapshot instead).
        """
        cluster = self.cluster_factory(self.options)
        columns = self.columns(split.table, tuple(split.primary_key))
        snapshot_id, log_start = split.snapshot_id, split.snapshot_log_offset
        for _ in range(3):
            try:
                snap = self._snapshot_table(cluster, split, snapshot_id, log_start, columns)
                break
            except KvSnapshotNotExist:
                latest = cluster.latest_kv_snapshots(split.table).get(split.bucket)
                if latest is None:
                    raise
                snapshot_id, log_start = latest.snapshot_id, latest.log_offset
        else:
            raise KvSnapshotNotExist(f"table {split.table!r} bucket {split.bucket}: its KV "
                                     f"snapshots kept disappearing while being read; retry the "
                                     f"read")
        parts = [snap] if snap is not None else []
        if split.log_end > log_start:
            batches = list(cluster.read_log(split.table, split.bucket, log_start, split.log_end,
                                            columns))
            if batches:
                parts.append(pa.Table.from_batches(batches))
        if not parts:
            return
        yield from fold_latest(parts, list(split.primary_key)).to_batches()

    def _snapshot_table(self, cluster: Cluster, split: MergedBucketSplit, snapshot_id: int | None,
                        log_offset: int, columns: list[str] | None) -> pa.Table | None:
        if snapshot_id is None:
            return None
        batches = [with_snapshot_metadata(b, log_offset) for b in cluster.read_snapshot(
            split.table, split.bucket, snapshot_id, projection=columns,
            batch_size_bytes=self.options.scan_batch_bytes)]
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
    alive = pc.invert(pc.is_in(rows.column(CHANGE_TYPE), pa.array(list(RETRACTIONS))))
    rows = rows.filter(alive)
    return rows


__all__ = ["SplitReader", "cached_cluster", "drop_cached_cluster", "fold_latest"]
