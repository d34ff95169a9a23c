"""The tablet server process: hosts the buckets assigned to its id and serves their RPCs."""

from __future__ import annotations

import logging
import socket
import threading
import time
from pathlib import Path

from fluss_spark.clock import Clock, wall_ms
from fluss_spark.config import LOG_RETENTION_CHECK_INTERVAL, LOG_SEGMENT_BYTES
from fluss_spark.errors import (NonPrimaryKeyTable, NotLeaderOrFollower, PartitionNotExist,
                                TableNotPartitioned, UnknownTableOrBucket)
from fluss_spark.metadata.layout import SnapshotRecord, TableRecord, TabletRecord
from fluss_spark.metadata.store import MetadataStore
from fluss_spark.protocol import messages as m
from fluss_spark.protocol.acl import OperationType, Resource
from fluss_spark.protocol.arrow_ipc import bytes_to_table
from fluss_spark.protocol.ipc_limits import IpcLimits
from fluss_spark.server.metadata_view import build_metadata, snapshot_info
from fluss_spark.server.port import ServerPort
from fluss_spark.server.settings import ServerSettings
from fluss_spark.server.tablet.assignment import (Assignment, BucketKey, bucket_dir,
                                                  remove_dropped_dirs)
from fluss_spark.server.tablet.bucket import Bucket
from fluss_spark.server.tablet.scanner import ScannerManager
from fluss_spark.server.tablet.snapshotter import TRIGGER_DEADLINE_S, Snapshotter

log = logging.getLogger(__name__)

#: How often the assignment in ZooKeeper is re-read.
SYNC_INTERVAL_S = 0.5
#: How often a tablet checks that its registration in ZooKeeper is still there.
REGISTRATION_CHECK_S = 10.0
#: How often buckets are checked for a due periodic snapshot.
SNAPSHOT_CHECK_INTERVAL_S = 0.2


class TabletServer:
    """Hosts buckets: PRODUCE, LIST_OFFSETS, FETCH_LOG, TRIGGER_KV_SNAPSHOT, GET_METADATA.

    The buckets it hosts are the ones the coordinator assigned to its id in ZooKeeper; the
    assignment is polled, and re-read at once when a request names a bucket not known yet.
    Local state lives under ``<data_dir>/tables/<table_id>/[p<partition_id>/]<bucket>/{log,kv}``.
    """

    def __init__(self, settings: ServerSettings, *, clock: Clock = wall_ms):
        self.settings = settings
        self.server_id = settings.server_id
        self.options = settings.options
        self.data_dir = Path(settings.data_dir)
        self._clock = clock
        self.store = MetadataStore(settings.zookeeper,
                                   session_timeout_s=settings.zk_session_timeout_s,
                                   digest=settings.zk_digest)
        port = ServerPort.open(settings, "tablet", self.store)
        self.security, self.authorizer, self.rpc = port.security, port.authorizer, port.rpc
        self.ipc_limits = IpcLimits.from_options(settings.options)
        self.host, self.port = self.rpc.host, self.rpc.port
        self.stopping = threading.Event()
        self._registered = threading.Event()
        self._next_registration_check = 0.0
        self._buckets: dict[BucketKey, Bucket] = {}
        self._known = Assignment()
        self._sync_lock = threading.Lock()
        self._last_sync_started = 0.0
        self._threads: list[threading.Thread] = []
        self.snapshotter = Snapshotter(self, clock=clock)
        self.rpc.register(m.GetMetadataRequest, self._get_metadata)
        self.rpc.register(m.ProduceRequest, self._produce)
        self.rpc.register(m.ListOffsetsRequest, self._list_offsets)
        self.rpc.register(m.FetchLogRequest, self._fetch_log)
        self.rpc.register(m.TriggerKvSnapshotRequest, self._trigger_snapshot)
        self.scanners = ScannerManager(self, settings.options)
        self.scanners.register(self.rpc)

    # -- lifecycle -------------------------------------------------------------------------------
    def start(self) -> None:
        """Open the assigned buckets, serve RPCs and register in ZooKeeper (non-blocking after)."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.store.start()
        self.sync(remove_unknown_dirs=True)
        self.rpc.start()
        self.store.zk.add_listener(self._on_session_state)
        self._register()
        self.scanners.start()
        if self.security.sasl:      # PLAINTEXT allows everything: no ACL to follow
            self._threads.append(self.authorizer.cache.start(self.stopping,
                                                             f"tablet-{self.server_id}-acls"))
        for name, target in (("sync", self._sync_loop), ("retention", self._retention_loop),
                             ("snapshots", self._snapshot_loop)):
            t = threading.Thread(target=target, name=f"tablet-{self.server_id}-{name}", daemon=True)
            t.start()
            self._threads.append(t)
        log.info("tablet server %d serving on %s:%d with %d bucket(s)", self.server_id,
                 self.host, self.port, len(self._buckets))

    def _register(self) -> None:
        existing = self.store.tablets().get(self.server_id)
        if existing is not None and (
                (existing.host, existing.port) == (self.host, self.port)
                or not _answers(existing.host, existing.port)):
            # The ephemeral node of a killed predecessor outlives it by the session timeout;
            # nobody answers at its address, so it is stale: replace it right away.
            self.store.delete_tablet(self.server_id)
        self.store.register_tablet(TabletRecord(self.server_id, self.host, self.port,
                                                self._clock()))
        self._registered.set()

    def _on_session_state(self, state) -> None:
        # kazoo states compare equal to their names. LOST: the session expired (a pause or a
        # partition longer than the session timeout), and our ephemeral registration with it;
        # kazoo goes on to open a new session, in which the sync loop registers again.
        if state == "LOST" and not self.stopping.is_set():
            log.warning("tablet server %d: ZooKeeper session expired; registering again once "
                        "reconnected", self.server_id)
            self._registered.clear()

    def _ensure_registered(self) -> None:
        """Register again after a session expiry (and check the registration now and then)."""
        now = time.monotonic()
        if self._registered.is_set() and now < self._next_registration_check:
            return
        self._next_registration_check = now + REGISTRATION_CHECK_S
        mine = self.store.tablets().get(self.server_id)
        if mine is not None and (mine.host, mine.port) == (self.host, self.port) \
                and self._registered.is_set():
            return
        self._register()
        log.info("tablet server %d registered again at %s:%d", self.server_id, self.host,
                 self.port)

    def stop(self) -> None:
        self.stopping.set()
        self.scanners.close_all()
        self.rpc.stop()
        # ZooKeeper first: a loop waiting on an unreachable ZooKeeper fails at once instead of
        # holding the exit for its session timeout.
        self.store.close()
        for t in self._threads:
            t.join(timeout=10)
        with self._sync_lock:
            for bucket in self._buckets.values():
                bucket.close()
            self._buckets.clear()
        self.snapshotter.close()

    # -- assignment --------------------------------------------------------------------------------
    def sync(self, *, remove_unknown_dirs: bool = False, requested_at: float | None = None) -> None:
        """Open newly assigned buckets, close moved or dropped ones (reads ZooKeeper); the
        local data of a dropped table or partition is deleted."""
        with self._sync_lock:
            if requested_at is not None and self._last_sync_started >= requested_at:
                return          # a sync that began after the request already finished
            self._last_sync_started = time.monotonic()
            known = Assignment.read(self.store)
            wanted = known.owned_by(self.server_id)
            for key in [k for k in self._buckets if k not in wanted]:
                self._remove_bucket(key, dropped=not known.owners(key[0], key[1]))
            gone_tables = [t for t in self._known.tables if t not in known.tables]
            gone_partitions = [k for k in self._known.partitions if k not in known.partitions]
            self._known = known
            for key, bucket in self._buckets.items():
                bucket.update_table(known.tables[key[0]][0])
            if remove_unknown_dirs or gone_tables or gone_partitions:
                remove_dropped_dirs(self.data_dir, known)
            for key in sorted(wanted - set(self._buckets), key=str):
                self._open_bucket(key)

    def _open_bucket(self, key: BucketKey) -> None:
        table_id, partition_id, b = key
        rec = self._known.tables[table_id][0]
        part = None if partition_id is None else self._known.partitions[(table_id, partition_id)]
        try:
            bucket = Bucket(rec, b, bucket_dir(self.data_dir, key),
                            segment_bytes=self.options.get(LOG_SEGMENT_BYTES.key,
                                                           LOG_SEGMENT_BYTES.default),
                            clock=self._clock, partition=part)
            if bucket.is_primary_key:
                self.snapshotter.init_bucket(bucket)
        except Exception:  # noqa: BLE001 - one broken bucket must not stop the others
            log.exception("cannot open table %s partition id %s bucket %d", rec.name,
                          partition_id, b)
            return
        self._buckets[key] = bucket
        log.info("hosting %s", bucket.label)

    def _remove_bucket(self, key: BucketKey, dropped: bool) -> None:
        bucket = self._buckets.pop(key)
        self.scanners.close_bucket(*key)
        bucket.close()
        log.info("%s: %s", bucket.label, "dropped" if dropped else "assigned elsewhere")

    def bucket(self, table_id: int, bucket: int, partition_id: int | None = None) -> Bucket:
        """The hosted bucket (of a partition, for a partitioned table), or NotLeaderOrFollower /
        UnknownTableOrBucket / PartitionNotExist (after a refresh)."""
        key = (table_id, partition_id, bucket)
        found = self._buckets.get(key)
        if found is not None:
            return found
        self._refresh()
        found = self._buckets.get(key)
        if found is not None:
            return found
        known = self._known.tables.get(table_id)
        if known is None:
            raise UnknownTableOrBucket(f"table id {table_id} is not known to tablet server "
                                       f"{self.server_id}; refresh metadata (was it dropped?)")
        rec = known[0]
        where = self._where(rec, partition_id)
        if not 0 <= bucket < rec.num_buckets:
            raise UnknownTableOrBucket(f"{where} has buckets 0..{rec.num_buckets - 1}, "
                                       f"not {bucket}")
        owners = self._known.owners(table_id, partition_id)
        owner = owners[bucket] if bucket < len(owners) else None
        raise NotLeaderOrFollower(f"{where} bucket {bucket} is hosted by tablet server "
                                  f"{owner}, not {self.server_id}; refresh metadata")

    def learn_columns(self, bucket: Bucket, names) -> None:
        """Re-read the table definitions when a request names columns ``bucket`` does not
        have: they may have been added a moment ago (the periodic sync has not run yet)."""
        if not set(names) <= set(bucket.schema.names):
            self._refresh()

    def _where(self, rec: TableRecord, partition_id: int | None) -> str:
        """``table db.t`` or ``table db.t partition ...``; refuses a partition id that does not
        fit the table (PartitionNotExist, TableNotPartitioned, or a partition id missing)."""
        if partition_id is None:
            if rec.partitioned:
                raise PartitionNotExist(f"table {rec.name} is partitioned (by "
                                        f"{', '.join(rec.partition_keys)}): name a partition id")
            return f"table {rec.name}"
        if not rec.partitioned:
            raise TableNotPartitioned(f"table {rec.name} is not partitioned; send no partition "
                                      f"id (got {partition_id})")
        part = self._known.partitions.get((rec.table_id, partition_id))
        if part is None:
            raise PartitionNotExist(f"partition id {partition_id} of table {rec.name} does not "
                                    "exist (was it dropped?); refresh metadata")
        return f"table {rec.name} partition {part.name}"

    def _refresh(self) -> None:
        """Re-read the assignment now (a request named something not known yet)."""
        try:
            self.sync(requested_at=time.monotonic())
        except Exception as e:  # noqa: BLE001 - ZooKeeper down: answer from what is known
            log.warning("refreshing the assignment failed: %s: %s", type(e).__name__, e)

    def authorize(self, operation: OperationType, table_id: int, action: str) -> None:
        """AuthorizationFailed unless the caller may do ``operation`` on table ``table_id``
        (a table this server does not know is left to the caller's own lookup)."""
        known = self._known.tables.get(table_id)
        if known is not None:
            name = known[0].name
            self.authorizer.check(operation, Resource.table(name), f"{action} table {name}")

    def buckets(self) -> list[Bucket]:
        return list(self._buckets.values())

    def snapshot_record(self, table_id: int, bucket: int, snapshot_id: int,
                        partition_id: int | None = None) -> SnapshotRecord | None:
        """A registered snapshot of a bucket, from ZooKeeper (None if not registered)."""
        return self.store.snapshot(table_id, bucket, snapshot_id, partition_id)

    # -- background passes ---------------------------------------------------------------------
    def _sync_loop(self) -> None:
        while not self.stopping.wait(SYNC_INTERVAL_S):
            try:
                self._ensure_registered()
                self.sync()
            except Exception as e:  # noqa: BLE001 - ZooKeeper hiccups must not end the loop
                if not self.stopping.is_set():
                    log.warning("refreshing the assignment from ZooKeeper failed: %s: %s",
                                type(e).__name__, e)

    def _retention_loop(self) -> None:
        interval = self.options.get(LOG_RETENTION_CHECK_INTERVAL.key,
                                    LOG_RETENTION_CHECK_INTERVAL.default) / 1000
        while not self.stopping.wait(interval):
            now = self._clock()
            for bucket in self.buckets():
                try:
                    bucket.apply_retention(now)
                except Exception:  # noqa: BLE001
                    log.exception("%s: retention pass failed", bucket.label)

    def _snapshot_loop(self) -> None:
        while not self.stopping.wait(SNAPSHOT_CHECK_INTERVAL_S):
            now = self._clock()
            for bucket in self.buckets():
                if not bucket.is_primary_key or bucket.closed:
                    continue
                interval = bucket.snapshot_interval_ms()
                if interval <= 0 or now - bucket.last_snapshot_ms < interval:
                    continue
                try:
                    self.snapshotter.snapshot(bucket, force=False)
                except Exception as e:  # noqa: BLE001 - retried at the next interval
                    if not self.stopping.is_set():
                        log.warning("%s: periodic snapshot failed: %s", bucket.label, e)
                    bucket.last_snapshot_ms = self._clock()

    # -- handlers --------------------------------------------------------------------------------
    def _get_metadata(self, req: m.GetMetadataRequest) -> m.GetMetadataResponse:
        return build_metadata(self.store, req.tables, self.authorizer)

    def _produce(self, req: m.ProduceRequest) -> m.ProduceResponse:
        bucket = self.bucket(req.table_id, req.bucket, req.partition_id)
        self.authorize(OperationType.WRITE, req.table_id, "write to")
        # Bounded before anything is decompressed: a refused request writes nothing.
        rows = bytes_to_table(req.records, limits=self.ipc_limits, validate=True,
                              what=f"PRODUCE to {bucket.label} refused, nothing written")
        self.learn_columns(bucket, rows.column_names)
        base, end = bucket.write(req.op, rows)
        return m.ProduceResponse(base, end)

    def _list_offsets(self, req: m.ListOffsetsRequest) -> m.ListOffsetsResponse:
        pid = req.partition_id
        for b in req.buckets[:1]:
            self.bucket(req.table_id, b, pid)   # learns the table (or raises what is wrong)
        self.authorize(OperationType.DESCRIBE, req.table_id, "list the offsets of")
        return m.ListOffsetsResponse({b: self.bucket(req.table_id, b, pid).offset_for(
            req.spec, req.timestamp_ms) for b in req.buckets})

    def _fetch_log(self, req: m.FetchLogRequest) -> m.FetchLogResponse:
        bucket = self.bucket(req.table_id, req.bucket, req.partition_id)
        self.authorize(OperationType.READ, req.table_id, "read")
        projection = list(req.projection) if req.projection is not None else None
        self.learn_columns(bucket, projection or ())
        return bucket.fetch(req.offset, req.end_offset, req.max_bytes, req.max_wait_ms,
                            projection)

    def _trigger_snapshot(self, req: m.TriggerKvSnapshotRequest) -> m.TriggerKvSnapshotResponse:
        table_id, buckets, pid = req.table_id, req.buckets, req.partition_id
        if buckets is None:
            self._refresh()
            buckets = tuple(sorted(b for (t, p, b) in self._buckets
                                   if t == table_id and p == pid))
            if not buckets and table_id not in self._known.tables:
                raise UnknownTableOrBucket(f"table id {table_id} is not known to tablet server "
                                           f"{self.server_id}")
        hosted = [self.bucket(table_id, b, pid) for b in buckets]
        # Taking a snapshot changes what the table stores: a writer's call, as Fluss's
        # snapshots follow writes.
        self.authorize(OperationType.WRITE, table_id, "snapshot")
        if hosted and not hosted[0].is_primary_key:
            raise NonPrimaryKeyTable(f"table {hosted[0].table.name} is a log table; only "
                                     "primary-key tables have KV snapshots")
        out = {}
        for bucket in hosted:
            rec = self.snapshotter.snapshot(bucket, force=True, deadline_s=TRIGGER_DEADLINE_S)
            out[bucket.bucket_id] = snapshot_info(rec) if rec is not None else None
        return m.TriggerKvSnapshotResponse(out)


def _answers(host: str, port: int) -> bool:
    """Whether something accepts TCP connections at host:port."""
    try:
        with socket.create_connection((host, port), timeout=1.0):
            return True
    except OSError:
        return False
