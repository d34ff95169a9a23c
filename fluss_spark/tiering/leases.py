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
from fluss_spark.errors import FlussError, LeaseNotFound
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
    0.9.1) does not say what is pinned: every bucket of a PK table not in ``released_before`` is
    released then (releasing what is not pinned changes nothing)."""
    pinned: Callable[[TableInfo], list[int]]
    if not cluster.capabilities().lease_describe:
        pinned = lambda info: info.buckets if info.has_primary_key else []  # noqa: E731
        tables = {n: i for n, i in tables.items() if n not in released_before}
    else:
        try:
            lease = cluster.describe_kv_snapshot_lease(lease_id)
        except LeaseNotFound:
            return []
        except FlussError as e:
            log.warning("cannot describe lease %s: %s", lease_id, e)
            return []
        pinned = lambda info: sorted(  # noqa: E731 - a partitioned table's pins are per partition
            {b for pins in [lease.tables.get(info.table_id, {}),
                            *lease.partitions.get(info.table_id, {}).values()] for b in pins})
    released = []
    for name, info in tables.items():
        pins = pinned(info)
        if not pins or name in failed:
            continue  # a failed query's pins go with the lease's expiry or a restart
        m = LakeTable.open(lake_root, name).state()
        if (m.commit is not None and m.snapshot_complete and read_snapshots(m.fluss_offsets)
                and finished_batch(name) >= m.commit.batch_id):
            try:    # a table's buckets release its pins in every partition too
                cluster.release_kv_snapshot_lease(lease_id, {info.table_id: pins})
            except LeaseNotFound:
                pass
            released.append(name)
            log.info("released table %s from lease %s after its snapshot phase", name, lease_id)
    return released


def read_snapshots(offsets: dict) -> bool:
    """Whether a lake position read KV snapshots (of any partition, for a partitioned table)."""
    return bool(offsets.get("snapshot")) or any(
        p.get("snapshot") for p in (offsets.get("partitions") or {}).values())


__all__ = ["read_snapshots", "release_finished_snapshots"]
