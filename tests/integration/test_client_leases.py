"""Admin lease calls against a real coordinator, and against one without the lease APIs."""

from __future__ import annotations

import uuid

import pytest

from fluss_spark.errors import LeaseNotFound, UnsupportedVersion
from fluss_spark.local.embedded import EmbeddedProcesses


def test_lease_round_trip(conn, table_name):
    admin = conn.admin()
    info = admin.create_table(table_name, "id BIGINT", primary_key=["id"], num_buckets=2)
    conn.writer(info).upsert([(i,) for i in range(20)])
    snaps = admin.trigger_kv_snapshot(info)
    lease_id = f"lease-{uuid.uuid4().hex[:8]}"
    pins = {b: s.snapshot_id for b, s in snaps.items()}
    assert admin.acquire_kv_snapshot_lease(lease_id, 60_000, {info.table_id: pins}) == {}
    lease = admin.describe_kv_snapshot_lease(lease_id)
    assert lease.tables == {info.table_id: pins} and lease.pin_count == 2
    assert lease_id in [x.lease_id for x in admin.list_kv_snapshot_leases()]
    assert all(lease_id in s.pinned_by for s in admin.list_kv_snapshots(info))
    unavailable = admin.acquire_kv_snapshot_lease(lease_id, 60_000, {info.table_id: {0: 999}})
    assert unavailable == {info.table_id: {0: 999}}
    assert admin.renew_kv_snapshot_lease(lease_id, 120_000) > lease.expires_at_ms
    assert admin.release_kv_snapshot_lease(lease_id, {info.table_id: [0]}) == 1
    admin.drop_kv_snapshot_lease(lease_id)
    with pytest.raises(LeaseNotFound):
        admin.describe_kv_snapshot_lease(lease_id)
    with pytest.raises(LeaseNotFound):
        admin.renew_kv_snapshot_lease(lease_id, 1000)


def test_server_without_lease_apis_raises_unsupported_version(zookeeper, tmp_path):
    cluster = EmbeddedProcesses(tmp_path, tablets=1,
                                zookeeper=f"{zookeeper.address}/fluss-old-{uuid.uuid4().hex[:8]}",
                                disabled_apis=["kv_snapshot_lease"])
    with cluster, cluster.connection(request_timeout_s=10) as conn:
        admin = conn.admin()
        assert admin.supports_leases() is False
        with pytest.raises(UnsupportedVersion, match="KV snapshot leases"):
            admin.acquire_kv_snapshot_lease("x", 1000, {1: {0: 1}})
        with pytest.raises(UnsupportedVersion):
            admin.list_kv_snapshot_leases()
        assert admin.list_tables() == []   # everything else still works
