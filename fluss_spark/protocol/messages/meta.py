"""Messages every server answers: API versions, authentication, cluster and table metadata."""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from fluss_spark.protocol.api import ApiKey
from fluss_spark.protocol.arrow_ipc import deserialize_schema, serialize_schema
from fluss_spark.protocol.changelog import CHANGELOG_FIELDS
from fluss_spark.protocol.messages.base import (Bytes, Int, Kind, ListOf, MapOf, Message, Nested,
                                                Request, Str, wire)

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


@dataclass(frozen=True)
class ApiVersionsResponse(Message):
    api_keys: tuple[int, ...] = wire(ListOf(Int()))
    server: str = wire(Str(), "")
    server_id: int = wire(Int(None), 0)


@dataclass(frozen=True)
class ApiVersionsRequest(Request[ApiVersionsResponse]):
    API_KEY = ApiKey.API_VERSIONS
    RESPONSE = ApiVersionsResponse


@dataclass(frozen=True)
class AuthenticateResponse(Message):
    principal: str | None = wire(Str(), None)


@dataclass(frozen=True)
class AuthenticateRequest(Request[AuthenticateResponse]):
    """SASL: ``token`` is b"\\0user\\0password" for PLAIN (RFC 4616)."""

    API_KEY = ApiKey.AUTHENTICATE
    RESPONSE = AuthenticateResponse
    mechanism: str = wire(Str(max_len=64))
    token: bytes = wire(Bytes())


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
class ServerAddress(Message):
    host: str = wire(Str(max_len=1024))
    port: int = wire(Int(0, 65535))


@dataclass(frozen=True)
class TabletAddress(Message):
    id: int = wire(Int(None))
    host: str = wire(Str(max_len=1024))
    port: int = wire(Int(0, 65535))


@dataclass(frozen=True)
class GetMetadataResponse(Message):
    coordinator: ServerAddress | None = wire(Nested(ServerAddress), None)
    tablets: tuple[TabletAddress, ...] = wire(ListOf(Nested(TabletAddress)), ())
    tables: tuple[TableInfo, ...] = wire(ListOf(Nested(TableInfo)), ())


@dataclass(frozen=True)
class GetMetadataRequest(Request[GetMetadataResponse]):
    """``tables``: the tables to describe (TableNotExist if one is missing); None: every table."""

    API_KEY = ApiKey.GET_METADATA
    RESPONSE = GetMetadataResponse
    tables: tuple[str, ...] | None = wire(ListOf(Str(max_len=1024)), None)


__all__ = ["ApiVersionsRequest", "ApiVersionsResponse", "ArrowSchema", "AuthenticateRequest",
           "AuthenticateResponse", "COLUMN", "GetMetadataRequest", "GetMetadataResponse",
           "MAX_COLUMNS", "MAX_PARTITIONS", "PartitionInfo", "ServerAddress", "TableInfo",
           "TabletAddress"]
