"""Offset planning: where a query starts, and how far each micro-batch goes under the read limit."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Iterable

from pyspark.sql.streaming.datasource import (ReadAllAvailable, ReadLimit, ReadMaxRows,
                                              ReadMinRows)

from fluss_spark.client.cluster import Cluster, TableInfo
from fluss_spark.clock import Clock, monotonic_ms
from fluss_spark.connector.offsets import (QueryIdentity, SnapshotPos, SourceOffset, TablePos,
                                           UnitKey, unit_order)
from fluss_spark.connector.options import SourceOptions
from fluss_spark.errors import PartitionNotExist

#: (read unit, bucket): a partition's buckets are buckets of their own.
BucketKey = tuple[UnitKey, int]


def bucket_order(key: BucketKey) -> tuple[tuple[int, int], int]:
    """A sort key of bucket keys: by table id, partition id, then bucket."""
    return unit_order(key[0]), key[1]


def live_readable(pos: SnapshotPos | None) -> bool:
    """Whether a bucket's KV state may still be read by a live scan: its snapshot phase has not
    begun (no row of the snapshot was read)."""
    return pos is not None and not pos.complete and pos.next_row == 0


def spread(pending: dict[BucketKey, int], budget: int) -> dict[BucketKey, int]:
    """Share ``budget`` fairly over buckets (water-filling: small backlogs are served whole, the
    rest split evenly); deterministic, and at least one unit goes out while any is pending."""
    alloc = {k: 0 for k in pending}
    items = sorted(((p, k) for k, p in pending.items() if p > 0),
                   key=lambda pk: (pk[0], bucket_order(pk[1])))
    remaining = max(0, budget)
    for i, (p, k) in enumerate(items):
        give = min(p, remaining // (len(items) - i))
        alloc[k] = give
        remaining -= give
    for p, k in sorted(items, key=lambda pk: bucket_order(pk[1])):  # leftovers, in bucket order
        if remaining <= 0:
            break
        if alloc[k] < p:
            alloc[k] += 1
            remaining -= 1
    return alloc


@dataclass(frozen=True)
class Step:
    """The next end offset; ``reads`` is False when it reads nothing (only replacements moved)."""

    end: SourceOffset
    reads: bool


class OffsetPlanner:
    """Plans offsets of one query run from the cluster's snapshots and changelog offsets.

    Snapshot rows and changelog records are one measure ("offsets"): a bucket reads its snapshot
    rows first, then (once the snapshot was fully read in an earlier batch) its changelog.
    """

    def __init__(self, options: SourceOptions, cluster: Callable[[], Cluster], *,
                 clock: Clock = monotonic_ms, live_scans: Callable[[], bool] = lambda: False):
        """``live_scans()``: whether KV states are read through live scans, which read a
        bucket whole in one task (so snapshot-phase buckets are admitted whole)."""
        self.options = options
        self._cluster = cluster
        self._live_scans = live_scans
        self.clock = clock
        self._last_batch_ms = clock()
        self._available_now_target: dict[BucketKey, int] | None = None
        #: Everything available after the last planned start (``reportLatestOffset``).
        self.latest_available: SourceOffset | None = None
        #: The latest changelog offset last seen per bucket: what a partition that disappears
        #: had, for its report.
        self.known_latest: dict[BucketKey, int] = {}
        #: A partition was not found since the partitions were last listed.
        self.vanished = False

    def offsets(self, table: str, spec: str, timestamp_ms: int | None = None,
                partition: str | None = None) -> dict[int, int]:
        if spec == "timestamp":
            return self._cluster().list_offsets(table, spec="timestamp", timestamp_ms=timestamp_ms,
                                                partition=partition)
        return self._cluster().list_offsets(table, spec=spec, partition=partition)

    # -- where a query starts -----------------------------------------------------------------
    def initial(self, infos: Iterable[TableInfo], lease_id: str,
                identity: QueryIdentity) -> SourceOffset:
        """``full`` mode: PK tables at their latest KV snapshots (buckets without one at their
        earliest changelog offset), log tables at the earliest offset; the other modes: the
        changelog only, from that point. A partitioned table: each of its partitions so."""
        tables: dict[int, TablePos] = {}
        for info in infos:
            if not info.partitioned:
                tables[info.table_id] = self.unit_start(info, None, self.options.startup_mode)
                continue
            tables[info.table_id] = TablePos(info.name, partition_keys=info.partition_keys,
                                             partitions={
                p.partition_id: self.unit_start(info, p.name, self.options.startup_mode)
                for p in sorted(info.partitions, key=lambda p: p.partition_id)})
        return SourceOffset(lease_id, tables, identity)

    def unit_start(self, info: TableInfo, partition: str | None, mode: str) -> TablePos:
        """Where a table (``partition`` None) or one partition starts in startup ``mode``; the
        position is named by the partition's name, or the table's."""
        name = info.name
        if mode == "full" and info.has_primary_key:
            snaps = self._cluster().latest_kv_snapshots(name, partition=partition)
            earliest = self.offsets(name, "earliest", partition=partition)
            snapshot = {b: SnapshotPos(s.snapshot_id, s.row_count, 0, s.log_offset)
                        for b, s in sorted(snaps.items())}
            logs = {b: (snapshot[b].log_offset if b in snapshot else earliest.get(b, 0))
                    for b in range(info.num_buckets)}
            return TablePos(partition or name, snapshot, logs)
        spec = {"full": "earliest"}.get(mode, mode)
        offsets = self.offsets(name, spec, self.options.startup_timestamp_ms, partition)
        return TablePos(partition or name, {}, {b: offsets.get(b, 0)
                                                for b in range(info.num_buckets)})

    # -- read limits --------------------------------------------------------------------------
    def default_read_limit(self) -> ReadLimit:
        if self.options.min_offsets_per_trigger is not None:
            return ReadMinRows(self.options.min_offsets_per_trigger)
        if self.options.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        return ReadAllAvailable()

    def prepare_for_available_now(self, infos: Iterable[TableInfo]) -> None:
        """Fix the target: the changelog ends as of now (snapshots are bounded anyway), for every
        table and every partition that exists now; a partition created later is not read."""
        target = {}
        for info in infos:
            units = ([(p.partition_id, p.name) for p in info.partitions] if info.partitioned
                     else [(None, None)])
            for pid, part in units:
                try:
                    latest = self._cluster().list_offsets(info.name, spec="latest",
                                                          partition=part)
                except PartitionNotExist:
                    continue
                for b, off in latest.items():
                    target[((info.table_id, pid), b)] = off
        self._available_now_target = target

    # -- micro-batches ------------------------------------------------------------------------
    def next_end(self, start: SourceOffset, limit: ReadLimit | None,
                 identity: QueryIdentity | None) -> Step | None:
        """The end of the next micro-batch from ``start``; None to wait (``minOffsetsPerTrigger``
        not reached within ``maxTriggerDelay``)."""
        pending, latest_log = self.pending(start)
        self.latest_available = self.advance(start, pending, latest_log, identity)

        limit = limit if limit is not None else self.default_read_limit()
        budget = None
        if isinstance(limit, ReadMaxRows):
            budget = limit.max_rows
        elif isinstance(limit, ReadMinRows):
            total = sum(pending.values())
            waited = self.clock() - self._last_batch_ms
            # Under AvailableNow no more data is coming: waiting for a minimum would only stall.
            if (total < limit.min_rows and waited < self.options.max_trigger_delay_ms
                    and self._available_now_target is None):
                return None
            budget = self.options.max_offsets_per_trigger
        alloc = pending if budget is None else spread(pending, budget)
        if self._live_scans():
            alloc = self.whole_buckets(start, pending, alloc, budget)
        if not any(alloc.values()):
            return Step(self.advance(start, {}, {}, identity), reads=False)
        self._last_batch_ms = self.clock()
        return Step(self.advance(start, alloc, latest_log, identity), reads=True)

    def whole_buckets(self, start: SourceOffset, pending: dict[BucketKey, int],
                      alloc: dict[BucketKey, int], budget: int | None) -> dict[BucketKey, int]:
        """``alloc`` with snapshot-phase buckets admitted whole or not at all: in bucket order,
        while the budget and ``scan.kv.live.max-buckets-per-trigger`` allow, at least one.
        A bucket some of whose snapshot rows were already read (a checkpoint made with
        ``scan.kv.read=snapshot``) goes on by snapshot pages: a live scan would repeat them.
        Partitions are read from their snapshots (live scans address tables only)."""
        units = start.units()
        phase = sorted((k for k, n in pending.items() if n > 0 and k[0][1] is None
                        and live_readable(units[k[0]].snapshot.get(k[1]))), key=bucket_order)
        out = dict(alloc)
        rows = chosen = 0
        for k in phase:
            fits = budget is None or rows + pending[k] <= budget
            if chosen < self.options.live_max_buckets and (fits or not chosen):
                out[k] = pending[k]
                rows += pending[k]
                chosen += 1
            else:
                out[k] = 0
        return out

    def pending(self, start: SourceOffset) -> tuple[dict[BucketKey, int], dict[BucketKey, int]]:
        """Units available per bucket: unread snapshot rows, or (once the snapshot was fully
        read in an earlier batch) changelog records up to the latest offset. A partition that
        disappeared since it was last listed has none (the next listing reports it)."""
        pending: dict[BucketKey, int] = {}
        latest_log: dict[BucketKey, int] = {}
        for key, t in start.units().items():
            in_snapshot = {b for b, s in t.snapshot.items() if not s.complete}
            for b, s in t.snapshot.items():
                if not s.complete:
                    pending[(key, b)] = s.remaining
            log_buckets = [b for b in t.log if b not in in_snapshot]
            if not log_buckets:
                continue
            try:
                latest = self._cluster().list_offsets(start.table_name(key), spec="latest",
                                                      partition=start.partition_name(key))
            except PartitionNotExist:
                self.vanished = True
                continue
            for b in log_buckets:
                end = latest.get(b, t.log[b])
                if self._available_now_target is not None:
                    end = min(end, self._available_now_target.get((key, b), t.log[b]))
                # A latest offset below the position already reached (the high watermark of a
                # leader that has just taken over can lag behind the old one's) means no new
                # records: the position never goes back, which would read records again.
                end = max(end, t.log[b])
                latest_log[(key, b)] = end
                pending[(key, b)] = max(0, end - t.log[b])
        self.known_latest.update(latest_log)
        return pending, latest_log

    @staticmethod
    def advance(start: SourceOffset, alloc: dict[BucketKey, int],
                latest_log: dict[BucketKey, int], identity: QueryIdentity | None) -> SourceOffset:
        """``start`` moved by ``alloc`` units per bucket (changelog buckets up to
        ``latest_log``) under the run's ``identity`` (None: ``start``'s)."""
        units = {}
        for key, t in start.units().items():
            snapshot, logs = dict(t.snapshot), dict(t.log)
            for b, s in t.snapshot.items():
                n = alloc.get((key, b), 0) if not s.complete else 0
                if n:
                    snapshot[b] = SnapshotPos(s.snapshot_id, s.row_count, s.next_row + n,
                                              s.log_offset)
            for b in t.log:
                if (key, b) in latest_log:
                    logs[b] = t.log[b] + min(alloc.get((key, b), 0),
                                             latest_log[(key, b)] - t.log[b])
            units[key] = replace(t, snapshot=snapshot, log=logs)
        moved = start.with_units(units)
        return SourceOffset(start.lease_id, moved.tables, identity or start.query)


__all__ = ["BucketKey", "OffsetPlanner", "Step", "bucket_order", "live_readable", "spread"]
