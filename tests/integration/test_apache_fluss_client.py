"""The Apache Fluss wire client against a real Fluss 0.9.1 cluster (the ``apache_fluss`` fixture)."""

from __future__ import annotations

import time
import uuid

import pyarrow as pa
import pytest

from fluss_spark.client.apache_fluss import ApacheFlussWireCluster
from fluss_spark.client.cluster import Capabilities, Cluster
from fluss_spark.errors import ConfigError, TableNotExist, UnsupportedVersion
from fluss_spark.protocol.fluss.api import SERVER_TYPE_COORDINATOR, SERVER_TYPE_TABLET, FlussApiKey
from fluss_spark.testing import apache_fluss as writer
from fluss_spark.transport.fluss_client import FlussRpcConnection, speaks_fluss

pytestmark = pytest.mark.slow

LOG_SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string())])
PK_SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string()), ("n", pa.int32())])


@pytest.fixture(scope="module")
def fluss(apache_fluss):
    cluster = ApacheFlussWireCluster.connect(apache_fluss.bootstrap_servers,
                                             request_timeout_s=20)
    yield cluster
    cluster.close()


@pytest.fixture(scope="module")
def tables(fluss, apache_fluss):
    """A log table (1 bucket, two appends) and a PK table (2 buckets: inserts, an update, a
    delete), created by this client and written with pyfluss."""
    db = f"wire_{uuid.uuid4().hex[:8]}"
    fluss.create_database(db)
    log, pk = f"{db}.events", f"{db}.users"
    fluss.create_table(log, LOG_SCHEMA, buckets=1)
    fluss.create_table(pk, PK_SCHEMA, primary_key=["id"], buckets=2)
    boot = apache_fluss.bootstrap_servers
    writer.append(boot, log, [(1, "a"), (2, None), (3, "c")])
    time.sleep(0.05)             # the second append gets a later commit timestamp
    writer.append(boot, log, [(4, "d"), (5, "e")])
    writer.upsert(boot, pk, [(1, "x", 10), (2, "y", 20), (3, "z", 30)])
    writer.upsert(boot, pk, [(1, "x2", 11)])
    writer.delete(boot, pk, [(2,)])
    return db, log, pk


def _rows(batches) -> list[tuple]:
    return [tuple(r.values()) for b in batches for r in b.to_pylist()]


def test_api_versions_of_coordinator_and_tablets(apache_fluss, fluss):
    coordinator = fluss.conn.coordinator()
    versions = coordinator.api_versions()
    tablet_only = {FlussApiKey.FETCH_LOG, FlussApiKey.LIST_OFFSETS}
    assert all(coordinator.supports(k) for k in FlussApiKey if k not in tablet_only)
    assert not any(k in versions for k in tablet_only)
    assert coordinator.server_type == SERVER_TYPE_COORDINATOR
    # SCAN_KV (1061) and LIST_KV_SNAPSHOTS (1064) are not in 0.9.1.
    assert 1061 not in versions and 1064 not in versions
    host, port = fluss.conn._tablets[min(fluss.conn._tablets)]
    tablet = FlussRpcConnection(host, port)
    try:
        assert all(tablet.supports(k) for k in tablet_only)
        assert tablet.server_type == SERVER_TYPE_TABLET
    finally:
        tablet.close()
    assert isinstance(fluss, Cluster)
    assert fluss.capabilities() == Capabilities(leases=True, lease_renewal="reacquire",
                                                snapshot_read="none")


def test_databases_tables_and_metadata(fluss, tables):
    db, log, pk = tables
    assert db in fluss.list_databases()
    assert {log, pk} <= set(fluss.list_tables())
    info = fluss.get_table(pk)
    assert info.name == pk and info.primary_key == ("id",) and info.bucket_key == ("id",)
    assert info.schema == pa.schema([pa.field("id", pa.int64(), nullable=False),
                                     ("v", pa.string()), ("n", pa.int32())])
    assert info.num_buckets == 2 and sorted(info.assignment) == [0, 1]
    assert set(info.assignment.values()) <= set(fluss.conn._tablets)
    log_info = fluss.get_table(log)
    assert log_info.primary_key == () and log_info.schema == LOG_SCHEMA
    assert log_info.table_id != info.table_id
    with pytest.raises(TableNotExist, match="does not exist"):
        fluss.get_table(f"{db}.missing")
    with pytest.raises(ConfigError, match="database.table"):
        fluss.get_table("no_dot")


def test_list_offsets_earliest_latest_and_timestamp(fluss, tables):
    _, log, _ = tables
    assert fluss.list_offsets(log, spec="earliest") == {0: 0}
    assert fluss.list_offsets(log) == {0: 5}
    batches = list(fluss.read_log(log, 0, 0, 5))
    stamps = [r["_commit_timestamp"] for b in batches for r in b.to_pylist()]
    second = int(stamps[3].timestamp() * 1000)
    assert stamps[0] < stamps[3]
    assert fluss.list_offsets(log, spec="timestamp", timestamp_ms=second) == {0: 3}
    assert fluss.list_offsets(log, spec="timestamp", timestamp_ms=0) == {0: 0}
    with pytest.raises(ConfigError):
        fluss.list_offsets(log, spec="timestamp")


def test_read_log_of_a_log_table_exactly(fluss, tables):
    _, log, _ = tables
    batches = list(fluss.read_log(log, 0, 0, 5))
    assert batches[0].schema.names == ["id", "name", "_change_type", "_log_offset",
                                       "_commit_timestamp"]
    assert batches[0].schema.field("_commit_timestamp").type == pa.timestamp("ms", tz="UTC")
    assert [r[:4] for r in _rows(batches)] == [
        (1, "a", "+A", 0), (2, None, "+A", 1), (3, "c", "+A", 2), (4, "d", "+A", 3),
        (5, "e", "+A", 4)]
    # A sub-range across both batches, and a projection in another order.
    assert [r[:4] for r in _rows(fluss.read_log(log, 0, 2, 4))] == [(3, "c", "+A", 2),
                                                                   (4, "d", "+A", 3)]
    projected = list(fluss.read_log(log, 0, 1, 5, projection=["name", "id"]))
    assert projected[0].schema.names == ["name", "id", "_change_type", "_log_offset",
                                         "_commit_timestamp"]
    assert [r[:4] for r in _rows(projected)] == [(None, 2, "+A", 1), ("c", 3, "+A", 2),
                                                 ("d", 4, "+A", 3), ("e", 5, "+A", 4)]
    with pytest.raises(ConfigError, match="unknown"):
        fluss.read_log(log, 0, 0, 5, projection=["nope"])


def test_read_log_of_a_primary_key_table_has_change_types(fluss, tables):
    _, _, pk = tables
    latest = fluss.list_offsets(pk)
    assert sorted(latest) == [0, 1] and sum(latest.values()) == 6
    by_key: dict[int, list[tuple]] = {}
    for bucket, end in latest.items():
        rows = _rows(fluss.read_log(pk, bucket, 0, end))
        assert [r[4] for r in rows] == list(range(end))       # offsets 0..end-1 in order
        for r in rows:
            by_key.setdefault(r[0], []).append(r[1:4])
    assert by_key == {1: [("x", 10, "+I"), ("x", 10, "-U"), ("x2", 11, "+U")],
                      2: [("y", 20, "+I"), ("y", 20, "-D")],
                      3: [("z", 30, "+I")]}
    projected = [r for b, end in latest.items()
                 for r in _rows(fluss.read_log(pk, b, 0, end, projection=["n"]))]
    assert sorted((r[0], r[1]) for r in projected) == sorted(
        [(10, "+I"), (10, "-U"), (11, "+U"), (20, "+I"), (20, "-D"), (30, "+I")])


def test_kv_snapshots_and_leases(fluss, tables):
    _, _, pk = tables
    latest = fluss.list_offsets(pk)
    deadline = time.monotonic() + 60
    snapshots = fluss.latest_kv_snapshots(pk)
    # KV snapshots are taken every 5s on this cluster; wait until they cover every write.
    while (any(b not in snapshots or snapshots[b].log_offset < end
               for b, end in latest.items() if end)
           and time.monotonic() < deadline):
        time.sleep(0.5)
        snapshots = fluss.latest_kv_snapshots(pk)
    table_id = fluss.get_table(pk).table_id
    assert {b: s.log_offset for b, s in snapshots.items()} == {
        b: end for b, end in latest.items() if end}
    assert all(s.table_id == table_id and s.snapshot_id >= 0 for s in snapshots.values())

    lease = f"lease-{uuid.uuid4().hex[:8]}"
    pins = {table_id: {b: s.snapshot_id for b, s in snapshots.items()}}
    assert fluss.acquire_kv_snapshot_lease(lease, 60_000, pins) == {}
    # Renewal is acquiring again.
    assert fluss.acquire_kv_snapshot_lease(lease, 120_000, pins) == {}
    with pytest.raises(UnsupportedVersion, match="acquire the same pins again"):
        fluss.renew_kv_snapshot_lease(lease, 60_000)
    with pytest.raises(UnsupportedVersion, match="describe"):
        fluss.describe_kv_snapshot_lease(lease)
    first = min(snapshots)
    assert fluss.release_kv_snapshot_lease(lease, {table_id: [first]}) == -1
    assert fluss.drop_kv_snapshot_lease(lease) is True
    with pytest.raises(UnsupportedVersion, match="not supported yet"):
        fluss.read_snapshot(pk, first, snapshots[first].snapshot_id)


def test_probe_tells_fluss_from_this_projects_servers(apache_fluss, fluss, local_cluster):
    host, port = apache_fluss.bootstrap_servers.rsplit(":", 1)
    assert speaks_fluss(host, int(port), timeout=5)
    tablet_host, tablet_port = fluss.conn._tablets[min(fluss.conn._tablets)]
    assert speaks_fluss(tablet_host, tablet_port, timeout=5)
    ours = local_cluster(tablets=1)
    ours_host, ours_port = ours.address("coordinator", 0).rsplit(":", 1)
    assert not speaks_fluss(ours_host, int(ours_port), timeout=5)
    # Probing did not hurt our server: it still answers its own protocol.
    conn = ours.connection(request_timeout_s=10)
    try:
        assert isinstance(conn.admin().list_tables(), list)
    finally:
        conn.close()
