"""The proto2 codec of the Apache Fluss client: known byte strings, round trips, unknown fields."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from fluss_spark.errors import CorruptMessage
from fluss_spark.protocol.apache_fluss.messages import (ApiVersionsRequest, ApiVersionsResponse,
                                                 ErrorResponse, FetchLogRequest,
                                                 ListOffsetsRequest, MetadataResponse,
                                                 PbApiVersion, PbBucketMetadata,
                                                 PbFetchLogReqForBucket, PbFetchLogReqForTable,
                                                 PbServerNode, PbTableMetadata, PbTablePath)
from fluss_spark.protocol.apache_fluss.proto import (BOOL, BYTES, DOUBLE, FIXED32_, FIXED64_, FLOAT,
                                              INT32, INT64, MESSAGE, SFIXED32, SFIXED64, SINT32,
                                              SINT64, STRING, UINT32, UINT64, ProtoMessage,
                                              encode_varint, pb, read_varint, unzigzag, zigzag)


@dataclass(kw_only=True)
class Inner(ProtoMessage):
    """A nested message for the tests."""

    x: int = pb(1, SINT32, required=True)


@dataclass(kw_only=True)
class Everything(ProtoMessage):
    """One field of every kind."""

    i32: int | None = pb(1, INT32)
    i64: int | None = pb(2, INT64)
    u32: int | None = pb(3, UINT32)
    u64: int | None = pb(4, UINT64)
    s32: int | None = pb(5, SINT32)
    s64: int | None = pb(6, SINT64)
    flag: bool | None = pb(7, BOOL)
    f32: int | None = pb(8, FIXED32_)
    sf32: int | None = pb(9, SFIXED32)
    fl: float | None = pb(10, FLOAT)
    f64: int | None = pb(11, FIXED64_)
    sf64: int | None = pb(12, SFIXED64)
    db: float | None = pb(13, DOUBLE)
    text: str | None = pb(14, STRING)
    raw: bytes | None = pb(15, BYTES)
    inner: Inner | None = pb(16, MESSAGE, message=Inner)
    inners: list[Inner] = pb(17, MESSAGE, repeated=True, message=Inner)
    packed: list[int] = pb(18, INT32, repeated=True, packed=True)
    unpacked: list[int] = pb(19, INT64, repeated=True)
    names: list[str] = pb(20, STRING, repeated=True)


def _varint(n: int) -> bytes:
    out = bytearray()
    encode_varint(n, out)
    return bytes(out)


def test_varints_and_zigzag_match_the_protobuf_encoding():
    assert _varint(0) == b"\x00"
    assert _varint(1) == b"\x01"
    assert _varint(150) == b"\x96\x01"
    assert _varint(300) == b"\xac\x02"
    # A negative int32/int64 is its 64-bit two's complement: ten bytes.
    assert _varint(-1) == b"\xff" * 9 + b"\x01"
    assert read_varint(memoryview(b"\x96\x01\x00"), 0) == (150, 2)
    assert [zigzag(v) for v in (0, -1, 1, -2, 2147483647, -2147483648)] == \
        [0, 1, 2, 3, 4294967294, 4294967295]
    assert [unzigzag(v) for v in (0, 1, 2, 3, 4294967295)] == [0, -1, 1, -2, -2147483648]


def test_api_versions_request_bytes():
    # field 1 (LEN): tag 0x0a; field 2 (LEN): tag 0x12.
    req = ApiVersionsRequest(client_software_name="py", client_software_version="0.1")
    assert req.encode() == b"\x0a\x02py\x12\x030.1"
    assert ApiVersionsRequest.decode(b"\x0a\x02py\x12\x030.1") == req


def test_error_response_with_negative_code_bytes():
    data = b"\x08" + b"\xff" * 9 + b"\x01" + b"\x12\x04boom"
    assert ErrorResponse.decode(data) == ErrorResponse(error_code=-1, error_message="boom")
    assert ErrorResponse(error_code=-1, error_message="boom").encode() == data


def test_api_versions_response_bytes():
    entry = b"\x08\xe8\x07\x10\x00\x18\x00"          # api_key 1000, min 0, max 0
    data = b"\x0a" + bytes([len(entry)]) + entry + b"\x10\x01"
    resp = ApiVersionsResponse.decode(data)
    assert resp == ApiVersionsResponse(
        api_versions=[PbApiVersion(api_key=1000, min_version=0, max_version=0)], server_type=1)
    assert resp.encode() == data


def test_packed_repeated_bytes_and_unpacked_input_accepted():
    req = ListOffsetsRequest(follower_server_id=-1, offset_type=1, table_id=7,
                             bucket_id=[0, 1, 300])
    data = req.encode()
    assert data == (b"\x08" + b"\xff" * 9 + b"\x01" + b"\x10\x01" + b"\x18\x07"
                    + b"\x2a\x04\x00\x01\xac\x02")
    # The same bucket ids unpacked (tag 0x28 each) decode to the same message.
    unpacked = data[:-6] + b"\x28\x00\x28\x01\x28\xac\x02"
    assert ListOffsetsRequest.decode(unpacked) == req


def test_nested_fetch_log_request_bytes():
    req = FetchLogRequest(follower_server_id=-1, max_bytes=1024, tables_req=[
        PbFetchLogReqForTable(table_id=3, projection_pushdown_enabled=True,
                              projected_fields=[0, 2],
                              buckets_req=[PbFetchLogReqForBucket(bucket_id=1, fetch_offset=5,
                                                                  max_fetch_bytes=1024)])])
    bucket = b"\x10\x01\x18\x05\x20\x80\x08"
    table = b"\x08\x03\x10\x01\x1a\x02\x00\x02\x22" + bytes([len(bucket)]) + bucket
    assert req.encode() == (b"\x08" + b"\xff" * 9 + b"\x01" + b"\x10\x80\x08"
                            + b"\x1a" + bytes([len(table)]) + table)
    assert FetchLogRequest.decode(req.encode()) == req


def test_every_kind_round_trips():
    msg = Everything(i32=-5, i64=-(1 << 40), u32=4000000000, u64=(1 << 64) - 1, s32=-3,
                     s64=-(1 << 50), flag=True, f32=0xDEADBEEF, sf32=-7, fl=1.5,
                     f64=(1 << 63) + 5, sf64=-9, db=2.25, text="héllo", raw=b"\x00\xff",
                     inner=Inner(x=-1), inners=[Inner(x=1), Inner(x=2)],
                     packed=[1, -1, 150], unpacked=[-2, 3], names=["a", ""])
    assert Everything.decode(msg.encode()) == msg
    assert Everything.decode(b"") == Everything()
    # s32 -3 zigzags to 5: tag (5 << 3 | 0) = 0x28.
    assert Everything(s32=-3).encode() == b"\x28\x05"
    assert Everything(fl=1.5).encode() == b"\x55\x00\x00\xc0\x3f"


def test_unknown_fields_of_every_wire_type_are_skipped():
    known = ErrorResponse(error_code=12, error_message="x").encode()
    extra = (b"\x18\x05"                       # field 3 varint
             + b"\x21" + b"\x01" * 8           # field 4 fixed64
             + b"\x2a\x03abc"                  # field 5 length-delimited
             + b"\x35" + b"\x02" * 4)          # field 6 fixed32
    assert ErrorResponse.decode(extra + known + extra) == ErrorResponse(error_code=12,
                                                                        error_message="x")


def test_metadata_response_round_trip_keeps_leaders():
    resp = MetadataResponse(
        coordinator_server=PbServerNode(node_id=0, host="h", port=9123),
        tablet_servers=[PbServerNode(node_id=1, host="t", port=9124, listeners="FLUSS://t:9124")],
        table_metadata=[PbTableMetadata(
            table_path=PbTablePath(database_name="db", table_name="t"), table_id=4, schema_id=1,
            table_json=b"{}", created_time=10, modified_time=11,
            bucket_metadata=[PbBucketMetadata(bucket_id=0, leader_id=1, replica_id=[1]),
                             PbBucketMetadata(bucket_id=1)])])
    back = MetadataResponse.decode(resp.encode())
    assert back == resp
    assert [b.leader_id for b in back.table_metadata[0].bucket_metadata] == [1, None]


@pytest.mark.parametrize("data, match", [
    (b"\x12\x04boom", "required field error_code"),
    (b"\x08", "truncated varint"),
    (b"\x08\x01\x12\x09boom", "past the end"),
    (b"\x08\x01\x13", "wire type"),
    (b"\x0a\x01x", "wire type 2, expected 0"),
])
def test_malformed_input_is_refused(data, match):
    with pytest.raises(CorruptMessage, match=match):
        ErrorResponse.decode(data)


def test_missing_required_field_is_refused_on_encoding():
    with pytest.raises(CorruptMessage, match="required"):
        ErrorResponse(error_code=None).encode()  # type: ignore[arg-type]



def test_authenticate_messages_and_a_token_kept_out_of_reprs():
    from fluss_spark.protocol.apache_fluss.messages import (AuthenticateRequest,
                                                            AuthenticateResponse)
    req = AuthenticateRequest(protocol="PLAIN", token=b"\0admin\0s3cret")
    assert req.API_KEY == 1038
    assert req.encode() == b"\x0a\x05PLAIN\x12\x0d\x00admin\x00s3cret"
    assert AuthenticateRequest.decode(req.encode()) == req
    assert "s3cret" not in repr(req)
    assert AuthenticateResponse.decode(b"\x0a\x00").challenge == b""
    assert AuthenticateResponse.decode(b"").challenge is None
