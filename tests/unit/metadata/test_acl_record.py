"""AclRecord: round trip, the v1 bytes still decode, newer or damaged records are refused."""

import pytest

from fluss_spark.errors import CorruptMessage
from fluss_spark.metadata import layout
from fluss_spark.metadata.layout import AclRecord
from fluss_spark.protocol.acl import AclBinding, OperationType, Resource
from fluss_spark.protocol.codec import packb

ORDERS = Resource.table("db.orders")


def test_acl_record_round_trip():
    rec = AclRecord(ORDERS, frozenset({AclBinding(ORDERS, "User:alice", OperationType.READ),
                                       AclBinding(ORDERS, "User:bob", OperationType.ALL,
                                                  "10.0.0.1")}))
    assert AclRecord.decode(rec.encode()) == rec
    assert layout.acl_path(ORDERS) == "/fluss/acls/table/db.orders"
    assert layout.acl_path(Resource.cluster()) == "/fluss/acls/cluster/cluster"


def test_v1_acl_record_bytes_still_decode():
    # Bytes as a v1 writer produced them: this test pins the stored format.
    data = packb({"v": 1, "resource_type": "DATABASE", "resource_name": "db",
                  "entries": [{"principal": "User:alice", "host": "*", "operation": "WRITE",
                               "permission": "ALLOW"}]})
    rec = AclRecord.decode(data)
    assert rec.resource == Resource.database("db")
    assert rec.acls == {AclBinding(Resource.database("db"), "User:alice", OperationType.WRITE)}


@pytest.mark.parametrize("raw, error", [
    ({"v": 2, "resource_type": "CLUSTER", "resource_name": "cluster", "entries": []},
     "newer than this software"),
    ({"v": 1, "resource_type": "TOPIC", "resource_name": "x", "entries": []}, "undecodable"),
    ({"v": 1, "resource_type": "TABLE", "resource_name": "db.t",
      "entries": [{"principal": "User:a", "host": "*", "operation": "FLY",
                   "permission": "ALLOW"}]}, "undecodable"),
])
def test_newer_or_damaged_acl_records_are_refused_not_misread(raw, error):
    with pytest.raises(CorruptMessage, match=error):
        AclRecord.decode(packb(raw))
