"""Admin: tables, offsets, KV snapshots, KV snapshot leases, ACLs, metrics and scan sessions."""

from __future__ import annotations

from dataclasses import asdict
from typing import Iterable, Mapping, TypeVar

import pyarrow as pa

from fluss_spark.client.cluster import PartitionPins, Unavailable
from fluss_spark.client.embedded import partitions
from fluss_spark.config import validate_table_properties
from fluss_spark.errors import ConfigError, NetworkError, TableNotExist, UnsupportedVersion
from fluss_spark.protocol import messages as m
from fluss_spark.protocol.acl import AclBinding, AclFilter
from fluss_spark.protocol.arrow_ipc import serialize_schema
from fluss_spark.protocol.messages import LeaseInfo, SnapshotInfo, TableInfo
from fluss_spark.protocol.auto_partition import AutoPartition
from fluss_spark.protocol.partitions import check_partition_keys, parse_spec
from fluss_spark.protocol.schema_change import add_columns
from fluss_spark.protocol.types import parse_schema, validate_table_schema

_OFFSET_SPECS = ("earliest", "latest", "timestamp")


def _spec(spec: Mapping[str, str] | str) -> dict[str, str]:
    return parse_spec(spec) if isinstance(spec, str) else {str(k): str(v)
                                                           for k, v in spec.items()}
R = TypeVar("R", bound=m.Message)


class Admin:
    """Cluster administration over a FlussConnection (cheap to create; holds no state)."""

    def __init__(self, conn):
        self._conn = conn

    # -- tables ---------------------------------------------------------------------------------
    def create_table(self, name: str, schema: pa.Schema | str, primary_key: Iterable[str] = (),
                     bucket_key: Iterable[str] | None = None, num_buckets: int = 1,
                     properties: Mapping[str, str] | None = None,
                     ignore_if_exists: bool = False,
                     partition_keys: Iterable[str] = ()) -> TableInfo:
        """Create ``db.table`` and return its metadata.

        The bucket key defaults to the primary key (without the partition keys); a log table
        without one spreads batches over its buckets. ``partition_keys`` make a partitioned
        table; for a PK table they must be part of the primary key.
        """
        if isinstance(schema, str):
            schema = parse_schema(schema)
        primary_key = [primary_key] if isinstance(primary_key, str) else list(primary_key)
        partition_keys = ([partition_keys] if isinstance(partition_keys, str)
                          else list(partition_keys))
        if bucket_key is None:
            bucket_key = []
        else:
            bucket_key = [bucket_key] if isinstance(bucket_key, str) else list(bucket_key)
        if isinstance(num_buckets, bool) or not isinstance(num_buckets, int) or num_buckets < 1:
            raise ConfigError(f"num_buckets must be a positive integer, got {num_buckets!r}")
        validate_table_schema(schema, primary_key, bucket_key)
        bucket_key = check_partition_keys(name, schema, primary_key, bucket_key, partition_keys)
        props = validate_table_properties(dict(properties or {}))
        AutoPartition.of(name, props, partition_keys)
        self._conn.call_coordinator(m.CreateTableRequest(
            name=name, schema=serialize_schema(schema), primary_key=tuple(primary_key),
            bucket_key=tuple(bucket_key), num_buckets=num_buckets, properties=props,
            ignore_if_exists=bool(ignore_if_exists), partition_keys=tuple(partition_keys)))
        return self._conn.refresh_table(name)

    def add_columns(self, name: str, columns: pa.Schema | str) -> TableInfo:
        """Append nullable ``columns`` (``"note STRING"``) to a table; its new metadata."""
        if isinstance(columns, str):
            columns = parse_schema(columns)
        info = self._conn.refresh_table(name)
        add_columns(name, info.schema, columns, info.primary_key)  # refused here, in one line
        try:
            self._conn.call_coordinator(m.AlterTableRequest(name=name,
                                                            add_columns=serialize_schema(columns)))
        finally:
            self._conn.forget_table(name)
        return self._conn.refresh_table(name)

    # -- partitions -----------------------------------------------------------------------------
    def list_partitions(self, table: str) -> list[m.PartitionInfo]:
        """The partitions of a partitioned table, by name; TableNotPartitioned otherwise."""
        return list(self._conn.call_coordinator(m.ListPartitionsRequest(table=table)).partitions)

    def create_partition(self, table: str, spec: Mapping[str, str] | str,
                         ignore_if_exists: bool = False) -> m.PartitionInfo:
        """Create the partition ``spec`` (``{"dt": "2026-11-25"}`` or ``"dt=2026-11-25"``)."""
        return self._conn.call_coordinator(m.CreatePartitionRequest(
            table=table, spec=_spec(spec), ignore_if_exists=bool(ignore_if_exists)))

    def drop_partition(self, table: str, spec: Mapping[str, str] | str,
                       ignore_if_not_exists: bool = False) -> None:
        """Drop the partition ``spec``: its data, snapshots and lease pins go with it."""
        self._conn.call_coordinator(m.DropPartitionRequest(
            table=table, spec=_spec(spec), ignore_if_not_exists=bool(ignore_if_not_exists)))

    def drop_table(self, name: str, ignore_if_not_exists: bool = False) -> None:
        try:
            self._conn.call_coordinator(m.DropTableRequest(
                name=name, ignore_if_not_exists=bool(ignore_if_not_exists)))
        finally:
            self._conn.forget_table(name)

    def list_tables(self) -> list[str]:
        return sorted(self._conn.call_coordinator(m.ListTablesRequest()).tables)

    def get_table(self, name: str) -> TableInfo:
        """Fresh metadata of ``name``; TableNotExist when there is no such table."""
        return self._conn.refresh_table(name)

    def table_exists(self, name: str) -> bool:
        try:
            self.get_table(name)
            return True
        except TableNotExist:
            return False

    # -- offsets --------------------------------------------------------------------------------
    def _partition_id(self, info: TableInfo, partition: str | None) -> int | None:
        part = partitions.lookup(self._conn, info, partition)
        return None if part is None else part.partition_id

    def list_offsets(self, table: str | TableInfo, buckets: Iterable[int] | None = None,
                     spec: str = "latest", timestamp_ms: int | None = None, *,
                     partition: str | None = None) -> dict[int, int]:
        """Changelog offsets per bucket (of ``partition``, by name or spec, of a partitioned
        table): ``earliest`` retained, ``latest`` (the high watermark), or the first offset
        whose commit timestamp is >= ``timestamp_ms``."""
        info = self._conn.resolve(table)
        if spec not in _OFFSET_SPECS:
            raise ConfigError(f"offset spec must be one of {', '.join(_OFFSET_SPECS)}, "
                              f"got {spec!r}")
        if spec == "timestamp" and timestamp_ms is None:
            raise ConfigError("offset spec 'timestamp' needs timestamp_ms")
        pid = self._partition_id(info, partition)
        wanted = info.buckets if buckets is None else list(buckets)

        def request(group: list[int]) -> m.ListOffsetsRequest:
            return m.ListOffsetsRequest(
                table_id=info.table_id, buckets=tuple(group), spec=spec,
                timestamp_ms=None if timestamp_ms is None else int(timestamp_ms), partition_id=pid)

        out: dict[int, int] = {}
        for _, resp in self._conn.call_buckets(info, wanted, request, pid):
            out.update(resp.offsets)
        return dict(sorted(out.items()))

    # -- KV snapshots ---------------------------------------------------------------------------
    def list_kv_snapshots(self, table: str | TableInfo, bucket: int | None = None, *,
                          partition: str | None = None) -> list[SnapshotInfo]:
        """Registered snapshots (of every partition of a partitioned table unless
        ``partition`` names one), ordered by partition, bucket, then snapshot id."""
        info = self._conn.resolve(table)
        pid = None if partition is None else self._partition_id(info, partition)
        resp = self._conn.call_coordinator(m.ListKvSnapshotsRequest(
            table_id=info.table_id, bucket=None if bucket is None else int(bucket),
            partition_id=pid))
        return sorted(resp.snapshots,
                      key=lambda s: (s.partition_id or 0, s.bucket, s.snapshot_id))

    def latest_kv_snapshots(self, table: str | TableInfo, *,
                            partition: str | None = None) -> dict[int, SnapshotInfo]:
        """The newest snapshot of every bucket (of ``partition``) that has one."""
        info = self._conn.resolve(table)
        resp = self._conn.call_coordinator(m.ListKvSnapshotsRequest(
            table_id=info.table_id, latest_only=True,
            partition_id=self._partition_id(info, partition)))
        out: dict[int, SnapshotInfo] = {}
        for s in resp.snapshots:
            if s.bucket not in out or s.snapshot_id > out[s.bucket].snapshot_id:
                out[s.bucket] = s
        return dict(sorted(out.items()))

    def trigger_kv_snapshot(self, table: str | TableInfo, buckets: Iterable[int] | None = None,
                            *, partition: str | None = None) -> dict[int, SnapshotInfo | None]:
        """Snapshot the buckets (of ``partition``) now (each tablet waits until its snapshots
        are registered); None for a bucket that is empty and was never snapshotted."""
        info = self._conn.resolve(table)
        pid = self._partition_id(info, partition)
        wanted = info.buckets if buckets is None else list(buckets)
        out: dict[int, SnapshotInfo | None] = {}
        for _, resp in self._conn.call_buckets(
                info, wanted,
                lambda group: m.TriggerKvSnapshotRequest(table_id=info.table_id,
                                                         buckets=tuple(group), partition_id=pid),
                pid):
            out.update(resp.snapshots)
        return dict(sorted(out.items()))

    # -- KV snapshot leases ---------------------------------------------------------------------
    def supports_leases(self) -> bool:
        """Whether the coordinator offers the KV snapshot lease APIs."""
        return self._conn.with_coordinator(
            lambda rpc: rpc.supports(m.AcquireLeaseRequest.API_KEY))

    def _lease_call(self, request: m.Request[R]) -> R:
        def call(rpc):
            rpc.require(request.API_KEY, "KV snapshot leases")
            return rpc.call(request)
        return self._conn.with_coordinator(call)

    def acquire_kv_snapshot_lease(self, lease_id: str, duration_ms: int,
                                  tables: Mapping[int, Mapping[int, int]],
                                  holder: str | None = None, *,
                                  partitions: PartitionPins | None = None) -> Unavailable:
        """Pin snapshots ``{table_id: {bucket: snapshot_id}}`` of unpartitioned tables and
        ``partitions`` ``{table_id: {partition_id: {bucket: snapshot_id}}}`` of partitions for
        ``duration_ms``; returns the pins that could not be granted because the snapshot is not
        registered (any more) in that partition.

        ``holder`` names the query the pins are for (``[A-Za-z0-9._-]{1,128}``, else the
        coordinator answers ``InvalidRequest``). If a table named here has pins under this lease
        recorded for a different holder, the whole call raises ``LeaseHeldByOther`` (not
        retriable) and nothing changes; the same holder again is granted. ``None`` (operators,
        older clients) is never refused and leaves recorded holders as they are. A coordinator
        older than partition pins is refused with ``UnsupportedVersion``."""
        wanted = {int(t): {int(p): {int(b): int(s) for b, s in pins.items()}
                           for p, pins in by_partition.items()}
                  for t, by_partition in (partitions or {}).items()}
        request = m.AcquireLeaseRequest(
            lease_id=lease_id, duration_ms=int(duration_ms), holder=holder,
            tables={int(t): {int(b): int(s) for b, s in pins.items()}
                    for t, pins in tables.items()},
            partitions=wanted or None)
        resp = self._lease_call(request)
        if wanted and resp.unavailable_partitions is None:
            raise UnsupportedVersion(f"the coordinator does not pin partitions (a release older "
                                     f"than partition leases) and ignored the partition pins "
                                     f"of lease {lease_id!r}; upgrade the coordinator")
        return Unavailable(resp.unavailable, resp.unavailable_partitions)

    def renew_kv_snapshot_lease(self, lease_id: str, duration_ms: int) -> int:
        """Extend the lease to now + ``duration_ms``; LeaseNotFound when it is gone."""
        return self._lease_call(m.RenewLeaseRequest(lease_id=lease_id,
                                                    duration_ms=int(duration_ms))).expires_at_ms

    def release_kv_snapshot_lease(self, lease_id: str, tables: Mapping[int, Iterable[int]], *,
                                  partitions: Mapping[int, Mapping[int, Iterable[int]]] | None
                                  = None) -> int:
        """Unpin buckets ``{table_id: [bucket]}`` (in the table and in each of its
        partitions) and ``partitions`` ``{table_id: {partition_id: [bucket]}}`` (in that
        partition); returns the pins the lease still holds."""
        return self._lease_call(m.ReleaseLeaseRequest(
            lease_id=lease_id, tables={int(t): tuple(int(b) for b in bs)
                                       for t, bs in tables.items()},
            partitions={int(t): {int(p): tuple(int(b) for b in bs) for p, bs in ps.items()}
                        for t, ps in partitions.items()} if partitions else None
        )).remaining_pins

    def drop_kv_snapshot_lease(self, lease_id: str) -> bool:
        """Remove the lease and its pins; False when there was no such lease."""
        return self._lease_call(m.DropLeaseRequest(lease_id=lease_id)).dropped

    def list_kv_snapshot_leases(self) -> list[LeaseInfo]:
        resp = self._lease_call(m.ListLeasesRequest())
        return sorted(resp.leases, key=lambda lease: lease.lease_id)

    def describe_kv_snapshot_lease(self, lease_id: str) -> LeaseInfo:
        return self._lease_call(m.DescribeLeaseRequest(lease_id=lease_id))

    # -- ACLs -----------------------------------------------------------------------------------
    def create_acls(self, acls: Iterable[AclBinding]) -> list[AclBinding]:
        """Grant ``acls``; returns those that did not exist yet. Needs a super user, ALTER on
        the cluster, or ALL on the resource (a table's: its database)."""
        resp = self._conn.call_coordinator(m.CreateAclsRequest(
            tuple(m.AclInfo.of(a) for a in acls)))
        return [a.binding() for a in resp.created]

    def list_acls(self, acl_filter: AclFilter | None = None) -> list[AclBinding]:
        """The ACLs ``acl_filter`` matches (all by default) on resources the caller may see."""
        resp = self._conn.call_coordinator(m.ListAclsRequest(
            m.AclFilterInfo.of(acl_filter or AclFilter())))
        return sorted(a.binding() for a in resp.acls)

    def drop_acls(self, filters: Iterable[AclFilter]) -> list[AclBinding]:
        """Remove every ACL one of ``filters`` matches; returns what was removed."""
        resp = self._conn.call_coordinator(m.DropAclsRequest(
            tuple(m.AclFilterInfo.of(f) for f in filters)))
        return sorted(a.binding() for a in resp.dropped)

    # -- operations -----------------------------------------------------------------------------
    def metrics(self) -> dict:
        """The coordinator's metrics: ``{metrics: {name: n}, tables: {table: {name: n}}}``."""
        resp = self._conn.call_coordinator(m.GetMetricsRequest())
        return {"metrics": resp.metrics, "tables": resp.tables}

    def list_scanners(self) -> list[dict]:
        """Open scan sessions of every live tablet server, each row with its ``server_id``."""
        rows: list[dict] = []
        self._conn.refresh_metadata()
        for tablet_id in sorted(self._conn.tablets):
            try:
                resp = self._conn.tablet(tablet_id).call(m.ListScannersRequest())
            except NetworkError:
                continue  # a registered server that just died has no sessions to show
            rows.extend({"server_id": tablet_id, **asdict(s)} for s in resp.scanners)
        return rows
