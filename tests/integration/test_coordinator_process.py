"""The coordinator as a real process: tables over RPC, recovery after kill -9, election, bad
input."""

import socket

import pytest

from fluss_spark.errors import (InvalidConfig, InvalidRequest, InvalidTable, LeaderNotAvailable,
                                NotCoordinatorLeader, TableAlreadyExist, TableNotExist)
from fluss_spark.metadata.layout import TabletRecord
from fluss_spark.metadata.store import MetadataStore
from fluss_spark.protocol.api import ApiKey
from fluss_spark.protocol.arrow_ipc import deserialize_schema, serialize_schema
from fluss_spark.protocol.types import parse_schema
from fluss_spark.testing.coordinator import (CoordinatorProcess, call_until_leader,
                                            place_snapshot_file)
from fluss_spark.local.ports import wait_until

SCHEMA = parse_schema("id BIGINT NOT NULL, name STRING, amount DECIMAL(10, 2)")


def table_body(name="db.t", **kw):
    body = {"name": name, "schema": serialize_schema(SCHEMA), "primary_key": ["id"],
            "bucket_key": [], "num_buckets": 3, "properties": {"kv.snapshot.num-retained": "3"},
            "ignore_if_exists": False}
    body.update(kw)
    return body


@pytest.fixture
def meta(zk_address):
    store = MetadataStore(zk_address).start()
    yield store
    store.close()


@pytest.fixture
def coordinator(zk_address, tmp_path):
    proc = CoordinatorProcess(zk_address, tmp_path / "coord").start()
    yield proc
    proc.stop()
    print(proc.log())


def test_table_lifecycle_over_rpc(coordinator, meta):
    conn = coordinator.connection()
    with pytest.raises(LeaderNotAvailable, match="no tablet server is registered; start one"):
        conn.call_raw(ApiKey.CREATE_TABLE, table_body())
    for i in (2, 1):
        meta.register_tablet(TabletRecord(id=i, host="127.0.0.1", port=9000 + i))
    table_id = conn.call_raw(ApiKey.CREATE_TABLE, table_body())["table_id"]
    with pytest.raises(TableAlreadyExist):
        conn.call_raw(ApiKey.CREATE_TABLE, table_body())
    assert conn.call_raw(ApiKey.CREATE_TABLE, table_body(ignore_if_exists=True)) == {
        "table_id": table_id}
    assert conn.call_raw(ApiKey.LIST_TABLES, {}) == {"tables": ["db.t"]}
    md = conn.call_raw(ApiKey.GET_METADATA, {"tables": ["db.t"]})
    assert md["coordinator"] == {"host": coordinator.host, "port": coordinator.port}
    (info,) = md["tables"]
    assert deserialize_schema(info["schema"]) == SCHEMA
    assert (info["primary_key"], info["bucket_key"], info["num_buckets"]) == (["id"], ["id"], 3)
    ids = [1, 2]
    assert info["assignment"] == {b: ids[(table_id + b) % 2] for b in range(3)}
    assert info["properties"] == {"kv.snapshot.num-retained": "3"}
    conn.call_raw(ApiKey.DROP_TABLE, {"name": "db.t", "ignore_if_not_exists": False})
    assert conn.call_raw(ApiKey.LIST_TABLES, {}) == {"tables": []}
    with pytest.raises(TableNotExist):
        conn.call_raw(ApiKey.DROP_TABLE, {"name": "db.t", "ignore_if_not_exists": False})
    assert conn.call_raw(ApiKey.DROP_TABLE, {"name": "db.t", "ignore_if_not_exists": True}) == {}
    with pytest.raises(TableNotExist):
        conn.call_raw(ApiKey.GET_METADATA, {"tables": ["db.t"]})


def test_bad_input_gets_clear_errors_and_the_server_keeps_serving(coordinator, meta):
    meta.register_tablet(TabletRecord(id=1, host="127.0.0.1", port=9001))
    conn = coordinator.connection()
    with pytest.raises(InvalidTable, match="invalid table name"):
        conn.call_raw(ApiKey.CREATE_TABLE, table_body(name="no-dots"))
    with pytest.raises(InvalidTable, match="primary key column 'nope'"):
        conn.call_raw(ApiKey.CREATE_TABLE, table_body(primary_key=["nope"]))
    with pytest.raises(InvalidConfig, match="unknown table property"):
        conn.call_raw(ApiKey.CREATE_TABLE, table_body(properties={"bogus": "1"}))
    with pytest.raises(InvalidRequest, match="lease_id"):
        conn.call_raw(ApiKey.ACQUIRE_KV_SNAPSHOT_LEASE, {"duration_ms": 1, "tables": {}})
    with pytest.raises(TableNotExist):
        conn.call_raw(ApiKey.COMMIT_KV_SNAPSHOT, {"table_id": 77, "bucket": 0, "snapshot_id": 1,
                                              "path": "/x", "log_offset": 0, "row_count": 0})
    with socket.create_connection((coordinator.host, coordinator.port)) as s:
        s.sendall(b"\x00\x00\x00\x05garbage-garbage")
    assert conn.call_raw(ApiKey.LIST_TABLES, {}) == {"tables": []}


def test_kill_9_and_restart_recovers_tables_and_snapshots(coordinator, meta, tmp_path):
    meta.register_tablet(TabletRecord(id=1, host="127.0.0.1", port=9001))
    conn = coordinator.connection()
    table_id = conn.call_raw(ApiKey.CREATE_TABLE, table_body())["table_id"]
    for s in (1, 2):
        conn.call_raw(ApiKey.COMMIT_KV_SNAPSHOT, {
            "table_id": table_id, "bucket": 2, "snapshot_id": s,
            "path": place_snapshot_file(coordinator.remote_data_dir, table_id, 2, s),
            "log_offset": s, "row_count": s, "size_bytes": 0, "created_ms": 5})
    coordinator.kill()
    coordinator.start(timeout_s=60)
    conn = coordinator.connection()
    snaps = call_until_leader(conn, ApiKey.LIST_KV_SNAPSHOTS, {"table_id": table_id},
                              timeout_s=60)["snapshots"]
    assert [(s["bucket"], s["snapshot_id"], s["log_offset"]) for s in snaps] == [(2, 1, 1),
                                                                                (2, 2, 2)]
    assert conn.call_raw(ApiKey.GET_METRICS, {})["metrics"]["table_count"] == 1
    next_id = conn.call_raw(ApiKey.CREATE_TABLE, table_body(name="db.u"))["table_id"]
    assert next_id == table_id + 1


def test_only_one_coordinator_is_active_and_a_standby_takes_over(zk_address, tmp_path, meta):
    meta.register_tablet(TabletRecord(id=1, host="127.0.0.1", port=9001))
    first = CoordinatorProcess(zk_address, tmp_path / "c1").start()
    second = CoordinatorProcess(zk_address, tmp_path / "c2").start()
    try:
        standby = second.connection()
        with pytest.raises(NotCoordinatorLeader) as e:
            standby.call_raw(ApiKey.LIST_KV_SNAPSHOT_LEASES, {})
        assert e.value.retriable
        # Metadata works everywhere and names the active coordinator.
        assert standby.call_raw(ApiKey.GET_METADATA, {})["coordinator"]["port"] == first.port
        first.connection().call_raw(ApiKey.CREATE_TABLE, table_body())
        first.kill()
        # The standby takes over once the dead leader's ZooKeeper session expires.
        assert call_until_leader(standby, ApiKey.LIST_KV_SNAPSHOT_LEASES, {},
                                 timeout_s=60) == {"leases": []}
        wait_until(lambda: (meta.active_coordinator() or None) and
                   meta.active_coordinator().port == second.port, 30, "the new active record")
        assert standby.call_raw(ApiKey.CREATE_TABLE, table_body(ignore_if_exists=True))[
            "table_id"] == 1
    finally:
        first.stop()
        second.stop()


def test_a_coordinator_paused_past_its_session_serves_and_writes_nothing_when_it_wakes(
        zk_address, tmp_path, meta):
    """A leader paused (SIGSTOP) while a standby took over must not answer from its stale state
    when it wakes, nor expire or delete leases the new leader keeps (writes are fenced)."""
    import os
    import signal
    import time

    from fluss_spark.errors import ApiError, LeaseNotFound
    remote = tmp_path / "remote"
    options = ["zookeeper.client.session-timeout=2s",
               "kv.snapshot.lease.expiration-check-interval=100ms"]
    meta.register_tablet(TabletRecord(id=1, host="127.0.0.1", port=9001))
    first = CoordinatorProcess(zk_address, tmp_path / "c1", options=options,
                               remote_data_dir=remote).start()
    second = CoordinatorProcess(zk_address, tmp_path / "c2", options=options,
                                remote_data_dir=remote).start()
    try:
        old, new = first.connection(), second.connection()
        t = call_until_leader(old, ApiKey.CREATE_TABLE, table_body())["table_id"]
        old.call_raw(ApiKey.COMMIT_KV_SNAPSHOT, {
            "table_id": t, "bucket": 0, "snapshot_id": 1,
            "path": place_snapshot_file(remote, t, 0, 1), "log_offset": 5, "row_count": 1,
            "size_bytes": 4, "created_ms": 1})
        old.call_raw(ApiKey.ACQUIRE_KV_SNAPSHOT_LEASE,
                 {"lease_id": "short", "duration_ms": 3_000, "tables": {t: {0: 1}}})
        os.kill(first.pid, signal.SIGSTOP)
        paused_at = time.monotonic()
        try:
            # The standby takes over once the paused leader's session expires, and keeps the
            # lease alive; the paused leader still holds its old copy, due to expire.
            call_until_leader(new, ApiKey.RENEW_KV_SNAPSHOT_LEASE,
                              {"lease_id": "short", "duration_ms": 3_600_000}, timeout_s=60)
            new.call_raw(ApiKey.ACQUIRE_KV_SNAPSHOT_LEASE,
                     {"lease_id": "later", "duration_ms": 3_600_000, "tables": {t: {0: 1}}})
            wait_until(lambda: time.monotonic() - paused_at > 4, 10, "the old copy to expire")
        finally:
            os.kill(first.pid, signal.SIGCONT)
        # Awake, the old leader neither answers from its stale state nor acts on it.
        for lease_id in ("later", "short"):
            with pytest.raises(ApiError) as err:
                old.call_raw(ApiKey.DESCRIBE_KV_SNAPSHOT_LEASE, {"lease_id": lease_id})
            assert err.value.retriable and not isinstance(err.value, LeaseNotFound), err.value
        wait_until(lambda: "stepping down" in first.log() or "session lost" in first.log()
                   or "ZooKeeper session lost" in first.log(), 30, "the old leader to step down")
        assert sorted(meta.lease_ids()) == ["later", "short"]
        assert meta.load_lease("short").expires_at_ms > time.time() * 1000 + 3_000_000
        assert new.call_raw(ApiKey.DESCRIBE_KV_SNAPSHOT_LEASE,
                            {"lease_id": "short"})["pin_count"] == 1
    finally:
        first.stop()
        second.stop()


def test_a_tree_of_the_old_snapshot_layout_is_recovered_and_moved_into_the_index(
        coordinator, meta):
    """A coordinator started on a ZooKeeper tree of the previous release (one znode per
    snapshot, a v3 lease) serves the same snapshots and lease, and rewrites the tree."""
    from fluss_spark.metadata import layout
    from fluss_spark.protocol.codec import packb
    from fluss_spark.testing.legacy_snapshots import write_v1_snapshots
    meta.register_tablet(TabletRecord(id=1, host="127.0.0.1", port=9001))
    conn = coordinator.connection()
    table_id = conn.call_raw(ApiKey.CREATE_TABLE, table_body())["table_id"]
    for b in range(3):
        for s in (1, 2):
            conn.call_raw(ApiKey.COMMIT_KV_SNAPSHOT, {
                "table_id": table_id, "bucket": b, "snapshot_id": s,
                "path": place_snapshot_file(coordinator.remote_data_dir, table_id, b, s),
                "log_offset": s * 10, "row_count": s, "size_bytes": 4, "created_ms": 5})
    before = conn.call_raw(ApiKey.LIST_KV_SNAPSHOTS, {"table_id": table_id})["snapshots"]
    coordinator.stop()
    # Turn the tree into what the previous release wrote.
    records = meta.all_snapshots()
    meta.zk.delete(layout.snapshot_index_path(table_id), recursive=True)
    write_v1_snapshots(meta.zk, records)
    meta.zk.create(layout.lease_path("old-job"), packb({
        "v": 3, "lease_id": "old-job", "created_ms": 1, "expires_at_ms": 2 ** 50,
        "state": "ok", "holders": {table_id: "q"}, "owner": None,
        "pins": [{"t": table_id, "e": "dense", "s": [1, -1, 2]}], "generation": 1,
        "chunks": 0, "payload_bytes": 0, "payload_crc": 0}))
    coordinator.start(timeout_s=60)
    conn = coordinator.connection()
    after = call_until_leader(conn, ApiKey.LIST_KV_SNAPSHOTS, {"table_id": table_id},
                              timeout_s=60)["snapshots"]
    pinned = {(0, 1): ["old-job"], (2, 2): ["old-job"]}
    assert after == [dict(s, pinned_by=pinned.get((s["bucket"], s["snapshot_id"]), []))
                     for s in before]
    info = conn.call_raw(ApiKey.DESCRIBE_KV_SNAPSHOT_LEASE, {"lease_id": "old-job"})
    assert info["tables"] == {table_id: {0: 1, 2: 2}} and info["holders"] == {table_id: "q"}
    assert meta.zk.get_children(layout.SNAPSHOTS) == []
    assert meta.zk.get_children(layout.snapshot_index_path(table_id)) == ["0"]
    # A kill -9 now recovers from the index alone.
    coordinator.kill()
    coordinator.start(timeout_s=60)
    conn = coordinator.connection()
    assert call_until_leader(conn, ApiKey.LIST_KV_SNAPSHOTS, {"table_id": table_id},
                             timeout_s=60)["snapshots"] == after
