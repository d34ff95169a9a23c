"""Apache Fluss request/response headers and the error-code mapping."""

from __future__ import annotations

import pytest

from fluss_spark import errors
from fluss_spark.errors import CorruptMessage
from fluss_spark.protocol.apache_fluss import framing
from fluss_spark.protocol.apache_fluss.api import API_VERSION, FlussApiKey
from fluss_spark.protocol.apache_fluss.errors import to_exception


def test_api_keys_and_versions():
    assert {k.name: int(k) for k in FlussApiKey} == {
        "API_VERSIONS": 1000, "CREATE_DATABASE": 1001, "DROP_DATABASE": 1002,
        "LIST_DATABASES": 1003, "CREATE_TABLE": 1005, "DROP_TABLE": 1006,
        "GET_TABLE_INFO": 1007, "LIST_TABLES": 1008, "LIST_PARTITION_INFOS": 1009,
        "GET_TABLE_SCHEMA": 1011, "GET_METADATA": 1012, "FETCH_LOG": 1015, "LIST_OFFSETS": 1021,
        "GET_LATEST_KV_SNAPSHOTS": 1023, "GET_KV_SNAPSHOT_METADATA": 1024,
        "CREATE_PARTITION": 1036, "DROP_PARTITION": 1037, "AUTHENTICATE": 1038,
        "ALTER_TABLE": 1044, "ACQUIRE_KV_SNAPSHOT_LEASE": 1056, "RELEASE_KV_SNAPSHOT_LEASE": 1057,
        "DROP_KV_SNAPSHOT_LEASE": 1058, "SCAN_KV": 1061}
    assert set(API_VERSION.values()) == {0}


def test_request_frame_bytes():
    frame = framing.encode_request(1000, 0, 7, b"\x0a\x00")
    # length 10 = 8 header bytes + 2 body bytes; key 0x03e8; version 0; request id 7.
    assert frame == b"\x00\x00\x00\x0a\x03\xe8\x00\x00\x00\x00\x00\x07\x0a\x00"
    key, version, request_id, body = framing.decode_request(frame[4:])
    assert (key, version, request_id, bytes(body)) == (1000, 0, 7, b"\x0a\x00")


def test_response_headers():
    ok = framing.encode_response(framing.SUCCESS_RESPONSE, 7, b"\x10\x01")
    assert ok == b"\x00\x00\x00\x07\x00\x00\x00\x00\x07\x10\x01"
    header = framing.decode_response_header(ok[4:])
    assert (header.response_type, header.request_id, bytes(ok[4:][header.body_offset:])) == \
        (0, 7, b"\x10\x01")
    err = framing.decode_response_header(b"\x01\x00\x00\x01\x00\x08\x07")
    assert (err.response_type, err.request_id, err.body_offset) == (1, 256, 5)
    # A server failure has no request id: the body follows the type byte.
    failure = framing.encode_response(framing.SERVER_FAILURE, None, b"\x08\x01")
    assert failure == b"\x00\x00\x00\x03\x02\x08\x01"
    header = framing.decode_response_header(failure[4:])
    assert (header.response_type, header.request_id, header.body_offset) == (2, None, 1)


@pytest.mark.parametrize("payload, match", [
    (b"", "empty"),
    (b"\x83\xa1a\x01", "unknown response type 131"),     # a msgpack map, as our servers send
    (b"\x00\x00\x01", "shorter than its header"),
])
def test_malformed_response_headers_are_refused(payload, match):
    with pytest.raises(CorruptMessage, match=match):
        framing.decode_response_header(payload)


def test_frame_length_limits():
    assert framing.decode_length(b"\x00\x00\x00\x05") == 5
    for prefix in (b"\x00\x00\x00\x00", b"\xff\xff\xff\xff", b"\x7f\xff\xff\xff"):
        with pytest.raises(CorruptMessage, match="frame length"):
            framing.decode_length(prefix)


def test_error_codes_map_to_this_projects_classes():
    cases = {7: errors.TableNotExist, 12: errors.NotLeaderOrFollower,
             19: errors.LogOffsetOutOfRange, 41: errors.KvSnapshotNotExist,
             44: errors.LeaderNotAvailable, 2: errors.UnsupportedVersion,
             46: errors.AuthenticationFailed, 48: errors.AuthorizationFailed,
             36: errors.PartitionNotExist, 37: errors.TableNotPartitioned,
             42: errors.PartitionAlreadyExist, 43: errors.InvalidPartitionSpec}
    for code, cls in cases.items():
        err = to_exception(code, "why")
        assert type(err) is cls and err.message.endswith(": why")
    err = to_exception(12, "not leader")
    assert err.retriable and err.refresh_metadata
    assert err.message == "NOT_LEADER_OR_FOLLOWER (12): not leader"
    assert not to_exception(7, "x").retriable


def test_unknown_and_unmapped_codes_keep_fluss_code_and_message():
    err = to_exception(4, "The database does not exist.")
    assert isinstance(err, errors.UnknownServerError) and err.code == 4
    assert err.message == "DATABASE_NOT_EXIST (4): The database does not exist."
    assert not err.retriable
    schema = to_exception(9, "no schema")
    assert schema.code == 9 and schema.retriable and not schema.refresh_metadata
    odd = to_exception(999, None)
    assert odd.code == 999 and odd.message == "ERROR_999 (999): no message"
    # The class's own code is untouched by an instance carrying Fluss's number.
    assert errors.UnknownServerError.code == -1


def test_java_stack_traces_are_cut_to_their_first_line():
    err = to_exception(-1, "java.lang.RuntimeException: boom\n\tat a.b.C(C.java:1)\n")
    assert err.message == "UNKNOWN_SERVER_ERROR (-1): java.lang.RuntimeException: boom"


def test_alter_table_adds_columns_last_with_their_fluss_type_json():
    import json

    from fluss_spark.protocol.apache_fluss.alter_table import (AlterTableRequest,
                                                               add_columns_request)
    from fluss_spark.protocol.apache_fluss.messages import PbTablePath
    from fluss_spark.protocol.types import parse_schema
    req = add_columns_request(PbTablePath(database_name="db", table_name="t"),
                              parse_schema("note STRING, n DECIMAL(10, 2)"))
    back = AlterTableRequest.decode(req.encode())
    assert back.table_path.table_name == "t" and back.ignore_if_not_exists is False
    assert [(c.column_name, json.loads(c.data_type_json), c.column_position_type)
            for c in back.add_columns] == [
        ("note", {"type": "STRING"}, 0), ("n", {"type": "DECIMAL", "precision": 10, "scale": 2}, 0)]
