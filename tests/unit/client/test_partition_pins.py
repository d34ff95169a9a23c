"""Lease pins of partitions in the client: what an acquire answers, an older coordinator that
ignores them, and the clusters that refuse them in one line."""

from __future__ import annotations

import pytest

from fluss_spark.client import Admin
from fluss_spark.client.cluster import Unavailable
from fluss_spark.errors import UnsupportedVersion
from fluss_spark.testing.fake_cluster import FakeCluster


def test_unavailable_is_the_tables_dict_and_its_partitions():
    none = Unavailable({1: {}}, {2: {7: {}}})
    assert none == {} and not none and none.partitions == {}
    some = Unavailable({}, {2: {7: {0: 3}}})
    assert some and some != {} and some.partitions == {2: {7: {0: 3}}}
    assert some == Unavailable(None, {"2": {"7": {"0": "3"}}})
    tables = Unavailable({1: {0: 5}})
    assert tables == {1: {0: 5}} and tables.get(1) == {0: 5} and tables.partitions == {}


class Rpc:
    """A coordinator connection that answers every acquire with ``body``."""

    def __init__(self, body: dict):
        self.body, self.sent = body, []

    def require(self, api_key, what):
        pass

    def call(self, request):
        self.sent.append(request)
        return request.decode_response(self.body)


class Conn:
    def __init__(self, rpc: Rpc):
        self.rpc = rpc

    def with_coordinator(self, fn):
        return fn(self.rpc)


def test_the_admin_sends_partition_pins_and_reads_what_was_not_granted():
    rpc = Rpc({"unavailable": {}, "expires_at_ms": 5,
               "unavailable_partitions": {4: {7: {1: 3}}}})
    got = Admin(Conn(rpc)).acquire_kv_snapshot_lease("L", 1000, {9: {0: 1}},
                                                     partitions={4: {7: {0: 2, 1: 3}}})
    assert got == Unavailable({}, {4: {7: {1: 3}}})
    assert rpc.sent[0].partitions == {4: {7: {0: 2, 1: 3}}} and rpc.sent[0].tables == {9: {0: 1}}
    # Without partition pins the request is what older clients sent.
    Admin(Conn(rpc)).acquire_kv_snapshot_lease("L", 1000, {9: {0: 1}})
    assert "partitions" not in rpc.sent[1].to_wire()


def test_a_coordinator_that_ignores_partition_pins_is_refused_in_one_line():
    rpc = Rpc({"unavailable": {}, "expires_at_ms": 5})     # what an older coordinator answers
    with pytest.raises(UnsupportedVersion, match="does not pin partitions .* upgrade the "
                                                 "coordinator"):
        Admin(Conn(rpc)).acquire_kv_snapshot_lease("L", 1000, {},
                                                   partitions={4: {7: {0: 2}}})
    assert Admin(Conn(rpc)).acquire_kv_snapshot_lease("L", 1000, {4: {0: 2}}) == {}


def test_the_fake_cluster_pins_partitions():
    # The fake cluster pins partitions as the coordinator does: one of no table is unavailable.
    fake = FakeCluster()
    missing = fake.acquire_kv_snapshot_lease("L", 1000, {}, partitions={4: {7: {0: 2}}})
    assert dict(missing) == {} and missing.partitions == {4: {7: {0: 2}}}
