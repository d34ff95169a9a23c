"""MetadataStore: typed reads and writes of the ZooKeeper layout over one kazoo session."""

from __future__ import annotations

import time
from typing import Callable

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError
from kazoo.recipe.election import Election

from fluss_spark.errors import (FlussError, PartitionAlreadyExist, PartitionNotExist,
                                TableAlreadyExist, TableNotExist)
from fluss_spark.metadata import layout
from fluss_spark.metadata.acl_store import AclMap, ZkAclStore
from fluss_spark.metadata.layout import (AssignmentRecord, CoordinatorRecord, LeaseRecord,
                                         PartitionRecord, SnapshotRecord, TableRecord,
                                         TabletRecord)
from fluss_spark.metadata.lease_codec import PinChanges
from fluss_spark.metadata.lease_store import ZkLeaseStore
from fluss_spark.metadata.snapshot_index import SnapshotIndex
from fluss_spark.metadata.zk import ZkSession, retriable_on_connection_loss
from fluss_spark.protocol.acl import AclBinding, Resource

__all__ = ["Election", "MetadataStore"]


@retriable_on_connection_loss
class MetadataStore:
    """Owns one kazoo session; every method maps to one layout path.

    Coordinator, tablet and table records are read and written here; KV snapshots go to
    ``SnapshotIndex``, leases to ``ZkLeaseStore`` and ACLs to ``ZkAclStore``, over the same
    ``ZkSession``.

    ``zookeeper_address`` is ``host:port[,host:port...][/chroot]``. A call that ZooKeeper does
    not answer (connection lost, or not reconnected within ``session_timeout_s``) raises the
    retriable ``MetadataStoreUnavailable``; whether a write it carried was applied is then
    unknown (ZooKeeper may still apply a request sent before the loss), so callers change their
    own state only after a write returns and answer "retry" otherwise.
    """

    def __init__(self, zookeeper_address: str, *, timeout_s: float = 15.0,
                 session_timeout_s: float = 10.0, digest: str | None = None):
        """``digest``: ``username:password`` for ZooKeeper digest authentication; every node
        this store creates (and ``/fluss`` itself) then lets only that user change it."""
        self.address = zookeeper_address
        self._session = ZkSession(zookeeper_address, timeout_s=timeout_s,
                                  session_timeout_s=session_timeout_s, digest=digest)
        self._snapshots = SnapshotIndex(self._session)
        self._leases = ZkLeaseStore(self._session)
        self._acls = ZkAclStore(self._session)
        # table name -> (pzxid of its partitions' znode, their records): see ``partitions``
        self._partition_cache: dict[str, tuple[int, list[PartitionRecord]]] = {}

    @property
    def zk(self):
        """The kazoo client."""
        return self._session.zk

    @zk.setter
    def zk(self, client) -> None:
        self._session.zk = client

    @property
    def on_fenced(self) -> Callable[[], None] | None:
        """Called when a write found the fence taken by another coordinator."""
        return self._session.on_fenced

    @on_fenced.setter
    def on_fenced(self, callback: Callable[[], None] | None) -> None:
        self._session.on_fenced = callback

    def start(self) -> "MetadataStore":
        self._session.start()
        return self

    def close(self) -> None:
        self._session.close()

    # -- coordinator ------------------------------------------------------------------------
    def claim_epoch(self) -> int:
        """Make this store the coordinator's writer: bump the coordinator epoch and fence every
        later write on it. Returns the new epoch."""
        return self._session.claim_epoch()

    def still_writer(self) -> bool:
        """Whether no other coordinator claimed the epoch since ``claim_epoch``."""
        return self._session.still_writer()

    def election(self, identifier: str) -> Election:
        return self.zk.Election(layout.COORDINATOR_ELECTION, identifier)

    def remove_stale_election_nodes(self, identifier: str) -> int:
        """Delete election nodes that carry ``identifier`` but belong to another session.

        A coordinator restarted on the same host:port after kill -9 finds the node of its dead
        predecessor (which holds the address it has now bound, so no live process can own it)
        and removes it instead of waiting for that session to expire.
        """
        removed = 0
        own = self.zk.client_id[0] if self.zk.client_id else None
        for child in self._session.children(layout.COORDINATOR_ELECTION):
            path = f"{layout.COORDINATOR_ELECTION}/{child}"
            try:
                data, stat = self.zk.get(path)
            except NoNodeError:
                continue
            if data.decode(errors="replace") == identifier and stat.ephemeralOwner != own:
                try:
                    self.zk.delete(path)
                    removed += 1
                except NoNodeError:
                    pass
        return removed

    def set_active_coordinator(self, record: CoordinatorRecord) -> None:
        try:
            self._session.write("delete", layout.COORDINATOR_ACTIVE)
        except NoNodeError:
            pass
        self._session.write("create", layout.COORDINATOR_ACTIVE, record.encode(), ephemeral=True)

    def active_coordinator(self) -> CoordinatorRecord | None:
        return self._session.get(layout.COORDINATOR_ACTIVE, CoordinatorRecord)

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
        for child in self._session.children(layout.TABLETS):
            rec = self._session.get(f"{layout.TABLETS}/{child}", TabletRecord)
            if rec is not None:
                out[rec.id] = rec
        return out

    def delete_tablet(self, tablet_id: int) -> None:
        """Remove a tablet registration (a dead predecessor's lingering ephemeral node)."""
        try:
            self.zk.delete(layout.tablet_path(tablet_id))
        except NoNodeError:
            pass

    # -- tables -----------------------------------------------------------------------------
    def next_table_id(self) -> int:
        return self._next_id(layout.TABLE_ID_COUNTER)

    def next_partition_id(self) -> int:
        """A new partition id, unique in the cluster (as Fluss's partition ids are)."""
        return self._next_id(layout.PARTITION_ID_COUNTER)

    def _next_id(self, path: str) -> int:
        self.zk.ensure_path(path)
        while True:
            data, stat = self.zk.get(path)
            value = layout.decode_int(data) + 1
            try:
                self._session.write("set_data", path, layout.encode_int(value),
                                    version=stat.version)
                return value
            except BadVersionError:
                continue

    def create_table(self, table: TableRecord, assignment: AssignmentRecord) -> None:
        tx = self._session.transaction()
        tx.create(layout.table_path(table.name), table.encode())
        tx.create(layout.assignment_path(table.name), assignment.encode())
        if table.partitioned:
            tx.create(layout.partitions_path(table.name), b"")
        results = self._session.commit(tx, f"create table {table.name}")
        for r in results:
            if isinstance(r, NodeExistsError):
                raise TableAlreadyExist(f"table {table.name} already exists")
            if isinstance(r, Exception):
                raise FlussError(f"creating table {table.name} failed: {r!r}")

    def update_table(self, table: TableRecord) -> None:
        """Replace the definition of an existing table (a schema change)."""
        try:
            self._session.write("set_data", layout.table_path(table.name), table.encode())
        except NoNodeError:
            raise TableNotExist(f"table {table.name} does not exist") from None

    def drop_table(self, name: str) -> None:
        try:
            self._session.delete_tree(layout.table_path(name))
        except NoNodeError:
            raise TableNotExist(f"table {name} does not exist") from None

    # -- partitions -------------------------------------------------------------------------
    def create_partition(self, table: str, rec: PartitionRecord) -> None:
        """Write a partition; PartitionAlreadyExist if its name is taken, TableNotExist if the
        table is gone (its ``partitions`` znode, made with the table, is the parent)."""
        tx = self._session.transaction()
        tx.create(layout.partition_path(table, rec.name), rec.encode())
        results = self._session.commit(tx, f"create partition {rec.name} of {table}")
        for r in results:
            if isinstance(r, NodeExistsError):
                raise PartitionAlreadyExist(f"partition {rec.name} of table {table} already "
                                            "exists")
            if isinstance(r, NoNodeError):
                raise TableNotExist(f"table {table} does not exist")
            if isinstance(r, Exception):
                raise FlussError(f"creating partition {rec.name} of {table} failed: {r!r}")

    def drop_partition(self, table: str, name: str) -> None:
        try:
            self._session.delete_tree(layout.partition_path(table, name))
        except NoNodeError:
            raise PartitionNotExist(f"partition {name} of table {table} does not exist") from None

    def partitions(self, table: str) -> list[PartitionRecord]:
        """The partitions of a table, by name.

        A partition record never changes once written (a partition dropped and created again
        is a new znode), so while the children's ``pzxid`` stays the same the records read
        before are still the records: a tablet's sync pass costs one read per partitioned
        table, not one per partition.
        """
        base = layout.partitions_path(table)
        children, version = self._session.children_version(base)
        cached = self._partition_cache.get(table)
        if version is not None and cached is not None and cached[0] == version:
            return list(cached[1])
        out = []
        for child in sorted(children):
            rec = self._session.get(f"{base}/{child}", PartitionRecord)
            if rec is not None:
                out.append(rec)
        if version is not None and len(out) == len(children):
            self._partition_cache[table] = (version, out)
        return out

    def table_names(self) -> list[str]:
        return sorted(self._session.children(layout.TABLES))

    def table(self, name: str) -> TableRecord | None:
        return self._session.get(layout.table_path(name), TableRecord)

    def assignment(self, name: str) -> AssignmentRecord | None:
        return self._session.get(layout.assignment_path(name), AssignmentRecord)

    def set_assignment(self, name: str, assignment: AssignmentRecord) -> None:
        self._session.write("set_data", layout.assignment_path(name), assignment.encode())

    def tables(self) -> list[tuple[TableRecord, AssignmentRecord | None]]:
        out = []
        for name in self.table_names():
            rec = self.table(name)
            if rec is not None:
                out.append((rec, self.assignment(name)))
        return out

    # -- KV snapshots (SnapshotIndex) -------------------------------------------------------
    def put_snapshot(self, rec: SnapshotRecord) -> None:
        self._snapshots.put_snapshot(rec)

    def delete_snapshot(self, table_id: int, bucket: int, snapshot_id: int,
                        partition_id: int | None = None) -> None:
        self._snapshots.delete_snapshot(table_id, bucket, snapshot_id, partition_id)

    def snapshot_ids(self, table_id: int, bucket: int,
                     partition_id: int | None = None) -> list[int]:
        return self._snapshots.snapshot_ids(table_id, bucket, partition_id)

    def snapshot_buckets(self, table_id: int, partition_id: int | None = None) -> list[int]:
        return self._snapshots.snapshot_buckets(table_id, partition_id)

    def snapshot(self, table_id: int, bucket: int, snapshot_id: int,
                 partition_id: int | None = None) -> SnapshotRecord | None:
        return self._snapshots.snapshot(table_id, bucket, snapshot_id, partition_id)

    def snapshot_table_ids(self) -> list[int]:
        return self._snapshots.snapshot_table_ids()

    def delete_table_snapshots(self, table_id: int) -> None:
        self._snapshots.delete_table_snapshots(table_id)

    def delete_partition_snapshots(self, table_id: int, partition_id: int) -> None:
        self._snapshots.delete_partition_snapshots(table_id, partition_id)

    def all_snapshots(self) -> list[SnapshotRecord]:
        """Every registered KV snapshot (see ``SnapshotIndex.all_snapshots``)."""
        return self._snapshots.all_snapshots()

    def index_snapshots(self) -> list[SnapshotRecord]:
        """Every KV snapshot in the index pages, not the layout v1 znodes."""
        return self._snapshots.index_snapshots()

    def migrate_snapshots(self) -> int:
        """Move layout v1 snapshot znodes into index pages; returns how many were moved."""
        return self._snapshots.migrate_snapshots()

    def v1_buckets(self) -> dict[int, list[int]]:
        """{table id: buckets} that still have layout v1 snapshot znodes."""
        return self._snapshots.v1_buckets()

    def read_v1(self, table_id: int, buckets: list[int]) -> dict[int, list[SnapshotRecord]]:
        """{bucket: layout v1 snapshot records} of a table's ``buckets``."""
        return self._snapshots.read_v1(table_id, buckets)

    def move_v1(self, table_id: int, found: dict[int, list[SnapshotRecord]]) -> None:
        """Move records ``read_v1`` found into the index pages and delete their znodes."""
        self._snapshots.move_v1(table_id, found)

    # -- KV snapshot leases (ZkLeaseStore) --------------------------------------------------
    def lease_ids(self) -> list[str]:
        return self._leases.lease_ids()

    def save_lease(self, record: LeaseRecord,
                   changed: PinChanges | None = None) -> int:
        """Write a lease; returns the bytes now stored for it (see ``ZkLeaseStore.save_lease``)."""
        return self._leases.save_lease(record, changed=changed)

    def load_lease(self, lease_id: str) -> LeaseRecord | None:
        """Read one lease; None when absent or when its first write never finished."""
        return self._leases.load_lease(lease_id)

    def load_leases(self) -> list[LeaseRecord]:
        """Every stored lease; unfinished first writes are removed, not returned."""
        return self._leases.load_leases()

    def delete_lease(self, lease_id: str) -> None:
        """Delete a lease and its child znodes in one transaction."""
        self._leases.delete_lease(lease_id)

    def lease_stored_bytes(self, lease_id: str) -> int:
        """Bytes the lease occupies in ZooKeeper (header plus children), for metrics and benches."""
        return self._leases.lease_stored_bytes(lease_id)

    # -- ACLs (ZkAclStore) ------------------------------------------------------------------
    def acl_change_version(self) -> int:
        """Moves with every ACL change (-1 before the first); one cheap read to poll."""
        return self._acls.acl_change_version()

    def load_acls(self) -> tuple[int, AclMap]:
        """(change version, every ACL by resource)."""
        return self._acls.load_acls()

    def update_acls(self, resource: Resource,
                    change: Callable[[frozenset[AclBinding]], frozenset[AclBinding]]
                    ) -> tuple[frozenset[AclBinding], frozenset[AclBinding]]:
        """Compare-and-set the ACLs of ``resource``; returns (before, after)."""
        return self._acls.update_acls(resource, change)
