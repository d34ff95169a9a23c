"""The records the ``Cluster`` interface returns, as this project's servers send them: tables,
partitions, KV snapshots and leases.

Kept apart from the requests that carry them, so that a client of Apache Fluss, which describes
its tables and snapshots with these but sends none of this project's requests, builds only
these few dataclasses (each costs a fresh Spark Python process ~0.6 ms to build).
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from fluss_spark.protocol.arrow_ipc import deserialize_schema, serialize_schema
from fluss_spark.protocol.changelog import CHANGELOG_FIELDS
from fluss_spark.protocol.messages.base import (Bytes, Int, Kind, ListOf, MapOf, Message, Nested,
                                                Str, wire)

#: Column names: any string a table may hold, bounded.
COLUMN = Str(max_len=1024, min_len=1)
#: A column list (projection, keys): more columns than any table has are refused unread.
MAX_COLUMNS = 10_000
#: Most partitions one answer holds (far above a table's useful count).
MAX_PARTITIONS = 100_000


class ArrowSchema(Kind):
    """An Arrow schema, as an Arrow IPC schema message."""

    def decode(self, value, name, error):
        data = Bytes().decode(value, name, error)
        try:
            return deserialize_schema(data)
        except Exception as e:  # noqa: BLE001 - any undecodable schema is the sender's fault
            raise error(f"field {name!r} is not an Arrow schema: {e}") from None

    def encode(self, value):
        return serialize_schema(value)


#: Lease ids and holders: their rule (protocol/names.py) is checked by the lease manager, which
#: answers InvalidLeaseId; on the wire they are bounded strings.
LEASE_ID = Str(max_len=1024)
#: {table_id: {bucket: snapshot_id}}; ids may come as digit strings from loosely typed clients.
#: Every id and bucket is an integer in 0..2**53 (``Int``'s bounds), as everywhere on the wire.
PINS = MapOf(Int(digits_ok=True), MapOf(Int(digits_ok=True), Int()))
#: {table_id: {partition_id: {bucket: snapshot_id}}}: the pins of partitions, same bounds.
PARTITION_PINS = MapOf(Int(digits_ok=True), PINS)


@dataclass(frozen=True)
class PartitionInfo(Message):
    """A partition: its id (unique in the cluster), its name (the values joined by ``$``), and
    the tablet server of each of its buckets."""

    partition_id: int = wire(Int())
    name: str = wire(Str(max_len=2048))
    assignment: dict = wire(MapOf(Int(digits_ok=True), Int(None)), default_factory=dict,
                            compare=False)
    created_ms: int = wire(Int(), 0)


@dataclass(frozen=True)
class TableInfo(Message):
    """A table as the cluster describes it (GET_METADATA)."""

    table_id: int = wire(Int())
    name: str = wire(Str(max_len=1024))
    schema: pa.Schema = wire(ArrowSchema())
    primary_key: tuple[str, ...] = wire(ListOf(COLUMN, max_len=MAX_COLUMNS), ())
    bucket_key: tuple[str, ...] = wire(ListOf(COLUMN, max_len=MAX_COLUMNS), ())
    num_buckets: int = wire(Int(1), 1)
    properties: dict = wire(MapOf(Str(), Str()), default_factory=dict, compare=False)
    created_ms: int = wire(Int(), 0)
    assignment: dict = wire(MapOf(Int(digits_ok=True), Int(None)), default_factory=dict,
                            compare=False)
    #: Empty: not partitioned (older servers send none).
    partition_keys: tuple[str, ...] = wire(ListOf(COLUMN, max_len=MAX_COLUMNS), ())
    #: The partitions of a partitioned table with their buckets' tablet servers, so a client
    #: routes by partition as it routes by bucket (older servers send none).
    partitions: tuple[PartitionInfo, ...] = wire(ListOf(Nested(PartitionInfo),
                                                        max_len=MAX_PARTITIONS), (),
                                                 compare=False)
    #: The id of ``schema``: 1 at creation, one more per schema change (older servers send
    #: none).
    schema_id: int = wire(Int(1), 1)

    @property
    def partitioned(self) -> bool:
        return bool(self.partition_keys)

    @property
    def has_primary_key(self) -> bool:
        return bool(self.primary_key)

    @property
    def buckets(self) -> list[int]:
        return list(range(self.num_buckets))

    def changelog_schema(self, projection: list[str] | None = None) -> pa.Schema:
        """Schema of changelog records: the (projected) table columns plus the metadata columns."""
        cols = [self.schema.field(c) for c in projection] if projection else list(self.schema)
        return pa.schema(cols + list(CHANGELOG_FIELDS))


@dataclass(frozen=True)
class SnapshotInfo(Message):
    """One registered KV snapshot of a bucket; ``log_offset`` is the exclusive offset it covers."""

    table_id: int = wire(Int())
    bucket: int = wire(Int())
    snapshot_id: int = wire(Int())
    path: str = wire(Str(max_len=4096), "")
    log_offset: int = wire(Int(), 0)
    row_count: int = wire(Int(), 0)
    size_bytes: int = wire(Int(), 0)
    created_ms: int = wire(Int(), 0)
    pinned_by: tuple[str, ...] = wire(ListOf(Str()), ())
    #: The partition of a partitioned table; absent for an unpartitioned one.
    partition_id: int | None = wire(Int(), None, omit_none=True)


@dataclass(frozen=True)
class LeaseInfo(Message):
    """A KV snapshot lease: its expiry and its pins, ``tables`` (table id -> bucket -> snapshot
    id) and ``partitions`` (table id -> partition id -> bucket -> snapshot id; absent from older
    servers). ``holders`` and ``pin_count`` cover both."""

    lease_id: str = wire(LEASE_ID)
    expires_at_ms: int = wire(Int(), 0)
    created_ms: int = wire(Int(), 0)
    tables: dict = wire(PINS, default_factory=dict, compare=False)
    pin_count: int = wire(Int(), 0)
    holders: dict = wire(MapOf(Int(digits_ok=True), Str()), default_factory=dict, compare=False)
    owner: str | None = wire(Str(), None)
    partitions: dict = wire(PARTITION_PINS, default_factory=dict, compare=False)


__all__ = ["ArrowSchema", "COLUMN", "LEASE_ID", "LeaseInfo", "MAX_COLUMNS", "MAX_PARTITIONS",
           "PARTITION_PINS", "PINS", "PartitionInfo", "SnapshotInfo", "TableInfo"]
