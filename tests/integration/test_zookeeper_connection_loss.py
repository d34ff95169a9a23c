"""ZooKeeper unreachable in the middle of a lease call: a retriable error, never a half write.

Each test runs a ZooKeeper of its own (the session-wide one must never be stopped) and a real
coordinator process on it, then stops ZooKeeper (SIGSTOP: it hangs, the coordinator only
notices when its reads time out) or kills it (the coordinator notices at once and waits to
reconnect) while a lease call is on its way.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from fluss_spark.client import FlussConnection
from fluss_spark.errors import ApiError, MetadataStoreUnavailable
from fluss_spark.metadata.layout import TabletRecord
from fluss_spark.metadata.store import MetadataStore
from fluss_spark.protocol.api import ApiKey
from fluss_spark.protocol.arrow_ipc import serialize_schema
from fluss_spark.protocol.types import parse_schema
from fluss_spark.testing.coordinator import (CoordinatorProcess, call_until_leader,
                                            place_snapshot_file)
from fluss_spark.local.ports import wait_until
from fluss_spark.local.zookeeper import ZooKeeperProcess

HOUR = 3_600_000
#: The coordinator's ZooKeeper session timeout. kazoo drops a silent connection after 2/3 of
#: it (4 s), and a stop of ZooKeeper shorter than it keeps the session (and the leadership).
SESSION_S = 6


@dataclass
class Outage:
    """A dedicated ZooKeeper, a coordinator on it, and a table with snapshot 1 in buckets 0, 1."""

    zk: ZooKeeperProcess
    coordinator: CoordinatorProcess
    address: str
    table_id: int

    def stop_zookeeper(self) -> None:
        os.kill(self.zk.proc.pid, signal.SIGSTOP)

    def resume_zookeeper(self) -> None:
        if self.zk.proc.poll() is None:
            os.kill(self.zk.proc.pid, signal.SIGCONT)

    def stored_leases(self) -> dict:
        """What ZooKeeper holds, read by a client of its own: {lease_id: LeaseRecord}."""
        store = MetadataStore(self.address).start()
        try:
            return {i: store.load_lease(i) for i in store.lease_ids()}
        finally:
            store.close()


@pytest.fixture
def outage(tmp_path):
    zk = ZooKeeperProcess(tmp_path / "zk").start()
    address = f"{zk.address}/fluss"
    coordinator = None
    try:
        coordinator = CoordinatorProcess(
            address, tmp_path / "coord",
            options=[f"zookeeper.client.session-timeout={SESSION_S}s"]).start()
        table_id = _table_with_snapshots(coordinator, address, tmp_path / "coord" / "remote")
        ctx = Outage(zk, coordinator, address, table_id)
        try:
            yield ctx
        finally:
            ctx.resume_zookeeper()   # whatever the test did, never leave ZooKeeper stopped
    finally:
        if coordinator is not None:
            coordinator.stop()
            print(coordinator.log())
        zk.stop()


def _table_with_snapshots(coordinator, address: str, remote: Path) -> int:
    # Creating a table needs a registered tablet server; this one only has to exist meanwhile.
    store = MetadataStore(address).start()
    try:
        store.register_tablet(TabletRecord(id=0, host="127.0.0.1", port=1))
        conn = coordinator.connection()
        table_id = call_until_leader(conn, ApiKey.CREATE_TABLE, {
            "name": "db.t", "schema": serialize_schema(parse_schema("id BIGINT NOT NULL")),
            "primary_key": ["id"], "bucket_key": [], "num_buckets": 2, "properties": {},
            "ignore_if_exists": False})["table_id"]
    finally:
        store.close()
    for bucket in (0, 1):
        path = place_snapshot_file(remote, table_id, bucket, 1)
        conn.call_raw(ApiKey.COMMIT_KV_SNAPSHOT, {
            "table_id": table_id, "bucket": bucket, "snapshot_id": 1, "path": path,
            "log_offset": 10, "row_count": 1, "size_bytes": 4, "created_ms": 1})
    return table_id


def succeeds(conn, api_key, body):
    """The call's answer, or None while it fails with a retriable error (ZooKeeper not back)."""
    try:
        return conn.call_raw(api_key, body) or {"ok": True}
    except ApiError as e:
        if not e.retriable:
            raise
        return None


def memory_leases(conn) -> dict:
    """The coordinator's view (served from memory): {lease_id: lease info}."""
    return {x["lease_id"]: x for x in conn.call_raw(ApiKey.LIST_KV_SNAPSHOT_LEASES, {})["leases"]}


def pin_count(conn) -> int:
    """Pins the coordinator counts (its reference counts, not recomputed from the leases)."""
    return conn.call_raw(ApiKey.GET_METRICS, {})["metrics"]["lease_pin_count"]


def assert_memory_matches_zookeeper(ctx, conn) -> None:
    in_memory = memory_leases(conn)
    stored = ctx.stored_leases()
    assert sorted(in_memory) == sorted(stored)
    for lease_id, info in in_memory.items():
        rec = stored[lease_id]
        assert (info["tables"], info["holders"], info["expires_at_ms"]) == \
            (rec.tables, rec.holders, rec.expires_at_ms)
    assert pin_count(conn) == sum(x["pin_count"] for x in in_memory.values())


def test_an_acquire_while_zookeeper_hangs_is_retriable_and_applied_once_or_not_at_all(outage):
    conn = outage.coordinator.connection()   # waits 30 s: longer than kazoo's 4 s read timeout
    t = outage.table_id
    call_until_leader(conn, ApiKey.ACQUIRE_KV_SNAPSHOT_LEASE, {
        "lease_id": "before", "duration_ms": HOUR, "tables": {t: {0: 1}}})
    before = memory_leases(conn)["before"]
    request = {"lease_id": "during", "duration_ms": HOUR, "tables": {t: {1: 1}},
               "holder": "query-1"}
    outage.stop_zookeeper()
    try:
        with pytest.raises(MetadataStoreUnavailable) as err:
            conn.call_raw(ApiKey.ACQUIRE_KV_SNAPSHOT_LEASE, request)
    finally:
        outage.resume_zookeeper()
    assert err.value.retriable and err.value.code == 1005
    assert f"zk {outage.address}" in str(err.value) and "'during'" in str(err.value)

    # The coordinator did not apply the failed call; ZooKeeper has it whole or not at all.
    assert memory_leases(conn) == {"before": before}
    assert pin_count(conn) == 1
    stored = outage.stored_leases()
    assert stored["before"].tables == {t: {0: 1}}
    assert "during" not in stored or stored["during"].tables == {t: {1: 1}}

    reply = wait_until(lambda: succeeds(conn, ApiKey.ACQUIRE_KV_SNAPSHOT_LEASE, request), 60,
                       "the same acquire to succeed once ZooKeeper is back")
    assert reply["unavailable"] == {}
    leases = memory_leases(conn)
    assert leases["before"] == before
    assert leases["during"]["tables"] == {t: {1: 1}}
    assert leases["during"]["holders"] == {t: "query-1"}
    assert_memory_matches_zookeeper(outage, conn)


def test_a_drop_while_zookeeper_is_down_fails_within_the_session_timeout_not_forever(outage):
    conn = outage.coordinator.connection()
    t = outage.table_id
    call_until_leader(conn, ApiKey.ACQUIRE_KV_SNAPSHOT_LEASE, {
        "lease_id": "job", "duration_ms": HOUR, "tables": {t: {0: 1, 1: 1}}})
    held = memory_leases(conn)["job"]
    outage.zk.kill()   # the coordinator sees its connection close and tries to reconnect
    try:
        started = time.monotonic()
        with pytest.raises(MetadataStoreUnavailable) as err:
            conn.call_raw(ApiKey.DROP_KV_SNAPSHOT_LEASE, {"lease_id": "job"})
        # kazoo would wait for the reconnection without limit; the store gives up after one
        # session timeout so the caller hears "retry" instead of hanging.
        assert time.monotonic() - started < SESSION_S + 5
        assert err.value.retriable and "'job'" in str(err.value)
        # Calls served from memory answer with the unchanged lease while the coordinator can
        # still be sure it leads (within its session), and a retriable error after that.
        assert succeeds(conn, ApiKey.LIST_KV_SNAPSHOT_LEASES, {}) in (
            None, {"leases": [held]})
    finally:
        outage.zk.start()   # same port and data: the coordinator's session survives
    metrics = wait_until(lambda: succeeds(conn, ApiKey.GET_METRICS, {}), 60,
                         "the coordinator to reach ZooKeeper again")
    assert metrics["metrics"]["lease_pin_count"] == 2
    assert outage.stored_leases()["job"].tables == {t: {0: 1, 1: 1}}
    wait_until(lambda: succeeds(conn, ApiKey.DROP_KV_SNAPSHOT_LEASE, {"lease_id": "job"}), 60,
               "the same drop to succeed once ZooKeeper is back")
    assert memory_leases(conn) == {}
    assert_memory_matches_zookeeper(outage, conn)
    assert outage.stored_leases() == {}


def test_the_client_retries_a_lease_call_until_zookeeper_is_back(outage):
    coordinator = outage.coordinator
    result = {}
    with FlussConnection(f"127.0.0.1:{coordinator.port}", request_timeout_s=60) as fc:
        admin = fc.admin()
        admin.list_kv_snapshot_leases()   # metadata known before the outage
        outage.stop_zookeeper()
        try:
            def call():
                try:
                    result["unavailable"] = admin.acquire_kv_snapshot_lease(
                        "job-1", HOUR, {outage.table_id: {0: 1}})
                except Exception as e:  # noqa: BLE001 - reported below
                    result["error"] = e
            t = threading.Thread(target=call)
            t.start()
            # The coordinator answers "retry" at least once (and logs it); the client retries.
            wait_until(lambda: "lost its ZooKeeper connection" in coordinator.log(), 60,
                       "the coordinator to report the outage")
        finally:
            outage.resume_zookeeper()
        t.join(60)
        assert result == {"unavailable": {}}, result
        assert [x.lease_id for x in admin.list_kv_snapshot_leases()] == ["job-1"]
    assert_memory_matches_zookeeper(outage, coordinator.connection())
