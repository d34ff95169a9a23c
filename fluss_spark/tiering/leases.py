"""The tiering job's lease upkeep: unpin tables whose snapshot phase is in the lake and done.

The source releases a table's pins when it commits a batch after the snapshot phase, which Spark
does only when a NEXT batch runs (docs/spark_source.md, "How the source meets Spark"). The job
therefore also releases, itself, the pins of every table whose snapshot phase is committed in the
lake and marked done by Spark, so no lease outlives the snapshot phases even on a quiet table.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Callable, Container, Mapping

from fluss_spark.client.cluster import Cluster, TableInfo
from fluss_spark.errors import FlussError, LeaseNotFound, UnknownServerError
from fluss_spark.tiering.lake import LakeTable

log = logging.getLogger(__name__)


def release_finished_snapshots(cluster: Cluster, lease_id: str, lake_root: Path,
                               tables: Mapping[str, TableInfo], failed: Container[str],
                               finished_batch: Callable[[str], int],
                               released_before: Container[str] = ()) -> list[str]:
    """Unpin every table of ``tables`` whose snapshot phase is committed in its lake copy and
    whose query finished that batch (``finished_batch(name)``, -1 for none); a table in
    ``failed`` keeps its pins for a restart. Returns the tables released.

    A cluster that cannot describe a lease (no ``lease_describe`` capability: Apache Fluss
    0.9.1) does not say what is pinned: the buckets the lake copy's position read from KV
    snapshots (what its query pinned) are released then, once per table (``released_before``),
    and exactly those, as the source's own release does: Fluss 0.9.1 fails a release that
    names a bucket its lease does not pin after the table's last pinned one. It also fails one
    of a table the lease no longer pins at all, which is what the query's own release leaves."""
    describes = cluster.capabilities().lease_describe
    if describes:
        try:
            lease = cluster.describe_kv_snapshot_lease(lease_id)
        except LeaseNotFound:
            return []
        except FlussError as e:
            log.warning("cannot describe lease %s: %s", lease_id, e)
            return []
    released = []
    for name, info in tables.items():
        if name in failed or not info.has_primary_key or (not describes
                                                          and name in released_before):
            continue  # a failed query's pins go with the lease's expiry or a restart
        if describes:   # a partitioned table's pins are per partition
            pins = sorted({b for by_bucket in [lease.tables.get(info.table_id, {}),
                                               *lease.partitions.get(info.table_id, {}).values()]
                           for b in by_bucket})
            if not pins:
                continue
        m = LakeTable.open(lake_root, name).state()
        if not (m.commit is not None and m.snapshot_complete and read_snapshots(m.fluss_offsets)
                and finished_batch(name) >= m.commit.batch_id):
            continue
        try:
            if describes:   # a table's buckets release its pins in every partition too
                cluster.release_kv_snapshot_lease(lease_id, {info.table_id: pins})
            else:
                table, partitions = snapshot_buckets(m.fluss_offsets)
                cluster.release_kv_snapshot_lease(
                    lease_id, {info.table_id: table} if table else {},
                    partitions={info.table_id: partitions} if partitions else None)
        except LeaseNotFound:
            pass
        except UnknownServerError as e:
            if describes:
                raise
            log.info("lease %s no longer pins table %s (its query released it): %s",
                     lease_id, name, e)
        released.append(name)
        log.info("released table %s from lease %s after its snapshot phase", name, lease_id)
    return released


def snapshot_buckets(offsets: dict) -> tuple[list[int], dict[int, list[int]]]:
    """The buckets a lake position read from KV snapshots: the table's, and by partition id."""
    table = sorted(int(b) for b in offsets.get("snapshot") or {})
    partitions = {int(pid): sorted(int(b) for b in p["snapshot"])
                  for pid, p in (offsets.get("partitions") or {}).items() if p.get("snapshot")}
    return table, partitions


def read_snapshots(offsets: dict) -> bool:
    """Whether a lake position read KV snapshots (of any partition, for a partitioned table)."""
    table, partitions = snapshot_buckets(offsets)
    return bool(table or partitions)


__all__ = ["read_snapshots", "release_finished_snapshots", "snapshot_buckets"]
