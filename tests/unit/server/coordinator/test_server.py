"""CoordinatorServer in-process: recovery order and cleanup after an interrupted table drop."""

import dataclasses
import time
from pathlib import Path

import pytest

from fluss_spark.config import parse_server_options
from fluss_spark.errors import NotCoordinatorLeader
from fluss_spark.metadata.layout import TabletRecord
from fluss_spark.metadata.store import MetadataStore
from fluss_spark.protocol.api import ApiKey
from fluss_spark.protocol.arrow_ipc import serialize_schema
from fluss_spark.protocol.types import parse_schema
from fluss_spark.server.coordinator.server import CoordinatorServer
from fluss_spark.server.settings import ServerSettings
from fluss_spark.transport.client import RpcConnection
from fluss_spark.testing.clock import FakeClock
from fluss_spark.testing.coordinator import place_snapshot_file
from fluss_spark.local.ports import wait_until

HOUR = 3_600_000


@pytest.fixture
def settings(zk_address, tmp_path):
    return ServerSettings(role="coordinator", server_id=0, zookeeper=zk_address,
                          host="127.0.0.1", port=0, data_dir=tmp_path / "data",
                          remote_data_dir=str(tmp_path / "remote"),
                          options=parse_server_options([]))


@pytest.fixture
def meta(zk_address):
    store = MetadataStore(zk_address).start()
    store.register_tablet(TabletRecord(id=1, host="127.0.0.1", port=1))
    yield store
    store.close()


def start(settings, clock):
    server = CoordinatorServer(settings, clock=clock).start()
    assert server.is_leader
    return server, RpcConnection(server.host, server.port)


def test_restart_finishes_a_table_drop_that_a_crash_interrupted(settings, meta, tmp_path):
    clock = FakeClock()
    server, conn = start(settings, clock)
    try:
        table_id = conn.call_raw(ApiKey.CREATE_TABLE, {
            "name": "db.t", "schema": serialize_schema(parse_schema("id BIGINT")),
            "primary_key": ["id"], "num_buckets": 1, "properties": {}})["table_id"]
        f = Path(place_snapshot_file(settings.remote_data_dir, table_id, 0, 1))
        conn.call_raw(ApiKey.COMMIT_KV_SNAPSHOT, {"table_id": table_id, "bucket": 0,
                                              "snapshot_id": 1, "path": str(f),
                                              "log_offset": 0, "row_count": 0})
        conn.call_raw(ApiKey.ACQUIRE_KV_SNAPSHOT_LEASE, {"lease_id": "a", "duration_ms": HOUR,
                                                     "tables": {table_id: {0: 1}}})
    finally:
        server.stop()
    # The crash came right after the table znode was removed.
    meta.drop_table("db.t")
    server, conn = start(settings, clock)
    try:
        assert conn.call_raw(ApiKey.LIST_KV_SNAPSHOT_LEASES, {}) == {"leases": []}
        assert meta.snapshot_ids(table_id, 0) == []
        assert not f.exists()
    finally:
        server.stop()


def test_leader_only_requests_before_leadership_are_retriable(settings, meta):
    first, _ = start(settings, FakeClock())
    try:
        standby = CoordinatorServer(settings).start()
        try:
            assert not standby.is_leader
            conn = RpcConnection(standby.host, standby.port)
            with pytest.raises(NotCoordinatorLeader, match="not the active coordinator"):
                conn.call_raw(ApiKey.GET_METRICS, {})
            assert conn.call_raw(ApiKey.LIST_TABLES, {}) == {"tables": []}
        finally:
            standby.stop()
    finally:
        first.stop()


def _expiring_lease_server(settings, clock):
    settings = dataclasses.replace(settings, options=parse_server_options(
        ["kv.snapshot.lease.expiration-check-interval=30ms"]))
    server, _ = start(settings, clock)
    with server._lock:
        server.leases.acquire("short", 1000, {})
    clock.advance(5000)                  # the lease has expired
    return server


def test_lease_expiry_pauses_while_the_zookeeper_connection_is_suspended(settings, meta):
    # A coordinator that lost its ZooKeeper connection kept expiring leases from its stale
    # state; expiry now pauses until the connection is back, then catches up.
    clock = FakeClock()
    server = _expiring_lease_server(settings, clock)
    try:
        server._on_session_state("SUSPENDED")
        time.sleep(0.4)                  # more than ten expiry intervals
        assert meta.lease_ids() == ["short"], "expiry ran while suspended"
        server._on_session_state("CONNECTED")
        wait_until(lambda: meta.lease_ids() == [], 5, "expiry to resume", interval_s=0.02)
    finally:
        server.stop()


def test_lease_expiry_pauses_while_leadership_cannot_be_confirmed(settings, meta, monkeypatch):
    # A leader paused past its session wakes with its validity lapsed: until ZooKeeper confirms
    # the epoch is still its own, it expires nothing.
    clock = FakeClock()
    server = _expiring_lease_server(settings, clock)
    try:
        def unreachable():
            raise ConnectionError("ZooKeeper does not answer")
        monkeypatch.setattr(server._store, "still_writer", unreachable)
        server._valid_until = 0.0
        time.sleep(0.4)
        assert meta.lease_ids() == ["short"], "expiry ran with leadership unconfirmed"
        monkeypatch.undo()
        wait_until(lambda: meta.lease_ids() == [], 5, "expiry to resume", interval_s=0.02)
    finally:
        server.stop()
