"""MetadataStore: typed reads and writes of the ZooKeeper layout over one kazoo client."""

from __future__ import annotations

import logging
import time

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError
from kazoo.recipe.election import Election

from fluss_spark.errors import FlussError, TableAlreadyExist, TableNotExist
from fluss_spark.metadata import layout
from fluss_spark.metadata.layout import (AssignmentRecord, CoordinatorRecord, SnapshotRecord,
                                         TableRecord, TabletRecord)

log = logging.getLogger(__name__)


class MetadataStore:
    """Owns one kazoo session; every method maps to one layout path.

    ``zookeeper_address`` is ``host:port[,host:port...][/chroot]``.
    """

    def __init__(self, zookeeper_address: str, *, timeout_s: float = 15.0,
                 session_timeout_s: float = 10.0):
        self.address = zookeeper_address
        hosts, slash, chroot = zookeeper_address.partition("/")
        self._chroot = "/" + chroot.strip("/") if slash and chroot.strip("/") else ""
        self.zk = KazooClient(hosts=hosts, timeout=session_timeout_s)
        self._timeout_s = timeout_s

    def start(self) -> "MetadataStore":
        try:
            self.zk.start(timeout=self._timeout_s)
        except Exception as e:  # kazoo raises its own timeout type
            raise FlussError(f"cannot reach ZooKeeper at {self.address}: {e}; is it running?") from None
        if self._chroot:
            # kazoo needs the chroot node to exist before it is used as a root.
            self.zk.ensure_path(self._chroot)
            self.zk.chroot = self._chroot
        for path in (layout.TABLETS, layout.TABLES, layout.SNAPSHOTS, layout.LEASES,
                     layout.COORDINATOR_ELECTION, "/fluss/counters"):
            self.zk.ensure_path(path)
        return self

    def close(self) -> None:
        try:
            self.zk.stop()
            self.zk.close()
        except Exception:  # noqa: BLE001 - closing is best effort
            pass

    # -- coordinator ------------------------------------------------------------------------
    def election(self, identifier: str) -> Election:
        return self.zk.Election(layout.COORDINATOR_ELECTION, identifier)

    def set_active_coordinator(self, record: CoordinatorRecord) -> None:
        try:
            self.zk.delete(layout.COORDINATOR_ACTIVE)
        except NoNodeError:
            pass
        self.zk.create(layout.COORDINATOR_ACTIVE, record.encode(), ephemeral=True)

    def active_coordinator(self) -> CoordinatorRecord | None:
        return self._get(layout.COORDINATOR_ACTIVE, CoordinatorRecord)

    # -- tablet servers ---------------------------------------------------------------------
    def register_tablet(self, record: TabletRecord) -> None:
        path = layout.tablet_path(record.id)
        deadline = time.monotonic() + 30
        while True:
            try:
                self.zk.create(path, record.encode(), ephemeral=True)
                return
            except NodeExistsError:
                # The ephemeral node of a killed predecessor lingers until its session expires.
                if time.monotonic() > deadline:
                    raise FlussError(f"tablet server id {record.id} is already registered by a "
                                     "live process; pick another --id") from None
                time.sleep(0.5)

    def tablets(self) -> dict[int, TabletRecord]:
        out = {}
        for child in self._children(layout.TABLETS):
            rec = self._get(f"{layout.TABLETS}/{child}", TabletRecord)
            if rec is not None:
                out[rec.id] = rec
        return out

    # -- tables -----------------------------------------------------------------------------
    def next_table_id(self) -> int:
        path = layout.TABLE_ID_COUNTER
        self.zk.ensure_path(path)
        while True:
            data, stat = self.zk.get(path)
            value = layout.decode_int(data) + 1
            try:
                self.zk.set(path, layout.encode_int(value), version=stat.version)
                return value
            except BadVersionError:
                continue

    def create_table(self, table: TableRecord, assignment: AssignmentRecord) -> None:
        tx = self.zk.transaction()
        tx.create(layout.table_path(table.name), table.encode())
        tx.create(layout.assignment_path(table.name), assignment.encode())
        results = tx.commit()
        for r in results:
            if isinstance(r, NodeExistsError):
                raise TableAlreadyExist(f"table {table.name} already exists")
            if isinstance(r, Exception):
                raise FlussError(f"creating table {table.name} failed: {r!r}")

    def drop_table(self, name: str) -> None:
        try:
            self.zk.delete(layout.table_path(name), recursive=True)
        except NoNodeError:
            raise TableNotExist(f"table {name} does not exist") from None

    def table_names(self) -> list[str]:
        return sorted(self._children(layout.TABLES))

    def table(self, name: str) -> TableRecord | None:
        return self._get(layout.table_path(name), TableRecord)

    def assignment(self, name: str) -> AssignmentRecord | None:
        return self._get(layout.assignment_path(name), AssignmentRecord)

    def set_assignment(self, name: str, assignment: AssignmentRecord) -> None:
        self.zk.set(layout.assignment_path(name), assignment.encode())

    def tables(self) -> list[tuple[TableRecord, AssignmentRecord | None]]:
        out = []
        for name in self.table_names():
            rec = self.table(name)
            if rec is not None:
                out.append((rec, self.assignment(name)))
        return out

    # -- KV snapshots -----------------------------------------------------------------------
    def put_snapshot(self, rec: SnapshotRecord) -> None:
        path = layout.snapshot_path(rec.table_id, rec.bucket, rec.snapshot_id)
        try:
            self.zk.create(path, rec.encode(), makepath=True)
        except NodeExistsError:
            self.zk.set(path, rec.encode())

    def delete_snapshot(self, table_id: int, bucket: int, snapshot_id: int) -> None:
        try:
            self.zk.delete(layout.snapshot_path(table_id, bucket, snapshot_id))
        except NoNodeError:
            pass

    def snapshot_ids(self, table_id: int, bucket: int) -> list[int]:
        return sorted(int(c) for c in self._children(layout.snapshots_path(table_id, bucket)))

    def snapshot_buckets(self, table_id: int) -> list[int]:
        return sorted(int(c) for c in self._children(layout.snapshots_path(table_id)))

    def snapshot(self, table_id: int, bucket: int, snapshot_id: int) -> SnapshotRecord | None:
        return self._get(layout.snapshot_path(table_id, bucket, snapshot_id), SnapshotRecord)

    def snapshot_table_ids(self) -> list[int]:
        return sorted(int(c) for c in self._children(layout.SNAPSHOTS))

    def delete_table_snapshots(self, table_id: int) -> None:
        try:
            self.zk.delete(layout.snapshots_path(table_id), recursive=True)
        except NoNodeError:
            pass

    # -- helpers ----------------------------------------------------------------------------
    def _children(self, path: str) -> list[str]:
        try:
            return self.zk.get_children(path)
        except NoNodeError:
            return []

    def _get(self, path: str, cls):
        try:
            data, _ = self.zk.get(path)
        except NoNodeError:
            return None
        return cls.decode(data)
