"""KV snapshot leases through a real coordinator process: kill -9, expiry, GC, old servers."""

import threading
from pathlib import Path

import pytest

from fluss_spark.transport.client import RpcConnection
from fluss_spark.errors import (InvalidRequest, LeaseHeldByOther, LeaseNotFound,
                                UnsupportedVersion)
from fluss_spark.metadata.layout import TabletRecord
from fluss_spark.metadata.store import MetadataStore
from fluss_spark.protocol.api import LEASE_APIS, ApiKey
from fluss_spark.protocol.arrow_ipc import serialize_schema
from fluss_spark.protocol.types import parse_schema
from fluss_spark.server.snapshot_store import snapshot_location
from fluss_spark.testing.coordinator import (CoordinatorProcess, call_until_leader,
                                            place_snapshot_file)
from fluss_spark.local.ports import wait_until

HOUR = 3_600_000


@pytest.fixture
def meta(zk_address):
    """A store with one registered tablet server, so tables can be created."""
    store = MetadataStore(zk_address).start()
    store.register_tablet(TabletRecord(id=0, host="127.0.0.1", port=1))
    yield store
    store.close()


@pytest.fixture
def coordinator(zk_address, tmp_path, meta):
    proc = CoordinatorProcess(zk_address, tmp_path / "coord",
                              options=["kv.snapshot.lease.expiration-check-interval=100ms"])
    proc.start()
    yield proc
    if proc.proc.poll() is None:
        proc.stop()
    print(proc.log())


def create_table(conn, name="db.t", buckets=2, **props) -> int:
    return call_until_leader(conn, ApiKey.CREATE_TABLE, {
        "name": name, "schema": serialize_schema(parse_schema("id BIGINT NOT NULL, v STRING")),
        "primary_key": ["id"], "bucket_key": [], "num_buckets": buckets,
        "properties": props, "ignore_if_exists": False})["table_id"]


def commit(conn, remote: Path, table_id, bucket, snapshot_id) -> Path:
    f = Path(place_snapshot_file(remote, table_id, bucket, snapshot_id))
    conn.call_raw(ApiKey.COMMIT_KV_SNAPSHOT, {
        "table_id": table_id, "bucket": bucket, "snapshot_id": snapshot_id, "path": str(f),
        "log_offset": snapshot_id * 10, "row_count": 1, "size_bytes": 4, "created_ms": 1})
    return f


def snapshot_ids(conn, table_id, bucket):
    return [s["snapshot_id"] for s in conn.call_raw(ApiKey.LIST_KV_SNAPSHOTS,
                                                 {"table_id": table_id,
                                                  "bucket": bucket})["snapshots"]]


def test_kill_9_right_after_a_granted_acquire_keeps_the_lease(coordinator, tmp_path):
    conn = coordinator.connection()
    table_id = create_table(conn)
    remote = tmp_path / "coord" / "remote"
    commit(conn, remote, table_id, 0, 1)
    commit(conn, remote, table_id, 1, 1)
    reply = conn.call_raw(ApiKey.ACQUIRE_KV_SNAPSHOT_LEASE, {
        "lease_id": "job-1", "duration_ms": HOUR, "tables": {table_id: {0: 1, 1: 1}},
        "holder": "query-a"})
    assert reply["unavailable"] == {}
    coordinator.kill()
    coordinator.start(timeout_s=60)
    conn = coordinator.connection()
    info = call_until_leader(conn, ApiKey.DESCRIBE_KV_SNAPSHOT_LEASE, {"lease_id": "job-1"},
                             timeout_s=60)
    assert info["tables"] == {table_id: {0: 1, 1: 1}}
    assert info["holders"] == {table_id: "query-a"}
    assert info["expires_at_ms"] == reply["expires_at_ms"]
    # The holder survived too: another query still cannot move the pins.
    with pytest.raises(LeaseHeldByOther):
        conn.call_raw(ApiKey.ACQUIRE_KV_SNAPSHOT_LEASE, {
            "lease_id": "job-1", "duration_ms": HOUR, "tables": {table_id: {0: 1}},
            "holder": "query-b"})
    # The pins still protect after the restart.
    commit(conn, remote, table_id, 0, 2)
    commit(conn, remote, table_id, 0, 3)
    assert snapshot_ids(conn, table_id, 0) == [1, 2, 3]


def test_a_leased_snapshot_survives_two_newer_ones_and_is_collected_after_release(coordinator,
                                                                                   tmp_path):
    conn = coordinator.connection()
    table_id = create_table(conn)
    remote = tmp_path / "coord" / "remote"
    first = commit(conn, remote, table_id, 0, 1)
    conn.call_raw(ApiKey.ACQUIRE_KV_SNAPSHOT_LEASE, {"lease_id": "a", "duration_ms": HOUR,
                                                 "tables": {table_id: {0: 1}}})
    commit(conn, remote, table_id, 0, 2)
    commit(conn, remote, table_id, 0, 3)
    snaps = conn.call_raw(ApiKey.LIST_KV_SNAPSHOTS, {"table_id": table_id})["snapshots"]
    assert [(s["snapshot_id"], s["pinned_by"]) for s in snaps] == [(1, ["a"]), (2, []), (3, [])]
    assert first.exists()
    latest = conn.call_raw(ApiKey.LIST_KV_SNAPSHOTS, {"table_id": table_id, "latest_only": True})
    assert [s["snapshot_id"] for s in latest["snapshots"]] == [3]
    metrics = conn.call_raw(ApiKey.GET_METRICS, {})
    assert metrics["metrics"]["lease_count"] == 1
    assert metrics["metrics"]["leased_snapshot_count"] == 1
    assert metrics["tables"]["db.t"] == {"snapshot_count": 3, "leased_snapshot_count": 1,
                                         "lease_pin_count": 1}
    reply = conn.call_raw(ApiKey.RELEASE_KV_SNAPSHOT_LEASE, {"lease_id": "a",
                                                         "tables": {table_id: [0]}})
    assert reply == {"remaining_pins": 0}
    assert snapshot_ids(conn, table_id, 0) == [2, 3]
    assert not first.exists()
    assert conn.call_raw(ApiKey.LIST_KV_SNAPSHOT_LEASES, {}) == {"leases": []}


def test_expiry_in_the_server_collects_snapshots_and_renew_then_fails(coordinator, tmp_path):
    conn = coordinator.connection()
    table_id = create_table(conn)
    remote = tmp_path / "coord" / "remote"
    first = commit(conn, remote, table_id, 0, 1)
    conn.call_raw(ApiKey.ACQUIRE_KV_SNAPSHOT_LEASE, {"lease_id": "short", "duration_ms": 300,
                                                 "tables": {table_id: {0: 1}}})
    commit(conn, remote, table_id, 0, 2)
    commit(conn, remote, table_id, 0, 3)
    assert first.exists()
    wait_until(lambda: not first.exists(), 10, "the expired lease's snapshot to be collected",
               interval_s=0.05)
    assert snapshot_ids(conn, table_id, 0) == [2, 3]
    with pytest.raises(LeaseNotFound, match="does not exist or has expired"):
        conn.call_raw(ApiKey.RENEW_KV_SNAPSHOT_LEASE, {"lease_id": "short", "duration_ms": 1000})


def test_acquire_of_a_missing_snapshot_over_rpc_is_unavailable(coordinator):
    conn = coordinator.connection()
    table_id = create_table(conn)
    reply = conn.call_raw(ApiKey.ACQUIRE_KV_SNAPSHOT_LEASE, {
        "lease_id": "x", "duration_ms": HOUR, "tables": {table_id: {0: 42}, 999: {3: 1}}})
    assert reply["unavailable"] == {table_id: {0: 42}, 999: {3: 1}}
    assert conn.call_raw(ApiKey.DESCRIBE_KV_SNAPSHOT_LEASE, {"lease_id": "x"})["pin_count"] == 0


def test_table_drop_clears_pins_and_files(coordinator, tmp_path, meta):
    conn = coordinator.connection()
    keep_id = create_table(conn, "db.keep")
    drop_id = create_table(conn, "db.gone")
    remote = tmp_path / "coord" / "remote"
    commit(conn, remote, keep_id, 0, 1)
    gone_file = commit(conn, remote, drop_id, 1, 1)
    conn.call_raw(ApiKey.ACQUIRE_KV_SNAPSHOT_LEASE, {"lease_id": "a", "duration_ms": HOUR,
                                                 "tables": {keep_id: {0: 1}, drop_id: {1: 1}}})
    conn.call_raw(ApiKey.DROP_TABLE, {"name": "db.gone", "ignore_if_not_exists": False})
    info = conn.call_raw(ApiKey.DESCRIBE_KV_SNAPSHOT_LEASE, {"lease_id": "a"})
    assert info["tables"] == {keep_id: {0: 1}}
    assert meta.load_lease("a").tables == {keep_id: {0: 1}}
    assert not gone_file.exists() and not (remote / str(drop_id)).exists()
    assert meta.snapshot_buckets(drop_id) == []


def test_concurrent_clients_stay_consistent(coordinator, tmp_path, meta):
    conn = coordinator.connection()
    table_id = create_table(conn, buckets=8)
    remote = tmp_path / "coord" / "remote"
    for b in range(8):
        commit(conn, remote, table_id, b, 1)
    errors = []

    def client(n):
        c = RpcConnection(coordinator.host, coordinator.port)
        try:
            for i in range(25):
                lease, b = f"l{(n + i) % 3}", (n * 3 + i) % 8
                op = (n + 2 * i) % 4
                if op < 2:
                    c.call_raw(ApiKey.ACQUIRE_KV_SNAPSHOT_LEASE, {
                        "lease_id": lease, "duration_ms": HOUR, "tables": {table_id: {b: 1}}})
                elif op == 2:
                    c.call_raw(ApiKey.RELEASE_KV_SNAPSHOT_LEASE, {"lease_id": lease,
                                                              "tables": {table_id: [b]}})
                else:
                    c.call_raw(ApiKey.DROP_KV_SNAPSHOT_LEASE, {"lease_id": lease})
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)
        finally:
            c.close()

    threads = [threading.Thread(target=client, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    served = {le["lease_id"]: le["tables"]
              for le in conn.call_raw(ApiKey.LIST_KV_SNAPSHOT_LEASES, {})["leases"]}
    stored = {r.lease_id: r.tables for r in meta.load_leases()}
    assert served == stored
    pins = {}
    for tables in served.values():
        for b in tables.get(table_id, {}):
            pins[b] = pins.get(b, 0) + 1
    metrics = conn.call_raw(ApiKey.GET_METRICS, {})["metrics"]
    assert metrics["lease_pin_count"] == sum(pins.values())
    assert metrics["lease_count"] == len(served)


def test_a_coordinator_without_lease_apis_reports_unsupported_version(zk_address, tmp_path, meta):
    proc = CoordinatorProcess(zk_address, tmp_path / "old", disable_apis=["kv_snapshot_lease"])
    proc.start()
    try:
        conn = RpcConnection(proc.host, proc.port)
        for key in LEASE_APIS:
            assert conn.supports(key) is False
        assert conn.supports(ApiKey.LIST_KV_SNAPSHOTS) is True
        with pytest.raises(UnsupportedVersion, match="does not support API "
                                                     "ACQUIRE_KV_SNAPSHOT_LEASE"):
            conn.call_raw(ApiKey.ACQUIRE_KV_SNAPSHOT_LEASE, {"lease_id": "a", "duration_ms": 1,
                                                         "tables": {}})
        # Everything else still works on such a server.
        assert create_table(conn) >= 1
        assert call_until_leader(conn, ApiKey.LIST_TABLES, {}) == {"tables": ["db.t"]}
    finally:
        proc.stop()


def test_a_client_cannot_make_the_coordinator_delete_data(coordinator, tmp_path):
    """Snapshot commits naming foreign paths, far-future ids or missing files are refused, so
    retention never deletes a real snapshot or anything outside the store."""
    conn = coordinator.connection()
    table_id = create_table(conn, buckets=1)
    remote = tmp_path / "coord" / "remote"
    real = commit(conn, remote, table_id, 0, 1)
    victim = tmp_path / "precious"
    victim.mkdir()
    (victim / "data").write_text("keep me")

    def forged(snapshot_id, path):
        return {"table_id": table_id, "bucket": 0, "snapshot_id": snapshot_id, "path": path,
                "log_offset": 0, "row_count": 0}
    for i, path in enumerate([str(victim), "", str(remote / ".." / "precious"), str(remote)]):
        with pytest.raises(InvalidRequest, match="not its place in the snapshot store"):
            conn.call_raw(ApiKey.COMMIT_KV_SNAPSHOT, forged(10**15 + i, path))
    # Its own location, but nothing was written there.
    with pytest.raises(InvalidRequest, match="no snapshot file"):
        conn.call_raw(ApiKey.COMMIT_KV_SNAPSHOT, forged(10**15, snapshot_location(
            str(remote), table_id, 0, 10**15)))
    # Ids must follow the bucket's last one (an old file must not come back).
    old = place_snapshot_file(remote, table_id, 0, 0)
    with pytest.raises(InvalidRequest, match="must follow the bucket's last one, 1"):
        conn.call_raw(ApiKey.COMMIT_KV_SNAPSHOT, forged(0, old))
    # A retry of the real commit (its answer lost) is accepted and changes nothing.
    conn.call_raw(ApiKey.COMMIT_KV_SNAPSHOT,
                  {**forged(1, str(real)), "log_offset": 10, "row_count": 1})
    assert snapshot_ids(conn, table_id, 0) == [1]
    assert real.exists() and (victim / "data").read_text() == "keep me"


def test_kill_9_after_a_one_bucket_change_of_a_lease_in_part_znodes_keeps_both(
        coordinator, tmp_path, meta):
    """A lease big enough for its pins to live in child znodes (1024 buckets with ids spread
    over a million): the first acquire and a later one-bucket move survive kill -9."""
    import random

    from fluss_spark.metadata import layout, lease_codec
    conn = coordinator.connection()
    table_id = create_table(conn, buckets=1024)
    remote = tmp_path / "coord" / "remote"
    rng = random.Random(4)
    ids = {b: rng.randrange(1, 10 ** 6) for b in range(1024)}
    for b, s in ids.items():
        commit(conn, remote, table_id, b, s)
    commit(conn, remote, table_id, 5, ids[5] + 1)
    reply = conn.call_raw(ApiKey.ACQUIRE_KV_SNAPSHOT_LEASE, {
        "lease_id": "wide", "duration_ms": HOUR, "tables": {table_id: ids}})
    assert reply["unavailable"] == {}
    children = meta.zk.get_children(layout.lease_path("wide"))
    assert children == [lease_codec.lease_part_name(table_id, 0, 1)]

    def kill_9_and_describe():
        """kill -9, restart: (a connection to the new coordinator, its view of the lease)."""
        coordinator.kill()
        coordinator.start(timeout_s=60)
        c = coordinator.connection()
        return c, call_until_leader(c, ApiKey.DESCRIBE_KV_SNAPSHOT_LEASE, {"lease_id": "wide"},
                                    timeout_s=60)
    conn, info = kill_9_and_describe()
    assert info["tables"] == {table_id: ids}
    moved = {**ids, 5: ids[5] + 1}
    conn.call_raw(ApiKey.ACQUIRE_KV_SNAPSHOT_LEASE, {
        "lease_id": "wide", "duration_ms": HOUR, "tables": {table_id: {5: ids[5] + 1}}})
    conn, info = kill_9_and_describe()
    assert info["tables"] == {table_id: moved}
    assert meta.load_lease("wide").tables == {table_id: moved}
    assert meta.zk.get_children(layout.lease_path("wide")) == [
        lease_codec.lease_part_name(table_id, 0, 2)]
