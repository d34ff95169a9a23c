"""Splits: immutable, picklable descriptions of one Spark task's rows (progress lives in offsets).

Every split carries all its reader needs, because ``read()`` runs on a different reader instance
in an executor and sees nothing the driver learned after planning. A split of a partitioned
table's partition names it twice: by name (what cluster calls take) and by id (what tells it from
a partition of the same name created after it was dropped).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Mapping

from pyspark.sql.datasource import InputPartition

from fluss_spark.client.cluster import Cluster, LiveScanStart, SnapshotLocation
from fluss_spark.connector.offsets import SourceOffset, live_read_in, log_start


class PartitionPart:
    """What the splits of a partition share: its name and id (None for an unpartitioned
    table), and how messages name the bucket they read."""

    table: str
    bucket: int
    partition: str | None
    partition_id: int | None

    @property
    def where(self) -> str:
        """``table 'db.t' bucket 0`` or ``table 'db.t' partition 2026-11-25 bucket 0``."""
        part = f" partition {self.partition}" if self.partition is not None else ""
        return f"table {self.table!r}{part} bucket {self.bucket}"


@dataclass(frozen=True)
class SnapshotSplit(PartitionPart, InputPartition):
    """Rows ``[row_start, row_end)`` of one bucket's KV snapshot (key order, so deterministic)."""

    table_id: int
    table: str
    bucket: int
    snapshot_id: int
    row_start: int
    row_end: int
    lease_id: str = ""
    log_offset: int = 0  # the snapshot's log_offset (its rows get _log_offset = log_offset - 1)
    partition: str | None = None
    partition_id: int | None = None
    #: Where the snapshot's files are, as the driver learned it (a cluster that reads snapshot
    #: files): the reader then asks no server. Not part of what the split is: the same split
    #: planned again after a restart may come without it.
    location: SnapshotLocation | None = field(default=None, compare=False)

    @property
    def rows(self) -> int:
        return self.row_end - self.row_start


@dataclass(frozen=True)
class LogSplit(PartitionPart, InputPartition):
    """Changelog records ``[start, end)`` of one bucket."""

    table_id: int
    table: str
    bucket: int
    start: int
    end: int
    partition: str | None = None
    partition_id: int | None = None


@dataclass(frozen=True)
class LiveScanSplit(InputPartition):
    """One bucket's whole KV state through a live scan reflecting changelog offsets
    ``< log_offset`` (its rows get ``_log_offset = log_offset - 1``).

    ``start`` is the session the driver opened while planning (None after a driver restart:
    the reader reopens). ``snapshot_id`` / ``snapshot_log_offset`` name a leased snapshot with
    ``snapshot_log_offset <= log_offset``, from which the state at ``log_offset`` is rebuilt
    (snapshot + changelog folded by ``primary_key``) when the session is lost and a new one
    reflects another offset.
    """

    table_id: int
    table: str
    bucket: int
    log_offset: int
    snapshot_id: int | None
    snapshot_log_offset: int
    primary_key: tuple[str, ...]
    lease_id: str = ""
    start: LiveScanStart | None = None


@dataclass(frozen=True)
class MergedBucketSplit(PartitionPart, InputPartition):
    """Batch read of one PK bucket: a snapshot plus its changelog up to ``log_end``, folded by key.

    ``snapshot_id`` is None for a bucket without a snapshot (its whole changelog is folded).
    ``snapshot_log_offset`` is where the snapshot's changelog starts.
    """

    table_id: int
    table: str
    bucket: int
    snapshot_id: int | None
    snapshot_log_offset: int
    log_end: int
    primary_key: tuple[str, ...]
    partition: str | None = None
    partition_id: int | None = None


def located(splits: list[InputPartition], cluster: Cluster) -> list[InputPartition]:
    """``splits``, each snapshot split with its snapshot's files where ``cluster`` learned them
    while planning (a cluster that reads snapshot files): its task then asks no server."""
    out = []
    for split in splits:
        if isinstance(split, SnapshotSplit):
            where = cluster.snapshot_location(split.table, split.bucket, split.snapshot_id,
                                              partition=split.partition)
            split = split if where is None else replace(split, location=where)
        out.append(split)
    return out


def plan_splits(start: SourceOffset, end: SourceOffset, split_max_rows: int = 0,
                live_starts: Mapping[tuple[int, int, int], LiveScanStart] | None = None,
                primary_keys: Mapping[int, tuple[str, ...]] | None = None
                ) -> list[InputPartition]:
    """The splits of the micro-batch ``(start, end]``: same offsets, same splits, in a fixed order.

    A bucket read by a live scan in this batch gets one ``LiveScanSplit`` (with the session the
    driver opened, from ``live_starts``, when it has it) and no snapshot or changelog split.
    """
    splits: list[InputPartition] = []
    before = start.units()
    for key, e in end.units().items():
        tid, pid = key
        s = before.get(key)
        name, part = end.table_name(key), end.partition_name(key)
        live = {b for b in e.live if live_read_in(s, e, b)}
        for b in sorted(live):
            snap = e.snapshot.get(b)
            fallback = snap if snap is not None and snap.log_offset <= e.live[b] else None
            splits.append(LiveScanSplit(
                tid, name, b, e.live[b], fallback.snapshot_id if fallback else None,
                fallback.log_offset if fallback else 0, tuple((primary_keys or {})[tid]),
                end.lease_id, (live_starts or {}).get((tid, b, e.live[b]))))
        for b, es in sorted(e.snapshot.items()):
            if b in live:
                continue
            ss = s.snapshot.get(b) if s else None
            first = ss.next_row if ss and ss.snapshot_id == es.snapshot_id else 0
            step = split_max_rows or max(1, es.next_row - first)
            for lo in range(first, es.next_row, step):
                splits.append(SnapshotSplit(tid, name, b, es.snapshot_id, lo,
                                            min(lo + step, es.next_row), end.lease_id,
                                            es.log_offset, part, pid))
        for b, eo in sorted(e.log.items()):
            if b in live:
                continue
            lo = log_start(s, e, b)
            if eo > lo:
                splits.append(LogSplit(tid, name, b, lo, eo, part, pid))
    return splits
