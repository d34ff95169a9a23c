"""Length-prefixed frames: a 4-byte big-endian length, then that many bytes of payload.

Encoding and decoding never touch sockets (``transport/`` reads and writes them).
"""

from __future__ import annotations

import struct

from fluss_spark.errors import CorruptMessage

HEADER = struct.Struct(">I")
#: Larger frames are refused before their payload is read, so garbage cannot allocate memory.
MAX_FRAME_BYTES = 256 * 1024 * 1024


def encode_frame(payload: bytes) -> bytes:
    """Prefix ``payload`` with its length."""
    if len(payload) > MAX_FRAME_BYTES:
        raise CorruptMessage(f"frame of {len(payload)} bytes exceeds the limit of "
                             f"{MAX_FRAME_BYTES}")
    return HEADER.pack(len(payload)) + payload


def frame_parts(parts: list) -> list:
    """Payload buffers (sent in order) prefixed with the frame's length."""
    size = sum(memoryview(p).nbytes for p in parts)
    if size > MAX_FRAME_BYTES:
        raise CorruptMessage(f"frame of {size} bytes exceeds the limit of {MAX_FRAME_BYTES}")
    return [HEADER.pack(size), *parts]


def decode_length(header: bytes | bytearray, limit: int = MAX_FRAME_BYTES) -> int:
    """Read the payload length from a 4-byte header, refusing lengths over ``limit``."""
    (length,) = HEADER.unpack(header)
    if length > limit:
        raise CorruptMessage(
            f"frame length {length} exceeds the limit of {limit} bytes: not a fluss_spark peer, "
            f"or a request larger than the server's rpc.max-request-size")
    return length
