"""kill -9 of ZooKeeper for 20 s under load: retriable errors in time, nothing lost after (real
processes, embedded ZooKeeper restarted on its port and data)."""

from __future__ import annotations

import os
import signal
import threading
import time

import pyarrow as pa
import pytest

from fluss_spark.errors import ApiError, FlussError
from fluss_spark.local.ports import wait_until

OUTAGE_S = 20


@pytest.fixture
def local(local_cluster):
    return local_cluster(tablets=2)      # its own ZooKeeper, which the test kills


def test_zookeeper_killed_for_20s_then_everything_serves_with_nothing_lost(local):
    conn = local.connection(request_timeout_s=5)
    admin = conn.admin()
    admin.create_table("zk.log", "k BIGINT", num_buckets=4)
    admin.create_table("zk.pk", "id BIGINT NOT NULL, v BIGINT", primary_key=["id"], num_buckets=2)
    writer = conn.writer("zk.log")
    acked: list[int] = []
    slow: list[float] = []
    errors: dict[str, int] = {}
    stop = threading.Event()

    def load():
        i = 0
        while not stop.is_set():
            started = time.monotonic()
            try:
                writer.append(pa.table({"k": pa.array([i], pa.int64())}))
                acked.append(i)
            except FlussError as e:
                errors[type(e).__name__] = errors.get(type(e).__name__, 0) + 1
                assert not isinstance(e, ApiError) or e.retriable, e
            slow.append(time.monotonic() - started)
            i += 1
            time.sleep(0.02)

    t = threading.Thread(target=load)
    t.start()
    try:
        wait_until(lambda: len(acked) > 20, 30, "writes before the outage")
        local.kill("zookeeper")
        down = time.monotonic()
        # Coordinator calls during the outage: a retriable error within the client timeout,
        # never a hang and never a non-retriable UnknownServerError.
        while time.monotonic() - down < OUTAGE_S:
            started = time.monotonic()
            try:
                admin.acquire_kv_snapshot_lease("during-outage", 60_000, {})
            except ApiError as e:
                assert e.retriable, e
            except FlussError:
                pass            # NetworkError and friends: retriable by nature
            assert time.monotonic() - started < 5 + 12, "a call hung past the client timeout"
            time.sleep(0.5)
        local.restart("zookeeper")
        wait_until(lambda: _serves(admin), 90, "the coordinator to serve again")
        n_before = len(acked)
        wait_until(lambda: len(acked) > n_before + 20, 60, "writes after the outage")
    finally:
        stop.set()
        t.join(30)
    assert max(slow) < 5 + 12, "a write hung past the client timeout"
    # Every acknowledged write is in the log (a write whose answer was lost may be there too).
    fresh = local.connection(request_timeout_s=20)
    latest = fresh.admin().list_offsets("zk.log", spec="latest")
    scanner = fresh.log_scanner("zk.log")
    got = [v for b, end in latest.items() for batch in scanner.read(b, 0, end)
           for v in batch.column("k").to_pylist()]
    assert set(acked) <= set(got), sorted(set(acked) - set(got))[:10]
    # Tables, snapshots and leases work again.
    fresh.writer("zk.pk").upsert(pa.table({"id": pa.array([1, 2], pa.int64()),
                                           "v": pa.array([1, 2], pa.int64())}))
    snap = fresh.admin().trigger_kv_snapshot("zk.pk")
    pins = {fresh.table("zk.pk").table_id: {b: s.snapshot_id for b, s in snap.items() if s}}
    assert fresh.admin().acquire_kv_snapshot_lease("after", 60_000, pins) == {}
    fresh.close()
    conn.close()


def _serves(admin) -> bool:
    try:
        admin.list_kv_snapshot_leases()
        return True
    except FlussError:
        return False


def test_servers_exit_at_once_on_sigterm_while_zookeeper_is_down(local):
    """A supervisor stopping a cluster whose ZooKeeper died does not wait out ZooKeeper's session
    timeout: each server closes its ZooKeeper client first, so loops blocked on it return."""
    local.connection().admin().create_table("zk.t", "k BIGINT", num_buckets=2)
    servers = list(local.servers.values())
    assert {s.role for s in servers} == {"coordinator", "tablet"}
    local.kill("zookeeper")
    for s in servers:
        os.kill(s.pid, signal.SIGTERM)
    wait_until(lambda: not any(s.alive for s in servers), 5,
               "the servers to exit after SIGTERM with ZooKeeper down")
    assert [s.proc.returncode for s in servers] == [0] * len(servers)
