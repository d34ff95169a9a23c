"""Messages every server answers: API versions, authentication, cluster and table metadata."""

from __future__ import annotations

from dataclasses import dataclass

from fluss_spark.protocol.api import ApiKey
from fluss_spark.protocol.messages.base import (Bytes, Int, ListOf, Message, Nested,
                                                Request, Str, wire)
from fluss_spark.protocol.messages.records import TableInfo


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


__all__ = ["ApiVersionsRequest", "ApiVersionsResponse", "AuthenticateRequest",
           "AuthenticateResponse", "GetMetadataRequest", "GetMetadataResponse", "ServerAddress",
           "TabletAddress"]
