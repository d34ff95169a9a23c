"""What an Apache Fluss cluster offers follows from the APIs its coordinator and tablet servers
advertise."""

from __future__ import annotations

import pytest

from fluss_spark.client.apache_fluss import ApacheFlussWireCluster
from fluss_spark.client.cluster import Capabilities
from fluss_spark.errors import InvalidLeaseId, UnsupportedVersion
from fluss_spark.protocol.apache_fluss.api import LEASE_APIS, PARTITION_APIS, FlussApiKey


class Coordinator:
    def __init__(self, missing: set[int]):
        self.missing = missing

    def supports(self, key: int) -> bool:
        return key not in self.missing


class Connection:
    """Just what ``capabilities()`` asks of a ``FlussWireConnection``."""

    def __init__(self, missing: set[int], tablets_missing: tuple[set[int], ...] = ({1061}, )):
        self.coordinator_ = Coordinator(missing)
        self.tablets = [Coordinator(m) for m in tablets_missing]

    def coordinator(self) -> Coordinator:
        return self.coordinator_

    def tablet_ids(self) -> list[int]:
        return list(range(len(self.tablets)))

    def tablet(self, server_id: int) -> Coordinator:
        return self.tablets[server_id]

    def with_retries(self, op, *, table=None):
        return op()


@pytest.mark.parametrize("missing", [set(), {int(k) for k in LEASE_APIS},
                                     {int(min(LEASE_APIS))}])
def test_leases_only_when_every_lease_api_is_advertised(missing):
    cluster = ApacheFlussWireCluster(Connection(missing))
    assert cluster.capabilities() == Capabilities(leases=not missing, lease_renewal="reacquire",
                                                  snapshot_read="files", live_kv_scan=False,
                                                  partition_admin=True, partial_updates=True)


@pytest.mark.parametrize("tablets, live", [((set(), set()), True), ((set(), {1061}), False),
                                           (({1061},), False), ((), False)])
def test_live_scans_only_when_every_tablet_server_advertises_scan_kv(tablets, live):
    assert int(FlussApiKey.SCAN_KV) == 1061
    cluster = ApacheFlussWireCluster(Connection(set(), tablets))
    assert cluster.capabilities().live_kv_scan is live
    if not live:
        with pytest.raises(UnsupportedVersion, match="SCAN_KV"):
            cluster.open_live_scan("db.t", 0)


@pytest.mark.parametrize("bad", ["", "a/b", "..", "x" * 129, "lease id"])
def test_a_lease_id_fluss_would_make_a_bad_znode_is_refused_before_sending(bad):
    cluster = ApacheFlussWireCluster(Connection(set()))
    with pytest.raises(InvalidLeaseId, match="invalid lease id"):
        cluster.acquire_kv_snapshot_lease(bad, 1000, {1: {0: 0}})
    with pytest.raises(InvalidLeaseId):
        cluster.drop_kv_snapshot_lease(bad)
    with pytest.raises(InvalidLeaseId):
        cluster.release_kv_snapshot_lease(bad, {1: [0]})


def test_partition_admin_only_when_the_coordinator_offers_every_partition_api():
    assert ApacheFlussWireCluster(Connection(set())).capabilities().partition_admin
    for key in PARTITION_APIS:
        assert not ApacheFlussWireCluster(Connection({int(key)})).capabilities().partition_admin
