"""Typed results of the client API: tables, KV snapshots, leases and log batches."""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa

from fluss_spark.protocol.arrow_ipc import deserialize_schema

#: Columns the changelog adds after the table columns, in this order.
CHANGE_TYPE, LOG_OFFSET, COMMIT_TIMESTAMP = "_change_type", "_log_offset", "_commit_timestamp"
CHANGELOG_FIELDS = (
    pa.field(CHANGE_TYPE, pa.string()),
    pa.field(LOG_OFFSET, pa.int64()),
    pa.field(COMMIT_TIMESTAMP, pa.timestamp("ms", tz="UTC")),
)


@dataclass(frozen=True)
class TableInfo:
    """A table as the cluster describes it (GET_METADATA)."""

    table_id: int
    name: str
    schema: pa.Schema
    primary_key: tuple[str, ...] = ()
    bucket_key: tuple[str, ...] = ()
    num_buckets: int = 1
    properties: dict = field(default_factory=dict, hash=False, compare=False)
    created_ms: int = 0
    assignment: dict = field(default_factory=dict, hash=False, compare=False)

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

    @classmethod
    def from_wire(cls, d: dict) -> "TableInfo":
        return cls(table_id=int(d["table_id"]), name=d["name"],
                   schema=deserialize_schema(d["schema"]),
                   primary_key=tuple(d.get("primary_key") or ()),
                   bucket_key=tuple(d.get("bucket_key") or ()),
                   num_buckets=int(d.get("num_buckets") or 1),
                   properties=dict(d.get("properties") or {}),
                   created_ms=int(d.get("created_ms") or 0),
                   assignment={int(b): int(t) for b, t in (d.get("assignment") or {}).items()})


@dataclass(frozen=True)
class SnapshotInfo:
    """One registered KV snapshot of a bucket; ``log_offset`` is the exclusive offset it covers."""

    table_id: int
    bucket: int
    snapshot_id: int
    path: str
    log_offset: int
    row_count: int
    size_bytes: int
    created_ms: int
    pinned_by: tuple[str, ...] = ()

    @classmethod
    def from_wire(cls, d: dict) -> "SnapshotInfo":
        return cls(table_id=int(d["table_id"]), bucket=int(d["bucket"]),
                   snapshot_id=int(d["snapshot_id"]), path=str(d.get("path") or ""),
                   log_offset=int(d["log_offset"]), row_count=int(d.get("row_count") or 0),
                   size_bytes=int(d.get("size_bytes") or 0),
                   created_ms=int(d.get("created_ms") or 0),
                   pinned_by=tuple(d.get("pinned_by") or ()))


@dataclass(frozen=True)
class LeaseInfo:
    """A KV snapshot lease: its expiry and its pins (table id -> bucket -> snapshot id)."""

    lease_id: str
    expires_at_ms: int
    created_ms: int
    tables: dict = field(default_factory=dict, hash=False, compare=False)
    pin_count: int = 0
    holders: dict = field(default_factory=dict, hash=False, compare=False)
    owner: str | None = None

    @classmethod
    def from_wire(cls, d: dict) -> "LeaseInfo":
        tables = {int(t): {int(b): int(s) for b, s in (pins or {}).items()}
                  for t, pins in (d.get("tables") or {}).items()}
        return cls(lease_id=d["lease_id"], expires_at_ms=int(d.get("expires_at_ms") or 0),
                   created_ms=int(d.get("created_ms") or 0), tables=tables,
                   pin_count=int(d.get("pin_count", sum(len(p) for p in tables.values()))),
                   holders={int(t): str(h) for t, h in (d.get("holders") or {}).items()},
                   owner=d.get("owner"))


@dataclass(frozen=True)
class LogBatch:
    """One FETCH_LOG answer: the records read and where the next read starts."""

    records: pa.Table
    next_offset: int
    high_watermark: int
    log_start_offset: int

    @property
    def num_rows(self) -> int:
        return self.records.num_rows
