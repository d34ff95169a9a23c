"""A cluster with SASL PLAIN authentication (real processes): who may connect, and who may do
what."""

from __future__ import annotations

import os
import subprocess
import sys

import pyarrow as pa
import pytest

from fluss_spark.client import FlussConnection
from fluss_spark.transport.client import RpcConnection
from fluss_spark.errors import AuthenticationFailed, AuthorizationFailed
from fluss_spark.protocol.api import ApiKey
from fluss_spark.testing.coordinator import place_snapshot_file

def login(cluster, user=None, password=None) -> FlussConnection:
    return FlussConnection(cluster.bootstrap_servers, request_timeout_s=10,
                           username=user, password=password)


def test_anonymous_and_wrong_passwords_are_refused_on_every_server(sasl_cluster):
    for user, password in ((None, None), ("admin", "nope"), ("mallory", "x")):
        with pytest.raises(AuthenticationFailed) as err:
            login(sasl_cluster, user, password).admin().list_tables()
        assert not err.value.retriable
    for addr in sasl_cluster.bootstrap_servers.split(","):
        host, port = addr.rsplit(":", 1)
        rpc = RpcConnection(host, int(port), timeout_s=5)
        assert rpc.call_raw(ApiKey.API_VERSIONS)["server"] in ("coordinator", "tablet")
        with pytest.raises(AuthenticationFailed, match="requires SASL"):
            rpc.call_raw(ApiKey.GET_METADATA, {})
        rpc.close()


def test_the_super_user_writes_and_the_tablets_commit_snapshots_as_the_internal_principal(
        sasl_cluster):
    with login(sasl_cluster, "admin", "admin-secret") as conn:
        admin = conn.admin()
        admin.create_table("s.pk", "id BIGINT NOT NULL, v STRING", primary_key=["id"],
                           num_buckets=1)
        conn.writer("s.pk").upsert(pa.table({"id": pa.array(range(10), pa.int64()),
                                             "v": [f"v{i}" for i in range(10)]}))
        snap = admin.trigger_kv_snapshot("s.pk")[0]
        rows = conn.kv_scanner("s.pk").scan(0, snapshot_id=snap.snapshot_id).read_all()
        assert sorted(rows.column("id").to_pylist()) == list(range(10))


def test_an_ordinary_user_reads_but_cannot_create_or_drop_tables(sasl_cluster):
    with login(sasl_cluster, "admin", "admin-secret") as conn:
        conn.admin().create_table("s.log", "k BIGINT", num_buckets=1)
        conn.writer("s.log").append(pa.table({"k": pa.array([1, 2, 3], pa.int64())}))
    with login(sasl_cluster, "bob", "bob-secret") as conn:
        admin = conn.admin()
        assert admin.list_offsets("s.log", spec="latest") == {0: 3}
        with pytest.raises(AuthorizationFailed, match="'bob' may not create table"):
            admin.create_table("s.bob", "k BIGINT", num_buckets=1)
        with pytest.raises(AuthorizationFailed, match="'bob' may not drop table"):
            admin.drop_table("s.log")
        assert admin.table_exists("s.log")


def test_snapshot_commits_are_accepted_only_from_the_internal_principal(sasl_cluster):
    """A forged COMMIT_KV_SNAPSHOT, even from the super user, is refused and registers nothing."""
    with login(sasl_cluster, "admin", "admin-secret") as conn:
        conn.admin().create_table("s.forged", "id BIGINT NOT NULL", primary_key=["id"],
                                  num_buckets=1)
        tid = conn.table("s.forged").table_id
        path = place_snapshot_file(sasl_cluster.snapshot_dir, tid, 0, 5)
        body = {"table_id": tid, "bucket": 0, "snapshot_id": 5, "path": path, "log_offset": 0,
                "row_count": 0, "size_bytes": 1, "created_ms": 1}
        host, port = conn.coordinator().host, conn.coordinator().port
        for user, password in (("admin", "admin-secret"), ("bob", "bob-secret")):
            rpc = RpcConnection(host, port, timeout_s=5, credentials=(user, password))
            with pytest.raises(AuthorizationFailed, match="internal principal"):
                rpc.call_raw(ApiKey.COMMIT_KV_SNAPSHOT, body)
            rpc.close()
        assert conn.admin().latest_kv_snapshots("s.forged") == {}


def test_the_cli_logs_in_to_the_local_cluster_and_takes_credentials_from_the_environment(
        sasl_cluster, tmp_path):
    env = {**os.environ, "FLUSS_SPARK_HOME": str(sasl_cluster.base_dir),
           "FLUSS_BOOTSTRAP_SERVERS": sasl_cluster.bootstrap_servers}
    env.pop("FLUSS_USERNAME", None)
    env.pop("FLUSS_PASSWORD", None)
    cli = [sys.executable, "-m", "fluss_spark.cli", "--json"]
    ok = subprocess.run(cli + ["table", "list"], env=env, capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    assert "s.log" in ok.stdout
    bad = subprocess.run(cli + ["table", "list"], capture_output=True, text=True,
                         env={**env, "FLUSS_USERNAME": "bob", "FLUSS_PASSWORD": "wrong"})
    assert bad.returncode == 1 and "wrong username or password" in bad.stderr
    assert "wrong" not in bad.stderr.replace("wrong username", "")     # no password echoed
    assert len(bad.stderr.strip().splitlines()) == 1


def test_only_the_principal_that_created_a_lease_or_a_super_user_may_change_it(sasl_cluster):
    with login(sasl_cluster, "admin", "admin-secret") as conn:
        conn.admin().create_table("s.leased", "id BIGINT NOT NULL", primary_key=["id"],
                                  num_buckets=1)
        conn.writer("s.leased").upsert(pa.table({"id": pa.array([1], pa.int64())}))
        snap = conn.admin().trigger_kv_snapshot("s.leased")[0]
        tid = conn.table("s.leased").table_id
    pins = {tid: {0: snap.snapshot_id}}
    with login(sasl_cluster, "bob", "bob-secret") as bob, \
            login(sasl_cluster, "carol", "carol-secret") as carol, \
            login(sasl_cluster, "admin", "admin-secret") as admin:
        bob.admin().acquire_kv_snapshot_lease("bobs-job", 600_000, pins)
        assert carol.admin().describe_kv_snapshot_lease("bobs-job").owner == "bob"
        for call in (lambda a: a.drop_kv_snapshot_lease("bobs-job"),
                     lambda a: a.release_kv_snapshot_lease("bobs-job", {tid: [0]}),
                     lambda a: a.renew_kv_snapshot_lease("bobs-job", 600_000),
                     lambda a: a.acquire_kv_snapshot_lease("bobs-job", 600_000, pins)):
            with pytest.raises(AuthorizationFailed, match="'carol' may not .* belongs to 'bob'"):
                call(carol.admin())
        assert bob.admin().describe_kv_snapshot_lease("bobs-job").pin_count == 1
        bob.admin().renew_kv_snapshot_lease("bobs-job", 600_000)
        assert admin.admin().drop_kv_snapshot_lease("bobs-job")      # a super user may
        assert "bobs-job" not in {x.lease_id for x in bob.admin().list_kv_snapshot_leases()}


def test_with_a_zookeeper_credential_only_the_servers_may_change_the_fluss_tree(sasl_cluster):
    from kazoo.client import KazooClient
    from kazoo.exceptions import NoAuthError
    hosts, _, chroot = sasl_cluster.zookeeper_address.partition("/")
    outsider = KazooClient(hosts=f"{hosts}/{chroot}")
    outsider.start(timeout=15)
    try:
        assert "tables" in outsider.get_children("/fluss")          # reading stays open
        for write in (lambda: outsider.create("/fluss/leases/kv_snapshot/forged", b"x"),
                      lambda: outsider.delete("/fluss/tables", recursive=True),
                      lambda: outsider.set("/fluss/coordinator/epoch", b"9")):
            with pytest.raises(NoAuthError):
                write()
    finally:
        outsider.stop()
        outsider.close()
    with login(sasl_cluster, "admin", "admin-secret") as conn:
        conn.admin().create_table("s.after_acl", "k BIGINT", num_buckets=1)
        assert conn.admin().table_exists("s.after_acl")
