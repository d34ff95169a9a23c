"""KV snapshots a query needs that retention removed, and what each bucket reads instead."""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Callable

from fluss_spark.client.cluster import Cluster
from fluss_spark.connector.lease_session import LeaseSession
from fluss_spark.connector.offsets import SnapshotPos, SourceOffset, UnitKey
from fluss_spark.connector.options import SourceOptions
from fluss_spark.connector.planning import OffsetPlanner
from fluss_spark.errors import KvSnapshotNotExist

log = logging.getLogger(__name__)


class Replacements:
    """The buckets of a query run whose leased snapshot is gone: each continues from its newest
    snapshot (pinned under the same lease), or from its changelog where it has none any more.
    Kept for the run, so every offset of it that names the lost snapshot is moved alike."""

    def __init__(self, options: SourceOptions, cluster: Callable[[], Cluster],
                 lease: LeaseSession, planner: OffsetPlanner):
        self.options = options
        self._cluster = cluster
        self.lease = lease
        self.planner = planner
        # (unit, bucket, lost snapshot id) -> (snapshot the bucket continues with or None,
        # changelog offset it continues at or None to keep its own)
        self._replacements: dict[tuple[UnitKey, int, int],
                                 tuple[SnapshotPos | None, int | None]] = {}

    def replace(self, offset: SourceOffset, key: UnitKey, bucket: int, snapshot_id: int, *,
                lossless: bool) -> None:
        """A snapshot the query needs is gone: continue the bucket from its newest snapshot.

        ``lossless``: none of its rows was read yet (a fresh query that lost the race against
        retention), so this is no data loss. Otherwise ``failOnDataLoss`` decides."""
        where, name, part = offset.where(key), offset.table_name(key), offset.partition_name(key)
        what = (f"{where} bucket {bucket}: KV snapshot {snapshot_id} needed by this "
                f"query (lease {self.lease.lease_id!r}) no longer exists")
        if not lossless and self.options.fail_on_data_loss:
            raise KvSnapshotNotExist(
                f"{what}; its unread rows are lost, so this checkpoint cannot be restarted as "
                f"it is. Start the query with a new checkpointLocation, or set "
                f"failOnDataLoss=false to continue from the latest snapshot. This start released "
                f"the snapshots it pinned; `fluss-spark lease drop {self.lease.lease_id}` removes "
                f"whatever the lease may still hold")
        attempts = self.options.lease_acquire_retries + 1
        for _ in range(attempts):
            latest = self._cluster().latest_kv_snapshots(name, partition=part).get(bucket)
            if latest is None:  # no snapshot any more: the bucket reads its changelog
                log_from = (self.planner.offsets(name, "earliest", partition=part).get(bucket, 0)
                            if lossless else None)
                replacement: tuple[SnapshotPos | None, int | None] = (None, log_from)
                break
            names = {tid: t.name for tid, t in offset.tables.items()}
            if not self.lease.acquire({key: {bucket: latest.snapshot_id}}, names):
                replacement = (SnapshotPos(latest.snapshot_id, latest.row_count, 0,
                                           latest.log_offset), latest.log_offset)
                break
        else:
            raise KvSnapshotNotExist(
                f"could not lease the latest KV snapshot of {where} bucket {bucket} under lease "
                f"{self.lease.lease_id!r} after {attempts} attempts (they were removed by "
                f"retention faster than they could be leased). Raise the table's "
                f"kv.snapshot.num-retained or kv.snapshot.interval, then start the query again")
        new = replacement[0]
        log.log(logging.INFO if lossless else logging.WARNING, "%s (%s): %s", what,
                "no row of it was read yet" if lossless else "failOnDataLoss=false",
                f"continuing from snapshot {new.snapshot_id}" if new is not None
                else "continuing with the changelog")
        self._replacements[(key, bucket, snapshot_id)] = replacement

    def apply(self, offset: SourceOffset) -> SourceOffset:
        """``offset`` with every bucket whose snapshot was replaced moved to its replacement."""
        if not self._replacements:
            return offset
        units = offset.units()
        for (key, b, sid), (new, log_from) in self._replacements.items():
            t = units.get(key)
            cur = t.snapshot.get(b) if t is not None else None
            if t is None or cur is None or cur.snapshot_id != sid:
                continue
            snapshot, logs = dict(t.snapshot), dict(t.log)
            if new is None:
                del snapshot[b]
            else:
                snapshot[b] = new
            if log_from is not None:
                logs[b] = log_from
            units[key] = replace(t, snapshot=snapshot, log=logs)
        return offset.with_units(units)


__all__ = ["Replacements"]
