"""``ApacheFlussWireCluster``: the ``Cluster`` interface over Apache Fluss 0.9.1's wire protocol."""

from __future__ import annotations

import logging
import time
from typing import Any, Iterable, Iterator, Mapping, Sequence

import pyarrow as pa

from fluss_spark.client.apache_fluss.connection import (FlussWireConnection, TableMetadata,
                                                        split_table_name)
from fluss_spark.client.apache_fluss.kv_snapshot import (CheckpointScan, KvSnapshotFiles,
                                                         count_rows, read_row_count)
from fluss_spark.client.apache_fluss.live_scan import (FlussLiveScan, open_live_scan,
                                                       supports_live_scans)
from fluss_spark.client.cluster import (DEFAULT_SNAPSHOT_BATCH_BYTES, Capabilities, Cluster,
                                        LiveScanStart, Pins, RecordBatchStream, TableAdmin,
                                        refuse_partition)
from fluss_spark.client.writes import RowWriter, TableWrites
from fluss_spark.errors import (ConfigError, InvalidLeaseId, KvSnapshotNotExist, LeaderNotAvailable,
                                LogOffsetOutOfRange, NonPrimaryKeyTable, RecordTooLarge,
                                UnsupportedVersion)
from fluss_spark.protocol.changelog import CHANGELOG_FIELDS
from fluss_spark.protocol.apache_fluss.api import (CLIENT_FOLLOWER_ID, LEASE_APIS, OFFSET_EARLIEST,
                                            OFFSET_LATEST, OFFSET_TIMESTAMP)
from fluss_spark.protocol.apache_fluss.errors import to_exception
from fluss_spark.protocol.apache_fluss.log_batch import iter_batches
from fluss_spark.protocol.apache_fluss.messages import (
    AcquireKvSnapshotLeaseRequest, CreateDatabaseRequest, CreateTableRequest,
    DropDatabaseRequest, DropKvSnapshotLeaseRequest, DropTableRequest, FetchLogRequest,
    GetKvSnapshotMetadataRequest, GetLatestKvSnapshotsRequest, GetTableInfoRequest,
    GetKvSnapshotMetadataResponse, ListDatabasesRequest, ListOffsetsRequest, ListTablesRequest,
    PbFetchLogReqForBucket, PbFetchLogReqForTable, PbFetchLogRespForBucket,
    PbKvSnapshotLeaseForBucket, PbKvSnapshotLeaseForTable, PbTableBucket,
    ReleaseKvSnapshotLeaseRequest)
from fluss_spark.protocol.apache_fluss.table_json import parse_table_json, table_json
from fluss_spark.protocol.ipc_limits import IpcBudget
from fluss_spark.protocol.messages import LeaseInfo, SnapshotInfo, TableInfo
from fluss_spark.protocol.names import LEASE_ID_RULE, is_valid_lease_id

log = logging.getLogger(__name__)

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
    scans are offered too (``live_kv_scan``, see ``live_scan``).
    """

    def __init__(self, conn: FlussWireConnection):
        self.conn = conn
        self._capabilities: Capabilities | None = None

    @classmethod
    def connect(cls, bootstrap_servers: str, *, request_timeout_s: float = 60.0,
                username: str | None = None,
                password: str | None = None) -> "ApacheFlussWireCluster":
        """The cluster at ``bootstrap_servers``; with ``username``/``password`` every connection
        logs in with SASL PLAIN."""
        return cls(FlussWireConnection(bootstrap_servers, request_timeout_s=request_timeout_s,
                                       username=username, password=password))

    def capabilities(self) -> Capabilities:
        if self._capabilities is None:
            coordinator = self.conn.with_retries(self.conn.coordinator)
            leases = all(coordinator.supports(int(key)) for key in LEASE_APIS)
            live = self.conn.with_retries(lambda: supports_live_scans(self.conn))
            # Apache Fluss 0.9.1 neither describes nor lists leases, takes KV snapshots on its
            # own schedule only, and has no scan sessions of this project's kind.
            self._capabilities = Capabilities(leases=leases, lease_renewal="reacquire",
                                              snapshot_read="files", live_kv_scan=live,
                                              lease_describe=False, lease_listing=False,
                                              snapshot_trigger=False, scan_sessions=False,
                                              acls=False, partial_updates=True)
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
        """Create ``db.table`` (its database must exist); a primary key makes a PK table."""
        if list(partition_keys):
            raise UnsupportedVersion(f"cannot create {name} partitioned: creating partitioned "
                                     "Apache Fluss tables through this client is not supported "
                                     "yet; create it with Fluss's own tools")
        body = table_json(schema, primary_key=tuple(primary_key),
                          bucket_key=None if bucket_key is None else tuple(bucket_key),
                          buckets=buckets, properties=dict(properties or {}))
        self.conn.call_coordinator(CreateTableRequest(
            table_path=split_table_name(name), table_json=body, ignore_if_exists=ignore_if_exists))

    def drop_table(self, name: str, *, ignore_if_not_exists: bool = True) -> None:
        self.conn.call_coordinator(DropTableRequest(table_path=split_table_name(name),
                                                    ignore_if_not_exists=ignore_if_not_exists))
        self.conn.invalidate(name)

    def list_tables(self) -> list[str]:
        names: list[str] = []
        for db in self.list_databases():
            resp = self.conn.call_coordinator(ListTablesRequest(database_name=db))
            names.extend(f"{db}.{t}" for t in resp.table_name)
        return sorted(names)

    def get_table(self, name: str) -> TableInfo:
        info = self.conn.call_coordinator(GetTableInfoRequest(table_path=split_table_name(name)))
        desc = parse_table_json(info.table_json)
        meta = self.conn.with_retries(lambda: self._fresh_leaders(name), table=name)
        return TableInfo(table_id=info.table_id, name=name, schema=desc.schema,
                         primary_key=desc.primary_key, bucket_key=desc.bucket_key,
                         num_buckets=desc.bucket_count or len(meta.leaders) or 1,
                         properties=dict(desc.properties), created_ms=info.created_time,
                         assignment={b: leader for b, leader in meta.leaders.items()
                                     if leader is not None})

    def _fresh_leaders(self, name: str) -> TableMetadata:
        meta = self.conn.refresh_table(name)
        missing = [b for b, leader in meta.leaders.items() if leader is None]
        if missing:
            raise LeaderNotAvailable(f"buckets {missing} of {name} have no leader yet")
        return meta

    # -- offsets --------------------------------------------------------------------------------
    def list_offsets(self, table: str, buckets: Iterable[int] | None = None,
                     spec: str = "latest", timestamp_ms: int | None = None, *,
                     partition: str | None = None) -> dict[int, int]:
        refuse_partition(partition, table, "the Apache Fluss client")
        if spec not in _SPECS:
            raise ConfigError(f"offset spec {spec!r} is not one of {', '.join(_SPECS)}")
        if spec == "timestamp" and timestamp_ms is None:
            raise ConfigError("offset spec 'timestamp' needs timestamp_ms")

        def op() -> dict[int, int]:
            meta = self._unpartitioned(table)
            wanted = sorted(meta.leaders) if buckets is None else sorted(set(buckets))
            by_leader: dict[int, list[int]] = {}
            for b in wanted:
                by_leader.setdefault(self.conn.leader_id(table, b), []).append(b)
            out: dict[int, int] = {}
            for leader, bs in by_leader.items():
                resp = self.conn.tablet(leader).call(ListOffsetsRequest(
                    follower_server_id=CLIENT_FOLLOWER_ID, offset_type=_SPECS[spec],
                    table_id=meta.table_id, bucket_id=bs,
                    start_timestamp=timestamp_ms if spec == "timestamp" else None))
                for r in resp.buckets_resp:
                    if r.error_code:
                        raise to_exception(r.error_code, r.error_message)
                    out[r.bucket_id] = int(r.offset if r.offset is not None else -1)
            return out
        return self.conn.with_retries(op, table=table)

    # -- KV snapshots and leases ----------------------------------------------------------------
    def latest_kv_snapshots(self, table: str, *,
                            partition: str | None = None) -> dict[int, SnapshotInfo]:
        """The newest snapshot of each bucket, with its row count (from the snapshot's
        ``_METADATA``, or counted from its checkpoint when Fluss recorded none)."""
        refuse_partition(partition, table, "the Apache Fluss client")
        self._unpartitioned(table)
        for attempt in range(_LISTING_ATTEMPTS):
            resp = self.conn.call_coordinator(GetLatestKvSnapshotsRequest(
                table_path=split_table_name(table)))
            try:
                return {s.bucket_id: self._snapshot_info(table, s.bucket_id, s.snapshot_id)
                        for s in resp.latest_snapshots if s.snapshot_id is not None}
            except KvSnapshotNotExist:
                # Retention removed a snapshot between the listing and its files (a newer one
                # was completed meanwhile): list again.
                if attempt + 1 == _LISTING_ATTEMPTS:
                    raise
        raise AssertionError("unreachable")

    def _snapshot_info(self, table: str, bucket: int, snapshot_id: int) -> SnapshotInfo:
        files = self.kv_snapshot_files(table, bucket, snapshot_id)
        rows = read_row_count(files)
        if rows is None:
            log.info("%s records no row count; counting its rows", files.describe())
            rows = count_rows(files)
        return SnapshotInfo(table_id=self.conn.table(table).table_id, bucket=bucket,
                            snapshot_id=snapshot_id, path=files.directory,
                            log_offset=files.log_offset, row_count=rows)

    def kv_snapshot_files(self, table: str, bucket: int, snapshot_id: int) -> KvSnapshotFiles:
        """The files and log offset of one KV snapshot; ``KvSnapshotNotExist`` when it is gone."""
        resp = self._snapshot_metadata(self.conn.table(table).table_id, bucket, snapshot_id)
        return KvSnapshotFiles(table=table, bucket=int(bucket), snapshot_id=int(snapshot_id),
                               log_offset=resp.log_offset,
                               files=tuple((f.remote_path, f.local_file_name)
                                           for f in resp.snapshot_files))

    def _snapshot_metadata(self, table_id: int, bucket: int,
                           snapshot_id: int) -> GetKvSnapshotMetadataResponse:
        return self.conn.call_coordinator(GetKvSnapshotMetadataRequest(
            table_id=int(table_id), bucket_id=int(bucket), snapshot_id=int(snapshot_id)))

    def acquire_kv_snapshot_lease(self, lease_id: str, duration_ms: int, tables: Pins,
                                  holder: str | None = None) -> dict[int, dict[int, int]]:
        request = AcquireKvSnapshotLeaseRequest(
            lease_id=_checked(lease_id), lease_duration_ms=int(duration_ms),
            snapshots_to_lease=[PbKvSnapshotLeaseForTable(
                table_id=int(tid), bucket_snapshots=[
                    PbKvSnapshotLeaseForBucket(bucket_id=int(b), snapshot_id=int(sid))
                    for b, sid in sorted(pins.items())])
                for tid, pins in sorted(tables.items())])
        resp = self.conn.call_coordinator(request)
        unavailable: dict[int, dict[int, int]] = {}
        for t in resp.unavailable_snapshots:
            for s in t.bucket_snapshots:
                unavailable.setdefault(t.table_id, {})[s.bucket_id] = s.snapshot_id
        # Fluss 0.9.1 may grant a pin on a snapshot that retention already removed (its answer
        # does not list it as unavailable), so every granted pin is checked to still exist.
        for tid, pins in tables.items():
            for b, sid in pins.items():
                if int(b) not in unavailable.get(int(tid), {}) and \
                        not self._snapshot_exists(int(tid), int(b), int(sid)):
                    unavailable.setdefault(int(tid), {})[int(b)] = int(sid)
        return unavailable

    def _snapshot_exists(self, table_id: int, bucket: int, snapshot_id: int) -> bool:
        try:
            self._snapshot_metadata(table_id, bucket, snapshot_id)
        except KvSnapshotNotExist:
            return False
        return True

    def renew_kv_snapshot_lease(self, lease_id: str, duration_ms: int) -> int:
        raise UnsupportedVersion("Apache Fluss 0.9.1 has no call to renew a KV snapshot lease: "
                                 "acquire the same pins again to extend it "
                                 "(capabilities().lease_renewal == 'reacquire')")

    def release_kv_snapshot_lease(self, lease_id: str, tables: Mapping[int, Iterable[int]]) -> int:
        request = ReleaseKvSnapshotLeaseRequest(
            lease_id=_checked(lease_id), buckets_to_release=[
                PbTableBucket(table_id=int(tid), bucket_id=int(b))
                for tid, bs in sorted(tables.items()) for b in sorted(set(bs))])
        self.conn.call_coordinator(request)
        return -1

    def drop_kv_snapshot_lease(self, lease_id: str) -> bool:
        request = DropKvSnapshotLeaseRequest(lease_id=_checked(lease_id))
        self.conn.call_coordinator(request)
        return True

    def describe_kv_snapshot_lease(self, lease_id: str) -> LeaseInfo:
        raise UnsupportedVersion("Apache Fluss 0.9.1 has no call to describe a KV snapshot lease")

    # -- reads ----------------------------------------------------------------------------------
    def read_log(self, table: str, bucket: int, start: int, end: int,
                 projection: list[str] | None = None, *,
                 partition: str | None = None) -> Iterator[pa.RecordBatch]:
        """Exactly the records of offsets ``[start, end)`` of one bucket, as changelog batches.

        A projection is pushed to the server (Fluss sends only those columns); the CRC of
        such batches is not checked, because Fluss rewrites them without recomputing it."""
        refuse_partition(partition, table, "the Apache Fluss client")
        self._projection(table, projection)
        return self._read_log(table, int(bucket), int(start), int(end), projection)

    def _unpartitioned(self, table: str) -> TableMetadata:
        """The table's metadata, if it is not partitioned: its buckets are then per partition,
        which this client does not read yet."""
        meta = self.conn.table(table)
        keys = meta.descriptor.partition_key
        if keys:
            raise UnsupportedVersion(f"{table} is partitioned (by {', '.join(keys)}); reading "
                                     "partitioned Apache Fluss tables is not supported yet")
        return meta

    def _projection(self, table: str, projection: list[str] | None) -> list[str]:
        """The columns to read (all when ``projection`` is None); a bad projection is refused."""
        names = list(self._unpartitioned(table).descriptor.schema.names)
        if projection is None:
            return names
        unknown = [c for c in projection if c not in names]
        if unknown or not projection or len(set(projection)) != len(projection):
            raise ConfigError(f"projection {projection} of {table}: unknown or repeated "
                              f"column(s) {unknown}; the table has {', '.join(names)}")
        return list(projection)

    def _read_log(self, table: str, bucket: int, start: int, end: int,
                  projection: list[str] | None) -> Iterator[pa.RecordBatch]:
        meta = self.conn.table(table)
        schema = meta.descriptor.schema
        cols = projection if projection is not None else list(schema.names)
        output = pa.schema([schema.field(c) for c in cols] + list(CHANGELOG_FIELDS))
        indexes = sorted(schema.get_field_index(c) for c in cols)
        offset, max_bytes = start, 8 << 20
        deadline = time.monotonic() + self.conn.request_timeout_s
        wait_ms = 0
        while offset < end:
            resp = self._fetch(table, bucket, offset, max_bytes, indexes, projection is not None,
                               wait_ms)
            if resp.error_code:
                raise to_exception(resp.error_code, resp.error_message)
            records = resp.records or b""
            if not records and resp.remote_log_fetch_info is not None:
                raise UnsupportedVersion(f"offset {offset} of {table} bucket {bucket} is only in "
                                         "remote storage; reading tiered log segments is not "
                                         "supported yet")
            progressed = False
            # One budget per response: its batches together stay within the client's limits.
            budget = IpcBudget(self.conn.ipc_limits,
                               f"FETCH_LOG response for {table} bucket {bucket} at offset {offset}")
            for batch in iter_batches(records, check_crc=projection is None):
                if batch.next_offset <= offset:
                    continue
                progressed = True
                if batch.record_count:
                    _, wire = self.conn.schema(meta, batch.schema_id)
                    if projection is not None:
                        wire = pa.schema([wire.field(i) for i in indexes])
                    rows = batch.to_changelog(wire, output, budget)
                    lo = max(0, offset - batch.base_offset)
                    hi = min(rows.num_rows, end - batch.base_offset)
                    if hi > lo:
                        yield rows.slice(lo, hi - lo)
                offset = batch.next_offset
                if offset >= end:
                    return
            if progressed:
                wait_ms = 0
                continue
            if records:
                # Not even one whole batch fits in max_bytes: ask for more.
                if max_bytes >= 1 << 30:
                    raise RecordTooLarge(f"a record batch of {table} bucket {bucket} at offset "
                                         f"{offset} is larger than 1 GiB")
                max_bytes *= 2
                continue
            hw = resp.high_watermark if resp.high_watermark is not None else -1
            if hw < end and time.monotonic() < deadline:
                wait_ms = 200     # the range is not all committed yet: long-poll for it
                continue
            raise LogOffsetOutOfRange(f"cannot read offsets [{offset}, {end}) of {table} bucket "
                                      f"{bucket}: the high watermark is {hw}")

    def _fetch(self, table: str, bucket: int, offset: int, max_bytes: int, indexes: list[int],
               project: bool, wait_ms: int) -> PbFetchLogRespForBucket:
        def op() -> PbFetchLogRespForBucket:
            meta, conn = self.conn.leader(table, bucket)
            resp = conn.call(FetchLogRequest(
                follower_server_id=CLIENT_FOLLOWER_ID, max_bytes=max_bytes,
                max_wait_ms=wait_ms, min_bytes=1 if wait_ms else 0,
                tables_req=[PbFetchLogReqForTable(
                    table_id=meta.table_id, projection_pushdown_enabled=project,
                    projected_fields=indexes if project else [],
                    buckets_req=[PbFetchLogReqForBucket(bucket_id=bucket, fetch_offset=offset,
                                                        max_fetch_bytes=max_bytes)])]),
                timeout_s=self.conn.request_timeout_s + wait_ms / 1000)
            for t in resp.tables_resp:
                for b in t.buckets_resp:
                    if b.bucket_id == bucket:
                        if b.error_code:
                            err = to_exception(b.error_code, b.error_message)
                            if err.retriable:
                                raise err
                        return b
            raise UnsupportedVersion(f"FETCH_LOG answer from {conn.address} lacks bucket "
                                     f"{bucket} of {table}")
        return self.conn.with_retries(op, table=table)

    def read_snapshot(self, table: str, bucket: int, snapshot_id: int, *, start_row: int = 0,
                      limit: int | None = None, projection: list[str] | None = None,
                      batch_size_bytes: int = DEFAULT_SNAPSHOT_BATCH_BYTES,
                      partition: str | None = None) -> RecordBatchStream:
        """Rows of the snapshot's RocksDB checkpoint, copied from remote storage when the first
        batch is asked for; projection happens after decoding (the files hold whole rows)."""
        refuse_partition(partition, table, "the Apache Fluss client")
        meta = self._kv_table(table)
        return CheckpointScan(lambda: self.kv_snapshot_files(table, bucket, snapshot_id),
                              lambda schema_id: self.conn.schema(meta, schema_id)[1],
                              self._output(table, projection), start_row=start_row, limit=limit,
                              batch_size_bytes=batch_size_bytes)

    def _kv_table(self, table: str) -> TableMetadata:
        """The metadata of a PK table whose KV rows this client decodes."""
        meta = self._unpartitioned(table)
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
        return open_live_scan(self.conn, self._kv_table(table), int(bucket), batch_size_bytes)

    def read_live_scan(self, table: str, bucket: int, start: LiveScanStart, *,
                       projection: list[str] | None = None,
                       batch_size_bytes: int = DEFAULT_SNAPSHOT_BATCH_BYTES) -> RecordBatchStream:
        meta = self._kv_table(table)
        return FlussLiveScan(self.conn, meta, int(bucket), start, self._output(table, projection),
                             lambda schema_id: self.conn.schema(meta, schema_id)[1],
                             batch_size_bytes)

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


def _checked(lease_id: str) -> str:
    """The lease id, if this project's rule allows it: Fluss makes it a znode name unchecked."""
    if not is_valid_lease_id(lease_id):
        raise InvalidLeaseId(f"invalid lease id {lease_id!r}: use {LEASE_ID_RULE}")
    return lease_id


#: The type checker holds this implementation to the interfaces: mypy names any method that differs.
_IMPLEMENTS_CLUSTER: type[Cluster] = ApacheFlussWireCluster
_IMPLEMENTS_TABLE_ADMIN: type[TableAdmin] = ApacheFlussWireCluster
_IMPLEMENTS_TABLE_WRITES: type[TableWrites] = ApacheFlussWireCluster


__all__ = ["ApacheFlussWireCluster"]
