"""Executor-side split readers: snapshot pages, changelog ranges, and folded batch reads.

Clusters are opened lazily inside ``read()`` and cached per worker process (Spark reuses Python
workers), one per bootstrap servers, timeout, credentials and TLS settings.
"""

from __future__ import annotations

import logging
import threading
from typing import Callable, Iterator

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import InputPartition

from fluss_spark.client.remote_storage import RemoteStorage
from fluss_spark.client.cluster import (CHANGE_TYPE, COMMIT_TIMESTAMP, LOG_OFFSET, RETRACTIONS,
                                        Cluster, LiveScanStart, expired_by_retention)
from fluss_spark.clock import wall_ms
from fluss_spark.connector.options import SourceOptions
from fluss_spark.connector.schema import Layout, with_snapshot_metadata
from fluss_spark.connector.splits import (LiveScanSplit, LogSplit, MergedBucketSplit,
                                          PartitionPart, SnapshotSplit)
from fluss_spark.errors import (KvSnapshotNotExist, LiveScanLost, LogOffsetOutOfRange,
                                PartitionNotExist)

log = logging.getLogger(__name__)

#: How often a lost live scan is reopened in the hope of finding the same state again.
_LIVE_REOPENS = 2

_ClusterKey = tuple[str, int, str | None, str | None, bool, str | None, bool,
                   RemoteStorage | None, bool]
_CLUSTERS: dict[_ClusterKey, Cluster] = {}
_CLUSTERS_LOCK = threading.Lock()


def _key(options: SourceOptions) -> _ClusterKey:
    return (options.bootstrap_servers, options.request_timeout_ms, options.sasl_username,
            options.sasl_password, options.ssl_enabled, options.ssl_ca_file,
            options.ssl_verify_hostname, options.storage, options.short_circuit)


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

    def read(self, split: InputPartition) -> Iterator[pa.RecordBatch]:
        target = self.layout.arrow_schema
        if isinstance(split, SnapshotSplit):
            raw = self.snapshot_rows(split)
        elif isinstance(split, LogSplit):
            raw = self.log_records(split)
        elif isinstance(split, MergedBucketSplit):
            raw = self.merged_rows(split)
        elif isinstance(split, LiveScanSplit):
            raw = self.live_rows(split)
        elif getattr(split, "value", "") is None:
            return  # Spark's stand-in partition when planning found nothing to read
        else:
            raise TypeError(f"not a fluss split: {split!r}")
        if isinstance(split, PartitionPart) and split.partition_id is not None:
            raw = self._of_partition(split, raw)
        for batch in raw:
            if batch.num_rows:
                # The layout picks the read columns (a user schema may be narrower) and casts.
                yield self.layout.shape(split.table, batch, target)

    # -- partitions ---------------------------------------------------------------------------
    def _of_partition(self, split: PartitionPart,
                      raw: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """``raw`` while the split's partition exists. Fresh metadata tells a dropped partition
        (and one of the same name created since, which has another id) from the planned one
        before the first read, and makes reads by name address the right one."""
        cluster = self.cluster_factory(self.options)
        info = cluster.get_table(split.table)
        if not any(p.partition_id == split.partition_id for p in info.partitions):
            self._partition_gone(cluster, split)
            return
        try:
            yield from raw
        except PartitionNotExist:
            self._partition_gone(cluster, split)

    def _partition_gone(self, cluster: Cluster, split: PartitionPart) -> None:
        """The split's partition disappeared before all its rows were read. Retention expiry
        never fails the query, nor does anything with ``failOnDataLoss=false``; the driver
        reports the partition once (connector/discovery.py). A partition dropped by hand with
        ``failOnDataLoss=true`` fails it."""
        assert split.partition is not None
        expired = expired_by_retention(cluster.get_table(split.table), split.partition, wall_ms())
        what = (f"{split.where}: the partition (id {split.partition_id}) was "
                f"{'expired by retention' if expired else 'dropped'} before {_planned(split)} "
                f"were read")
        if self.options.fail_on_data_loss and not expired:
            raise PartitionNotExist(f"{what}; they are lost. Set failOnDataLoss=false to go on "
                                    f"without them, or restart with a new checkpointLocation")
        log.info("%s; skipped", what)

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
            batch_size_bytes=self.options.scan_batch_bytes, partition=split.partition,
            location=split.location)
        try:
            for batch in scan:
                if seen + batch.num_rows > split.rows:
                    batch = batch.slice(0, split.rows - seen)
                seen += batch.num_rows
                yield with_snapshot_metadata(batch, split.log_offset)
                if seen >= split.rows:
                    break
        except KvSnapshotNotExist:
            what = (f"{split.where}: KV snapshot "
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
                f"{split.where}: KV snapshot {split.snapshot_id} "
                f"returned {seen} rows from row {split.row_start}, expected {split.rows}; the "
                f"snapshot is not the one this query planned")

    # -- live scan splits ---------------------------------------------------------------------
    def live_rows(self, split: LiveScanSplit) -> Iterator[pa.RecordBatch]:
        """A bucket's state as of ``split.log_offset``, exactly, whatever happens to the session.

        A session cannot be resumed, so when it is lost: (a) a new session reflecting the same
        offset has the same rows in the same (key) order, and is read on past the rows already
        yielded; (b) otherwise the state is rebuilt from a snapshot at or before the offset plus
        the changelog up to it, folded by key, minus the keys already yielded; (c) when neither
        works the split fails (``failOnDataLoss``) or continues from the newer state, whose
        changelog gap the next batches deliver again (the folded table stays exact).
        """
        cluster = self.cluster_factory(self.options)
        columns = self.columns(split.table, split.primary_key)
        yielded: list[pa.Table] = []   # key columns of every row yielded, for (b) and (c)
        served, reopens, start = 0, 0, split.start
        while True:
            if start is None:
                start = cluster.open_live_scan(split.table, split.bucket,
                                               batch_size_bytes=self.options.scan_batch_bytes)
                if start.log_offset != split.log_offset:
                    break
            skip = served
            scan = cluster.read_live_scan(split.table, split.bucket, start, projection=columns,
                                          batch_size_bytes=self.options.scan_batch_bytes)
            try:
                for batch in scan:
                    if skip:
                        drop = min(skip, batch.num_rows)
                        batch, skip = batch.slice(drop), skip - drop
                        if not batch.num_rows:
                            continue
                    served += batch.num_rows
                    # Copies: a view would keep the whole received page alive.
                    yielded.append(pa.table({k: pa.concat_arrays([batch.column(k)])
                                             for k in split.primary_key}))
                    yield with_snapshot_metadata(batch, split.log_offset)
                return
            except LiveScanLost as lost:
                reopens += 1
                log.info("table %r bucket %d: %s; reopening (%d rows read)", split.table,
                         split.bucket, lost, served)
                start = None
                if reopens > _LIVE_REOPENS:
                    break
            finally:
                scan.close()
        rows = self._state_at(cluster, split, columns)
        offset = split.log_offset
        if rows is None:
            rows, offset = self._newer_state(cluster, split, columns, start, served)
        elif start is not None:        # a session of another state, not needed
            cluster.read_live_scan(split.table, split.bucket, start).close()
        if not rows.num_rows:
            return
        if yielded:
            seen = pa.concat_tables(yielded).combine_chunks()
            rows = rows.join(seen, list(split.primary_key), join_type="left anti")
        for batch in rows.select(columns or rows.column_names).to_batches():
            if batch.num_rows:
                yield with_snapshot_metadata(batch, offset)

    def _state_at(self, cluster: Cluster, split: LiveScanSplit,
                  columns: list[str] | None) -> pa.Table | None:
        """The bucket's rows as of ``split.log_offset`` from a snapshot at or before it plus the
        changelog up to it (the table columns only); None when no such snapshot or changelog
        is left."""
        candidates = [(split.snapshot_id, split.snapshot_log_offset)]
        latest = cluster.latest_kv_snapshots(split.table).get(split.bucket)
        if latest is not None and latest.log_offset <= split.log_offset:
            candidates.append((latest.snapshot_id, latest.log_offset))
        for snapshot_id, log_offset in candidates:
            if snapshot_id is None:
                continue
            try:
                parts = [t for t in (self._snapshot_table(cluster, split, snapshot_id, log_offset,
                                                          columns),) if t is not None]
                if split.log_offset > log_offset:
                    batches = list(cluster.read_log(split.table, split.bucket, log_offset,
                                                    split.log_offset, columns))
                    if batches:
                        parts.append(pa.Table.from_batches(batches))
            except (KvSnapshotNotExist, LogOffsetOutOfRange) as e:
                log.info("table %r bucket %d: cannot rebuild the state at log offset %d from "
                         "snapshot %s: %s", split.table, split.bucket, split.log_offset,
                         snapshot_id, e)
                continue
            if not parts:
                return pa.table({})     # an empty state: nothing to fold
            folded = fold_latest(parts, list(split.primary_key))
            log.info("table %r bucket %d: the live scan at log offset %d was lost; its state "
                     "was rebuilt from snapshot %d and the changelog", split.table, split.bucket,
                     split.log_offset, snapshot_id)
            return folded.drop_columns([c for c in folded.column_names
                                        if c in (CHANGE_TYPE, LOG_OFFSET, COMMIT_TIMESTAMP)])
        return None

    def _newer_state(self, cluster: Cluster, split: LiveScanSplit, columns: list[str] | None,
                     newer: LiveScanStart | None, served: int) -> tuple[pa.Table, int]:
        """(c): the state at ``split.log_offset`` is gone for good; fail, or (with
        ``failOnDataLoss=false``) the rows of a newer state and the offset it reflects."""
        what = (f"table {split.table!r} bucket {split.bucket}: the live scan of the state at "
                f"log offset {split.log_offset} lost its session after {served} rows, a new "
                f"session reflects another offset, and no KV snapshot at or before that offset "
                f"with its changelog is left to rebuild it from")
        if self.options.fail_on_data_loss:
            raise LiveScanLost(f"{what}. Set failOnDataLoss=false to continue from the newer "
                               "state (the bucket's changes after the lost offset are then "
                               "delivered again), or restart with a new checkpointLocation")
        if newer is None:
            newer = cluster.open_live_scan(split.table, split.bucket,
                                           batch_size_bytes=self.options.scan_batch_bytes)
        log.warning("%s; continuing from the state at log offset %d (failOnDataLoss=false)",
                    what, newer.log_offset)
        batches = list(cluster.read_live_scan(split.table, split.bucket, newer,
                                              projection=columns,
                                              batch_size_bytes=self.options.scan_batch_bytes))
        return (pa.Table.from_batches(batches) if batches else pa.table({})), newer.log_offset

    # -- changelog splits ---------------------------------------------------------------------
    def log_records(self, split: LogSplit) -> Iterator[pa.RecordBatch]:
        cluster = self.cluster_factory(self.options)
        columns = self.columns(split.table)
        start, part = split.start, split.partition
        try:
            yield from cluster.read_log(split.table, split.bucket, start, split.end, columns,
                                        partition=part)
            return
        except LogOffsetOutOfRange:
            if self.options.fail_on_data_loss:
                raise LogOffsetOutOfRange(
                    f"{split.where}: changelog records "
                    f"[{split.start}, {split.end}) are no longer retained (table.log.ttl); set "
                    f"failOnDataLoss=false to skip what was deleted") from None
        earliest = cluster.list_offsets(split.table, buckets=[split.bucket], spec="earliest",
                                        partition=part).get(split.bucket, split.end)
        log.warning("%s: changelog records [%d, %d) were deleted before they were read; skipped "
                    "(failOnDataLoss=false)", split.where, split.start, min(earliest, split.end))
        if earliest < split.end:
            yield from cluster.read_log(split.table, split.bucket, max(earliest, start),
                                        split.end, columns, partition=part)

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
                latest = cluster.latest_kv_snapshots(
                    split.table, partition=split.partition).get(split.bucket)
                if latest is None:
                    raise
                snapshot_id, log_start = latest.snapshot_id, latest.log_offset
        else:
            raise KvSnapshotNotExist(f"{split.where}: its KV "
                                     f"snapshots kept disappearing while being read; retry the "
                                     f"read")
        parts = [snap] if snap is not None else []
        if split.log_end > log_start:
            batches = list(cluster.read_log(split.table, split.bucket, log_start, split.log_end,
                                            columns, partition=split.partition))
            if batches:
                parts.append(pa.Table.from_batches(batches))
        if not parts:
            return
        yield from fold_latest(parts, list(split.primary_key)).to_batches()

    def _snapshot_table(self, cluster: Cluster, split: MergedBucketSplit | LiveScanSplit,
                        snapshot_id: int | None,
                        log_offset: int, columns: list[str] | None) -> pa.Table | None:
        if snapshot_id is None:
            return None
        batches = [with_snapshot_metadata(b, log_offset) for b in cluster.read_snapshot(
            split.table, split.bucket, snapshot_id, projection=columns,
            batch_size_bytes=self.options.scan_batch_bytes,
            partition=getattr(split, "partition", None))]
        return pa.Table.from_batches(batches) if batches else None


def _planned(split: PartitionPart) -> str:
    """What ``split`` was planned to read, for messages."""
    if isinstance(split, SnapshotSplit):
        return f"rows [{split.row_start}, {split.row_end}) of its KV snapshot {split.snapshot_id}"
    if isinstance(split, LogSplit):
        return f"changelog offsets [{split.start}, {split.end})"
    assert isinstance(split, MergedBucketSplit)
    return f"its rows up to changelog offset {split.log_end}"


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
