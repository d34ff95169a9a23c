"""Encode and decode request and response messages (msgpack maps); no I/O here.

A response to a client that asked for them (request field ``segments``) may be **segmented**:
its large binary values (Arrow IPC pages) travel as raw segments after a small msgpack header
instead of inside it, so neither end copies them through msgpack, the server sends the parts
with one scatter/gather call and the client reads the values in place (docs/servers.md,
"Segmented responses").
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any, Iterable

import msgpack

from fluss_spark.errors import ApiError, CorruptMessage, from_code


@dataclass(frozen=True)
class RequestEnvelope:
    """One decoded request: its header and its body map (a message in ``protocol/messages``)."""

    api_key: int
    api_version: int
    correlation_id: int
    body: dict = field(default_factory=dict)
    #: The client reads segmented responses.
    segments: bool = False


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
    return msgpack.packb(obj, use_bin_type=True, default=_buffer)


def _buffer(obj: Any) -> Any:
    # Buffers other than bytes (a pyarrow Buffer of an Arrow IPC page) are packed as binary.
    if isinstance(obj, Gather):
        return obj.join()
    try:
        return memoryview(obj)
    except TypeError:
        raise TypeError(f"cannot serialize {type(obj).__name__}") from None


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


def encode_request(api_key: int, api_version: int, correlation_id: int, body: dict, *,
                   segments: bool = False) -> bytes:
    """``segments``: the client reads segmented responses (servers without them ignore it)."""
    msg = {"api_key": int(api_key), "api_version": api_version,
           "correlation_id": correlation_id, "body": body}
    if segments:
        msg["segments"] = 1
    return packb(msg)


def decode_request(data: bytes | bytearray, max_container: int | None = None) -> RequestEnvelope:
    msg = _unpack_map(data, max_container)
    try:
        api_key, version, cid = msg["api_key"], msg["api_version"], msg["correlation_id"]
        body = msg.get("body") or {}
    except KeyError as e:
        raise CorruptMessage(f"request is missing the field {e.args[0]!r}") from None
    if not all(isinstance(v, int) for v in (api_key, version, cid)) or not isinstance(body, dict):
        raise CorruptMessage("request header fields must be integers and the body a map")
    return RequestEnvelope(api_key, version, cid, body, msg.get("segments") == 1)


def encode_response(correlation_id: int, body: dict | None = None,
                    error: ApiError | None = None) -> bytes:
    msg = {"correlation_id": correlation_id, "error_code": 0, "error_message": "",
           "body": body or {}}
    if error is not None:
        msg.update(error_code=error.code, error_message=error.message, body={})
    return packb(msg)


# -- segmented responses --------------------------------------------------------------------------
class Gather:
    """A binary value made of several buffers, sent one after another without being joined
    (an Arrow IPC stream assembled from pages of a memory-mapped file). Not a list: msgpack
    must not pack it as an array."""

    def __init__(self, parts: Iterable[Any]):
        self.parts = [memoryview(b).cast("B") for b in parts]
        self.nbytes = sum(v.nbytes for v in self.parts)

    def __len__(self) -> int:         # a binary value's length is its byte count
        return self.nbytes

    def join(self) -> bytes:
        return b"".join(self.parts)


#: First byte of a segmented payload. msgpack never uses 0xC1, so no plain payload starts so.
SEGMENTED = 0xC1
SEGMENTS_VERSION = 1
#: marker, version, segment count, header length; then one 4-byte length per segment.
_SEGMENTS_HEAD = struct.Struct(">BBHI")
#: msgpack extension type of a reference to a value: its first segment and how many follow
#: (2-byte big-endian numbers each).
_SEGMENT_REF = 1
#: Binary values at least this large become segments (smaller ones are cheaper inline).
SEGMENT_MIN_BYTES = 64 * 1024
_MAX_SEGMENTS = 0xFFFF
#: Bytes a "pad" entry of up to 7 bytes adds to the envelope map: the key (fixstr, 4 bytes) and
#: its value's bin8 header (2 bytes); the map's own header stays one byte (5 entries).
_PAD_ENTRY = 6


def encode_response_parts(correlation_id: int, body: dict | None = None,
                          error: ApiError | None = None, *,
                          segments: bool = False) -> list[Any]:
    """A response payload as buffers to send in order (their concatenation is the payload).

    With ``segments`` (the client asked), binary values of ``SEGMENT_MIN_BYTES`` or more
    anywhere in ``body`` are sent as raw segments after the header, never copied."""
    if error is not None or not segments or not body:
        return [encode_response(correlation_id, body, error)]
    parts: list[Any] = []

    def pull(value: Any) -> Any:
        if isinstance(value, Gather):
            views = value.parts
            if len(parts) + len(views) > _MAX_SEGMENTS:
                return value.join()
            first = len(parts)
            parts.extend(views)
            return msgpack.ExtType(_SEGMENT_REF, struct.pack(">HH", first, len(views)))
        if isinstance(value, dict):
            return {k: pull(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [pull(v) for v in value]
        if isinstance(value, (str, int, float, bool)) or value is None:
            return value
        try:
            view = memoryview(value)
        except TypeError:
            return value
        if view.nbytes < SEGMENT_MIN_BYTES or len(parts) >= _MAX_SEGMENTS:
            return value
        parts.append(view.cast("B") if view.ndim != 1 or view.format != "B" else view)
        return msgpack.ExtType(_SEGMENT_REF, struct.pack(">HH", len(parts) - 1, 1))

    pulled = pull(body)
    if not parts:
        return [encode_response(correlation_id, body)]
    envelope = {"correlation_id": correlation_id, "error_code": 0, "error_message": "",
                "body": pulled}
    fixed = _SEGMENTS_HEAD.size + 4 * len(parts)
    # The segments start at a multiple of 8 bytes into the payload (which a client reads into a
    # fresh, aligned buffer), so Arrow pages decode in place with aligned buffers: a "pad" entry
    # (readers ignore unknown envelope keys) takes the header to the next multiple of 8.
    unpadded = len(packb(envelope))
    envelope["pad"] = b"\0" * ((-(fixed + unpadded + _PAD_ENTRY)) % 8)
    header = packb(envelope)
    head = (_SEGMENTS_HEAD.pack(SEGMENTED, SEGMENTS_VERSION, len(parts), len(header))
            + struct.pack(f">{len(parts)}I", *(p.nbytes for p in parts)) + header)
    return [head, *parts]


def _decode_segmented(data: bytes | bytearray | memoryview) -> ResponseEnvelope:
    view = memoryview(data)
    if len(view) < _SEGMENTS_HEAD.size:
        raise CorruptMessage("segmented response shorter than its header")
    _, version, count, header_len = _SEGMENTS_HEAD.unpack_from(view)
    if version != SEGMENTS_VERSION:
        raise CorruptMessage(f"segmented response of version {version}; this client reads "
                             f"version {SEGMENTS_VERSION}")
    lengths_at = _SEGMENTS_HEAD.size
    header_at = lengths_at + 4 * count
    if header_at + header_len > len(view):
        raise CorruptMessage(f"segmented response of {len(view)} bytes is shorter than its "
                             f"header says")
    lengths = struct.unpack_from(f">{count}I", view, lengths_at) if count else ()
    offsets, at = [], header_at + header_len
    for n in lengths:
        offsets.append((at, at + n))
        at += n
    if at != len(view):
        raise CorruptMessage(f"segmented response of {len(view)} bytes does not match its "
                             f"header ({at} bytes)")

    def segment(code: int, ref: bytes) -> Any:
        if code != _SEGMENT_REF or len(ref) != 4:
            raise CorruptMessage(f"unknown msgpack extension {code} in a response")
        first, n = struct.unpack(">HH", ref)
        if n < 1 or first + n > count:
            raise CorruptMessage(f"a response refers to segments {first}..{first + n - 1} of "
                                 f"{count}")
        # Consecutive segments are contiguous in the payload: the value is read in place.
        return view[offsets[first][0]:offsets[first + n - 1][1]]

    try:
        msg = msgpack.unpackb(view[header_at:header_at + header_len], raw=False,
                              strict_map_key=False, ext_hook=segment)
    except CorruptMessage:
        raise
    except Exception as e:  # noqa: BLE001 - msgpack raises several unrelated types on garbage
        raise CorruptMessage(f"undecodable response header: {type(e).__name__}: {e}") from None
    if not isinstance(msg, dict):
        raise CorruptMessage(f"message must be a map, got {type(msg).__name__}")
    return _response(msg)


def decode_response(data: bytes | bytearray) -> ResponseEnvelope:
    if len(data) and data[0] == SEGMENTED:
        return _decode_segmented(data)
    return _response(_unpack_map(data))


def _response(msg: dict) -> ResponseEnvelope:
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
    except Exception as e:  # noqa: BLE001 - msgpack raises several unrelated types on garbage
        raise CorruptMessage(f"undecodable message: {type(e).__name__}: {e}") from None
    if not isinstance(msg, dict):
        raise CorruptMessage(f"message must be a map, got {type(msg).__name__}")
    return msg
