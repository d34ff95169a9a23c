"""The typed wire messages: every one round-trips through msgpack; decoding checks each field."""

from __future__ import annotations

import dataclasses

import pyarrow as pa
import pytest

from fluss_spark.errors import CorruptMessage, InvalidRequest, InvalidScanRequest
from fluss_spark.protocol import messages as m
from fluss_spark.protocol.api import ApiKey
from fluss_spark.protocol.arrow_ipc import serialize_schema
from fluss_spark.protocol.codec import packb, unpackb
from tests.unit.fresh_process import fresh_output

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string())])
TABLE = m.TableInfo(table_id=4, name="db.t", schema=SCHEMA, primary_key=("id",),
                    bucket_key=("id",), num_buckets=2, properties={"k": "v"}, created_ms=9,
                    assignment={0: 1, 1: 2})
SNAPSHOT = m.SnapshotInfo(table_id=4, bucket=1, snapshot_id=3, path="p", log_offset=10,
                          row_count=5, size_bytes=99, created_ms=7, pinned_by=("L",))
LEASE = m.LeaseInfo(lease_id="L", expires_at_ms=10, created_ms=1, tables={4: {1: 3}},
                    pin_count=2, holders={4: "q", 5: "q"}, owner="bob",
                    partitions={5: {7: {0: 2}}})
ACL = m.AclInfo("TABLE", "db.t", "User:alice", "READ", "10.0.0.1", "ALLOW")
ACL_FILTER = m.AclFilterInfo("DATABASE", "db", "User:bob", "ALL", "*", "ALLOW")

#: One instance of every message, with its optional fields set where it has them.
EXAMPLES = [
    m.ApiVersionsRequest(), m.ApiVersionsResponse((0, 1), "tablet", 3),
    m.AuthenticateRequest("PLAIN", b"\0u\0p"), m.AuthenticateResponse("u"),
    m.GetMetadataRequest(("db.t",)),
    m.GetMetadataResponse(m.ServerAddress("h", 1), (m.TabletAddress(1, "h", 2),), (TABLE,)),
    m.CreateTableRequest("db.t", serialize_schema(SCHEMA), ("id",), ("id",), 2, {"a": "b"}, True),
    m.CreateTableResponse(4), m.DropTableRequest("db.t", True), m.Empty(),
    m.AlterTableRequest("db.t", serialize_schema(SCHEMA)), m.AlterTableResponse(2),
    m.ListTablesRequest(), m.ListTablesResponse(("db.t",)),
    m.GetMetricsRequest(), m.GetMetricsResponse({"n": 1}, {"db.t": {"n": 2}}),
    m.CommitKvSnapshotRequest(4, 1, 3, "p", 10, 5, 99, 7),
    m.ListKvSnapshotsRequest(4, 1, True), m.ListKvSnapshotsResponse((SNAPSHOT,)),
    m.TriggerKvSnapshotRequest(4, (0, 1)), m.TriggerKvSnapshotResponse({0: None, 1: SNAPSHOT}),
    m.AcquireLeaseRequest("L", 1000, {4: {1: 3}}, "q", {5: {7: {0: 2}}}),
    m.AcquireLeaseResponse({4: {0: 2}}, 5, {5: {7: {1: 3}}}), m.RenewLeaseRequest("L", 1000),
    m.RenewLeaseResponse(5), m.ReleaseLeaseRequest("L", {4: (0, 1)}, {5: {7: (0,)}}),
    m.ReleaseLeaseResponse(0),
    m.DropLeaseRequest("L"), m.DropLeaseResponse(False), m.ListLeasesRequest(),
    m.ListLeasesResponse((LEASE,)), m.DescribeLeaseRequest("L"), LEASE,
    m.ProduceRequest(4, 1, "upsert", b"x"), m.ProduceResponse(0, 3),
    m.ListOffsetsRequest(4, (0, 1), "timestamp", 5), m.ListOffsetsResponse({0: 3}),
    m.FetchLogRequest(4, 1, 0, 9, 100, 10, ("v",)), m.FetchLogResponse(b"x", 0, 3, 3, 0),
    m.OpenScan(table_id=4, bucket=1, batch_size_bytes=10, call_seq_id=0, snapshot_id=3,
               projection=("v",), limit=5, start_row=2),
    m.ContinueScan("s", 1, 10), m.CloseScan("s"),
    m.ScanKvResponse("s", b"x", True, 10, 3, 0, 5),
    m.ListScannersRequest(),
    m.ListScannersResponse((m.ScannerInfo("s", 4, 1, 3, False, 9, 2, 5, 5),)),
    m.CreateAclsRequest((ACL,)), m.CreateAclsResponse((ACL,)),
    m.ListAclsRequest(ACL_FILTER), m.ListAclsResponse((ACL,)),
    m.DropAclsRequest((ACL_FILTER, m.AclFilterInfo())), m.DropAclsResponse((ACL,)),
    m.ListPartitionsRequest("db.t"),
    m.ListPartitionsResponse((m.PartitionInfo(7, "2026-11-25$eu", {0: 1, 1: 2}, 5),)),
    m.CreatePartitionRequest("db.t", {"dt": "2026-11-25", "region": "eu"}, True),
    m.PartitionInfo(8, "20261125"), m.DropPartitionRequest("db.t", {"dt": "20261125"}),
]


def test_every_api_key_has_a_request_type():
    assert set(m.REQUESTS) == set(ApiKey)
    for key, cls in m.REQUESTS.items():
        assert cls.API_KEY == key and issubclass(cls.RESPONSE, m.Message)


@pytest.mark.parametrize("msg", EXAMPLES, ids=lambda msg: type(msg).__name__)
def test_every_message_round_trips_through_msgpack(msg):
    wire = unpackb(packb(msg.to_wire()))
    decoded = (m.ScanKvRequest if isinstance(msg, m.ScanKvRequest) else type(msg)).decode(wire)
    assert decoded == msg
    assert dataclasses.asdict(decoded) == dataclasses.asdict(msg)   # fields left out of ==


def test_every_message_type_has_an_example():
    types = {type(x) for x in EXAMPLES}
    request_types = {c for c in m.REQUESTS.values() if c is not m.ScanKvRequest}
    missing = {c.__name__ for c in request_types | {c.RESPONSE for c in request_types}} \
        - {t.__name__ for t in types}
    assert not missing


def test_table_info_decodes_its_schema_and_integer_keys():
    info = m.TableInfo.decode({"table_id": 4, "name": "db.t", "schema": serialize_schema(SCHEMA),
                               "assignment": {"0": 1}})
    assert info.schema == SCHEMA and info.assignment == {0: 1} and info.num_buckets == 1
    assert info.changelog_schema(["v"]).names == ["v", "_change_type", "_log_offset",
                                                   "_commit_timestamp"]
    with pytest.raises(CorruptMessage, match="not an Arrow schema"):
        m.TableInfo.decode({"table_id": 4, "name": "x", "schema": b"junk"}, error=CorruptMessage)


@pytest.mark.parametrize("cls, body, match", [
    (m.AcquireLeaseRequest, {"lease_id": "L", "tables": {}}, "missing field 'duration_ms'"),
    (m.AcquireLeaseRequest, {"lease_id": "L", "duration_ms": True, "tables": {}},
     "'duration_ms' must be an integer, got bool"),
    (m.AcquireLeaseRequest, {"lease_id": 5, "duration_ms": 1, "tables": {}},
     "'lease_id' must be a string"),
    (m.AcquireLeaseRequest, {"lease_id": "L", "duration_ms": 1, "tables": {1: [3]}},
     r"'tables\[1\]' must be a map"),
    (m.AcquireLeaseRequest, {"lease_id": "L", "duration_ms": 1, "tables": {"x": {}}},
     "'tables key' must be an integer"),
    (m.ListOffsetsRequest, {"table_id": 1, "buckets": [0], "spec": "soon"}, "one of earliest"),
    (m.ListOffsetsRequest, {"table_id": 1, "buckets": [0], "spec": "timestamp"},
     "needs field 'timestamp_ms'"),
    (m.ListOffsetsRequest, {"table_id": 1, "buckets": list(range(2000)), "spec": "latest"},
     "at most 1024"),
    (m.FetchLogRequest, {"table_id": 1, "bucket": 0, "offset": -1}, "must not be negative"),
    (m.FetchLogRequest, {"table_id": 1, "bucket": 0, "offset": 2**60}, r"too large"),
    (m.GetMetadataRequest, {"tables": "db.t"}, "'tables' must be a list"),
    (m.ProduceRequest, {"table_id": 1, "bucket": 0, "op": "append", "records": "rows"},
     "'records' must be bytes"),
])
def test_decoding_refuses_a_bad_field_naming_it(cls, body, match):
    with pytest.raises(InvalidRequest, match=match):
        cls.decode(body)


def test_scan_kv_decodes_into_open_continue_or_close():
    assert isinstance(m.ScanKvRequest.decode({"table_id": 1, "bucket": 0, "live": True,
                                              "call_seq_id": 0, "batch_size_bytes": 8}),
                      m.OpenScan)
    assert m.ScanKvRequest.decode({"scanner_id": "s", "call_seq_id": 2}) == m.ContinueScan("s", 2)
    assert m.ScanKvRequest.decode({"scanner_id": "s", "close": True}) == m.CloseScan("s")
    for body, match in [({"scanner_id": "s", "bucket": 0}, "not both"),
                        ({}, "needs either open fields"),
                        ({"close": True}, "scanner_id"),
                        ({"table_id": 1, "bucket": 0, "batch_size_bytes": 8, "call_seq_id": 0},
                         "needs snapshot_id"),
                        ({"table_id": 1, "bucket": 0, "snapshot_id": 1, "call_seq_id": 0,
                          "batch_size_bytes": 8, "projection": ["a", "a"]}, "twice: a")]:
        with pytest.raises(InvalidScanRequest, match=match):
            m.ScanKvRequest.decode(body)


def test_absent_and_nil_fields_decode_to_defaults_and_none_is_sent_as_nil():
    assert m.DropLeaseResponse.decode({}) == m.DropLeaseResponse(True)  # servers before `dropped`
    assert m.FetchLogResponse.decode({"records": None}).records is None
    assert m.FetchLogResponse().to_wire()["records"] is None
    # A scan answer without a session leaves scanner_id out (``omit_none``).
    assert "scanner_id" not in m.ScanKvResponse(has_more=False).to_wire()


def test_lease_messages_without_partitions_are_what_older_peers_send_and_read():
    old_acquire = {"lease_id": "L", "duration_ms": 1, "tables": {4: {0: 1}}, "holder": None}
    req = m.AcquireLeaseRequest.decode(old_acquire)
    assert req.partitions is None and req.to_wire() == old_acquire      # no new key sent
    old_release = {"lease_id": "L", "tables": {4: [0]}}
    release = m.ReleaseLeaseRequest.decode(old_release)
    assert release.partitions is None and release.to_wire() == old_release
    # An older server leaves unavailable_partitions out: the client can tell (None, not {}).
    assert m.AcquireLeaseResponse.decode({"unavailable": {}, "expires_at_ms": 5}) \
        .unavailable_partitions is None
    assert m.AcquireLeaseResponse({}, 5, {}).to_wire()["unavailable_partitions"] == {}
    assert m.LeaseInfo.decode({"lease_id": "L"}).partitions == {}


@pytest.mark.parametrize("partitions, field", [
    ({4: {-1: {0: 1}}}, r"'partitions\[4\] key' must not be negative"),
    ({4: {7: {0: 2**60}}}, r"'partitions\[4\]\[7\]\[0\]' is too large"),
    ({4: {7: [0]}}, r"'partitions\[4\]\[7\]' must be a map"),
    ({"x": {}}, "'partitions key' must be an integer"),
])
def test_partition_pins_are_bounded_like_table_pins(partitions, field):
    body = {"lease_id": "L", "duration_ms": 1, "tables": {}, "partitions": partitions}
    with pytest.raises(InvalidRequest, match=field):
        m.AcquireLeaseRequest.decode(body)


def test_a_malformed_response_is_a_corrupt_message():
    with pytest.raises(CorruptMessage, match="PRODUCE response: missing field 'end_offset'"):
        m.ProduceRequest(1, 0, "append", b"").decode_response({"base_offset": 0})


@pytest.mark.parametrize("key", ["9" * 5000, "-" + "9" * 5000, "1" * 21, "\u00b2", "1\u0663"])
def test_an_integer_map_key_out_of_range_or_not_ascii_digits_is_an_invalid_request(key):
    # 5000 digits made int() raise ValueError (Python's digit limit): the server answered
    # UNKNOWN_SERVER_ERROR (-1) and logged a traceback.
    body = {"lease_id": "L", "duration_ms": 1, "tables": {key: {}}}
    with pytest.raises(InvalidRequest, match="'tables key'"):
        m.AcquireLeaseRequest.decode(body)
    with pytest.raises(InvalidRequest, match="'offsets key'"):
        m.ListOffsetsResponse.decode({"offsets": {key: 1}}, error=InvalidRequest)


def test_a_twenty_digit_map_key_still_decodes_and_is_range_checked():
    assert m.ListOffsetsResponse.decode({"offsets": {"12": 1}}).offsets == {12: 1}
    with pytest.raises(InvalidRequest, match="too large"):
        m.ListOffsetsResponse.decode({"offsets": {"9" * 20: 1}}, error=InvalidRequest)


@pytest.mark.parametrize("body, field", [
    ({"resource_type": "ANY", "resource_name": "x", "principal": "User:a", "operation": "READ"},
     "resource type ANY"),
    ({"resource_type": "TABLE", "resource_name": "nodot", "principal": "User:a",
      "operation": "READ"}, "invalid resource table name"),
    ({"resource_type": "TABLE", "resource_name": "db.t", "principal": "alice",
      "operation": "READ"}, "malformed principal"),
    ({"resource_type": "TABLE", "resource_name": "db.t", "principal": "User:a",
      "operation": "ANY"}, "operation ANY"),
    ({"resource_type": "TABLE", "resource_name": "db.t", "principal": "User:a",
      "operation": "FLY"}, "operation"),
    ({"resource_type": "CLUSTER", "resource_name": "other", "principal": "User:a",
      "operation": "ALTER"}, "named 'cluster'"),
])
def test_an_invalid_acl_is_refused_naming_what_is_wrong(body, field):
    with pytest.raises(InvalidRequest, match=field):
        m.CreateAclsRequest.decode({"acls": [body]})


def test_an_acl_request_needs_at_least_one_acl_and_at_most_a_thousand():
    with pytest.raises(InvalidRequest, match="non-empty"):
        m.CreateAclsRequest.decode({"acls": []})
    with pytest.raises(InvalidRequest, match="at most 1000"):
        m.DropAclsRequest.decode({"filters": [{}] * 1001})


def test_a_name_loads_only_its_areas_module():
    """Every fresh Spark Python process imports the messages it uses: a client of Apache Fluss
    needs the four records, not the dataclasses of every area (~50 ms on this machine)."""
    code = ("import sys\n"
            "from fluss_spark.protocol.messages import (LeaseInfo, PartitionInfo, SnapshotInfo,\n"
            "                                           TableInfo)\n"
            "print(sorted(k.rsplit('.', 1)[1] for k in sys.modules\n"
            "             if k.startswith('fluss_spark.protocol.messages.')))\n"
            "from fluss_spark.protocol import messages\n"
            "print(len(messages.REQUESTS),\n"
            "      [n for n in messages.__all__ if getattr(messages, n, None) is None])\n")
    loaded, requests = fresh_output(code).splitlines()
    assert loaded == "['base', 'records']"
    assert requests == f"{len(ApiKey)} []"


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'Nothing'"):
        m.Nothing  # noqa: B018
