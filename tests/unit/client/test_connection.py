"""FlussConnection routing, metadata cache and retries against fake servers (and one dead
address)."""

from __future__ import annotations

import socket
import threading
import time

import pyarrow as pa
import pytest

from fluss_spark.client import FlussConnection
from fluss_spark.client.bootstrap import parse_bootstrap
from fluss_spark.errors import (ClusterUnreachable, ConfigError, ConnectionRefused, InvalidRequest,
                                LeaderNotAvailable, NetworkError,
                                NotCoordinatorLeader, NotLeaderOrFollower, TableNotExist,
                                TooManyScanners)
from fluss_spark.protocol.api import ApiKey
from fluss_spark.protocol.arrow_ipc import serialize_schema
from fluss_spark.protocol.messages import ListOffsetsRequest, ListTablesRequest, ProduceRequest
from fluss_spark.testing.clock import FakeClock

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string())])
#: A request routed to bucket 0 or 1 (the fake servers answer any request).
PRODUCE = ProduceRequest(table_id=7, bucket=0, op="append", records=b"")


def offsets(group):
    return ListOffsetsRequest(table_id=7, buckets=tuple(group), spec="latest")


def table_wire(name="db.t", table_id=7, assignment=None, num_buckets=2):
    return {"table_id": table_id, "name": name, "schema": serialize_schema(SCHEMA),
            "primary_key": ["id"], "bucket_key": ["id"], "num_buckets": num_buckets,
            "properties": {}, "created_ms": 1,
            "assignment": assignment if assignment is not None else {0: 1, 1: 2}}


class FakeCluster:
    """Servers by port: each answers calls through a handler; records every call."""

    def __init__(self):
        self.handlers = {}
        self.calls = []
        self.tables = {"db.t": table_wire()}
        self.tablets = [{"id": 1, "host": "h", "port": 1001}, {"id": 2, "host": "h", "port": 1002}]
        self.coordinator = {"host": "h", "port": 1000}

    def metadata(self, body):
        names = body.get("tables")
        if names is not None:
            missing = [n for n in names if n not in self.tables]
            if missing:
                raise TableNotExist(f"table {missing[0]} does not exist")
            tables = [self.tables[n] for n in names]
        else:
            tables = list(self.tables.values())
        return {"coordinator": self.coordinator, "tablets": self.tablets, "tables": tables}

    def factory(self, host, port, timeout):
        cluster = self

        class FakeRpc:
            address = f"{host}:{port}"

            def call(self, request, timeout_s=None):
                api_key, body = request.API_KEY, request.to_wire()
                cluster.calls.append((port, api_key, body))
                if api_key == ApiKey.GET_METADATA and port not in cluster.handlers:
                    return request.decode_response(cluster.metadata(body))
                handler = cluster.handlers.get(port)
                if handler is None:
                    raise NetworkError(f"nothing listens on {port}")
                answer = handler(api_key, body)
                # Metadata is decoded as the real connection does; other answers are the
                # handlers' own dicts, passed through to the test.
                return request.decode_response(answer) if api_key == ApiKey.GET_METADATA \
                    else answer

            def close(self):
                pass

        return FakeRpc()


@pytest.fixture
def fake():
    return FakeCluster()


@pytest.fixture
def clock():
    return FakeClock()


def connect(fake, clock, timeout=10.0, bootstrap="h:1000"):
    return FlussConnection(bootstrap, request_timeout_s=timeout, rpc_factory=fake.factory,
                           clock=clock.seconds, sleep=clock.sleep)


def test_parse_bootstrap():
    assert parse_bootstrap("a:1, b:2") == [("a", 1), ("b", 2)]
    assert parse_bootstrap(["a:1"]) == [("a", 1)]
    with pytest.raises(ConfigError, match="empty"):
        parse_bootstrap(" , ")
    with pytest.raises(ConfigError, match="host:port"):
        parse_bootstrap("nohost")


def test_table_metadata_is_fetched_once_and_cached(fake, clock):
    conn = connect(fake, clock)
    info = conn.table("db.t")
    assert info.table_id == 7 and info.schema == SCHEMA and info.primary_key == ("id",)
    assert info.assignment == {0: 1, 1: 2} and info.has_primary_key
    conn.table("db.t")
    assert sum(1 for c in fake.calls if c[1] == ApiKey.GET_METADATA) == 1


def test_unknown_table_raises_table_not_exist(fake, clock):
    with pytest.raises(TableNotExist, match="db.missing"):
        connect(fake, clock).table("db.missing")


def test_call_bucket_routes_to_the_assigned_tablet(fake, clock):
    fake.handlers[1001] = lambda k, b: {"who": 1}
    fake.handlers[1002] = lambda k, b: {"who": 2}
    conn = connect(fake, clock)
    info = conn.table("db.t")
    assert conn.call_bucket(info, 0, PRODUCE)["who"] == 1
    assert conn.call_bucket(info, 1, PRODUCE)["who"] == 2


def test_bucket_out_of_range_is_a_config_error(fake, clock):
    conn = connect(fake, clock)
    with pytest.raises(ConfigError, match="buckets 0..1, not 5"):
        conn.call_bucket(conn.table("db.t"), 5, PRODUCE)


def test_not_leader_refreshes_metadata_and_follows_the_move(fake, clock):
    fake.handlers[1001] = lambda k, b: {"who": 1}

    def moved(k, b):
        # The bucket moved to tablet 1: the next metadata says so.
        fake.tables["db.t"] = table_wire(assignment={0: 1, 1: 1})
        raise NotLeaderOrFollower("bucket 1 is not here")

    fake.handlers[1002] = moved
    conn = connect(fake, clock)
    info = conn.table("db.t")
    assert conn.call_bucket(info, 1, PRODUCE)["who"] == 1
    assert conn.table("db.t").assignment == {0: 1, 1: 1}
    assert clock.sleeps == [0.05]


def test_retriable_errors_back_off_until_the_timeout(fake, clock):
    fake.handlers[1001] = lambda k, b: (_ for _ in ()).throw(TooManyScanners("busy"))
    conn = connect(fake, clock, timeout=3.0)
    with pytest.raises(TooManyScanners):
        conn.call_bucket(conn.table("db.t"), 0, PRODUCE)
    assert clock.sleeps[:5] == [0.05, 0.1, 0.2, 0.4, 0.8]
    assert max(clock.sleeps) == 1.0
    assert sum(clock.sleeps) <= 3.0


def test_non_retriable_errors_are_raised_at_once(fake, clock):
    fake.handlers[1001] = lambda k, b: (_ for _ in ()).throw(InvalidRequest("bad field"))
    conn = connect(fake, clock)
    with pytest.raises(InvalidRequest, match="bad field"):
        conn.call_bucket(conn.table("db.t"), 0, PRODUCE)
    assert clock.sleeps == []


def test_unassigned_bucket_waits_for_an_assignment(fake, clock):
    fake.tables["db.t"] = table_wire(assignment={0: 1})
    fake.handlers[1001] = lambda k, b: {"ok": True}
    conn = connect(fake, clock)
    info = conn.table("db.t")
    calls = []

    def assign_later():
        calls.append(1)
        if len(calls) == 2:
            fake.tables["db.t"] = table_wire(assignment={0: 1, 1: 1})
        return fake.metadata({})

    fake.handlers[1000] = lambda k, b: assign_later()
    assert conn.call_bucket(info, 1, PRODUCE) == {"ok": True}
    assert len(clock.sleeps) == 2


def test_dropped_and_recreated_table_is_not_written_by_old_id(fake, clock):
    def gone(k, b):
        fake.tables["db.t"] = table_wire(table_id=8)
        raise NotLeaderOrFollower("unknown table 7")

    fake.handlers[1001] = gone
    conn = connect(fake, clock)
    with pytest.raises(TableNotExist, match="was dropped"):
        conn.call_bucket(conn.table("db.t"), 0, PRODUCE)


def test_call_coordinator_follows_a_new_coordinator(fake, clock):
    def old(k, b):
        if k == ApiKey.GET_METADATA:
            return fake.metadata(b)
        fake.coordinator = {"host": "h", "port": 1003}
        raise NotCoordinatorLeader("not active")

    fake.handlers[1000] = old
    fake.handlers[1003] = lambda k, b: {"tables": ["db.t"]}
    conn = connect(fake, clock)
    assert conn.call_coordinator(ListTablesRequest()) == {"tables": ["db.t"]}


def test_metadata_falls_back_to_other_bootstrap_servers(fake, clock):
    fake.handlers[1000] = lambda k, b: (_ for _ in ()).throw(NetworkError("down"))
    fake.handlers[1001] = lambda k, b: fake.metadata(b)
    conn = connect(fake, clock, bootstrap="h:1000,h:1001")
    assert conn.table("db.t").table_id == 7


def test_no_reachable_server_names_what_was_tried(fake, clock):
    fake.handlers[1000] = lambda k, b: (_ for _ in ()).throw(NetworkError("down"))
    conn = connect(fake, clock, timeout=1.0)
    with pytest.raises(NetworkError, match="tried h:1000"):
        conn.table("db.t")


def test_call_buckets_groups_by_tablet(fake, clock):
    seen = []
    for port in (1001, 1002):
        fake.handlers[port] = lambda k, b, port=port: seen.append((port, b["buckets"])) or {}
    fake.tables["db.t"] = table_wire(num_buckets=4, assignment={0: 1, 1: 2, 2: 1, 3: 2})
    conn = connect(fake, clock)
    groups = conn.call_buckets(conn.table("db.t"), [3, 2, 1, 0], offsets)
    assert sorted(seen) == [(1001, [0, 2]), (1002, [1, 3])]
    assert sorted(g for g, _ in groups) == [[0, 2], [1, 3]]


def test_call_buckets_retries_only_the_failed_group(fake, clock):
    fails = [1]

    def flaky(k, b):
        if fails:
            fails.pop()
            raise NetworkError("lost")
        return {"n": len(b["buckets"])}

    fake.handlers[1001] = lambda k, b: {"n": len(b["buckets"])}
    fake.handlers[1002] = flaky
    conn = connect(fake, clock)
    groups = conn.call_buckets(conn.table("db.t"), [0, 1], offsets)
    assert sorted(g for g, _ in groups) == [[0], [1]]
    assert [c for c in fake.calls if c[0] == 1001 and c[1] == ApiKey.LIST_OFFSETS].__len__() == 1


def test_each_thread_gets_its_own_server_connection(fake, clock):
    conn = connect(fake, clock)
    rpcs = []
    t = threading.Thread(target=lambda: rpcs.append(conn.coordinator()))
    t.start()
    t.join()
    rpcs.append(conn.coordinator())
    assert rpcs[0] is not rpcs[1]
    assert conn.coordinator() is rpcs[1]


def test_closed_connection_refuses_calls(fake, clock):
    conn = connect(fake, clock, timeout=0.5)
    conn.close()
    with pytest.raises(NetworkError, match="closed"):
        conn.table("db.t")


def test_no_coordinator_is_retried_then_reported(fake, clock):
    fake.coordinator = None
    conn = connect(fake, clock, timeout=1.0)
    with pytest.raises(NotCoordinatorLeader):
        conn.call_coordinator(ListTablesRequest())


def test_leader_not_available_when_tablet_not_registered(fake, clock):
    fake.tablets = [{"id": 1, "host": "h", "port": 1001}]
    conn = connect(fake, clock, timeout=0.5)
    with pytest.raises(LeaderNotAvailable, match="bucket 1 of db.t"):
        conn.call_bucket(conn.table("db.t"), 1, PRODUCE)


def refuse(k, b):
    raise ConnectionRefused("nothing listens there (connection refused)")


def test_a_cluster_where_nothing_listens_fails_in_seconds_not_at_the_request_timeout(fake, clock):
    fake.handlers[1000] = refuse
    conn, start = connect(fake, clock, timeout=60.0), clock.seconds()
    with pytest.raises(ClusterUnreachable, match="no Fluss server listens at h:1000") as e:
        conn.call_coordinator(ListTablesRequest())
    assert "the cluster is down or bootstrap.servers is wrong" in str(e.value)
    assert 4 <= clock.seconds() - start < 7   # the refused timeout, not the request timeout


def test_a_server_that_comes_back_within_the_refused_timeout_is_waited_for(fake, clock):
    fake.handlers[1000] = refuse
    start, sleep = clock.seconds(), clock.sleep

    def back_after_3s(s):
        sleep(s)
        if clock.seconds() - start >= 3:
            fake.handlers[1000] = lambda k, b: (fake.metadata(b) if k == ApiKey.GET_METADATA
                                                else {"tables": []})   # the coordinator is back
    conn = FlussConnection("h:1000", request_timeout_s=60.0, rpc_factory=fake.factory,
                           clock=clock.seconds, sleep=back_after_3s)
    assert conn.call_coordinator(ListTablesRequest()) == {"tables": []}


def test_a_dead_address_fails_in_under_5_seconds_of_wall_time():
    with socket.socket() as s:          # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    started = time.monotonic()
    with pytest.raises(ClusterUnreachable, match=f"no Fluss server listens at 127.0.0.1:{port}"):
        FlussConnection(f"127.0.0.1:{port}").call_coordinator(ListTablesRequest())
    assert time.monotonic() - started < 5


def test_other_network_errors_are_retried_until_the_request_timeout(fake, clock):
    fake.handlers[1000] = lambda k, b: (_ for _ in ()).throw(NetworkError("reset by peer"))
    conn, start = connect(fake, clock, timeout=30.0), clock.seconds()
    with pytest.raises(NetworkError, match="cannot reach any Fluss server"):
        conn.call_coordinator(ListTablesRequest())
    assert clock.seconds() - start >= 29


def test_an_answer_to_an_earlier_request_arriving_last_does_not_bring_back_older_metadata(
        fake, clock):
    """Two threads refresh a table concurrently: the one that asked first gets the table as
    it was (bucket 1 on tablet 2) and its answer arrives after the other's (bucket 1 moved to
    tablet 1). The cache keeps the later request's view: bucket 1 is routed to tablet 1."""
    conn = connect(fake, clock)
    conn.table("db.t")
    asked, answered = threading.Event(), threading.Event()
    old = fake.metadata({"tables": ["db.t"]})

    def metadata(api_key, body):
        if threading.current_thread().name == "first":
            asked.set()
            assert answered.wait(10)
            return old
        return fake.metadata(body)

    fake.handlers[1000] = metadata
    first = threading.Thread(target=conn.refresh_table, args=("db.t",), name="first")
    first.start()
    assert asked.wait(10)
    fake.tables["db.t"] = table_wire(assignment={0: 1, 1: 1})
    assert conn.refresh_table("db.t").assignment == {0: 1, 1: 1}
    answered.set()
    first.join(10)
    assert conn.table("db.t").assignment == {0: 1, 1: 1}
    assert conn.refresh_table("db.t").assignment == {0: 1, 1: 1}
