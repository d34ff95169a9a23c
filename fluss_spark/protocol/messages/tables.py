"""Coordinator messages about tables, and its metrics."""

from __future__ import annotations

from dataclasses import dataclass

from fluss_spark.protocol.api import ApiKey
from fluss_spark.protocol.messages.base import (Bool, Bytes, Empty, Int, ListOf, MapOf, Message,
                                                Raw, Request, Str, wire)
from fluss_spark.protocol.messages.records import COLUMN, MAX_COLUMNS
from fluss_spark.protocol.partitions import MAX_PARTITION_KEYS

@dataclass(frozen=True)
class CreateTableResponse(Message):
    table_id: int = wire(Int())


@dataclass(frozen=True)
class CreateTableRequest(Request[CreateTableResponse]):
    """``schema``: an Arrow IPC schema message (the coordinator checks it and the keys).

    ``partition_keys``: at most 8 columns (STRING, integer, BOOLEAN or DATE); for a PK table
    each is part of the primary key. Absent: an unpartitioned table.
    """

    API_KEY = ApiKey.CREATE_TABLE
    RESPONSE = CreateTableResponse
    name: str = wire(Str(max_len=1024))
    schema: bytes = wire(Bytes())
    primary_key: tuple[str, ...] = wire(ListOf(COLUMN, max_len=MAX_COLUMNS), ())
    bucket_key: tuple[str, ...] = wire(ListOf(COLUMN, max_len=MAX_COLUMNS), ())
    num_buckets: int = wire(Int(None, None), 1)
    properties: dict = wire(MapOf(Str(), Str()), default_factory=dict)
    ignore_if_exists: bool = wire(Bool(), False)
    partition_keys: tuple[str, ...] = wire(ListOf(COLUMN, max_len=MAX_PARTITION_KEYS), ())


@dataclass(frozen=True)
class DropTableRequest(Request[Empty]):
    API_KEY = ApiKey.DROP_TABLE
    RESPONSE = Empty
    name: str = wire(Str(max_len=1024))
    ignore_if_not_exists: bool = wire(Bool(), False)


@dataclass(frozen=True)
class AlterTableResponse(Message):
    """The table's schema id after the change."""

    schema_id: int = wire(Int())


@dataclass(frozen=True)
class AlterTableRequest(Request[AlterTableResponse]):
    """``add_columns``: an Arrow IPC schema of the columns to append, each nullable and new to
    the table; the table gets a new schema id (its rows of older schemas read the new columns
    as null)."""

    API_KEY = ApiKey.ALTER_TABLE
    RESPONSE = AlterTableResponse
    name: str = wire(Str(max_len=1024))
    add_columns: bytes = wire(Bytes())


@dataclass(frozen=True)
class ListTablesResponse(Message):
    tables: tuple[str, ...] = wire(ListOf(Str()), ())


@dataclass(frozen=True)
class ListTablesRequest(Request[ListTablesResponse]):
    API_KEY = ApiKey.LIST_TABLES
    RESPONSE = ListTablesResponse


@dataclass(frozen=True)
class GetMetricsResponse(Message):
    """``metrics``: {name: number}; ``tables``: {table name: {name: number}}."""

    metrics: dict = wire(MapOf(Str(), Raw()), default_factory=dict)
    tables: dict = wire(MapOf(Str(), Raw()), default_factory=dict)


@dataclass(frozen=True)
class GetMetricsRequest(Request[GetMetricsResponse]):
    API_KEY = ApiKey.GET_METRICS
    RESPONSE = GetMetricsResponse
