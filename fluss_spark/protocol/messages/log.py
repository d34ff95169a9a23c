"""Tablet messages of the changelog: writing, offsets, and fetching records."""

from __future__ import annotations

from dataclasses import dataclass

from fluss_spark.config import MAX_BUCKETS
from fluss_spark.protocol.api import ApiKey
from fluss_spark.protocol.messages.base import (Bytes, Choice, Int, ListOf, MapOf, Message,
                                                Request, Str, wire)
from fluss_spark.protocol.messages.records import COLUMN, MAX_COLUMNS

#: The longest a FETCH_LOG waits for records; a longer ``max_wait_ms`` is cut to this.
MAX_FETCH_WAIT_MS = 30_000
DEFAULT_FETCH_MAX_BYTES = 1024 * 1024


@dataclass(frozen=True)
class ProduceResponse(Message):
    """The changelog offsets written: [base_offset, end_offset)."""

    base_offset: int = wire(Int())
    end_offset: int = wire(Int())


@dataclass(frozen=True)
class ProduceRequest(Request[ProduceResponse]):
    """``records``: an Arrow IPC stream of the table's columns; ``op``: append, upsert, delete."""

    API_KEY = ApiKey.PRODUCE
    RESPONSE = ProduceResponse
    table_id: int = wire(Int())
    bucket: int = wire(Int())
    op: str = wire(Str(max_len=64))
    records: bytes = wire(Bytes())
    #: The partition of a partitioned table; absent for an unpartitioned one.
    partition_id: int | None = wire(Int(), None, omit_none=True)


@dataclass(frozen=True)
class ListOffsetsResponse(Message):
    offsets: dict = wire(MapOf(Int(digits_ok=True), Int()), default_factory=dict)


@dataclass(frozen=True)
class ListOffsetsRequest(Request[ListOffsetsResponse]):
    """``earliest`` retained, ``latest`` (the high watermark), or the first offset whose commit
    timestamp is at least ``timestamp_ms``."""

    API_KEY = ApiKey.LIST_OFFSETS
    RESPONSE = ListOffsetsResponse
    table_id: int = wire(Int())
    buckets: tuple[int, ...] = wire(ListOf(Int(), max_len=MAX_BUCKETS))
    spec: str = wire(Choice("earliest", "latest", "timestamp"))
    timestamp_ms: int | None = wire(Int(None, None), None)
    #: The partition of a partitioned table; absent for an unpartitioned one.
    partition_id: int | None = wire(Int(), None, omit_none=True)

    def check(self) -> None:
        if self.spec == "timestamp" and self.timestamp_ms is None:
            raise self.ERROR("offset spec 'timestamp' needs field 'timestamp_ms'")


@dataclass(frozen=True)
class FetchLogResponse(Message):
    """``records``: the table columns (projected) plus _change_type and _commit_timestamp;
    record i has offset base_offset + i. None when nothing was read."""

    records: bytes | memoryview | None = wire(Bytes(in_place=True), None)
    base_offset: int = wire(Int(), 0)
    next_offset: int = wire(Int(), 0)
    high_watermark: int = wire(Int(), 0)
    log_start_offset: int = wire(Int(), 0)


@dataclass(frozen=True)
class FetchLogRequest(Request[FetchLogResponse]):
    """Records from ``offset`` up to ``end_offset`` (exclusive; the high watermark if None).

    At least one record is returned whatever ``max_bytes``; ``max_wait_ms`` (at most 30 s)
    waits for records when there are none yet."""

    API_KEY = ApiKey.FETCH_LOG
    RESPONSE = FetchLogResponse
    table_id: int = wire(Int())
    bucket: int = wire(Int())
    offset: int = wire(Int())
    end_offset: int | None = wire(Int(), None)
    max_bytes: int = wire(Int(), DEFAULT_FETCH_MAX_BYTES)
    max_wait_ms: int = wire(Int(), 0)
    projection: tuple[str, ...] | None = wire(ListOf(COLUMN, max_len=MAX_COLUMNS), None)
    #: The partition of a partitioned table; absent for an unpartitioned one.
    partition_id: int | None = wire(Int(), None, omit_none=True)
