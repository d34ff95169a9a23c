"""A tablet server paused past its ZooKeeper session timeout registers again and serves, and
``cluster start`` replaces a process that is running but does not answer (real processes)."""

from __future__ import annotations

import os
import signal
import uuid

import pyarrow as pa
import pytest

from fluss_spark.metadata.store import MetadataStore
from fluss_spark.local.embedded import EmbeddedProcesses
from fluss_spark.local.ports import wait_until
from fluss_spark.local.server_process import pid_alive

SESSION = "zookeeper.client.session-timeout=2s"


@pytest.fixture
def local(zookeeper, local_cluster):
    chroot = f"{zookeeper.address}/fluss-expiry-{uuid.uuid4().hex[:12]}"
    cluster = local_cluster(tablets=2, zookeeper=chroot, server_options=[SESSION])
    store = MetadataStore(chroot).start()
    yield cluster, store
    for p in cluster.processes():           # never leave a paused process behind
        if p["pid"] and p["role"] != "zookeeper":
            try:
                os.kill(p["pid"], signal.SIGCONT)
            except ProcessLookupError:
                pass
    store.close()


def tablet_pid(cluster: EmbeddedProcesses, server_id: int) -> int:
    return next(p["pid"] for p in cluster.processes()
                if p["role"] == "tablet" and p["id"] == server_id)


def test_a_tablet_paused_past_its_session_timeout_registers_again_and_serves(local):
    cluster, store = local
    conn = cluster.connection(request_timeout_s=20)
    admin = conn.admin()
    admin.create_table("db.expiry", "k BIGINT", num_buckets=4)
    writer = conn.writer("db.expiry")
    writer.append(pa.table({"k": pa.array(range(100), pa.int64())}))
    pid = tablet_pid(cluster, 1)
    os.kill(pid, signal.SIGSTOP)
    try:
        wait_until(lambda: 1 not in store.tablets(), 30, "the paused tablet's session to expire")
    finally:
        os.kill(pid, signal.SIGCONT)
    wait_until(lambda: 1 in store.tablets(), 30, "the tablet to register again")
    conn.refresh_metadata()
    writer.append(pa.table({"k": pa.array(range(100, 200), pa.int64())}))
    total = sum(off for off in admin.list_offsets("db.expiry", spec="latest").values())
    assert total == 200
    conn.close()


def test_cluster_start_replaces_a_process_that_does_not_answer(local):
    cluster, store = local
    pid = tablet_pid(cluster, 0)
    os.kill(pid, signal.SIGSTOP)
    again = EmbeddedProcesses.load(cluster.base_dir).start()
    try:
        new_pid = tablet_pid(again, 0)
        assert new_pid != pid
        assert not pid_alive(pid, None, None)      # killed (a zombie until reaped counts as gone)
        conn = again.connection(request_timeout_s=20)
        conn.admin().create_table("db.after", "k BIGINT", num_buckets=2)
        conn.writer("db.after").append(pa.table({"k": pa.array(range(10), pa.int64())}))
        assert sum(conn.admin().list_offsets("db.after", spec="latest").values()) == 10
        conn.close()
    finally:
        again.stop()        # the replacement process is this object's, not the fixture's
