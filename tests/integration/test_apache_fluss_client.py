"""The Apache Fluss wire client against a real Fluss 0.9.1 cluster (the ``apache_fluss``
fixture)."""

from __future__ import annotations

import socket
import time
import uuid
from dataclasses import replace

import pyarrow as pa
import pytest

from fluss_spark.client.apache_fluss import ApacheFlussWireCluster
from fluss_spark.client.apache_fluss.kv_snapshot import read_values
from fluss_spark.client.cluster import Capabilities, Cluster
from fluss_spark.errors import ConfigError, KvSnapshotNotExist, TableNotExist, UnsupportedVersion
from fluss_spark.protocol.apache_fluss.api import (SERVER_TYPE_COORDINATOR, SERVER_TYPE_TABLET,
                                                   FlussApiKey)
from fluss_spark.testing import apache_fluss as writer
from fluss_spark.transport.apache_fluss import FlussRpcConnection, speaks_fluss

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
    assert all(coordinator.supports(k) for k in FlussApiKey
               if k not in tablet_only and k != FlussApiKey.SCAN_KV)
    assert not any(k in versions for k in tablet_only)
    assert coordinator.server_type == SERVER_TYPE_COORDINATOR
    # SCAN_KV (1061) and LIST_KV_SNAPSHOTS (1064) are not in 0.9.1.
    assert 1061 not in versions and 1064 not in versions
    host, port = fluss.conn._tablets[min(fluss.conn._tablets)]
    tablet = FlussRpcConnection(host, port)
    try:
        assert all(tablet.supports(k) for k in tablet_only)
        assert not tablet.supports(FlussApiKey.SCAN_KV)      # so no live KV scans either
        assert tablet.server_type == SERVER_TYPE_TABLET
    finally:
        tablet.close()
    assert isinstance(fluss, Cluster)
    assert fluss.capabilities() == Capabilities(leases=True, lease_renewal="reacquire",
                                                snapshot_read="files", live_kv_scan=False,
                                                partition_admin=True, partial_updates=True)


def test_a_new_client_asks_for_metadata_first_past_a_dead_bootstrap_server(apache_fluss,
                                                                           tables, monkeypatch):
    """A fresh client's first request is the metadata it needs, not an API_VERSIONS round trip
    first (versions are asked only where a capability depends on them); a bootstrap server
    that does not answer is passed over for the next."""
    asked: list[tuple[str, int]] = []
    call_raw = FlussRpcConnection.call_raw

    def recorded(self, api_key, *args, **kwargs):
        asked.append((self.address, int(api_key)))
        return call_raw(self, api_key, *args, **kwargs)

    monkeypatch.setattr(FlussRpcConnection, "call_raw", recorded)
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{closed.getsockname()[1]}"       # nothing listens there
    cluster = ApacheFlussWireCluster.connect(f"{dead},{apache_fluss.bootstrap_servers}",
                                             request_timeout_s=20)
    try:
        _, _, pk = tables
        assert cluster.conn.table(pk).descriptor.primary_key == ("id",)
    finally:
        cluster.close()
    metadata = int(FlussApiKey.GET_METADATA)
    assert asked == [(dead, metadata), (apache_fluss.bootstrap_servers, metadata)]


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


def _wait_for_snapshots(fluss, table: str, timeout_s: float = 60) -> dict:
    """The latest snapshots once they cover every write of ``table`` (taken every 5 s here)."""
    latest = {b: end for b, end in fluss.list_offsets(table).items() if end}
    deadline = time.monotonic() + timeout_s
    while True:
        snapshots = fluss.latest_kv_snapshots(table)
        if all(b in snapshots and snapshots[b].log_offset >= end for b, end in latest.items()):
            return snapshots
        assert time.monotonic() < deadline, f"no snapshot of {table} covers {latest}"
        time.sleep(0.5)


def test_snapshot_rows_are_the_table_in_key_order_and_resumable(fluss, tables):
    _, _, pk = tables
    snapshots = _wait_for_snapshots(fluss, pk)
    assert {s.row_count for s in snapshots.values()} <= {0, 1, 2}
    assert sum(s.row_count for s in snapshots.values()) == 2
    got = {}
    for b, s in snapshots.items():
        scan = fluss.read_snapshot(pk, b, s.snapshot_id)
        batches = list(scan)
        assert all(batch.schema == fluss.get_table(pk).schema for batch in batches)
        got[b] = _rows(batches)
        assert len(got[b]) == s.row_count
        # Fluss 0.9.1's checkpoints are in the layout decoded in memory, without RocksDB: the
        # rows above came that way (values equal to RocksDB's: tests/unit/protocol/
        # test_apache_fluss_rocksdb_sst.py).
        values = read_values(fluss.kv_snapshot_files(pk, b, s.snapshot_id))
        assert values is not None and len(values) == s.row_count
    assert sorted(r for rs in got.values() for r in rs) == [(1, "x2", 11), (3, "z", 30)]
    # A projection, and a resumed read (rows [1, 2) of the bucket that has two rows, if any).
    b, s = max(snapshots.items(), key=lambda kv: kv[1].row_count)
    assert _rows(fluss.read_snapshot(pk, b, s.snapshot_id, projection=["n"])) == [
        (r[2],) for r in got[b]]
    assert _rows(fluss.read_snapshot(pk, b, s.snapshot_id, start_row=1, limit=5)) == got[b][1:]


def test_a_read_given_the_snapshots_location_asks_no_server_for_it(fluss, tables, apache_fluss,
                                                                    tmp_path):
    _, _, pk = tables
    snapshots = _wait_for_snapshots(fluss, pk)       # the listing learns each one's files
    # A new client, as an executor's: it learned nothing, and is handed what the driver did.
    reader = ApacheFlussWireCluster.connect(apache_fluss.bootstrap_servers, request_timeout_s=20)
    try:
        for b, s in snapshots.items():
            where = fluss.snapshot_location(pk, b, s.snapshot_id)
            assert where is not None and where.log_offset == s.log_offset
            assert "CURRENT" in {name for _, name in where.files}
            assert reader.snapshot_location(pk, b, s.snapshot_id) is None
            assert (_rows(reader.read_snapshot(pk, b, s.snapshot_id, location=where))
                    == _rows(fluss.read_snapshot(pk, b, s.snapshot_id)))
            if not s.row_count:
                continue
            # Files that are not there: the read goes by the location, and says what is gone.
            gone = replace(where, files=tuple((str(tmp_path / f"snap-{b}" / name), name)
                                              for _, name in where.files))
            with pytest.raises(KvSnapshotNotExist, match=str(tmp_path)):
                list(reader.read_snapshot(pk, b, s.snapshot_id, location=gone))
    finally:
        reader.close()


def test_every_type_and_many_rows_read_back_as_written(fluss, apache_fluss):
    import datetime as dt
    from decimal import Decimal
    name = f"wire_{uuid.uuid4().hex[:8]}.types"
    schema = pa.schema([
        pa.field("id", pa.int64(), nullable=False), ("b", pa.bool_()), ("i8", pa.int8()),
        ("i16", pa.int16()), ("i32", pa.int32()), ("f32", pa.float32()), ("f64", pa.float64()),
        ("s", pa.string()), ("bin", pa.binary()), ("d", pa.date32()),
        ("dec", pa.decimal128(10, 2)), ("ts", pa.timestamp("us")),
        ("ltz", pa.timestamp("us", tz="UTC"))])
    fluss.create_database(name.split(".")[0])
    fluss.create_table(name, schema, primary_key=["id"], buckets=2)

    def row(i: int) -> tuple:
        if i % 7 == 0:
            return (i,) + (None,) * 12
        return (i, i % 2 == 0, i % 100 - 50, -i, i * 1000 - 7, i / 4, i * -1.5, f"s{i}é" * (i % 50),
                bytes([i % 256]) * (i % 20), dt.date(1960, 1, 1) + dt.timedelta(days=i),
                Decimal(i) / 100, dt.datetime(2001, 12, 31, 23, 59, 59, 999) + dt.timedelta(
                    microseconds=i * 1001),
                dt.datetime(2024, 5, 6, tzinfo=dt.timezone.utc) + dt.timedelta(seconds=i))
    table = pa.Table.from_pylist([dict(zip(schema.names, row(i))) for i in range(20_000)],
                                 schema=schema)
    with writer.PyFluss(apache_fluss.bootstrap_servers) as w:
        w.upsert(name, table.to_pylist())
    snapshots = _wait_for_snapshots(fluss, name)
    parts = [pa.Table.from_batches(list(fluss.read_snapshot(name, b, s.snapshot_id,
                                                            batch_size_bytes=64 << 10)))
             for b, s in snapshots.items()]
    assert all(len(p.to_batches()) > 1 for p in parts)     # many batches of about 64 KiB
    got = pa.concat_tables(parts).sort_by("id")
    assert got.schema == schema
    assert got.equals(table)


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


def test_a_pin_on_a_snapshot_retention_removed_is_reported_unavailable(fluss, apache_fluss):
    """Fluss 0.9.1 grants a pin on a snapshot that no longer exists without saying so; the client
    checks each pin, so the caller re-lists and pins a snapshot that does exist."""
    name = f"wire_{uuid.uuid4().hex[:8]}.retained"
    fluss.create_database(name.split(".")[0])
    fluss.create_table(name, PK_SCHEMA, primary_key=["id"], buckets=1)
    with writer.PyFluss(apache_fluss.bootstrap_servers) as w:
        w.upsert(name, [(0, "first", 0)])
        first = _wait_for_snapshots(fluss, name)[0].snapshot_id
        # Two snapshots are retained (kv.snapshot.num-retained): two more remove the first.
        for n in (1, 2):
            w.upsert(name, [(n, f"v{n}", n)])
            _wait_for_snapshots(fluss, name)
    deadline = time.monotonic() + 60
    while True:
        try:
            fluss.kv_snapshot_files(name, 0, first)
        except KvSnapshotNotExist:
            break
        assert time.monotonic() < deadline, f"snapshot {first} was never removed"
        time.sleep(0.5)
    table_id = fluss.get_table(name).table_id
    latest = fluss.latest_kv_snapshots(name)[0].snapshot_id
    lease = f"lease-{uuid.uuid4().hex[:8]}"
    try:
        assert fluss.acquire_kv_snapshot_lease(lease, 60_000, {table_id: {0: first}}) == {
            table_id: {0: first}}
        assert fluss.acquire_kv_snapshot_lease(lease, 60_000, {table_id: {0: latest}}) == {}
    finally:
        fluss.drop_kv_snapshot_lease(lease)
    with pytest.raises(KvSnapshotNotExist, match="snapshot"):
        list(fluss.read_snapshot(name, 0, first))
    assert _rows(fluss.read_snapshot(name, 0, latest)) == [(0, "first", 0), (1, "v1", 1),
                                                           (2, "v2", 2)]
