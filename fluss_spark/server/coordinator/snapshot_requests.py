"""SnapshotRequests: the coordinator's KV snapshot calls (commit, list) and the removal of a
dropped partition's snapshots."""

from __future__ import annotations

import logging
import threading
from typing import Callable

from fluss_spark.errors import (InvalidRequest, PartitionNotExist, TableNotExist,
                                TableNotPartitioned)
from fluss_spark.metadata.layout import PartitionRecord, SnapshotRecord, TableRecord
from fluss_spark.protocol import messages as m
from fluss_spark.protocol.acl import OperationType, Resource
from fluss_spark.server.authorizer import Authorizer
from fluss_spark.server.coordinator.leases import LeaseManager
from fluss_spark.server.coordinator.partitions import PartitionManager
from fluss_spark.server.coordinator.snapshots import SnapshotRegistry, delete_path, join_path
from fluss_spark.server.coordinator.tables import TableManager
from fluss_spark.server.metadata_view import snapshot_info
from fluss_spark.server.snapshot_store import is_file, same_location, snapshot_location

log = logging.getLogger(__name__)


class SnapshotRequests:
    """COMMIT_KV_SNAPSHOT and LIST_KV_SNAPSHOTS over the registry, per (table, partition,
    bucket); a request's ``partition_id`` must fit its table (absent: unpartitioned)."""

    def __init__(self, *, tables: TableManager, partitions: PartitionManager,
                 snapshots: SnapshotRegistry, leases: LeaseManager, authorizer: Authorizer,
                 remote_data_dir: str, lock: threading.RLock, clock: Callable[[], int]):
        self.tables, self.partitions = tables, partitions
        self.snapshots, self.leases = snapshots, leases
        self.authorizer = authorizer
        self.remote_data_dir = remote_data_dir
        self._lock = lock
        self._clock = clock

    def commit(self, req: m.CommitKvSnapshotRequest) -> m.Empty:
        """Register a snapshot a tablet wrote (the caller checked it is a tablet)."""
        rec = SnapshotRecord(
            table_id=req.table_id, bucket=req.bucket, snapshot_id=req.snapshot_id, path=req.path,
            log_offset=req.log_offset, row_count=req.row_count, size_bytes=req.size_bytes,
            created_ms=req.created_ms or self._clock(), partition_id=req.partition_id)
        with self._lock:
            table = self.tables.by_id(rec.table_id)
            if table is None:
                raise TableNotExist(f"table id {rec.table_id} does not exist (dropped?); "
                                    "its snapshot is not registered")
            where = self._where(table, rec.partition_id)
            if not 0 <= rec.bucket < table.num_buckets:
                raise InvalidRequest(f"{where} has buckets 0..{table.num_buckets - 1}, "
                                     f"not {rec.bucket}")
            known = self.snapshots.get(rec.table_id, rec.bucket, rec.snapshot_id,
                                       rec.partition_id)
            if known is not None and known.path == rec.path:
                return m.Empty()  # a retry of a commit whose answer was lost
            self._check_new_snapshot(where, rec)
            self.snapshots.commit(rec)
        return m.Empty()

    def _check_new_snapshot(self, where: str, rec: SnapshotRecord) -> None:
        """A snapshot is registered only at the store's own location for its id, once written
        there, and after the bucket's last one: retention later deletes what is registered, so
        a request must never choose what gets deleted."""
        what = f"snapshot {rec.snapshot_id} of {where} bucket {rec.bucket}"
        expected = snapshot_location(self.remote_data_dir, rec.table_id, rec.bucket,
                                     rec.snapshot_id, rec.partition_id)
        if not same_location(rec.path, expected):
            raise InvalidRequest(f"{what}: path {rec.path!r} is not its place in the snapshot "
                                 f"store, {expected!r}")
        if not is_file(expected):
            raise InvalidRequest(f"{what}: no snapshot file at {expected!r}")
        last = self.snapshots.find(rec.table_id, rec.bucket, latest_only=True,
                                   partition_id=rec.partition_id)
        if last and rec.snapshot_id <= last[0].snapshot_id:
            raise InvalidRequest(f"{what}: snapshot ids must follow the bucket's last one, "
                                 f"{last[0].snapshot_id}")

    def list(self, req: m.ListKvSnapshotsRequest) -> m.ListKvSnapshotsResponse:
        """The snapshots of a table (every partition, or ``partition_id``'s)."""
        with self._lock:
            table = self.tables.by_id(req.table_id)
            if table is None:
                raise TableNotExist(f"table id {req.table_id} does not exist")
            self.authorizer.check(OperationType.DESCRIBE, Resource.table(table.name),
                                  f"list the KV snapshots of {table.name}")
            if req.partition_id is not None:
                self._where(table, req.partition_id)
            recs = self.snapshots.find(req.table_id, req.bucket, req.latest_only,
                                       req.partition_id)
            return m.ListKvSnapshotsResponse(tuple(snapshot_info(r, self.leases.pinned_by(
                r.table_id, r.bucket, r.snapshot_id, r.partition_id)) for r in recs))

    def drop_partition(self, part: PartitionRecord) -> None:
        """Remove a dropped partition's pins from every lease, then its snapshots: records,
        files and its store directory."""
        with self._lock:
            self.leases.drop_partition_pins(part.table_id, part.partition_id)
            self.snapshots.drop_partition(part.table_id, part.partition_id)
        try:
            delete_path(join_path(self.remote_data_dir, part.table_id, f"p{part.partition_id}"))
        except Exception as e:  # noqa: BLE001 - the partition is gone; leftovers are only space
            log.warning("cannot delete the snapshot directory of dropped partition %s of table "
                        "id %s: %s", part.name, part.table_id, e)

    def _where(self, table: TableRecord, partition_id: int | None) -> str:
        if partition_id is None:
            if table.partitioned:
                raise InvalidRequest(f"table {table.name} is partitioned: name a partition id")
            return f"table {table.name}"
        if not table.partitioned:
            raise TableNotPartitioned(f"table {table.name} is not partitioned; send no "
                                      f"partition id (got {partition_id})")
        part = self.partitions.by_id(table.table_id, partition_id)
        if part is None:
            raise PartitionNotExist(f"partition id {partition_id} of table {table.name} does "
                                    "not exist (dropped?)")
        return f"table {table.name} partition {part.name}"
