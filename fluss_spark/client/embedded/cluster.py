"""``EmbeddedCluster``: the ``Cluster`` interface over this project's coordinator and tablet
servers."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Mapping, Sequence

import pyarrow as pa

from fluss_spark.client.cluster import (DEFAULT_SNAPSHOT_BATCH_BYTES, Capabilities, Cluster,
                                        LiveScanStart, PartitionAdmin, PartitionPins, Pins,
                                        RecordBatchStream, SnapshotLocation, TableAdmin,
                                        Unavailable)
from fluss_spark.client.embedded.connection import FlussConnection
from fluss_spark.client.writes import RowWriter, TableWrites
from fluss_spark.errors import UnsupportedVersion
from fluss_spark.protocol.messages import LeaseInfo, PartitionInfo, SnapshotInfo, TableInfo

if TYPE_CHECKING:
    # ssl and the TLS client load with a TLS connection only (channel.py).
    from fluss_spark.transport.tls import TlsClientConfig


class EmbeddedCluster:
    """A ``Cluster`` that delegates to a ``FlussConnection`` (its admin, KV and log scanners)."""

    def __init__(self, conn: FlussConnection):
        self.conn = conn
        self._capabilities: Capabilities | None = None
        self._lock = threading.Lock()

    @classmethod
    def connect(cls, bootstrap_servers: str, *, request_timeout_s: float = 60.0,
                username: str | None = None, password: str | None = None,
                tls: TlsClientConfig | None = None,
                short_circuit_reads: bool = False) -> "EmbeddedCluster":
        return cls(FlussConnection(bootstrap_servers, request_timeout_s=request_timeout_s,
                                   username=username, password=password, tls=tls,
                                   short_circuit_reads=short_circuit_reads))

    def capabilities(self) -> Capabilities:
        # Asked once: the coordinator's API set does not change under a running connection.
        with self._lock:
            if self._capabilities is None:
                try:
                    leases = bool(self.conn.admin().supports_leases())
                except UnsupportedVersion:
                    leases = False
                self._capabilities = Capabilities(leases=leases, lease_renewal="renew",
                                                  snapshot_read="scan_session",
                                                  live_kv_scan=True, lease_describe=leases,
                                                  lease_listing=leases, snapshot_trigger=True,
                                                  scan_sessions=True, acls=True,
                                                  partition_admin=True)
            return self._capabilities

    # -- tables and offsets -----------------------------------------------------------------------
    def list_tables(self) -> list[str]:
        return self.conn.admin().list_tables()

    def get_table(self, name: str) -> TableInfo:
        return self.conn.admin().get_table(name)

    def list_offsets(self, table: str, buckets: Iterable[int] | None = None,
                     spec: str = "latest", timestamp_ms: int | None = None, *,
                     partition: str | None = None) -> dict[int, int]:
        return self.conn.admin().list_offsets(table, buckets=buckets, spec=spec,
                                              timestamp_ms=timestamp_ms, partition=partition)

    def latest_kv_snapshots(self, table: str, *,
                            partition: str | None = None) -> dict[int, SnapshotInfo]:
        return self.conn.admin().latest_kv_snapshots(table, partition=partition)

    # -- databases and tables (TableAdmin) ------------------------------------------------------
    def create_database(self, name: str, *, ignore_if_exists: bool = True) -> None:
        """Nothing to do: this project's tables are named ``db.table`` without databases."""

    def create_table(self, name: str, schema: pa.Schema, *, primary_key: Iterable[str] = (),
                     bucket_key: Iterable[str] | None = None, buckets: int = 1,
                     properties: Mapping[str, str] | None = None,
                     ignore_if_exists: bool = False, partition_keys: Iterable[str] = ()) -> None:
        self.conn.admin().create_table(name, schema, primary_key=primary_key,
                                       bucket_key=bucket_key, num_buckets=buckets,
                                       properties=properties, ignore_if_exists=ignore_if_exists,
                                       partition_keys=partition_keys)

    # -- partitions (PartitionAdmin) ------------------------------------------------------------
    def list_partitions(self, table: str) -> list[PartitionInfo]:
        return self.conn.admin().list_partitions(table)

    def create_partition(self, table: str, spec: Mapping[str, str], *,
                         ignore_if_exists: bool = False) -> PartitionInfo:
        return self.conn.admin().create_partition(table, spec, ignore_if_exists=ignore_if_exists)

    def drop_partition(self, table: str, spec: Mapping[str, str], *,
                       ignore_if_not_exists: bool = False) -> None:
        self.conn.admin().drop_partition(table, spec, ignore_if_not_exists=ignore_if_not_exists)

    def drop_table(self, name: str, *, ignore_if_not_exists: bool = True) -> None:
        self.conn.admin().drop_table(name, ignore_if_not_exists=ignore_if_not_exists)

    def add_columns(self, name: str, columns: pa.Schema) -> TableInfo:
        return self.conn.admin().add_columns(name, columns)

    # -- writes (TableWrites) --------------------------------------------------------------------
    def table_writer(self, table: str, options: Mapping[str, Any] | None = None, *,
                     columns: Sequence[str] | None = None) -> RowWriter:
        info = self.conn.resolve(table)
        if columns is not None and not set(columns) <= set(info.schema.names):
            info = self.conn.refresh_table(table)   # columns added since it was cached
        if columns is not None and set(columns) != set(info.schema.names):
            raise UnsupportedVersion(f"partial updates of {info.name} (columns "
                                     f"{', '.join(columns)}) are not supported by "
                                     "fluss_spark's servers: give every column")
        return self.conn.writer(info, options)

    # -- leases -----------------------------------------------------------------------------------
    def acquire_kv_snapshot_lease(self, lease_id: str, duration_ms: int, tables: Pins,
                                  holder: str | None = None, *,
                                  partitions: PartitionPins | None = None) -> Unavailable:
        return self.conn.admin().acquire_kv_snapshot_lease(lease_id, duration_ms, tables,
                                                           holder=holder, partitions=partitions)

    def renew_kv_snapshot_lease(self, lease_id: str, duration_ms: int) -> int:
        return self.conn.admin().renew_kv_snapshot_lease(lease_id, duration_ms)

    def release_kv_snapshot_lease(self, lease_id: str, tables: Mapping[int, Iterable[int]], *,
                                  partitions: Mapping[int, Mapping[int, Iterable[int]]] | None
                                  = None) -> int:
        return self.conn.admin().release_kv_snapshot_lease(lease_id, tables,
                                                           partitions=partitions)

    def drop_kv_snapshot_lease(self, lease_id: str) -> bool:
        return self.conn.admin().drop_kv_snapshot_lease(lease_id)

    def describe_kv_snapshot_lease(self, lease_id: str) -> LeaseInfo:
        return self.conn.admin().describe_kv_snapshot_lease(lease_id)

    # -- reads ------------------------------------------------------------------------------------
    def read_log(self, table: str, bucket: int, start: int, end: int,
                 projection: list[str] | None = None, *,
                 partition: str | None = None) -> Iterator[pa.RecordBatch]:
        return self.conn.log_scanner(table, projection, partition).read(bucket, start, end)

    def read_snapshot(self, table: str, bucket: int, snapshot_id: int, *, start_row: int = 0,
                      limit: int | None = None, projection: list[str] | None = None,
                      batch_size_bytes: int = DEFAULT_SNAPSHOT_BATCH_BYTES,
                      partition: str | None = None,
                      location: SnapshotLocation | None = None) -> RecordBatchStream:
        # Read through a scan session: the tablet server knows where its snapshot lies.
        return self.conn.kv_scanner(table, partition).scan(bucket, snapshot_id=snapshot_id,
                                                start_row=start_row, limit=limit,
                                                projection=projection,
                                                batch_size_bytes=batch_size_bytes)

    def snapshot_location(self, table: str, bucket: int, snapshot_id: int, *,
                          partition: str | None = None) -> SnapshotLocation | None:
        return None

    def open_live_scan(self, table: str, bucket: int, *,
                       batch_size_bytes: int = 1) -> LiveScanStart:
        return self.conn.kv_scanner(table).open_live(bucket, batch_size_bytes)

    def read_live_scan(self, table: str, bucket: int, start: LiveScanStart, *,
                       projection: list[str] | None = None,
                       batch_size_bytes: int = DEFAULT_SNAPSHOT_BATCH_BYTES) -> RecordBatchStream:
        return self.conn.kv_scanner(table).read_live(bucket, start, projection, batch_size_bytes)

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> "EmbeddedCluster":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


#: The type checker holds this implementation to the interface: mypy names any method that differs.
_IMPLEMENTS_CLUSTER: type[Cluster] = EmbeddedCluster
_IMPLEMENTS_TABLE_ADMIN: type[TableAdmin] = EmbeddedCluster
_IMPLEMENTS_PARTITION_ADMIN: type[PartitionAdmin] = EmbeddedCluster
_IMPLEMENTS_TABLE_WRITES: type[TableWrites] = EmbeddedCluster


__all__ = ["EmbeddedCluster"]
