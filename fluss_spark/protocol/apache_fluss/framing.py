"""Apache Fluss request and response headers: encoding and decoding only, no sockets.

A request frame is an int32 length (of what follows), int16 API key, int16 API version, int32
request id, then the protobuf body. A response frame is the int32 length, an int8 response type,
the int32 request id (absent for a server failure), then the body: the response message, or an
``ErrorResponse``. All integers are big-endian.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from fluss_spark.errors import CorruptMessage

LENGTH = struct.Struct(">i")
REQUEST_HEADER = struct.Struct(">hhi")
RESPONSE_HEADER = struct.Struct(">bi")

#: Response types: a response, an error response to one request, a failure of the whole server
#: (which carries no request id; the connection is unusable afterwards).
SUCCESS_RESPONSE, ERROR_RESPONSE, SERVER_FAILURE = 0, 1, 2

#: Larger response frames are refused before they are read.
MAX_RESPONSE_BYTES = 512 * 1024 * 1024


def encode_request(api_key: int, api_version: int, request_id: int, body: bytes) -> bytes:
    """The whole request frame, length prefix included."""
    header = REQUEST_HEADER.pack(api_key, api_version, request_id)
    return LENGTH.pack(len(header) + len(body)) + header + body


def decode_request(frame: bytes | bytearray | memoryview) -> tuple[int, int, int, memoryview]:
    """(API key, API version, request id, body) of a frame without its length prefix (tests and
    tools that stand in for a server)."""
    view = memoryview(frame)
    if len(view) < REQUEST_HEADER.size:
        raise CorruptMessage(f"request of {len(view)} bytes is shorter than its header")
    key, version, request_id = REQUEST_HEADER.unpack_from(view)
    return key, version, request_id, view[REQUEST_HEADER.size:]


def decode_length(prefix: bytes | bytearray, limit: int = MAX_RESPONSE_BYTES) -> int:
    """The length a 4-byte prefix announces, refused when negative or over ``limit``."""
    (length,) = LENGTH.unpack(prefix)
    if length < 1 or length > limit:
        raise CorruptMessage(f"frame length {length} is outside 1..{limit}: not an Apache Fluss "
                             "peer, or a corrupt stream")
    return length


@dataclass(frozen=True)
class ResponseHeader:
    """The decoded header of a response frame, and where its body starts."""

    response_type: int
    request_id: int | None
    body_offset: int


def decode_response_header(payload: bytes | bytearray | memoryview) -> ResponseHeader:
    """Header of a response frame (its payload, without the length prefix)."""
    view = memoryview(payload)
    if not len(view):
        raise CorruptMessage("empty response frame")
    kind = view[0]
    if kind == SERVER_FAILURE:
        return ResponseHeader(SERVER_FAILURE, None, 1)
    if kind not in (SUCCESS_RESPONSE, ERROR_RESPONSE):
        raise CorruptMessage(f"unknown response type {kind}: not an Apache Fluss response")
    if len(view) < RESPONSE_HEADER.size:
        raise CorruptMessage(f"response of {len(view)} bytes is shorter than its header")
    _, request_id = RESPONSE_HEADER.unpack_from(view)
    return ResponseHeader(kind, request_id, RESPONSE_HEADER.size)


def encode_response(response_type: int, request_id: int | None, body: bytes) -> bytes:
    """A whole response frame (tests and tools that stand in for a server)."""
    if response_type == SERVER_FAILURE:
        header = struct.pack(">b", SERVER_FAILURE)
    else:
        header = RESPONSE_HEADER.pack(response_type, request_id or 0)
    return LENGTH.pack(len(header) + len(body)) + header + body
