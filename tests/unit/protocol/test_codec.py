"""Round trips of the request/response codec and its refusal of garbage."""

import msgpack
import pytest
from hypothesis import given, strategies as st

from fluss_spark.errors import CorruptMessage, KvSnapshotNotExist, ScannerExpired
from fluss_spark.protocol import codec

bodies = st.dictionaries(
    st.text(max_size=10),
    st.recursive(st.none() | st.booleans() | st.integers(-2**63, 2**63 - 1) | st.text(max_size=20)
                 | st.binary(max_size=20),
                 lambda inner: st.lists(inner, max_size=4)
                 | st.dictionaries(st.integers(0, 1000), inner, max_size=4),
                 max_leaves=10),
    max_size=5)


@given(st.integers(0, 100), st.integers(0, 2**31 - 1), bodies)
def test_request_round_trip(api_key, cid, body):
    req = codec.decode_request(codec.encode_request(api_key, 1, cid, body))
    assert (req.api_key, req.api_version, req.correlation_id, req.body) == (api_key, 1, cid, body)


@given(st.integers(0, 2**31 - 1), bodies)
def test_response_round_trip(cid, body):
    resp = codec.decode_response(codec.encode_response(cid, body))
    assert resp.correlation_id == cid and resp.error_code == 0
    assert resp.raise_for_error() == body


def test_error_response_raises_typed_error():
    data = codec.encode_response(7, error=KvSnapshotNotExist("snapshot 3 of bucket 1 is gone"))
    resp = codec.decode_response(data)
    assert resp.error_code == 41
    with pytest.raises(KvSnapshotNotExist, match="snapshot 3 of bucket 1 is gone"):
        resp.raise_for_error()


def test_scanner_expired_keeps_flusss_code():
    assert ScannerExpired.code == 66 and not ScannerExpired.retriable


@pytest.mark.parametrize("data", [b"", b"\xc1", b"\x93\x01\x02\x03", msgpack.packb({"x": 1}),
                                  msgpack.packb({"api_key": "a", "api_version": 1,
                                                 "correlation_id": 1})])
def test_garbage_requests_are_corrupt_messages(data):
    with pytest.raises(CorruptMessage):
        codec.decode_request(data)


@given(st.binary(max_size=64))
def test_random_bytes_never_escape_as_other_errors(data):
    try:
        codec.decode_request(data)
    except CorruptMessage:
        pass


def test_a_request_that_would_grow_far_beyond_its_size_is_refused():
    tiny_maps = codec.encode_request(1, 0, 7, {"a": [[{0: 0}] * 100_000] * 20})
    with pytest.raises(CorruptMessage, match="memory"):
        codec.decode_request(tiny_maps, max_container=1 << 21)
    too_long = codec.encode_request(1, 0, 7, {"a": list(range(300))})
    with pytest.raises(CorruptMessage):
        codec.decode_request(too_long, max_container=200)


def test_a_large_lease_map_is_within_the_decode_budget():
    body = {"lease_id": "l", "tables": {1: {b: 1_000 + b for b in range(200_000)}}}
    req = codec.decode_request(codec.encode_request(1, 0, 7, body), max_container=1 << 21)
    assert req.body == body
