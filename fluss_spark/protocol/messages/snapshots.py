"""Messages about KV snapshots: their registry on the coordinator, and triggering them on
tablets."""

from __future__ import annotations

from dataclasses import dataclass

from fluss_spark.config import MAX_BUCKETS
from fluss_spark.protocol.api import ApiKey
from fluss_spark.protocol.messages.base import (Bool, Empty, Int, ListOf, MapOf, Message, Nested,
                                                Request, Str, wire)
from fluss_spark.protocol.messages.records import SnapshotInfo


@dataclass(frozen=True)
class CommitKvSnapshotRequest(Request[Empty]):
    """A tablet registers a snapshot it wrote (the coordinator checks its place and id)."""

    API_KEY = ApiKey.COMMIT_KV_SNAPSHOT
    RESPONSE = Empty
    table_id: int = wire(Int())
    bucket: int = wire(Int())
    snapshot_id: int = wire(Int())
    path: str = wire(Str(max_len=4096))
    log_offset: int = wire(Int())
    row_count: int = wire(Int())
    size_bytes: int = wire(Int(), 0)
    created_ms: int | None = wire(Int(), None)
    #: The partition of a partitioned table; absent for an unpartitioned one.
    partition_id: int | None = wire(Int(), None, omit_none=True)


@dataclass(frozen=True)
class ListKvSnapshotsResponse(Message):
    snapshots: tuple[SnapshotInfo, ...] = wire(ListOf(Nested(SnapshotInfo)), ())


@dataclass(frozen=True)
class ListKvSnapshotsRequest(Request[ListKvSnapshotsResponse]):
    API_KEY = ApiKey.LIST_KV_SNAPSHOTS
    RESPONSE = ListKvSnapshotsResponse
    table_id: int = wire(Int())
    bucket: int | None = wire(Int(), None)
    latest_only: bool = wire(Bool(), False)
    #: The partition of a partitioned table; absent for an unpartitioned one.
    partition_id: int | None = wire(Int(), None, omit_none=True)


@dataclass(frozen=True)
class TriggerKvSnapshotResponse(Message):
    """{bucket: SnapshotInfo, or None for a bucket that is empty and was never snapshotted}."""

    snapshots: dict = wire(MapOf(Int(digits_ok=True), Nested(SnapshotInfo),
                                 nullable_values=True), default_factory=dict)


@dataclass(frozen=True)
class TriggerKvSnapshotRequest(Request[TriggerKvSnapshotResponse]):
    """``buckets``: the buckets to snapshot; None: every bucket of the table this tablet hosts."""

    API_KEY = ApiKey.TRIGGER_KV_SNAPSHOT
    RESPONSE = TriggerKvSnapshotResponse
    table_id: int = wire(Int())
    buckets: tuple[int, ...] | None = wire(ListOf(Int(), max_len=MAX_BUCKETS), None)
    #: The partition of a partitioned table; absent for an unpartitioned one.
    partition_id: int | None = wire(Int(), None, omit_none=True)
