"""One lease per checkpoint at every restart point, and a checkpoint always belongs to its query.

``SparkLoop`` (fluss_spark/testing/spark_loop.py) drives enumerators the way Spark's micro-batch
engine does. A driver "dies" by dropping its enumerator at a chosen point; the next run starts a
fresh one on the same logs.
"""

from __future__ import annotations

import pytest
from pyspark.sql.streaming.datasource import ReadMaxRows

from fluss_spark.connector.enumerator import CheckpointMismatch
from fluss_spark.connector.offsets import decode
from fluss_spark.errors import KvSnapshotNotExist, LeaseHeldByOther
from fluss_spark.testing.spark_loop import SparkLoop


def rows(n, start=0):
    return [{"id": i, "v": f"r{i}"} for i in range(start, start + n)]


def acquired_ids(cluster) -> set[str]:
    return {c[1] for c in cluster.calls_of("acquire")}


@pytest.fixture
def pk(cluster):
    """db.pk: bucket 0 has snapshot 3 (12 rows, log offset 2), bucket 1 snapshot 4 (7 rows,
    log offset 1); both have changelog records after their snapshot."""
    cluster.add_table("db.pk", buckets=2)
    cluster.add_snapshot("db.pk", 0, 3, rows(12), 2)
    cluster.add_snapshot("db.pk", 1, 4, rows(7, 100), 1)
    cluster.append_log("db.pk", 0, [("+I", {"id": 50 + i, "v": "x"}) for i in range(5)])
    cluster.append_log("db.pk", 1, [("+I", {"id": 150 + i, "v": "y"}) for i in range(3)])
    return cluster


def assert_exact(loop, cluster, dead: frozenset = frozenset()):
    """Every snapshot row once, every changelog record after the snapshot once, one lease id
    (besides the ``dead`` ones of runs killed before any offset named them)."""
    assert sorted(loop.snapshot_rows()) == ([(0, 3, r) for r in range(12)]
                                            + [(1, 4, r) for r in range(7)])
    assert sorted(loop.log_records()) == [(0, o) for o in range(2, 5)] + [(1, o) for o in (1, 2)]
    assert len(loop.lease_ids_in_offsets()) == 1
    assert acquired_ids(cluster) - dead == loop.lease_ids_in_offsets()
    assert cluster.leases == {}  # released after the snapshot phase


def retention(cluster) -> None:
    """Retention at its harshest: every snapshot no lease pins is replaced by a newer one."""
    pinned = {(t, b, s) for lease in cluster.leases.values()
              for t, bs in lease["pins"].items() for b, s in bs.items()}
    for name, table in cluster.tables.items():
        tid = table.info.table_id
        for b, snaps in table.snapshots.items():
            newest = max(snaps)
            if (tid, b, newest) not in pinned:
                cluster.add_snapshot(name, b, newest + 1, *snaps[newest])
            for sid in [s for s in snaps if (tid, b, s) not in pinned and s != max(snaps)]:
                cluster.remove_snapshot(name, b, sid)


def test_no_logged_offset_names_a_snapshot_its_lease_does_not_pin(pk, clock):
    loop = SparkLoop(pk, clock).run()
    assert pk.calls_of("acquire") == []            # initialOffset plans, acquires nothing
    retention(pk)                                  # between the listing and the first batch
    assert loop.plan()
    lease_id = loop.offsets[0]["lease_id"]
    tid = pk.tables["db.pk"].info.table_id
    # Pinned before Spark logs the offset: the newer snapshots, for the grace only.
    named = {int(b): p[0] for b, p in loop.offsets[0]["tables"][str(tid)]["snapshot"].items()}
    assert named == {0: 4, 1: 5} and pk.leases[lease_id]["pins"] == {tid: named}
    assert pk.leases[lease_id]["expires"] == clock() + 120_000
    loop.execute()                                 # batch 0 is in the offset log
    assert pk.leases[lease_id]["expires"] == clock() + 86_400_000
    retention(pk)
    loop.run()                                     # killed inside batch 0: replayed as logged
    retention(pk)
    loop.drain()
    assert sorted(loop.snapshot_rows()) == ([(0, 4, r) for r in range(12)]
                                            + [(1, 5, r) for r in range(7)])
    assert sorted(loop.log_records()) == [(0, o) for o in range(2, 5)] + [(1, o) for o in (1, 2)]
    assert loop.lease_ids_in_offsets() == acquired_ids(pk) == {lease_id}
    assert pk.leases == {}


def test_killed_before_the_first_offset_leaves_a_lease_for_the_grace_only(pk, clock):
    loop = SparkLoop(pk, clock, **{"scan.kv.snapshot.lease.grace": "30s"}).run()
    dead = loop.start["lease_id"]
    loop.enum.latest_offset(loop.start, ReadMaxRows(5))   # planned, never written: driver dies
    assert pk.leases[dead]["expires"] == clock() + 30_000
    clock.advance(30_000)
    pk._expire()
    assert pk.leases == {}
    loop.run().drain()
    assert_exact(loop, pk, dead=frozenset({dead}))


def test_killed_after_offsets_0_before_commits_0_reuses_the_checkpoints_lease(pk, clock):
    loop = SparkLoop(pk, clock).run()
    loop.plan()
    loop.execute()                        # batch 0 runs... and the driver dies inside it
    first = loop.offsets[0]["lease_id"]
    pk.add_snapshot("db.pk", 0, 9, rows(14), 4)     # a newer snapshot appears meanwhile
    loop.run()                            # initialOffset again (a new id), then batch 0 replayed
    assert loop.enum.lease_id == first
    loop.drain()
    assert acquired_ids(pk) == {first}
    assert_exact(loop, pk)


@pytest.mark.parametrize("mode", ["full", "latest", "earliest"])
def test_a_replayed_first_batch_reads_exactly_what_the_killed_run_read(cluster, clock, mode):
    cluster.add_table("db.pk", buckets=2)
    cluster.add_snapshot("db.pk", 0, 3, rows(6), 2)     # bucket 1 has no snapshot yet
    for b in (0, 1):
        cluster.append_log("db.pk", b, [("+I", {"id": 10 * b + i, "v": "x"}) for i in range(4)])
    loop = SparkLoop(cluster, clock, **{"scan.startup.mode": mode}).run()
    for b in (0, 1):
        cluster.append_log("db.pk", b, [("+I", {"id": 50 + b, "v": "y"})])
    loop.plan(max_rows=100)
    loop.execute()                                  # killed inside batch 0
    killed = loop.output[0]
    assert killed
    # Meanwhile the table moves on: a new initial offset would start elsewhere.
    cluster.add_snapshot("db.pk", 1, 7, rows(3, 200), 3)
    for b in (0, 1):
        cluster.append_log("db.pk", b, [("+I", {"id": 60 + b, "v": "z"})] * 2)
    if mode == "earliest":                          # and log retention moved the start
        cluster.tables["db.pk"].log_start.update({0: 1, 1: 1})
    loop.run()                                      # initialOffset again, batch 0 replayed
    assert loop.output[0] == killed


@pytest.mark.parametrize("batches", [1, 2])
def test_killed_mid_snapshot_and_after_it_reuses_the_lease(pk, clock, batches):
    loop = SparkLoop(pk, clock).run()
    for _ in range(batches):
        loop.batch()
    loop.plan()                                     # the next batch is logged, never run
    loop.run().drain()
    assert_exact(loop, pk)
    # After the snapshot phase: a restart takes no lease at all.
    pk.append_log("db.pk", 0, [("+I", {"id": 99, "v": "late"})])
    loop.run()
    acquires = len(pk.calls_of("acquire"))
    loop.drain()
    assert len(pk.calls_of("acquire")) == acquires and pk.leases == {}
    assert (0, 5) in loop.log_records()


def test_replayed_batch_0_reacquires_pins_that_expired(pk, clock):
    loop = SparkLoop(pk, clock, **{"scan.kv.snapshot.lease.id": "job-1"}).run()
    loop.plan()
    loop.execute()
    pk.leases.clear()                                # the driver stayed down past the expiry
    loop.run()
    assert list(pk.leases) == ["job-1"]
    loop.drain()
    assert_exact(loop, pk)


def test_a_snapshot_lost_before_the_first_lease_is_no_data_loss(pk, clock):
    loop = SparkLoop(pk, clock).run()   # failOnDataLoss=true (default)
    pk.remove_snapshot("db.pk", 0, 3)                     # retention wins the race
    pk.add_snapshot("db.pk", 0, 8, rows(13), 3)
    loop.drain()
    rows_read = sorted(loop.snapshot_rows())
    assert [r for r in rows_read if r[0] == 0] == [(0, 8, r) for r in range(13)]
    assert [r for r in rows_read if r[0] == 1] == [(1, 4, r) for r in range(7)]
    assert sorted(o for b, o in loop.log_records() if b == 0) == [3, 4]
    assert pk.leases == {} and len(loop.lease_ids_in_offsets()) == 1


def test_a_snapshot_lost_after_rows_were_read_is_data_loss(pk, clock):
    loop = SparkLoop(pk, clock).run()
    loop.batch()
    pk.leases.clear()
    pk.remove_snapshot("db.pk", 0, 3)
    with pytest.raises(KvSnapshotNotExist, match="failOnDataLoss=false"):
        loop.run()
        loop.drain()


@pytest.mark.parametrize("point", ["inside batch 0", "mid-snapshot"])
def test_a_start_that_cannot_succeed_leaves_no_new_pins(pk, clock, point):
    loop = SparkLoop(pk, clock).run().kill_at(point)
    lease_id = loop.offsets[0]["lease_id"]
    pk.leases.clear()                              # the lease expired while the query was down
    pk.remove_snapshot("db.pk", 0, 3)              # and retention took a snapshot it needs
    for _ in range(3):                             # every restart fails, none leaves pins
        with pytest.raises(KvSnapshotNotExist) as err:
            loop.run()
            loop.drain()
        assert not pk.leases.get(lease_id, {}).get("pins")
    text = str(err.value)
    assert "new checkpointLocation" in text and f"fluss-spark lease drop {lease_id}" in text


def test_a_start_that_fails_for_a_passing_reason_keeps_the_checkpoints_pins(pk, clock):
    from fluss_spark.errors import NetworkError
    loop = SparkLoop(pk, clock).run()
    loop.batch()
    lease_id = loop.offsets[0]["lease_id"]
    tid = pk.tables["db.pk"].info.table_id
    real = pk.latest_kv_snapshots

    def down(name, **kw):
        raise NetworkError("the coordinator is restarting")
    pk.remove_snapshot("db.pk", 1, 4)   # a replacement must be listed: the listing fails
    pk.add_snapshot("db.pk", 1, 6, rows(7, 100), 1)
    pk.latest_kv_snapshots = down
    with pytest.raises(NetworkError):
        loop.run(**{"failOnDataLoss": "false"})
        loop.drain()
    assert pk.leases[lease_id]["pins"][tid][0] == 3   # the checkpoint is still protected
    pk.latest_kv_snapshots = real


MISMATCHES = [
    ({"table": "db.other"}, r"it reads table\(s\) \['db.pk'\], this query reads \['db.other'\]"),
    ({"scan.startup.mode": "earliest"}, "scan.startup.mode='full', this query has 'earliest'"),
    ({"table": None, "tables": "db.pk"}, "single-table layout, this query the multi-table"),
]


@pytest.mark.parametrize("point", ["after offsets/0", "mid-snapshot", "after the snapshot phase"])
@pytest.mark.parametrize("changed, message", MISMATCHES)
def test_a_checkpoint_of_another_query_is_refused_at_every_restart_point(
        pk, clock, point, changed, message):
    pk.add_table("db.other", buckets=1)
    loop = SparkLoop(pk, clock).run().kill_at(point)
    with pytest.raises(CheckpointMismatch, match=message) as err:
        loop.run(**changed)
        loop.drain()
    assert "new checkpointLocation" in str(err.value)


@pytest.mark.parametrize("point", ["after offsets/0", "mid-snapshot"])
def test_a_dropped_and_recreated_table_is_refused(pk, clock, point):
    loop = SparkLoop(pk, clock).run().kill_at(point)
    old = pk.tables.pop("db.pk").info.table_id
    pk.add_table("db.pk", buckets=2)
    with pytest.raises(CheckpointMismatch, match=f"has id {old}.*dropped and created again"):
        loop.run()
        loop.drain()


def test_version_1_checkpoint_restarts_under_its_lease(pk, clock):
    loop = SparkLoop(pk, clock).run()
    loop.batch()
    loop.plan()
    v1 = dict(loop.offsets[0])
    for i, offset in enumerate(loop.offsets):   # as a version without holders wrote them
        loop.offsets[i] = {"version": 1, "lease_id": offset["lease_id"],
                           "tables": offset["tables"]}
    pk.leases[v1["lease_id"]]["holders"].clear()
    loop.run().drain()
    assert decode(loop.offsets[-1]).holder == v1["lease_id"]   # the v1 lease id holds it
    assert_exact(loop, pk)


def test_a_second_query_cannot_take_the_first_ones_pins(pk, clock):
    first = SparkLoop(pk, clock, **{"scan.kv.snapshot.lease.id": "shared"}).run()
    first.batch()
    second = SparkLoop(pk, clock, **{"scan.kv.snapshot.lease.id": "shared"})
    with pytest.raises(LeaseHeldByOther) as err:
        second.run().plan()
    assert "'db.pk'" in str(err.value) and "fluss-spark lease drop shared" in str(err.value)
    first.drain()   # the first query is unharmed
    assert_exact(first, pk)


def _change_schema(cluster, table: str, schema: str) -> None:
    from dataclasses import replace as copy
    from fluss_spark.protocol.types import parse_schema
    t = cluster.tables[table]
    t.info = copy(t.info, schema=parse_schema(schema), schema_id=t.info.schema_id + 1)


@pytest.mark.parametrize("point", ["after offsets/0", "mid-snapshot", "after the snapshot phase"])
def test_a_restart_takes_columns_appended_since_its_checkpoint(pk, clock, point):
    loop = SparkLoop(pk, clock).run()
    assert loop.start["query"]["columns"] == {"db.pk": [["id", "int64"], ["v", "string"]]}
    loop.kill_at(point)
    _change_schema(pk, "db.pk", "id BIGINT, v STRING, note STRING")
    loop.run()
    loop.drain()
    pk.append_log("db.pk", 0, [("+I", {"id": 900, "v": "n", "note": "new"})])
    loop.drain()
    assert loop.offsets[-1]["query"]["columns"]["db.pk"][-1] == ["note", "string"]
    assert len(pk.leases) <= 1


@pytest.mark.parametrize("schema, problem", [
    ("id BIGINT, v BIGINT", "column 'v' changed type from string to int64"),
    ("id BIGINT", "column 'v' is gone"),
    ("id BIGINT, note STRING, v STRING", "column 'v' moved from position 2 to 3"),
])
def test_a_restart_refuses_any_other_schema_change(pk, clock, schema, problem):
    loop = SparkLoop(pk, clock).run().kill_at("mid-snapshot")
    _change_schema(pk, "db.pk", schema)
    with pytest.raises(CheckpointMismatch, match=f"'db.pk' changed incompatibly since "
                                                 f"\\({problem}\\).*new checkpointLocation"):
        loop.run()
        loop.drain()
