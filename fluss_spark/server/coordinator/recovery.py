"""How a new coordinator rebuilds the snapshot registry and the leases from ZooKeeper."""

from __future__ import annotations

from typing import Callable

from fluss_spark.server.coordinator.leases import LeaseManager
from fluss_spark.server.coordinator.snapshots import SnapshotRegistry


def recover(snapshots: SnapshotRegistry, leases: LeaseManager, *,
            table_exists: Callable[[int], bool],
            partition_exists: Callable[[int, int], bool]) -> tuple[int, int]:
    """Load snapshots and leases, expire what ran out while no coordinator was active, drop
    pins of tables and partitions that are gone, then collect garbage; returns (snapshots,
    leases) loaded.

    The order matters: every lease is loaded before any GC, so nothing a lease pins can be
    collected."""
    n_snapshots = snapshots.load()
    n_leases = leases.load()
    leases.expire_once()
    # A table drop interrupted by a crash leaves pins on a table that is gone.
    for table_id in leases.table_ids():
        if not table_exists(table_id):
            leases.drop_table_pins(table_id)
    # Likewise a partition drop (by hand or by auto-partition retention).
    for table_id, partition_id in leases.partition_ids():
        if not partition_exists(table_id, partition_id):
            leases.drop_partition_pins(table_id, partition_id)
    snapshots.gc_all()
    return n_snapshots, n_leases
