"""The Apache Fluss partition messages and the partition fields of the other requests, as bytes
worked out by hand from the protobuf encoding (tag = field number << 3 | wire type)."""

from __future__ import annotations

from fluss_spark.protocol.apache_fluss.messages import (GetLatestKvSnapshotsRequest,
                                                        ListOffsetsRequest, PbTablePath)
from fluss_spark.protocol.apache_fluss.partition_messages import (CreatePartitionRequest,
                                                                  DropPartitionRequest,
                                                                  ListPartitionInfosRequest,
                                                                  ListPartitionInfosResponse,
                                                                  PbPartitionSpec)

PATH = PbTablePath(database_name="db", table_name="t")
PATH_BYTES = b"\x0a\x07" + b"\x0a\x02db\x12\x01t"             # field 1, 7 bytes
# PbPartitionSpec {1: PbKeyValue {1: "dt", 2: "2026-11-25"}}: 16 bytes inside 18.
SPEC_BYTES = b"\x0a\x10" + b"\x0a\x02dt\x12\x0a2026-11-25"


def test_list_partition_infos_request_bytes():
    assert ListPartitionInfosRequest(table_path=PATH).encode() == PATH_BYTES
    partial = ListPartitionInfosRequest(table_path=PATH, partial_partition_spec=PbPartitionSpec.of(
        ["dt"], {"dt": "2026-11-25"}))
    assert partial.encode() == PATH_BYTES + b"\x12\x12" + SPEC_BYTES
    assert int(ListPartitionInfosRequest.API_KEY) == 1009


def test_create_and_drop_partition_request_bytes():
    spec = PbPartitionSpec.of(["dt"], {"dt": "2026-11-25"})
    create = CreatePartitionRequest(table_path=PATH, partition_spec=spec, ignore_if_exists=True)
    assert create.encode() == PATH_BYTES + b"\x12\x12" + SPEC_BYTES + b"\x18\x01"
    drop = DropPartitionRequest(table_path=PATH, partition_spec=spec, ignore_if_not_exists=False)
    # A required bool is sent even when false.
    assert drop.encode() == PATH_BYTES + b"\x12\x12" + SPEC_BYTES + b"\x18\x00"
    assert (int(create.API_KEY), int(drop.API_KEY)) == (1036, 1037)


def test_a_spec_lists_values_in_the_tables_key_order():
    spec = PbPartitionSpec.of(["dt", "region"], {"region": "eu", "dt": "2026-11-25"})
    assert [(kv.key, kv.value) for kv in spec.partition_key_values] == [
        ("dt", "2026-11-25"), ("region", "eu")]


def test_list_partition_infos_response_decodes():
    # {1: PbPartitionInfo {1: 5, 2: spec}} twice (ids 5 and 300, a two-byte varint).
    info5 = b"\x08\x05\x12\x12" + SPEC_BYTES
    info300 = b"\x08\xac\x02\x12\x12" + SPEC_BYTES
    body = (b"\x0a" + bytes([len(info5)]) + info5 + b"\x0a" + bytes([len(info300)]) + info300)
    resp = ListPartitionInfosResponse.decode(body)
    assert [p.partition_id for p in resp.partitions_info] == [5, 300]
    assert resp.partitions_info[1].partition_spec.partition_key_values[0].value == "2026-11-25"
    assert ListPartitionInfosResponse.decode(b"").partitions_info == []


def test_partition_fields_of_list_offsets_and_latest_kv_snapshots():
    offsets = ListOffsetsRequest(follower_server_id=-1, offset_type=1, table_id=7,
                                 partition_id=300, bucket_id=[0, 1])
    # -1 is a ten-byte varint; bucket ids are packed.
    assert offsets.encode() == (b"\x08" + b"\xff" * 9 + b"\x01" + b"\x10\x01\x18\x07"
                                + b"\x20\xac\x02" + b"\x2a\x02\x00\x01")
    latest = GetLatestKvSnapshotsRequest(table_path=PATH, partition_name="20261125")
    assert latest.encode() == PATH_BYTES + b"\x12\x0820261125"
