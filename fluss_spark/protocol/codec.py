"""Encode and decode request and response messages (msgpack maps); no I/O here."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import msgpack

from fluss_spark.errors import ApiError, CorruptMessage, from_code


@dataclass(frozen=True)
class Request:
    """One decoded request."""

    api_key: int
    api_version: int
    correlation_id: int
    body: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Response:
    """One decoded response; ``error_code`` 0 means success."""

    correlation_id: int
    error_code: int = 0
    error_message: str = ""
    body: dict = field(default_factory=dict)

    def raise_for_error(self) -> dict:
        """Return the body, or raise the typed exception the error code names."""
        if self.error_code:
            raise from_code(self.error_code, self.error_message)
        return self.body


def packb(obj: Any) -> bytes:
    """msgpack with binary-safe settings shared by every encoder in the project."""
    return msgpack.packb(obj, use_bin_type=True)


def unpackb(data: bytes) -> Any:
    """Inverse of ``packb``; integer map keys are allowed (bucket ids)."""
    return msgpack.unpackb(data, raw=False, strict_map_key=False)


def encode_request(api_key: int, api_version: int, correlation_id: int, body: dict) -> bytes:
    return packb({"api_key": int(api_key), "api_version": api_version,
                  "correlation_id": correlation_id, "body": body})


def decode_request(data: bytes) -> Request:
    msg = _unpack_map(data)
    try:
        api_key, version, cid = msg["api_key"], msg["api_version"], msg["correlation_id"]
        body = msg.get("body") or {}
    except KeyError as e:
        raise CorruptMessage(f"request is missing the field {e.args[0]!r}") from None
    if not all(isinstance(v, int) for v in (api_key, version, cid)) or not isinstance(body, dict):
        raise CorruptMessage("request header fields must be integers and the body a map")
    return Request(api_key, version, cid, body)


def encode_response(correlation_id: int, body: dict | None = None,
                    error: ApiError | None = None) -> bytes:
    msg = {"correlation_id": correlation_id, "error_code": 0, "error_message": "",
           "body": body or {}}
    if error is not None:
        msg.update(error_code=error.code, error_message=error.message, body={})
    return packb(msg)


def decode_response(data: bytes) -> Response:
    msg = _unpack_map(data)
    try:
        return Response(msg["correlation_id"], msg.get("error_code", 0),
                        msg.get("error_message", ""), msg.get("body") or {})
    except KeyError as e:
        raise CorruptMessage(f"response is missing the field {e.args[0]!r}") from None


def _unpack_map(data: bytes) -> dict:
    try:
        msg = unpackb(data)
    except Exception as e:  # msgpack raises several unrelated types on garbage
        raise CorruptMessage(f"undecodable message: {type(e).__name__}: {e}") from None
    if not isinstance(msg, dict):
        raise CorruptMessage(f"message must be a map, got {type(msg).__name__}")
    return msg
