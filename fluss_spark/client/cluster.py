"""The cluster interface the Spark connector and the tiering job depend on, and nothing else."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Iterator, Literal, Mapping, Protocol, runtime_checkable

import pyarrow as pa

from fluss_spark.errors import ConfigError, UnsupportedVersion
from fluss_spark.protocol.auto_partition import AutoPartition
from fluss_spark.protocol.messages import LeaseInfo, PartitionInfo, SnapshotInfo, TableInfo
from fluss_spark.protocol.partitions import spec_text, values_of
from fluss_spark.protocol.schema_change import additive_problem, column_texts, conform
from fluss_spark.protocol.changelog import (APPEND, CHANGE_TYPE, CHANGELOG_FIELDS,
                                            COMMIT_TIMESTAMP, DELETE, INSERT, LOG_OFFSET,
                                            RETRACTIONS, UPDATE_AFTER, UPDATE_BEFORE)

#: Target size of one batch of a snapshot read, unless the caller asks for another.
DEFAULT_SNAPSHOT_BATCH_BYTES = 4 << 20

#: ``{table_id: {bucket: snapshot_id}}``: the snapshots a lease pins.
Pins = Mapping[int, Mapping[int, int]]
#: ``{table_id: {partition_id: {bucket: snapshot_id}}}``: the snapshots a lease pins in
#: partitions of partitioned tables.
PartitionPins = Mapping[int, Mapping[int, Mapping[int, int]]]


class Unavailable(dict):
    """The pins an acquire did not grant because the snapshot is not registered (any more):
    the dict ``{table_id: {bucket: snapshot_id}}`` of tables' own pins, and ``partitions``
    ``{table_id: {partition_id: {bucket: snapshot_id}}}`` of partitions' pins. It is empty
    (false), and equal to ``{}``, only when both are."""

    def __init__(self, tables: Pins | None = None, partitions: PartitionPins | None = None):
        super().__init__({int(t): {int(b): int(s) for b, s in pins.items()}
                          for t, pins in (tables or {}).items() if pins})
        self.partitions: dict[int, dict[int, dict[int, int]]] = {
            int(t): {int(p): {int(b): int(s) for b, s in pins.items()}
                     for p, pins in by_partition.items() if pins}
            for t, by_partition in (partitions or {}).items() if any(by_partition.values())}

    def __bool__(self) -> bool:
        return bool(len(self) or self.partitions)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, dict):
            return NotImplemented
        return dict.__eq__(self, other) and self.partitions == getattr(other, "partitions", {})

    def __ne__(self, other: object) -> bool:
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    __hash__ = None     # a dict: unhashable

    def __repr__(self) -> str:
        return f"Unavailable({dict.__repr__(self)}, partitions={self.partitions!r})"


@dataclass(frozen=True)
class Capabilities:
    """What a cluster offers beyond reading tables, so callers pick a path without probing."""

    #: KV snapshot leases exist at all; without them a snapshot read runs unprotected.
    leases: bool
    #: How a lease is kept alive: ``renew`` (a call of its own) or ``reacquire`` (acquiring the
    #: same pins again, which extends the lease; Apache Fluss 0.9.1 has no renew call).
    lease_renewal: Literal["renew", "reacquire"] = "renew"
    #: How a snapshot is read: server-side ``scan_session`` paging, or the snapshot's ``files``
    #: (Apache Fluss 0.9.1: its RocksDB checkpoint in remote storage).
    snapshot_read: Literal["scan_session", "files"] = "scan_session"
    #: Live KV scans (``open_live_scan``): a server-side session over the bucket's current state
    #: that reports the changelog offset it reflects, cannot be resumed and expires when idle
    #: (Apache Fluss's SCAN_KV, API 1061, where the tablet servers offer it).
    live_kv_scan: bool = False
    #: ``describe_kv_snapshot_lease`` answers (expiry, pins, holders). Without it a caller cannot
    #: see what a lease pins (Apache Fluss 0.9.1 has no such call) and releases what it acquired.
    lease_describe: bool = False
    #: A call lists every lease of the cluster (the CLI's ``lease list``; this project's servers).
    lease_listing: bool = False
    #: A KV snapshot is taken on request (the CLI's ``snapshot trigger``); without it the cluster
    #: takes them on its own schedule (Apache Fluss: the table's ``kv.snapshot.interval``).
    snapshot_trigger: bool = False
    #: Server-side scan sessions of this project's servers: listed by the CLI's ``scanner list``,
    #: and read a bucket's snapshot or live state page by page (``scan --snapshot live``).
    scan_sessions: bool = False
    #: ACLs are granted, listed and removed through this client (the CLI's ``acl`` commands;
    #: this project's servers). Apache Fluss 0.9.1 has ACL calls this client does not speak.
    acls: bool = False
    #: Partitions of partitioned tables are listed, created and dropped through this client
    #: (``PartitionAdmin``; this project's servers, and Apache Fluss's coordinator).
    partition_admin: bool = False
    #: A writer updates only some columns of a PK table's rows (``table_writer(...,
    #: columns=...)``), the others keeping their values: Apache Fluss's partial updates.
    partial_updates: bool = False


def refuse_partition(partition: str | None, table: str, path: str) -> None:
    """Nothing when ``partition`` is None; a partition named to ``path`` (a cluster that does
    not read partitions yet) is refused with ``UnsupportedVersion``."""
    if partition is not None:
        raise UnsupportedVersion(f"partition {partition} of table {table}: partitions are not "
                                 f"supported by {path} yet")


def partition_values(name: str) -> tuple[str, ...]:
    """The values of the partition ``name`` in partition key order (``2026-11-25$eu``)."""
    return values_of(name)


def partition_spec(partition_keys: Iterable[str], name: str) -> str:
    """The command line's form of the partition ``name``: ``dt=2026-11-25``."""
    return spec_text(list(partition_keys), values_of(name))


def expired_by_retention(info: TableInfo, partition: str, now_ms: int) -> bool:
    """Whether the partition ``partition`` (a name) of ``info`` is older than its table's
    auto-partition retention at ``now_ms``: auto-partitioning drops such a partition, so one that
    disappeared expired; any other that disappeared was dropped by hand."""
    try:
        strategy = AutoPartition.of(info.name, info.properties, info.partition_keys)
    except ConfigError:
        return False
    if not strategy.enabled or not info.partition_keys:
        return False
    keys = list(info.partition_keys)
    values = values_of(partition)
    index = keys.index(strategy.time_key(keys))
    return index < len(values) and strategy.expired(now_ms, values[index])


def refuse_partition_pins(partitions: Mapping | None, path: str) -> None:
    """Nothing when ``partitions`` names no partition; partition pins given to ``path`` (a
    cluster whose leases do not pin partitions yet) are refused with ``UnsupportedVersion``."""
    if partitions:
        raise UnsupportedVersion(f"KV snapshot lease pins of partitions (table id(s) "
                                 f"{', '.join(map(str, sorted(partitions)))}) are not supported "
                                 f"by {path} yet")


@dataclass(frozen=True)
class LiveScanStart:
    """The open of a live KV scan of one bucket: the offset its rows reflect and its first rows.

    Plain data, so it can travel inside a Spark split to the executor that reads the rest.
    """

    #: The first changelog offset NOT reflected in the rows (rows carry ``log_offset - 1``).
    log_offset: int
    #: The server-side session, or None when the open returned every row (or the bucket is empty).
    scanner_id: str | None
    #: The open response's rows, in the cluster's own encoding (``read_live_scan`` decodes them).
    records: bytes
    #: Whether rows remain after ``records``.
    has_more: bool


@dataclass(frozen=True)
class SnapshotLocation:
    """Where a KV snapshot's rows lie, for a cluster that reads them from the snapshot's files
    (``Capabilities.snapshot_read == "files"``): its files and the log offset it covers.

    A snapshot's files never change, so what a driver learned while planning can travel in a
    Spark split: a reader given it asks no server where the files are. Plain data, as
    ``LiveScanStart``.
    """

    #: The first changelog offset the snapshot does NOT cover.
    log_offset: int
    #: ``(path in remote storage, name in the checkpoint)`` of each file.
    files: tuple[tuple[str, str], ...]


@runtime_checkable
class RecordBatchStream(Protocol):
    """Record batches of one read; ``close()`` ends it early and frees what the server holds."""

    def __iter__(self) -> Iterator[pa.RecordBatch]: ...

    def __next__(self) -> pa.RecordBatch: ...

    def close(self) -> None: ...


@runtime_checkable
class Cluster(Protocol):
    """Tables, offsets, KV snapshots, snapshot leases and Arrow reads of one Fluss cluster.

    Errors are the ``fluss_spark.errors`` classes (``TableNotExist``, ``LeaseNotFound``,
    ``LeaseHeldByOther``, ``KvSnapshotNotExist``, ``LogOffsetOutOfRange``, ...); callers decide
    on a retry by the error's ``retriable`` attribute. Tables are named ``db.table``.
    """

    def capabilities(self) -> Capabilities:
        """What this cluster offers (leases, how leases are renewed, how snapshots are read)."""
        ...

    # -- tables and offsets -----------------------------------------------------------------------
    def list_tables(self) -> list[str]:
        """Every table's name, sorted."""
        ...

    def get_table(self, name: str) -> TableInfo:
        """Fresh metadata of ``name``; ``TableNotExist`` when there is none."""
        ...

    def list_offsets(self, table: str, buckets: Iterable[int] | None = None,
                     spec: str = "latest", timestamp_ms: int | None = None, *,
                     partition: str | None = None) -> dict[int, int]:
        """Changelog offset per bucket: ``earliest`` retained, ``latest`` (the high watermark),
        or ``timestamp``: the first offset committed at or after ``timestamp_ms``. A bad
        ``spec`` (or ``timestamp`` without ``timestamp_ms``) is a ``ConfigError``.

        ``partition`` (here and in the reads below): the partition of a partitioned table, by
        name or spec (``dt=2026-11-25``); a partitioned table needs one (only where
        ``capabilities().partition_admin``)."""
        ...

    def latest_kv_snapshots(self, table: str, *,
                            partition: str | None = None) -> dict[int, SnapshotInfo]:
        """The newest KV snapshot of every bucket that has one."""
        ...

    # -- KV snapshot leases (only when ``capabilities().leases``) ----------------------------------
    def acquire_kv_snapshot_lease(self, lease_id: str, duration_ms: int, tables: Pins,
                                  holder: str | None = None, *,
                                  partitions: PartitionPins | None = None) -> Unavailable:
        """Pin ``tables`` (unpartitioned tables' buckets) and ``partitions`` (partitions'
        buckets, by partition id) under the lease (creating it, extending it to now +
        ``duration_ms``); returns the pins not granted because the snapshot is not registered
        (any more). A table pinned under this lease for another ``holder`` raises
        ``LeaseHeldByOther`` and changes nothing. A cluster that cannot pin partitions refuses
        ``partitions`` with ``UnsupportedVersion``."""
        ...

    def renew_kv_snapshot_lease(self, lease_id: str, duration_ms: int) -> int:
        """Extend the lease to now + ``duration_ms`` (its new expiry, epoch ms); only when
        ``capabilities().lease_renewal == "renew"``. ``LeaseNotFound`` when it is gone."""
        ...

    def release_kv_snapshot_lease(self, lease_id: str, tables: Mapping[int, Iterable[int]], *,
                                  partitions: Mapping[int, Mapping[int, Iterable[int]]] | None
                                  = None) -> int:
        """Unpin buckets ``{table_id: [bucket]}`` (of the table and of every one of its
        partitions: all of a table's buckets release all of its pins) and ``partitions``
        ``{table_id: {partition_id: [bucket]}}`` (of one partition); returns the pins the lease
        still holds. The lease goes with its last pin; an unknown lease releases nothing."""
        ...

    def drop_kv_snapshot_lease(self, lease_id: str) -> bool:
        """Remove the lease and its pins; False when there was no such lease."""
        ...

    def describe_kv_snapshot_lease(self, lease_id: str) -> LeaseInfo:
        """The lease's expiry, pins and holders; ``LeaseNotFound`` when it is gone."""
        ...

    # -- reads ------------------------------------------------------------------------------------
    def read_log(self, table: str, bucket: int, start: int, end: int,
                 projection: list[str] | None = None, *,
                 partition: str | None = None) -> Iterator[pa.RecordBatch]:
        """Exactly the changelog records of offsets ``[start, end)``: the (projected) table
        columns then ``_change_type``, ``_log_offset``, ``_commit_timestamp``.
        ``LogOffsetOutOfRange`` when ``start`` is below the retained log start."""
        ...

    def read_snapshot(self, table: str, bucket: int, snapshot_id: int, *, start_row: int = 0,
                      limit: int | None = None, projection: list[str] | None = None,
                      batch_size_bytes: int = DEFAULT_SNAPSHOT_BATCH_BYTES,
                      partition: str | None = None,
                      location: SnapshotLocation | None = None) -> RecordBatchStream:
        """Rows ``[start_row, start_row + limit)`` of a KV snapshot in key order, the
        (projected) table columns only. ``KvSnapshotNotExist`` (while iterating) when the
        snapshot is gone. Close the stream when stopping early. ``location``: the snapshot's
        files as ``snapshot_location`` gave them (a cluster that reads no files ignores it)."""
        ...

    def snapshot_location(self, table: str, bucket: int, snapshot_id: int, *,
                          partition: str | None = None) -> SnapshotLocation | None:
        """The files of a KV snapshot as this client already learned them (listing snapshots,
        checking a lease's pins), asking no server; None when it learned nothing of them, or
        when the cluster reads no snapshot files."""
        ...

    # -- live KV scans (only when ``capabilities().live_kv_scan``) ---------------------------------
    def open_live_scan(self, table: str, bucket: int, *,
                       batch_size_bytes: int = 1) -> LiveScanStart:
        """Open a live scan of a PK bucket's current state; the server answers with at least one
        row (``batch_size_bytes=1``: exactly one) while any exists."""
        ...

    def read_live_scan(self, table: str, bucket: int, start: LiveScanStart, *,
                       projection: list[str] | None = None,
                       batch_size_bytes: int = DEFAULT_SNAPSHOT_BATCH_BYTES) -> RecordBatchStream:
        """The rows of the scan ``start`` opened: its first rows, then the session's next batches
        to the end, the (projected) table columns only, in key order. ``LiveScanLost`` (while
        iterating) when the session is gone: it cannot be resumed. Closing the stream closes the
        session."""
        ...

    def close(self) -> None:
        """Release connections; the object is not used afterwards."""
        ...


@runtime_checkable
class TableAdmin(Protocol):
    """Creating and dropping tables: not part of ``Cluster`` (the source and the tiering job never
    do it), an optional interface that both backends' clusters implement, for the CLI and tools.
    """

    def create_database(self, name: str, *, ignore_if_exists: bool = True) -> None:
        """Create the database ``name`` where the cluster has databases (Apache Fluss); a
        cluster whose tables are named ``db.table`` without databases does nothing."""
        ...

    def create_table(self, name: str, schema: pa.Schema, *, primary_key: Iterable[str] = (),
                     bucket_key: Iterable[str] | None = None, buckets: int = 1,
                     properties: Mapping[str, str] | None = None,
                     ignore_if_exists: bool = False, partition_keys: Iterable[str] = ()) -> None:
        """Create ``db.table`` (its database must exist); a primary key makes a PK table,
        ``partition_keys`` a partitioned one (in the primary key of a PK table)."""
        ...

    def drop_table(self, name: str, *, ignore_if_not_exists: bool = True) -> None:
        """Drop ``db.table``; ``TableNotExist`` when absent unless ``ignore_if_not_exists``."""
        ...

    def add_columns(self, name: str, columns: pa.Schema) -> TableInfo:
        """Append the nullable ``columns`` to ``db.table`` (a new schema id; rows written
        before read them as null) and return its new metadata."""
        ...


@runtime_checkable
class PartitionAdmin(Protocol):
    """Partitions of partitioned tables (only when ``capabilities().partition_admin``).

    A spec is ``{partition key: value}`` naming every partition key; a partition's name is its
    values in key order joined by ``$`` (Fluss's). Errors: ``TableNotPartitioned``,
    ``PartitionNotExist``, ``PartitionAlreadyExist``, ``InvalidPartitionSpec``.
    """

    def list_partitions(self, table: str) -> list[PartitionInfo]:
        """The partitions of ``table`` (id, name, bucket assignment), by name."""
        ...

    def create_partition(self, table: str, spec: Mapping[str, str], *,
                         ignore_if_exists: bool = False) -> PartitionInfo:
        """Create the partition ``spec`` and return it."""
        ...

    def drop_partition(self, table: str, spec: Mapping[str, str], *,
                       ignore_if_not_exists: bool = False) -> None:
        """Drop the partition ``spec`` with its data, snapshots and lease pins."""
        ...


__all__ = ["APPEND", "CHANGELOG_FIELDS", "CHANGE_TYPE", "COMMIT_TIMESTAMP", "Capabilities",
           "Cluster", "DEFAULT_SNAPSHOT_BATCH_BYTES", "DELETE", "INSERT", "LOG_OFFSET",
           "LeaseInfo", "LiveScanStart", "PartitionAdmin", "PartitionInfo", "PartitionPins",
           "Pins", "RETRACTIONS", "RecordBatchStream", "SnapshotInfo", "SnapshotLocation",
           "expired_by_retention",
           "partition_spec", "partition_values", "refuse_partition", "refuse_partition_pins",
           "TableAdmin", "TableInfo", "UPDATE_AFTER", "UPDATE_BEFORE",
           "Unavailable", "additive_problem", "column_texts", "conform"]
