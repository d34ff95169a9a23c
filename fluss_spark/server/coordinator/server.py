"""CoordinatorServer: leader election, recovery from ZooKeeper, and the coordinator RPC handlers."""

from __future__ import annotations

import logging
import threading
import time

from fluss_spark import config
from fluss_spark.clock import Clock, wall_ms
from fluss_spark.errors import (MetadataStoreUnavailable,
                                NotCoordinatorLeader)
from fluss_spark.metadata.layout import CoordinatorRecord
from fluss_spark.metadata.store import Election, MetadataStore
from fluss_spark.protocol import messages as m
from fluss_spark.protocol.acl import OperationType, Resource
from fluss_spark.server.coordinator.acls import AclManager
from fluss_spark.server.coordinator.auto_partitions import AutoPartitioner
from fluss_spark.server.coordinator.leases import LeaseManager
from fluss_spark.server.coordinator.partitions import PartitionManager
from fluss_spark.server.coordinator.recovery import recover
from fluss_spark.server.coordinator.snapshot_migration import SnapshotMigration
from fluss_spark.server.coordinator.snapshot_requests import SnapshotRequests
from fluss_spark.server.coordinator.snapshots import SnapshotRegistry, delete_path, join_path
from fluss_spark.server.coordinator.tables import TableManager
from fluss_spark.server.metadata_view import (build_metadata, lease_info, partition_info)
from fluss_spark.server.security import current_principal
from fluss_spark.server.port import ServerPort
from fluss_spark.server.settings import ServerSettings

log = logging.getLogger(__name__)


class CoordinatorServer:
    """The coordinator process: serves RPCs at once, acts only while it is the elected leader.

    On winning the election it reloads tables, the snapshot registry and every lease from
    ZooKeeper, expires leases that ran out while no coordinator was active, runs one GC pass,
    and only then publishes itself as the active coordinator and accepts leader-only requests.
    Layout v1 snapshot znodes left by an older release are moved into the snapshot index in
    the background after that (``SnapshotMigration``), so recovery reads O(tables + pages).
    Before that (or on a standby) those requests get the retriable NotCoordinatorLeader.
    """

    #: How long ``start`` waits for leadership when no other coordinator is active.
    LEADER_WAIT_S = 10.0

    def __init__(self, settings: ServerSettings, *, clock: Clock = wall_ms):
        self.settings = settings
        self._clock = clock
        self._store = MetadataStore(settings.zookeeper,
                                    session_timeout_s=settings.zk_session_timeout_s,
                                   digest=settings.zk_digest)
        self._lock = threading.RLock()
        self.tables = TableManager(self._store, lock=self._lock, clock=clock)
        self.partitions = PartitionManager(self._store, self.tables, lock=self._lock,
                                           clock=clock)
        self.snapshots = SnapshotRegistry(self._store, num_retained=self.tables.num_retained,
                                          store_root=settings.remote_data_dir,
                                          lock=self._lock)
        self.leases = LeaseManager(self._store, snapshot_exists=self.snapshots.exists,
                                   on_unpinned=self.snapshots.collect, clock=clock,
                                   lock=self._lock)
        self.snapshots.is_pinned = self.leases.is_pinned
        self.snapshot_migration = SnapshotMigration(self.snapshots)
        port = ServerPort.open(settings, "coordinator", self._store)
        self.security, self.authorizer, self._rpc = port.security, port.authorizer, port.rpc
        self.acls = AclManager(self._store, self.authorizer, self._lock)
        self.snapshot_requests = SnapshotRequests(
            tables=self.tables, partitions=self.partitions, snapshots=self.snapshots,
            leases=self.leases, authorizer=self.authorizer,
            remote_data_dir=settings.remote_data_dir, lock=self._lock, clock=clock)
        self.auto_partitions = AutoPartitioner(self.tables, self.partitions,
                                               drop=self.drop_partition, clock=clock)
        self.host, self.port = self._rpc.host, self._rpc.port
        self._leader = threading.Event()
        #: The ZooKeeper connection is up (cleared while it is SUSPENDED or LOST): background
        #: passes that change state (lease expiry) pause meanwhile.
        self._zk_connected = threading.Event()
        #: Leader requests are served only before this (monotonic) time, which each confirmed
        #: look at the coordinator epoch moves on; a coordinator paused past its session finds
        #: it passed when it wakes, before it could serve anything from a stale state.
        self._valid_until = 0.0
        self._session_s = settings.zk_session_timeout_s
        self._store.on_fenced = self._on_fenced
        self._stopping = threading.Event()
        self._wake = threading.Event()
        self._election: Election | None = None
        self._election_thread: threading.Thread | None = None
        self._register_handlers()

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> "CoordinatorServer":
        """Listen for RPCs and enter the election; returns without waiting on another leader.

        When no coordinator is active it waits (up to LEADER_WAIT_S) until this one has
        recovered and leads, so a lone coordinator is fully serving when ``start`` returns.
        """
        self._store.start()
        self._zk_connected.set()
        self._store.zk.add_listener(self._on_session_state)
        self._rpc.start()
        if self.security.sasl:      # PLAINTEXT allows everything: no ACL to follow
            self.authorizer.cache.start(self._stopping, "coordinator-acls")
        identifier = f"{self.host}:{self.port}"
        if self._store.remove_stale_election_nodes(identifier):
            log.info("removed the election node of a dead coordinator at %s", identifier)
        self._election = self._store.election(identifier)
        self._election_thread = threading.Thread(target=self._election_loop,
                                                 args=(self._election,),
                                                 name="coordinator-election", daemon=True)
        self._election_thread.start()
        if self._store.active_coordinator() is None:
            self._leader.wait(self.LEADER_WAIT_S)
        return self

    def stop(self) -> None:
        self._stopping.set()
        self._wake.set()
        if self._election is not None:
            self._election.cancel()
        self._rpc.stop()
        # ZooKeeper first: a thread waiting on an unreachable ZooKeeper fails at once instead
        # of holding the exit for its session timeout.
        self._store.close()
        if self._election_thread is not None:
            self._election_thread.join(timeout=10)
        self.leases.stop_expiry()
        self.auto_partitions.stop()
        self.snapshot_migration.stop()

    @property
    def is_leader(self) -> bool:
        return self._leader.is_set()

    def wait_until_leader(self, timeout_s: float) -> bool:
        return self._leader.wait(timeout_s)

    def _on_session_state(self, state) -> None:
        # kazoo states compare equal to their names; LOST means our election node is gone.
        if state == "CONNECTED":
            self._zk_connected.set()
        else:       # SUSPENDED (connection lost, session maybe alive) or LOST
            self._zk_connected.clear()
        if state == "LOST" and not self._stopping.is_set():
            log.warning("ZooKeeper session lost; stepping down as coordinator")
            self._leader.clear()
            self._wake.set()

    def _on_fenced(self) -> None:
        if self._leader.is_set():
            log.warning("another coordinator took over (coordinator epoch changed); stepping down")
        self._leader.clear()
        self._wake.set()

    def _confirm_leadership(self) -> None:
        """Check the epoch is still ours and extend the validity of leadership, or step down."""
        asked = time.monotonic()
        try:
            mine = self._store.still_writer()
        except Exception as e:  # noqa: BLE001 - unknown: let the validity lapse, retry later
            log.warning("cannot confirm leadership (%s: %s); leader requests pause until "
                        "ZooKeeper answers", type(e).__name__, e)
            return
        if mine:
            # ZooKeeper saw our session alive after ``asked``: it cannot expire, and so no
            # other coordinator can take over, before asked + the session timeout.
            self._valid_until = asked + 0.8 * self._session_s
        else:
            self._on_fenced()

    def _may_act(self) -> bool:
        """Whether background passes may change state now: this coordinator leads, its
        ZooKeeper connection is up, and its leadership is confirmed (confirming it first when
        the last confirmation is too old, as a leader request would)."""
        if self._stopping.is_set() or not self._leader.is_set() \
                or not self._zk_connected.is_set():
            return False
        if time.monotonic() >= self._valid_until:
            self._confirm_leadership()
        return self._leader.is_set() and time.monotonic() < self._valid_until

    def _election_loop(self, election: Election) -> None:
        while not self._stopping.is_set():
            try:
                election.run(self._lead)
            except Exception:  # noqa: BLE001 - a lost session must not end the election loop
                if not self._stopping.is_set():    # (stopping closes the session under it)
                    log.exception("coordinator election failed; retrying")
            if not self._stopping.is_set():
                time.sleep(0.5)

    def _lead(self) -> None:
        if self._stopping.is_set():
            return
        self._wake.clear()
        try:
            self._become_leader()
        except Exception:  # noqa: BLE001 - give up leadership and let the election retry
            log.exception("coordinator recovery failed; releasing leadership")
            return
        log.info("coordinator %s:%s is the active coordinator", self.host, self.port)
        confirm_every = max(0.05, self._session_s / 4)
        while not self._stopping.is_set() and not self._wake.wait(confirm_every):
            self._confirm_leadership()
        self._leader.clear()
        self.leases.stop_expiry()
        self.auto_partitions.stop()
        self.snapshot_migration.stop()

    def _become_leader(self) -> None:
        with self._lock:
            # First of all: from here on, writes of any earlier coordinator fail.
            epoch = self._store.claim_epoch()
            n_tables = self.tables.load()
            self.partitions.load()
            n_snaps, n_leases = recover(
                self.snapshots, self.leases,
                table_exists=lambda t: self.tables.by_id(t) is not None,
                partition_exists=lambda t, p: self.partitions.by_id(t, p) is not None)
            self._store.set_active_coordinator(
                CoordinatorRecord(host=self.host, port=self.port, epoch=self._clock()))
            self._valid_until = time.monotonic() + 0.8 * self._session_s
            self._leader.set()
        log.info("coordinator epoch %d: recovered %d tables, %d snapshots, %d leases", epoch,
                 n_tables, n_snaps, n_leases)
        interval = self.settings.options.get(config.LEASE_EXPIRATION_CHECK_INTERVAL.key,
                                             config.LEASE_EXPIRATION_CHECK_INTERVAL.default)
        self.leases.start_expiry(int(interval), active=self._may_act)
        interval = self.settings.options.get(config.AUTO_PARTITION_CHECK_INTERVAL.key,
                                             config.AUTO_PARTITION_CHECK_INTERVAL.default)
        self.auto_partitions.start(int(interval), active=self._may_act)
        pause = self.settings.options.get(config.SNAPSHOT_MIGRATION_PAUSE.key,
                                          config.SNAPSHOT_MIGRATION_PAUSE.default)
        self.snapshot_migration.start(int(pause), active=self._may_act)

    # -- handlers ----------------------------------------------------------------------------
    def _register_handlers(self) -> None:
        reg = self._rpc.register
        reg(m.GetMetadataRequest, self._get_metadata)
        reg(m.ListTablesRequest, self._list_tables)
        leader_only = [
            (m.CreateTableRequest, self._create_table),
            (m.DropTableRequest, self._drop_table),
            (m.AlterTableRequest, self._alter_table),
            (m.ListPartitionsRequest, self._list_partitions),
            (m.CreatePartitionRequest, self._create_partition),
            (m.DropPartitionRequest, self._drop_partition),
            (m.CommitKvSnapshotRequest, self._commit_snapshot),
            (m.ListKvSnapshotsRequest, self.snapshot_requests.list),
            (m.GetMetricsRequest, self._metrics),
            (m.AcquireLeaseRequest, self._acquire),
            (m.RenewLeaseRequest, self._renew),
            (m.ReleaseLeaseRequest, self._release),
            (m.DropLeaseRequest, self._drop_lease),
            (m.ListLeasesRequest, self._list_leases),
            (m.DescribeLeaseRequest, self._describe_lease),
            (m.CreateAclsRequest, self.acls.create),
            (m.ListAclsRequest, self.acls.list),
            (m.DropAclsRequest, self.acls.drop),
        ]
        for request_type, fn in leader_only:
            reg(request_type, self._leader_only(fn))

    def _leader_only(self, fn):
        def handler(request):
            if self._leader.is_set() and time.monotonic() >= self._valid_until:
                self._confirm_leadership()      # one ZooKeeper read, bounded by the session
            if self._leader.is_set() and time.monotonic() >= self._valid_until:
                raise MetadataStoreUnavailable(
                    f"the coordinator at {self.host}:{self.port} cannot confirm it is still the "
                    f"active coordinator: ZooKeeper ({self.settings.zookeeper}) does not "
                    f"answer; retry")
            if not self._leader.is_set():
                raise NotCoordinatorLeader(
                    f"the coordinator at {self.host}:{self.port} is not the active coordinator "
                    "(it is recovering or on standby); retry, or ask GET_METADATA for the "
                    "active one")
            return fn(request)
        return handler

    def _get_metadata(self, req: m.GetMetadataRequest) -> m.GetMetadataResponse:
        return build_metadata(self._store, req.tables, self.authorizer)

    def _list_tables(self, req: m.ListTablesRequest) -> m.ListTablesResponse:
        return m.ListTablesResponse(tuple(n for n in self._store.table_names()
                                          if self.authorizer.visible(n)))

    def _create_table(self, req: m.CreateTableRequest) -> m.CreateTableResponse:
        self.authorizer.check(OperationType.CREATE, Resource.database_of(req.name),
                              f"create table {req.name!r}")
        created = self.tables.create(req)
        self.auto_partitions.wake()     # its first partitions now, not after the interval
        return m.CreateTableResponse(created)

    def _alter_table(self, req: m.AlterTableRequest) -> m.AlterTableResponse:
        self.authorizer.check(OperationType.ALTER, Resource.table(req.name),
                              f"alter table {req.name!r}")
        with self._lock:
            rec = self.tables.alter(req)
        log.info("table %s: columns added, schema id %d", rec.name, rec.schema_id)
        return m.AlterTableResponse(rec.schema_id)

    def _drop_table(self, req: m.DropTableRequest) -> m.Empty:
        self.authorizer.check(OperationType.DROP, Resource.table(req.name),
                              f"drop table {req.name!r}")
        with self._lock:
            rec = self.tables.drop(req.name, req.ignore_if_not_exists)
            if rec is None:
                return m.Empty()
            self.partitions.forget_table(rec.table_id)
            self.leases.drop_table_pins(rec.table_id)
            self.snapshots.drop_table(rec.table_id)
        try:
            delete_path(join_path(self.settings.remote_data_dir, rec.table_id))
        except Exception as e:  # noqa: BLE001 - the table is gone; leftover files are only space
            log.warning("cannot delete the snapshot directory of dropped table %s: %s",
                        req.name, e)
        return m.Empty()

    def _list_partitions(self, req: m.ListPartitionsRequest) -> m.ListPartitionsResponse:
        self.authorizer.check(OperationType.DESCRIBE, Resource.table(req.table),
                              f"list the partitions of {req.table!r}")
        return m.ListPartitionsResponse(tuple(partition_info(p)
                                              for p in self.partitions.of(req.table)))

    def _create_partition(self, req: m.CreatePartitionRequest) -> m.PartitionInfo:
        self.authorizer.check(OperationType.WRITE, Resource.table(req.table),
                              f"create a partition of {req.table!r}")
        return partition_info(self.partitions.create(req.table, dict(req.spec),
                                                     req.ignore_if_exists))

    def _drop_partition(self, req: m.DropPartitionRequest) -> m.Empty:
        self.authorizer.check(OperationType.WRITE, Resource.table(req.table),
                              f"drop a partition of {req.table!r}")
        self.drop_partition(req.table, dict(req.spec), req.ignore_if_not_exists)
        return m.Empty()

    def drop_partition(self, table: str, spec: dict, ignore_if_not_exists: bool = False) -> None:
        """Drop a partition and its snapshots, by request or by auto-partition retention."""
        part = self.partitions.drop(table, spec, ignore_if_not_exists)
        if part is not None:    # its tablets delete its local data when they see it gone
            self.snapshot_requests.drop_partition(part)

    def _commit_snapshot(self, req: m.CommitKvSnapshotRequest) -> m.Empty:
        self.security.authorize_internal("commit KV snapshots (a tablet server's call)")
        return self.snapshot_requests.commit(req)

    def _metrics(self, req: m.GetMetricsRequest) -> m.GetMetricsResponse:
        with self._lock:
            lease_metrics, lease_tables = self.leases.metrics()
            counts = self.snapshots.counts()
            tables = {}
            for name in self.tables.names():
                rec = self.tables.by_name(name)
                if rec is None:     # cannot happen: names() lists the same map, under the lock
                    continue
                per = lease_tables.get(rec.table_id, {})
                tables[name] = {"snapshot_count": counts.get(rec.table_id, 0),
                                "leased_snapshot_count": per.get("leased_snapshot_count", 0),
                                "lease_pin_count": per.get("lease_pin_count", 0)}
            metrics = {"table_count": len(tables), "snapshot_count": sum(counts.values()),
                       "tablet_count": len(self._store.tablets()),
                       "snapshot_buckets_to_migrate": self.snapshots.unmoved_buckets(),
                       **lease_metrics}
            return m.GetMetricsResponse(metrics=metrics, tables=tables)

    def _acquire(self, req: m.AcquireLeaseRequest) -> m.AcquireLeaseResponse:
        partitions = req.partitions or {}
        with self._lock:
            self._authorize_lease(req.lease_id, "change")
            self._authorize_pins(set(req.tables) | set(partitions),
                                 f"pin snapshots under lease {req.lease_id!r}")
            grant = self.leases.pin(req.lease_id, req.duration_ms, req.tables, partitions,
                                    holder=req.holder, owner=current_principal())
        # Always sent, so a client can tell this server from one that ignores partition pins.
        return m.AcquireLeaseResponse(unavailable=grant.unavailable,
                                      expires_at_ms=grant.expires_at_ms,
                                      unavailable_partitions=grant.unavailable_partitions)

    def _authorize_lease(self, lease_id: str, action: str, *, pinned: bool = False) -> None:
        """The lease's creator (or a super user); with ``pinned``, READ on the tables it pins."""
        self.security.authorize_owner(self.leases.owner_of(lease_id),
                                      f"{action} KV snapshot lease {lease_id!r}")
        if pinned:
            held = self.leases.pinned_tables(lease_id)
            self._authorize_pins(held, f"{action} KV snapshot lease {lease_id!r}")

    def _authorize_pins(self, table_ids, action: str) -> None:
        """READ on every (existing) table of ``table_ids``: a lease keeps its data readable."""
        tables = (self.tables.by_id(t) for t in table_ids)
        self.authorizer.check_tables(OperationType.READ, (t.name for t in tables if t), action)

    def _renew(self, req: m.RenewLeaseRequest) -> m.RenewLeaseResponse:
        with self._lock:
            self._authorize_lease(req.lease_id, "renew", pinned=True)
            return m.RenewLeaseResponse(self.leases.renew(req.lease_id, req.duration_ms))

    def _release(self, req: m.ReleaseLeaseRequest) -> m.ReleaseLeaseResponse:
        with self._lock:
            self._authorize_lease(req.lease_id, "release pins of")
            self._authorize_pins(set(req.tables) | set(req.partitions or {}),
                                 f"release pins of lease {req.lease_id!r}")
            return m.ReleaseLeaseResponse(self.leases.release(req.lease_id, req.tables,
                                                              req.partitions))

    def _drop_lease(self, req: m.DropLeaseRequest) -> m.DropLeaseResponse:
        with self._lock:
            self._authorize_lease(req.lease_id, "drop", pinned=True)
            return m.DropLeaseResponse(self.leases.drop(req.lease_id))

    def _list_leases(self, req: m.ListLeasesRequest) -> m.ListLeasesResponse:
        return m.ListLeasesResponse(tuple(lease_info(r) for r in self.leases.live()))

    def _describe_lease(self, req: m.DescribeLeaseRequest) -> m.LeaseInfo:
        return lease_info(self.leases.describe(req.lease_id))
