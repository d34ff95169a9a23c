"""`fluss-spark cluster start|status|stop` as real processes: idempotent start after kill -9."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid

from fluss_spark.local.embedded import EmbeddedProcesses
from fluss_spark.local.ports import free_port


def fs(*argv, env_dir=None, timeout=120):
    env = dict(os.environ)
    env.pop("FLUSS_BOOTSTRAP_SERVERS", None)
    if env_dir is not None:
        env["FLUSS_SPARK_HOME"] = str(env_dir)
    return subprocess.run([sys.executable, "-m", "fluss_spark.cli", *argv], capture_output=True,
                          text=True, timeout=timeout, env=env)


def status(d):
    res = fs("cluster", "status", "--json", env_dir=d)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def by_key(doc):
    return {(p["role"], p["id"]): p for p in doc["processes"]}


def test_cluster_start_is_idempotent_and_heals_a_killed_tablet(tmp_path):
    d = tmp_path / "cluster"
    try:
        port = free_port()
        res = fs("cluster", "start", "--tablets", "2", "--option", "kv.scanner.ttl=30s",
                 "--port", str(port), env_dir=d)
        assert res.returncode == 0, res.stderr
        bootstrap = res.stdout.strip()
        assert len(bootstrap.split(",")) == 3 and bootstrap.startswith(f"127.0.0.1:{port},")
        # A line on stderr as each process came up, then the line to export.
        said = [ln.split(" up on ")[0] for ln in res.stderr.splitlines() if " up on " in ln]
        assert said[:2] == ["zookeeper", "coordinator 0"]
        assert sorted(said[2:]) == ["tablet 0", "tablet 1"]
        assert res.stderr.splitlines()[-1] == f"export FLUSS_BOOTSTRAP_SERVERS={bootstrap}"
        first = by_key(status(d))
        assert set(first) == {("zookeeper", 0), ("coordinator", 0), ("tablet", 0), ("tablet", 1)}
        assert all(p["alive"] and p["pid"] for p in first.values())
        assert status(d)["metrics"]["metrics"]["tablet_count"] == 2

        # Data written before the fault, through the default (local cluster) bootstrap.
        assert fs("table", "create", "db.orders", "--schema", "id BIGINT, v STRING",
                  "--primary-key", "id", "--buckets", "2", env_dir=d).returncode == 0
        assert fs("produce", "db.orders", "--rows", "50", env_dir=d).returncode == 0

        again = fs("cluster", "start", env_dir=d)
        assert again.returncode == 0 and again.stdout.strip() == bootstrap
        assert {k: p["pid"] for k, p in by_key(status(d)).items()} == \
            {k: p["pid"] for k, p in first.items()}

        os.kill(first[("tablet", 1)]["pid"], signal.SIGKILL)
        deadline = time.monotonic() + 10
        while by_key(status(d))[("tablet", 1)]["alive"]:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        healed = fs("cluster", "start", env_dir=d)
        assert healed.returncode == 0, healed.stderr
        assert healed.stdout.strip() == bootstrap
        after = by_key(status(d))
        assert after[("tablet", 1)]["alive"]
        assert after[("tablet", 1)]["pid"] != first[("tablet", 1)]["pid"]
        assert after[("tablet", 1)]["address"] == first[("tablet", 1)]["address"]
        for key in (("zookeeper", 0), ("coordinator", 0), ("tablet", 0)):
            assert after[key]["pid"] == first[key]["pid"]

        res = fs("log", "db.orders", "--json", env_dir=d)
        assert res.returncode == 0, res.stderr
        assert sorted(r["id"] for r in json.loads(res.stdout)) == list(range(50))
    finally:
        stop = fs("cluster", "stop", env_dir=d)
    assert stop.returncode == 0, stop.stderr
    assert not any(p["alive"] for p in status(d)["processes"])
    res = fs("table", "list", env_dir=d)
    assert res.returncode == 1 and res.stderr.startswith("error: no server is reachable")


def test_cluster_commands_without_a_cluster_fail_clearly(tmp_path):
    res = fs("cluster", "status", env_dir=tmp_path / "none")
    assert res.returncode == 1 and "cluster start" in res.stderr
    res = fs("table", "list", env_dir=tmp_path / "none")
    assert res.returncode == 1 and "--bootstrap-servers" in res.stderr
    res = fs("cluster", "start", "--option", "no.such.option=1", env_dir=tmp_path / "x")
    assert res.returncode == 1 and "no.such.option" in res.stderr
    assert not (tmp_path / "x" / "cluster.json").exists()


def test_local_cluster_restart_keeps_data_and_port(zookeeper, tmp_path):
    cluster = EmbeddedProcesses(tmp_path, tablets=1,
                                zookeeper=f"{zookeeper.address}/fluss-restart-{uuid.uuid4().hex[:8]}")
    with cluster:
        with cluster.connection(request_timeout_s=30) as conn:
            info = conn.admin().create_table("db.r", "id BIGINT", primary_key=["id"])
            conn.writer(info).upsert([(i,) for i in range(10)])
            address = cluster.address("tablet", 0)
            cluster.kill("tablet", 0)
            assert not {p["alive"] for p in cluster.processes() if p["role"] == "tablet"} - {False}
            cluster.restart("tablet", 0)
            assert cluster.address("tablet", 0) == address
            # The same connection finds the restarted server again.
            assert conn.admin().list_offsets(info) == {0: 10}
            conn.writer(info).upsert([(10,)])
            assert conn.admin().trigger_kv_snapshot(info)[0].row_count == 11
            cluster.kill("coordinator", 0)
            cluster.restart("coordinator", 0)
            # ... and the restarted coordinator, for admin calls.
            assert conn.admin().list_tables() == ["db.r"]
            assert conn.admin().latest_kv_snapshots(info)[0].row_count == 11
        reloaded = EmbeddedProcesses.load(tmp_path)
        assert reloaded.bootstrap_servers == cluster.bootstrap_servers
        assert all(p["alive"] for p in reloaded.processes())
    assert not any(p["alive"] for p in EmbeddedProcesses.load(tmp_path).processes())


def test_remote_storage_s3_puts_the_snapshot_store_in_an_object_store(tmp_path):
    """``cluster start --remote-storage s3``: a local S3 store beside the cluster, reported by
    ``status --json``; the snapshots are objects in it, listed with only what status names
    (endpoint, region, credentials file); a restart asking for no store keeps it."""
    import pyarrow.fs as pafs

    from fluss_spark.client import FlussConnection
    from fluss_spark.testing.streams import create_pk
    d = tmp_path / "c"
    try:
        res = fs("cluster", "start", "--remote-storage", "s3", env_dir=d, timeout=600)
        assert res.returncode == 0, res.stderr
        assert "remote.data.dir is s3://fluss/snapshots on http://127.0.0.1:" in res.stderr
        doc = status(d)
        store = doc["remote_storage"]
        assert doc["remote_data_dir"] == "s3://fluss/snapshots"
        assert store["kind"] == "s3" and store["alive"] and by_key(doc)[("object-store", 0)]
        with FlussConnection(doc["bootstrap_servers"]) as conn:
            _, snaps = create_pk(conn, "s3db.t", 100, buckets=2)
        os.environ["AWS_SHARED_CREDENTIALS_FILE"] = store["credentials_file"]
        try:
            s3 = pafs.S3FileSystem(endpoint_override=store["endpoint"].split("://")[1],
                                   scheme="http", region=store["region"])
            objects = {f.path for f in s3.get_file_info(pafs.FileSelector(
                f"{store['bucket']}/snapshots", recursive=True))}
        finally:
            del os.environ["AWS_SHARED_CREDENTIALS_FILE"]
        assert {s.path.removeprefix("s3://") for s in snaps.values()} <= objects
        res = fs("cluster", "start", env_dir=d)
        assert res.returncode == 0 and status(d)["remote_data_dir"] == "s3://fluss/snapshots"
    finally:
        fs("cluster", "stop", env_dir=d)
    assert not status(d)["remote_storage"]["alive"]


def test_a_cluster_keeps_the_remote_storage_it_was_started_with(tmp_path):
    d = tmp_path / "c"
    try:
        assert fs("cluster", "start", env_dir=d).returncode == 0
        res = fs("cluster", "start", "--remote-storage", "s3", env_dir=d)
        assert res.returncode != 0
        assert "remote storage is a local directory; stop it and use another --dir" in res.stderr
        assert status(d)["remote_storage"] is None
    finally:
        fs("cluster", "stop", env_dir=d)
