"""``ApacheFlussWireCluster``: the ``Cluster`` interface over Apache Fluss 0.9.1's wire protocol."""

from __future__ import annotations

import logging
from typing import Any, Iterable, Iterator, Mapping, Sequence

import pyarrow as pa

from fluss_spark.client.apache_fluss.connection import (FlussWireConnection, TableMetadata,
                                                        split_table_name)
from fluss_spark.client.apache_fluss.leases import FlussLeases, checked
from fluss_spark.client.apache_fluss.live_scan import (FlussLiveScan, open_live_scan,
                                                       supports_live_scans)
from fluss_spark.client.apache_fluss.partitions import FlussPartitions
from fluss_spark.client.apache_fluss.snapshot_files import KvSnapshotFiles
from fluss_spark.client.apache_fluss.snapshot_listing import (known_location, located_files,
                                                              snapshot_files, snapshot_infos)
from fluss_spark.client.remote_storage import RemoteStorage
from fluss_spark.client.cluster import (DEFAULT_SNAPSHOT_BATCH_BYTES, Capabilities, Cluster,
                                        LiveScanStart, PartitionAdmin, PartitionPins, Pins,
                                        RecordBatchStream, SnapshotLocation, TableAdmin,
                                        Unavailable)
from fluss_spark.client.writes import RowWriter, TableWrites
from fluss_spark.errors import (ConfigError, KvSnapshotNotExist, LeaderNotAvailable,
                                NonPrimaryKeyTable, TableAlreadyExist, UnknownTableOrBucket,
                                UnsupportedVersion)
from fluss_spark.protocol.apache_fluss.api import (CLIENT_FOLLOWER_ID, LEASE_APIS,
                                                   OFFSET_EARLIEST, OFFSET_LATEST,
                                                   OFFSET_TIMESTAMP, PARTITION_APIS)
from fluss_spark.protocol.apache_fluss.alter_table import add_columns_request
from fluss_spark.protocol.apache_fluss.errors import to_exception
from fluss_spark.protocol.apache_fluss.messages import (
    CreateDatabaseRequest, CreateTableRequest, DropDatabaseRequest, DropTableRequest,
    GetLatestKvSnapshotsRequest, GetTableInfoRequest, ListDatabasesRequest, ListOffsetsRequest,
    ListTablesRequest)
from fluss_spark.protocol.apache_fluss.table_json import parse_table_json, table_json
from fluss_spark.protocol.messages import LeaseInfo, PartitionInfo, SnapshotInfo, TableInfo
from fluss_spark.protocol.partitions import check_partition_keys
from fluss_spark.protocol.schema_change import add_columns
from fluss_spark.retry import retry

log = logging.getLogger(__name__)

# The row decoders (kv_snapshot, log_reader) are imported where they are used: the driver-side
# source process, a fresh one for every query run, uses neither.

#: How long a new table may go without bucket leaders before it is taken for lost (leaders
#: come within a second), and how often it is then created again.
NEW_TABLE_LEADERS_S = 15.0
NEW_TABLE_ATTEMPTS = 3

#: Listings of a table's latest snapshots tried when retention removes one while it is listed.
_LISTING_ATTEMPTS = 3

_SPECS = {"earliest": OFFSET_EARLIEST, "latest": OFFSET_LATEST, "timestamp": OFFSET_TIMESTAMP}


class ApacheFlussWireCluster:
    """A ``Cluster`` backed by an Apache Fluss 0.9.1 cluster, spoken to in Fluss's protocol.

    Differences from this project's own servers, all from what Fluss 0.9.1 offers: a lease is
    renewed by acquiring it again (``lease_renewal="reacquire"``), there is no call to renew or
    describe one, and lease holders are not recorded (``holder`` is ignored). Fluss does not say
    what a release left pinned (``release_kv_snapshot_lease`` returns -1) nor whether a dropped
    lease existed (``drop_kv_snapshot_lease`` returns True). A snapshot is read from its files,
    the RocksDB checkpoint in Fluss's remote storage (``snapshot_read="files"``, see
    ``kv_snapshot``). Where every tablet server offers SCAN_KV (Fluss's main branch), live KV
    scans are offered too (``live_kv_scan``, see ``live_scan``). The coordinator lists, creates
    and drops partitions (``partition_admin``, see ``partitions``); reads take ``partition=``.
    """

    def __init__(self, conn: FlussWireConnection):
        self.conn = conn
        self.partitions = FlussPartitions(conn)
        self.leases = FlussLeases(conn)
        self._capabilities: Capabilities | None = None

    @classmethod
    def connect(cls, bootstrap_servers: str, *, request_timeout_s: float = 60.0,
                username: str | None = None, password: str | None = None,
                storage: RemoteStorage = RemoteStorage()) -> "ApacheFlussWireCluster":
        """The cluster at ``bootstrap_servers``; with ``username``/``password`` every connection
        logs in with SASL PLAIN; ``storage``: how its remote.data.dir is reached."""
        return cls(FlussWireConnection(bootstrap_servers, request_timeout_s=request_timeout_s,
                                       username=username, password=password, storage=storage))

    def capabilities(self) -> Capabilities:
        if self._capabilities is None:
            coordinator = self.conn.with_retries(self.conn.coordinator)
            leases = all(coordinator.supports(int(key)) for key in LEASE_APIS)
            partitions = all(coordinator.supports(int(key)) for key in PARTITION_APIS)
            live = self.conn.with_retries(lambda: supports_live_scans(self.conn))
            # Apache Fluss 0.9.1 neither describes nor lists leases, takes KV snapshots on its
            # own schedule only, and has no scan sessions of this project's kind.
            self._capabilities = Capabilities(leases=leases, lease_renewal="reacquire",
                                              snapshot_read="files", live_kv_scan=live,
                                              lease_describe=False, lease_listing=False,
                                              snapshot_trigger=False, scan_sessions=False,
                                              acls=False, partition_admin=partitions,
                                              partial_updates=True)
        return self._capabilities

    # -- databases and tables (admin) -----------------------------------------------------------
    def list_databases(self) -> list[str]:
        return sorted(self.conn.call_coordinator(ListDatabasesRequest()).database_name)

    def create_database(self, name: str, *, ignore_if_exists: bool = True) -> None:
        self.conn.call_coordinator(CreateDatabaseRequest(database_name=name,
                                                         ignore_if_exists=ignore_if_exists))

    def drop_database(self, name: str, *, ignore_if_not_exists: bool = True,
                      cascade: bool = True) -> None:
        self.conn.call_coordinator(DropDatabaseRequest(
            database_name=name, ignore_if_not_exists=ignore_if_not_exists, cascade=cascade))
        self.conn.invalidate()

    def create_table(self, name: str, schema: pa.Schema, *, primary_key: Iterable[str] = (),
                     bucket_key: Iterable[str] | None = None, buckets: int = 1,
                     properties: Mapping[str, str] | None = None,
                     ignore_if_exists: bool = False, partition_keys: Iterable[str] = ()) -> None:
        """Create ``db.table`` (its database must exist); a primary key makes a PK table,
        ``partition_keys`` a partitioned one (in the primary key of a PK table, whose bucket
        key is then the primary key without them). ``table.auto-partition.*`` properties go to
        Fluss as they are; Fluss checks them."""
        pk, keys = list(primary_key), list(partition_keys)
        if keys:
            bucket_key = check_partition_keys(name, schema, pk, list(bucket_key or ()), keys)
        body = table_json(schema, primary_key=tuple(pk),
                          bucket_key=None if bucket_key is None else tuple(bucket_key),
                          buckets=buckets, properties=dict(properties or {}),
                          partition_keys=tuple(keys))
        for attempt in range(NEW_TABLE_ATTEMPTS):
            try:
                self.conn.call_coordinator(CreateTableRequest(
                    table_path=split_table_name(name), table_json=body, ignore_if_exists=False))
            except TableAlreadyExist:
                if ignore_if_exists and attempt == 0:
                    return
                raise
            if self._taken_in(name, bool(keys)):
                return
            # Fluss 0.9.1's coordinator can miss the ZooKeeper event of a table created just
            # after another (its cache reads the node's data before handling the creation), and
            # then never gives that table leaders, nor any partition of it: creating one makes
            # the coordinator fail every later leader change. The table is ours, new and empty,
            # so it is dropped and created again.
            log.warning("the coordinator did not take in new table %s within %.0f s; dropping "
                        "and creating it again", name, NEW_TABLE_LEADERS_S)
            self.drop_table(name)
        raise LeaderNotAvailable(
            f"table {name} was created {NEW_TABLE_ATTEMPTS} times and the coordinator missed it "
            "each time; check the coordinator's log, or restart the coordinator")

    def _taken_in(self, name: str, partitioned: bool) -> bool:
        """Whether the coordinator took new table ``name`` in within NEW_TABLE_LEADERS_S: every
        bucket has a leader, or, for a partitioned table (no buckets before its partitions),
        the coordinator knows its id."""
        if partitioned:
            table_id = self.conn.call_coordinator(
                GetTableInfoRequest(table_path=split_table_name(name))).table_id
            return self.coordinator_knows(table_id, NEW_TABLE_LEADERS_S)
        try:
            retry(lambda: self._fresh_leaders(name), timeout_s=NEW_TABLE_LEADERS_S)
            return True
        except LeaderNotAvailable:
            return False

    def coordinator_knows(self, table_id: int, timeout_s: float) -> bool:
        """Whether the coordinator's own table registry has ``table_id`` within ``timeout_s``
        (Fluss 0.9.1's can miss a new table, as ``create_table`` says)."""
        try:
            retry(lambda: self.leases.check_table_known(table_id), timeout_s=timeout_s)
            return True
        except UnknownTableOrBucket:
            return False

    def drop_table(self, name: str, *, ignore_if_not_exists: bool = True) -> None:
        self.conn.call_coordinator(DropTableRequest(table_path=split_table_name(name),
                                                    ignore_if_not_exists=ignore_if_not_exists))
        self.conn.invalidate(name)

    def add_columns(self, name: str, columns: pa.Schema) -> TableInfo:
        """ALTER TABLE ... ADD COLUMN: Fluss appends nullable columns under a new schema id."""
        info = self.get_table(name)
        add_columns(name, info.schema, columns, info.primary_key)   # refused here, in one line
        self.conn.call_coordinator(add_columns_request(split_table_name(name), columns))
        self.conn.invalidate(name)
        return self.get_table(name)

    def list_tables(self) -> list[str]:
        names: list[str] = []
        for db in self.list_databases():
            resp = self.conn.call_coordinator(ListTablesRequest(database_name=db))
            names.extend(f"{db}.{t}" for t in resp.table_name)
        return sorted(names)

    def get_table(self, name: str) -> TableInfo:
        """Fresh metadata of ``name``; a partitioned table's partitions with their leaders."""
        # Leaders first: their metadata answer also names the coordinator, which a new
        # connection would otherwise ask for in a request of its own.
        meta = self.conn.with_retries(lambda: self._fresh_leaders(name), table=name)
        info = self.conn.call_coordinator(GetTableInfoRequest(table_path=split_table_name(name)))
        desc = parse_table_json(info.table_json)
        return TableInfo(table_id=info.table_id, name=name, schema=desc.schema,
                         schema_id=info.schema_id,
                         primary_key=desc.primary_key, bucket_key=desc.bucket_key,
                         num_buckets=desc.bucket_count or len(meta.leaders) or 1,
                         properties=dict(desc.properties), created_ms=info.created_time,
                         assignment={b: leader for b, leader in meta.leaders.items()
                                     if leader is not None},
                         partition_keys=desc.partition_key,
                         partitions=tuple(self.list_partitions(name) if desc.partition_key
                                          else ()))

    def _fresh_leaders(self, name: str) -> TableMetadata:
        meta = self.conn.refresh_table(name)
        missing = [b for b, leader in meta.leaders.items() if leader is None]
        if missing:
            raise LeaderNotAvailable(f"buckets {missing} of {name} have no leader yet")
        return meta

    # -- partitions (PartitionAdmin) ------------------------------------------------------------
    def list_partitions(self, table: str) -> list[PartitionInfo]:
        return self.partitions.list_partitions(table)

    def create_partition(self, table: str, spec: Mapping[str, str], *,
                         ignore_if_exists: bool = False) -> PartitionInfo:
        return self.partitions.create_partition(table, spec, ignore_if_exists=ignore_if_exists)

    def drop_partition(self, table: str, spec: Mapping[str, str], *,
                       ignore_if_not_exists: bool = False) -> None:
        self.partitions.drop_partition(table, spec, ignore_if_not_exists=ignore_if_not_exists)

    # -- offsets --------------------------------------------------------------------------------
    def list_offsets(self, table: str, buckets: Iterable[int] | None = None,
                     spec: str = "latest", timestamp_ms: int | None = None, *,
                     partition: str | None = None) -> dict[int, int]:
        if spec not in _SPECS:
            raise ConfigError(f"offset spec {spec!r} is not one of {', '.join(_SPECS)}")
        if spec == "timestamp" and timestamp_ms is None:
            raise ConfigError("offset spec 'timestamp' needs timestamp_ms")

        def op() -> dict[int, int]:
            meta = self.conn.table(table)
            part = self.partitions.resolve(table, partition)
            leaders = meta.leaders if part is None else part.leaders
            wanted = sorted(leaders) if buckets is None else sorted(set(buckets))
            name = None if part is None else part.name
            by_leader: dict[int, list[int]] = {}
            for b in wanted:
                by_leader.setdefault(self.conn.leader_id(table, b, name), []).append(b)
            out: dict[int, int] = {}
            for leader, bs in by_leader.items():
                resp = self.conn.tablet(leader).call(ListOffsetsRequest(
                    follower_server_id=CLIENT_FOLLOWER_ID, offset_type=_SPECS[spec],
                    table_id=meta.table_id, bucket_id=bs,
                    partition_id=None if part is None else part.partition_id,
                    start_timestamp=timestamp_ms if spec == "timestamp" else None))
                for r in resp.buckets_resp:
                    if r.error_code:
                        raise to_exception(r.error_code, r.error_message)
                    out[r.bucket_id] = int(r.offset if r.offset is not None else -1)
            return out
        found = self.conn.with_retries(op, table=table)
        if spec != "timestamp" or all(o < 0 for o in found.values()):
            return found
        assert timestamp_ms is not None
        latest = self.list_offsets(table, list(found), partition=partition)
        part = self.partitions.resolve(table, partition)
        from fluss_spark.client.apache_fluss.log_reader import first_offset_at
        return {b: first_offset_at(self.conn, table, b, o, latest[b], timestamp_ms, part)
                if 0 <= o < latest[b] else o for b, o in found.items()}

    # -- KV snapshots and leases ----------------------------------------------------------------
    def latest_kv_snapshots(self, table: str, *,
                            partition: str | None = None) -> dict[int, SnapshotInfo]:
        """The newest snapshot of each bucket, with its row count (from the snapshot's
        ``_METADATA``, or counted from its checkpoint when Fluss recorded none)."""
        part = self.partitions.resolve(table, partition)
        for attempt in range(_LISTING_ATTEMPTS):
            resp = self.conn.call_coordinator(GetLatestKvSnapshotsRequest(
                table_path=split_table_name(table),
                partition_name=None if part is None else part.name))
            listed = {s.bucket_id: s.snapshot_id for s in resp.latest_snapshots
                      if s.snapshot_id is not None}
            try:
                return snapshot_infos(self.conn, table, listed, part)
            except KvSnapshotNotExist:
                # Retention removed a snapshot between the listing and its files (a newer one
                # was completed meanwhile): list again.
                if attempt + 1 == _LISTING_ATTEMPTS:
                    raise
        raise AssertionError("unreachable")

    def kv_snapshot_files(self, table: str, bucket: int, snapshot_id: int, *,
                          partition: str | None = None) -> KvSnapshotFiles:
        """The files and log offset of one KV snapshot (of ``partition``, by name or spec);
        ``KvSnapshotNotExist`` when it is gone."""
        return snapshot_files(self.conn, table, bucket, snapshot_id,
                              self.partitions.resolve(table, partition))

    def acquire_kv_snapshot_lease(self, lease_id: str, duration_ms: int, tables: Pins,
                                  holder: str | None = None, *,
                                  partitions: PartitionPins | None = None) -> Unavailable:
        return Unavailable(*self.leases.acquire(lease_id, duration_ms, tables, partitions))

    def renew_kv_snapshot_lease(self, lease_id: str, duration_ms: int) -> int:
        raise UnsupportedVersion("Apache Fluss 0.9.1 has no call to renew a KV snapshot lease: "
                                 "acquire the same pins again to extend it "
                                 "(capabilities().lease_renewal == 'reacquire')")

    def release_kv_snapshot_lease(self, lease_id: str, tables: Mapping[int, Iterable[int]], *,
                                  partitions: Mapping[int, Mapping[int, Iterable[int]]] | None
                                  = None) -> int:
        # A table's buckets are released in every partition too (the Cluster contract); Fluss
        # releases a partition's pins only when the request names the partition.
        checked(lease_id)
        expanded = {tid: {pid: list(bs) for pid, bs in parts.items()}
                    for tid, parts in (partitions or {}).items()}
        for tid, buckets in tables.items():
            name = self.conn.table_name(int(tid))
            if name is not None and self.partitions.keys(name):
                for part in self.partitions.list_partitions(name):
                    expanded.setdefault(int(tid), {}).setdefault(
                        part.partition_id, []).extend(buckets)
        self.leases.release(lease_id, tables, expanded)
        return -1

    def drop_kv_snapshot_lease(self, lease_id: str) -> bool:
        self.leases.drop(lease_id)
        return True

    def describe_kv_snapshot_lease(self, lease_id: str) -> LeaseInfo:
        raise UnsupportedVersion("Apache Fluss 0.9.1 has no call to describe a KV snapshot lease")

    # -- reads ----------------------------------------------------------------------------------
    def read_log(self, table: str, bucket: int, start: int, end: int,
                 projection: list[str] | None = None, *,
                 partition: str | None = None) -> Iterator[pa.RecordBatch]:
        """Exactly the records of offsets ``[start, end)`` of one bucket, as changelog batches
        (the projection is pushed to the servers; see ``log_reader``)."""
        self._projection(table, projection)
        part = self.partitions.resolve(table, partition)
        from fluss_spark.client.apache_fluss.log_reader import read_log
        return read_log(self.conn, table, int(bucket), int(start), int(end), projection, part)

    def _projection(self, table: str, projection: list[str] | None) -> list[str]:
        """The columns to read (all when ``projection`` is None); a bad projection is refused."""
        names = list(self.conn.table(table).descriptor.schema.names)
        if projection is None:
            return names
        if not set(projection) <= set(names):   # columns added since it was cached?
            names = list(self.conn.refresh_table(table).descriptor.schema.names)
        unknown = [c for c in projection if c not in names]
        if unknown or not projection or len(set(projection)) != len(projection):
            raise ConfigError(f"projection {projection} of {table}: unknown or repeated "
                              f"column(s) {unknown}; the table has {', '.join(names)}")
        return list(projection)

    def read_snapshot(self, table: str, bucket: int, snapshot_id: int, *, start_row: int = 0,
                      limit: int | None = None, projection: list[str] | None = None,
                      batch_size_bytes: int = DEFAULT_SNAPSHOT_BATCH_BYTES,
                      partition: str | None = None,
                      location: SnapshotLocation | None = None) -> RecordBatchStream:
        """Rows of the snapshot's RocksDB checkpoint, copied from remote storage when the first
        batch is asked for; projection happens after decoding (the files hold whole rows).
        Without a ``location`` the coordinator is asked where the files are."""
        meta = self._kv_table(table)
        part = self.partitions.resolve(table, partition)
        from fluss_spark.client.apache_fluss.kv_snapshot import CheckpointScan

        def files() -> KvSnapshotFiles:
            if location is not None:
                return located_files(self.conn, table, bucket, snapshot_id, part, location)
            return snapshot_files(self.conn, table, bucket, snapshot_id, part)
        return CheckpointScan(files,
                              lambda schema_id: self.conn.schema(meta, schema_id)[1],
                              self._output(table, projection), start_row=start_row, limit=limit,
                              batch_size_bytes=batch_size_bytes, schema_id=meta.schema_id)

    def snapshot_location(self, table: str, bucket: int, snapshot_id: int, *,
                          partition: str | None = None) -> SnapshotLocation | None:
        return known_location(self.conn, table, bucket, snapshot_id,
                              self.partitions.resolve(table, partition))

    def _kv_table(self, table: str) -> TableMetadata:
        """The metadata of a PK table whose KV rows this client decodes."""
        meta = self.conn.table(table)
        desc = meta.descriptor
        if not desc.primary_key:
            raise NonPrimaryKeyTable(f"{table} has no primary key, hence no KV state to read")
        kv_format = desc.properties.get("table.kv.format", "compacted").lower()
        if kv_format != "compacted":
            raise UnsupportedVersion(f"{table} stores its KV rows in the {kv_format!r} format; "
                                     "only 'compacted' (Fluss's default) rows are read")
        return meta

    def _output(self, table: str, projection: list[str] | None) -> pa.Schema:
        """The Arrow schema of the (projected) rows: KV rows are whole, projected after decoding."""
        schema = self.conn.table(table).descriptor.schema
        return pa.schema([schema.field(c) for c in self._projection(table, projection)])

    # -- live KV scans --------------------------------------------------------------------------
    def open_live_scan(self, table: str, bucket: int, *,
                       batch_size_bytes: int = 1) -> LiveScanStart:
        self._require_live_scans()
        return open_live_scan(self.conn, self._unpartitioned_kv_table(table), int(bucket),
                              batch_size_bytes)

    def read_live_scan(self, table: str, bucket: int, start: LiveScanStart, *,
                       projection: list[str] | None = None,
                       batch_size_bytes: int = DEFAULT_SNAPSHOT_BATCH_BYTES) -> RecordBatchStream:
        meta = self._unpartitioned_kv_table(table)
        return FlussLiveScan(self.conn, meta, int(bucket), start, self._output(table, projection),
                             lambda schema_id: self.conn.schema(meta, schema_id)[1],
                             batch_size_bytes)

    def _unpartitioned_kv_table(self, table: str) -> TableMetadata:
        """A PK table a live scan reads: the live scan calls name no partition."""
        meta = self._kv_table(table)
        keys = meta.descriptor.partition_key
        if keys:
            raise UnsupportedVersion(f"{table} is partitioned (by {', '.join(keys)}); live KV "
                                     "scans of partitioned Apache Fluss tables are not "
                                     "supported yet: read its KV snapshots")
        return meta

    def _require_live_scans(self) -> None:
        if not self.capabilities().live_kv_scan:
            raise UnsupportedVersion("this Apache Fluss cluster has no live KV scans: its tablet "
                                     "servers do not offer SCAN_KV (API 1061, not in Fluss 0.9.1); "
                                     "read KV snapshots instead")

    def table_writer(self, table: str, options: Mapping[str, Any] | None = None, *,
                     columns: Sequence[str] | None = None) -> RowWriter:
        from fluss_spark.client.apache_fluss.pyfluss_writer import open_writer
        return open_writer(self, table, options, columns)

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> "ApacheFlussWireCluster":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


#: The type checker holds this implementation to the interfaces: mypy names any method that differs.
_IMPLEMENTS_CLUSTER: type[Cluster] = ApacheFlussWireCluster
_IMPLEMENTS_TABLE_ADMIN: type[TableAdmin] = ApacheFlussWireCluster
_IMPLEMENTS_PARTITION_ADMIN: type[PartitionAdmin] = ApacheFlussWireCluster
_IMPLEMENTS_TABLE_WRITES: type[TableWrites] = ApacheFlussWireCluster


__all__ = ["ApacheFlussWireCluster"]
