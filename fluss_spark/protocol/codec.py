"""Encode and decode request and response messages (msgpack maps); no I/O here."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import msgpack

from fluss_spark.errors import ApiError, CorruptMessage, from_code


@dataclass(frozen=True)
class RequestEnvelope:
    """One decoded request: its header and its body map (a message in ``protocol/messages``)."""

    api_key: int
    api_version: int
    correlation_id: int
    body: dict = field(default_factory=dict)


@dataclass(frozen=True)
class ResponseEnvelope:
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


def unpackb(data: bytes | bytearray, max_container: int | None = None) -> Any:
    """Inverse of ``packb``; integer map keys are allowed (bucket ids).

    With ``max_container`` (servers decoding requests), no array or map may have more entries
    (checked before it is allocated), and what decoding builds may not pass a budget of
    ``DECODE_BUDGET_FACTOR`` times the message size plus ``DECODE_BUDGET_BASE``: a message of
    millions of tiny maps or numbers is refused instead of growing a hundredfold in memory.
    """
    if max_container is None:
        return msgpack.unpackb(data, raw=False, strict_map_key=False)
    budget = _DecodeBudget(DECODE_BUDGET_FACTOR * len(data) + DECODE_BUDGET_BASE)
    return msgpack.unpackb(data, raw=False, strict_map_key=False,
                           max_array_len=max_container, max_map_len=max_container,
                           object_hook=budget.map, list_hook=budget.list)


#: A decoded request may take this many times its size in memory, plus DECODE_BUDGET_BASE.
DECODE_BUDGET_FACTOR = 16
DECODE_BUDGET_BASE = 16 << 20


class _DecodeBudget:
    """Charges every decoded map and list an estimate of its memory; refuses past the limit."""

    # CPython sizes: an empty dict ~64 B and ~100 B per small-int entry with its key and
    # value; a list 56 B plus 8 B per entry (small ints are shared).
    def __init__(self, limit: int):
        self.limit = self.left = limit

    def _charge(self, n: int) -> None:
        self.left -= n
        if self.left < 0:
            raise CorruptMessage(f"message refused: decoding it would take over {self.limit} "
                                 f"bytes of memory (too many maps or list entries for its size)")

    def map(self, d: dict) -> dict:
        self._charge(232 + 100 * len(d))
        return d

    def list(self, items: list) -> list:
        self._charge(56 + 8 * len(items))
        return items


def encode_request(api_key: int, api_version: int, correlation_id: int, body: dict) -> bytes:
    return packb({"api_key": int(api_key), "api_version": api_version,
                  "correlation_id": correlation_id, "body": body})


def decode_request(data: bytes | bytearray, max_container: int | None = None) -> RequestEnvelope:
    msg = _unpack_map(data, max_container)
    try:
        api_key, version, cid = msg["api_key"], msg["api_version"], msg["correlation_id"]
        body = msg.get("body") or {}
    except KeyError as e:
        raise CorruptMessage(f"request is missing the field {e.args[0]!r}") from None
    if not all(isinstance(v, int) for v in (api_key, version, cid)) or not isinstance(body, dict):
        raise CorruptMessage("request header fields must be integers and the body a map")
    return RequestEnvelope(api_key, version, cid, body)


def encode_response(correlation_id: int, body: dict | None = None,
                    error: ApiError | None = None) -> bytes:
    msg = {"correlation_id": correlation_id, "error_code": 0, "error_message": "",
           "body": body or {}}
    if error is not None:
        msg.update(error_code=error.code, error_message=error.message, body={})
    return packb(msg)


def decode_response(data: bytes | bytearray) -> ResponseEnvelope:
    msg = _unpack_map(data)
    try:
        return ResponseEnvelope(msg["correlation_id"], msg.get("error_code", 0),
                        msg.get("error_message", ""), msg.get("body") or {})
    except KeyError as e:
        raise CorruptMessage(f"response is missing the field {e.args[0]!r}") from None


def _unpack_map(data: bytes | bytearray, max_container: int | None = None) -> dict:
    try:
        msg = unpackb(data, max_container)
    except CorruptMessage:
        raise
    except Exception as e:  # msgpack raises several unrelated types on garbage
        raise CorruptMessage(f"undecodable message: {type(e).__name__}: {e}") from None
    if not isinstance(msg, dict):
        raise CorruptMessage(f"message must be a map, got {type(msg).__name__}")
    return msg
