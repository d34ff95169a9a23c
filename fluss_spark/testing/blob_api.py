"""A test API whose reply is as large as asked (GET_METRICS key): what RPC tests use to make
replies that do not fit a socket at once."""

from __future__ import annotations

from dataclasses import dataclass

from fluss_spark.protocol.api import ApiKey
from fluss_spark.protocol.messages.base import Bytes, Int, Message, Request, wire


@dataclass(frozen=True)
class Blob(Message):
    data: bytes = wire(Bytes())


@dataclass(frozen=True)
class GetBlob(Request[Blob]):
    API_KEY, RESPONSE = ApiKey.GET_METRICS, Blob
    size: int = wire(Int())


def pattern(size: int) -> bytes:
    """``size`` bytes counting 0..255 over and over (a lost or reordered piece shows)."""
    return (bytes(range(256)) * (size // 256 + 1))[:size]


def serve_blobs(server) -> None:
    """Register GET_BLOB on an ``RpcServer``: it answers ``pattern(size)``."""
    server.register(GetBlob, lambda req: Blob(pattern(req.size)))
