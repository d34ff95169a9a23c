"""ACLs on a SASL cluster (real processes): who may read, write and manage ACLs, per table and
database, and how soon a removed ACL stops a reader."""

from __future__ import annotations

import json
import threading
import time

import pyarrow as pa
import pytest

from fluss_spark.cli import main
from fluss_spark.client import FlussConnection
from fluss_spark.errors import AuthorizationFailed
from fluss_spark.protocol.acl import AclBinding, AclFilter, OperationType, Resource
from fluss_spark.server.authorizer import ACL_REFRESH_S

READ, WRITE = OperationType.READ, OperationType.WRITE
#: How long a change may take to reach a tablet server: its poll interval, plus slack for a
#: loaded machine.
PROPAGATION_S = ACL_REFRESH_S + 5


def login(cluster, user: str, password: str) -> FlussConnection:
    return FlussConnection(cluster.bootstrap_servers, request_timeout_s=10, username=user,
                           password=password)


def until(condition, what: str, timeout_s: float = PROPAGATION_S):
    """``condition()``'s first truthy value, polled until ``timeout_s``."""
    deadline, tick = time.monotonic() + timeout_s, threading.Event()
    while True:
        value = condition()
        if value:
            return value
        assert time.monotonic() < deadline, f"not within {timeout_s}s: {what}"
        tick.wait(0.05)


def read_rows(conn: FlussConnection, table: str) -> list[int]:
    info = conn.admin().get_table(table)
    end = conn.admin().list_offsets(table)[0]
    batches = list(conn.log_scanner(info).read(0, 0, end))
    return sorted(v for b in batches for v in b.column("k").to_pylist())


def refused(fn) -> str | None:
    """The AuthorizationFailed message of ``fn()``, or None when it was allowed."""
    try:
        fn()
    except AuthorizationFailed as e:
        return str(e)
    return None


@pytest.fixture(scope="module")
def tables(sasl_cluster):
    with sasl_cluster.connection() as conn:
        for name in ("acl.orders", "acl.other", "acl2.events"):
            conn.admin().create_table(name, "k BIGINT", num_buckets=1, ignore_if_exists=True)
            conn.writer(name).append(pa.table({"k": pa.array([1, 2, 3], pa.int64())}))
    return sasl_cluster


@pytest.fixture
def admin(tables):
    with tables.connection() as conn:
        yield conn.admin()
        conn.admin().drop_acls([AclFilter.of(principal="User:alice")])


@pytest.fixture
def alice(tables):
    with login(tables, "alice", "alice-secret") as conn:
        yield conn


def test_a_table_acl_lets_alice_read_that_table_only_until_it_is_removed(tables, admin, alice):
    message = refused(lambda: read_rows(alice, "acl.orders"))
    assert message and "'alice' may not" in message and "table:acl.orders" in message
    assert alice.admin().list_tables() == []          # she may not even see the tables

    admin.create_acls([AclBinding(Resource.table("acl.orders"), "User:alice", READ)])
    assert until(lambda: refused(lambda: read_rows(alice, "acl.orders")) is None,
                 "the tablet server learns the new ACL")
    assert read_rows(alice, "acl.orders") == [1, 2, 3]
    assert alice.admin().list_tables() == ["acl.orders"]
    assert "table:acl.other" in (refused(lambda: read_rows(alice, "acl.other")) or "")
    writing = refused(lambda: alice.writer("acl.orders").append(
        pa.table({"k": pa.array([9], pa.int64())})))
    assert writing and "may not write to table acl.orders" in writing

    assert admin.drop_acls([AclFilter.of(Resource.table("acl.orders"), "User:alice")]) == [
        AclBinding(Resource.table("acl.orders"), "User:alice", READ)]
    # The metadata is still cached by the client: the tablet server's own check refuses.
    info = alice.table("acl.orders")
    until(lambda: refused(lambda: list(alice.log_scanner(info).read(0, 0, 3))),
          "the tablet server drops the removed ACL")


def test_a_database_acl_covers_its_tables_and_a_super_user_needs_none(tables, admin, alice):
    admin.create_acls([AclBinding(Resource.database("acl2"), "User:alice", WRITE)])
    until(lambda: refused(lambda: alice.writer("acl2.events").append(
        pa.table({"k": pa.array([4], pa.int64())}))) is None, "a write allowed by the database")
    assert "READ on table:acl2.events" in (refused(lambda: read_rows(alice, "acl2.events")) or "")
    assert "table:acl.orders" in (refused(lambda: alice.writer("acl.orders").append(
        pa.table({"k": pa.array([4], pa.int64())}))) or "")
    with tables.connection() as conn:           # admin: a super user, without any ACL
        assert read_rows(conn, "acl2.events")[-1] == 4


def test_only_super_users_and_acl_administrators_change_acls(tables, admin, alice):
    grant = AclBinding(Resource.table("acl.orders"), "User:alice", READ)
    with login(tables, "bob", "bob-secret") as bob:       # bob may READ everything
        for who, call in (("alice", lambda: alice.admin().create_acls([grant])),
                          ("bob", lambda: bob.admin().create_acls([grant]))):
            with pytest.raises(AuthorizationFailed, match=f"'{who}' may not change the ACLs of "
                                                          "table:acl.orders: that needs a super"):
                call()
        assert admin.list_acls(AclFilter.of(principal="User:alice")) == []
        admin.create_acls([grant])
        with pytest.raises(AuthorizationFailed, match="'bob' may not change the ACLs"):
            bob.admin().drop_acls([AclFilter.of(principal="User:alice")])
        assert grant in bob.admin().list_acls()     # READ on the cluster lets him see ACLs
    assert alice.admin().list_acls() == [grant]     # she sees only what she may describe


def test_the_cli_adds_lists_and_removes_acls_in_one_line_each(tables, admin, capsys,
                                                                monkeypatch):
    monkeypatch.setenv("FLUSS_SPARK_HOME", str(tables.base_dir))
    monkeypatch.setenv("FLUSS_BOOTSTRAP_SERVERS", tables.bootstrap_servers)
    monkeypatch.delenv("FLUSS_USERNAME", raising=False)
    monkeypatch.delenv("FLUSS_PASSWORD", raising=False)

    def run(*argv) -> tuple[int, str, str]:
        code = main(["--json", *argv])
        out, err = capsys.readouterr()
        return code, out, err

    acl = ["--principal", "User:alice", "--operation", "READ", "--resource", "database:acl"]
    code, out, _ = run("acl", "add", *acl)
    assert code == 0 and json.loads(out)["created"] is True
    code, out, _ = run("acl", "list", "--principal", "User:alice")
    assert json.loads(out) == [{"principal": "User:alice", "permission": "ALLOW",
                                "operation": "READ", "resource": "database:acl",
                                "resource_type": "DATABASE", "resource_name": "acl",
                                "host": "*"}]
    code, out, _ = run("acl", "remove", "--principal", "User:alice", "--resource",
                       "database:acl")
    assert code == 0 and [d["resource"] for d in json.loads(out)] == ["database:acl"]
    assert json.loads(run("acl", "list", "--principal", "User:alice")[1]) == []

    monkeypatch.setenv("FLUSS_USERNAME", "alice")
    monkeypatch.setenv("FLUSS_PASSWORD", "alice-secret")
    code, out, err = run("acl", "add", *acl)
    assert code == 1 and out == "" and len(err.strip().splitlines()) == 1
    assert "'alice' may not change the ACLs of database:acl" in err
