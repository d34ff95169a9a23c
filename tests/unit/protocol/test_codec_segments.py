"""Segmented responses: large binary values travel as raw segments beside a msgpack header and
are read in place; plain payloads and clients that did not ask are unchanged."""

from __future__ import annotations

import struct

import pyarrow as pa
import pytest

from fluss_spark.errors import CorruptMessage, KvSnapshotNotExist
from fluss_spark.protocol import codec, framing

BIG = bytes(range(256)) * 1024                       # 256 KiB: above SEGMENT_MIN_BYTES


def joined(parts) -> bytearray:
    return bytearray(b"".join(memoryview(p).cast("B") for p in parts))


def test_large_values_become_segments_read_in_place():
    arrow = pa.py_buffer(BIG[::-1])
    body = {"records": arrow, "small": b"tiny", "pages": [{"records": BIG}], "n": 3}
    parts = codec.encode_response_parts(7, body, segments=True)
    assert len(parts) == 3 and parts[0][0] == codec.SEGMENTED
    assert parts[1].obj is arrow or bytes(parts[1]) == BIG[::-1]   # the buffer itself, no copy
    payload = joined(parts)
    resp = codec.decode_response(payload)
    got = resp.raise_for_error()
    assert isinstance(got["records"], memoryview) and got["records"].obj is payload
    assert bytes(got["records"]) == BIG[::-1] and bytes(got["pages"][0]["records"]) == BIG
    assert got["small"] == b"tiny" and got["n"] == 3 and resp.correlation_id == 7


@pytest.mark.parametrize("cid", [0, 7, 300, 70_000, 2**40])
@pytest.mark.parametrize("name", ["", "t", "a much longer table name, thirty+"])
def test_segments_start_at_a_multiple_of_8_so_arrow_pages_decode_aligned(cid, name):
    parts = codec.encode_response_parts(cid, {"name": name, "records": BIG}, segments=True)
    assert len(parts[0]) % 8 == 0
    got = codec.decode_response(joined(parts)).raise_for_error()
    assert got["name"] == name and bytes(got["records"]) == BIG


def test_a_gather_is_one_value_sent_in_pieces():
    pieces = [b"a" * 70_000, pa.py_buffer(b"b" * 10), b"c" * 5]
    parts = codec.encode_response_parts(1, {"records": codec.Gather(pieces)}, segments=True)
    assert len(parts) == 4
    got = codec.decode_response(joined(parts)).raise_for_error()["records"]
    assert bytes(got) == b"a" * 70_000 + b"b" * 10 + b"c" * 5
    # A client that did not ask gets one plain msgpack payload with the value joined.
    plain = codec.encode_response_parts(1, {"records": codec.Gather(pieces)})
    assert len(plain) == 1 and plain[0][0] != codec.SEGMENTED
    assert codec.decode_response(plain[0]).body["records"] == bytes(got)


def test_small_bodies_errors_and_old_clients_stay_plain():
    assert len(codec.encode_response_parts(1, {"records": b"x" * 100}, segments=True)) == 1
    err = codec.encode_response_parts(2, error=KvSnapshotNotExist("gone"), segments=True)
    assert len(err) == 1
    with pytest.raises(KvSnapshotNotExist, match="gone"):
        codec.decode_response(err[0]).raise_for_error()
    req = codec.decode_request(codec.encode_request(5, 1, 9, {}, segments=True))
    assert req.segments and not codec.decode_request(codec.encode_request(5, 1, 9, {})).segments


def test_frame_parts_prefix_the_total_length():
    parts = codec.encode_response_parts(1, {"records": BIG}, segments=True)
    framed = framing.frame_parts(parts)
    assert struct.unpack(">I", framed[0])[0] == len(joined(parts))


@pytest.mark.parametrize("mangle, message", [
    (lambda p: p[:5], "shorter than its header"),
    (lambda p: p[:-1], "does not match its header"),
    (lambda p: p[:1] + b"\x09" + p[2:], "version 9"),
])
def test_malformed_segmented_payloads_are_corrupt_messages(mangle, message):
    payload = joined(codec.encode_response_parts(1, {"records": BIG}, segments=True))
    with pytest.raises(CorruptMessage, match=message):
        codec.decode_response(bytearray(mangle(bytes(payload))))


def test_a_reference_past_the_segments_is_refused():
    header = codec.packb({"correlation_id": 1, "body": {
        "r": __import__("msgpack").ExtType(1, struct.pack(">HH", 1, 1))}})
    payload = (struct.pack(">BBHI", codec.SEGMENTED, 1, 1, len(header)) + struct.pack(">I", 3)
               + header + b"abc")
    with pytest.raises(CorruptMessage, match="segments 1..1 of 1"):
        codec.decode_response(bytearray(payload))
