"""The driver-side enumerator with a fake cluster and a fake clock (no Spark, no servers)."""

import logging

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, ReadMinRows

from fluss_spark.connector.enumerator import Enumerator
from fluss_spark.connector.planning import spread
from fluss_spark.connector.offsets import decode, rows_between
from fluss_spark.connector.options import parse_options
from fluss_spark.connector.splits import LogSplit, SnapshotSplit
from fluss_spark.errors import KvSnapshotNotExist
from fluss_spark.testing.fake_cluster import BASE_TIMESTAMP_MS


def rows(n, start=0):
    return [{"id": i, "v": f"r{i}"} for i in range(start, start + n)]


@pytest.fixture
def pk(cluster):
    """db.pk: bucket 0 has snapshot 3 (10 rows, log offset 12), bucket 1 has no snapshot."""
    cluster.add_table("db.pk", buckets=2)
    cluster.add_snapshot("db.pk", 0, 3, rows(10), 12)
    cluster.append_log("db.pk", 0, [("+I", {"id": 100 + i, "v": "x"}) for i in range(15)])
    cluster.append_log("db.pk", 1, [("+I", {"id": 200 + i, "v": "y"}) for i in range(4)])
    return cluster


def make(cluster, clock, tables=("db.pk",), **opts):
    options = parse_options({"bootstrap.servers": "h:1",
                             **({"table": tables[0]} if len(tables) == 1
                                else {"tables": ",".join(tables)}), **opts})
    return Enumerator(options, list(tables), lambda: cluster, clock=clock, renew_in_thread=False)


def test_full_mode_pins_the_snapshots_before_an_offset_names_them(pk, clock):
    e = make(pk, clock)
    first = e.initial_offset()
    assert e.initial_offset() == first  # Spark calls it twice on a fresh start
    assert pk.calls_of("acquire") == []  # a restart before commits/0 plans this again: no lease
    tid = pk.tables["db.pk"].info.table_id
    t = first["tables"][str(tid)]
    assert t["name"] == "db.pk"
    assert t["snapshot"] == {"0": [3, 10, 0, 12]}
    assert t["log"] == {"0": 12, "1": 0}  # no snapshot: bucket 1 reads its log from earliest
    assert first["query"]["startup_mode"] == "full" and first["query"]["layout"] == "single"
    end = e.latest_offset(first, ReadAllAvailable())
    lease_id = first["lease_id"]
    # Pinned before Spark logs an offset naming it, for the grace only (the id is not logged).
    assert [c[1] for c in pk.calls_of("acquire")] == [lease_id]
    assert pk.leases[lease_id]["pins"] == {tid: {0: 3}}
    assert pk.leases[lease_id]["expires"] == clock() + 120_000
    e.partitions(first, end)   # ``end`` is in the offset log: the full duration from now on
    assert list(pk.leases) == [lease_id]
    assert pk.leases[lease_id]["pins"] == {tid: {0: 3}}
    assert pk.leases[lease_id]["expires"] == clock() + 86_400_000


def test_an_existing_lease_is_never_shortened_by_the_grace(pk, clock):
    # An id given by option may be shared (the tiering job's is): a short first life would cut
    # the others' protection short. A new one gets the grace like a generated id.
    pk.add_table("db.other", buckets=1)
    pk.add_snapshot("db.other", 0, 1, rows(3), 0)
    other = make(pk, clock, tables=("db.other",), **{"scan.kv.snapshot.lease.id": "job"})
    other.latest_offset(other.initial_offset(), ReadAllAvailable())
    assert pk.leases["job"]["expires"] == clock() + 120_000
    e = make(pk, clock, **{"scan.kv.snapshot.lease.id": "job",
                           "scan.kv.snapshot.lease.grace": "5s"})
    clock.advance(1000)
    e.latest_offset(e.initial_offset(), ReadAllAvailable())
    assert pk.leases["job"]["expires"] == clock() + 86_400_000


def test_the_grace_is_renewed_while_the_driver_lives(pk, clock):
    e = make(pk, clock, **{"scan.kv.snapshot.lease.grace": "30s"})
    first = e.initial_offset()
    e.latest_offset(first, ReadAllAvailable())
    for _ in range(5):          # e.g. minOffsetsPerTrigger keeps batch 0 waiting
        clock.advance(10_001)
        e.keeper.tick()
    assert pk.leases[first["lease_id"]]["expires"] > clock()
    assert pk.leases[first["lease_id"]]["expires"] <= clock() + 30_000


def test_configured_lease_id_is_used(pk, clock):
    e = make(pk, clock, **{"scan.kv.snapshot.lease.id": "my-job"})
    start = e.initial_offset()
    assert start["lease_id"] == "my-job"
    e.partitions(start, e.latest_offset(start, ReadAllAvailable()))
    assert list(pk.leases) == ["my-job"]


def test_snapshot_phase_then_changelog(pk, clock):
    e = make(pk, clock)
    start = e.initial_offset()
    end = e.latest_offset(start, ReadAllAvailable())
    tid = pk.tables["db.pk"].info.table_id
    # Snapshot rows of bucket 0 all go out; its log waits until the snapshot phase committed.
    assert end["tables"][str(tid)]["snapshot"]["0"] == [3, 10, 10, 12]
    assert end["tables"][str(tid)]["log"] == {"0": 12, "1": 4}
    splits = e.partitions(start, end)
    assert splits == [SnapshotSplit(tid, "db.pk", 0, 3, 0, 10, start["lease_id"], 12),
                      LogSplit(tid, "db.pk", 1, 0, 4)]
    end2 = e.latest_offset(end, ReadAllAvailable())
    assert end2["tables"][str(tid)]["log"] == {"0": 15, "1": 4}
    assert e.partitions(end, end2) == [LogSplit(tid, "db.pk", 0, 12, 15)]
    assert e.latest_offset(end2, ReadAllAvailable()) == end2  # nothing new: start comes back


def test_commit_releases_each_table_once_and_lease_goes(cluster, clock):
    for name in ("db.a", "db.b"):
        cluster.add_table(name, buckets=2)
        cluster.add_snapshot(name, 0, 1, rows(4), 0)
        cluster.add_snapshot(name, 1, 1, rows(40), 0)
    e = make(cluster, clock, tables=("db.a", "db.b"), maxOffsetsPerTrigger="30")
    start = e.initial_offset()
    lease_id = start["lease_id"]
    a, b = (cluster.tables[n].info.table_id for n in ("db.a", "db.b"))
    offsets = [start]
    while True:
        nxt = e.latest_offset(offsets[-1], ReadMaxRows(30))
        if nxt == offsets[-1]:
            break
        total = sum(rows_between(decode(offsets[-1]), decode(nxt)).values())
        assert total <= 30
        e.partitions(offsets[-1], nxt)
        # One lease, both tables: pinned before batch 0 is logged, extended once it is.
        assert len(cluster.calls_of("acquire")) == 2
        if len(offsets) == 1:
            assert set(cluster.leases[lease_id]["pins"]) == {a, b}
        e.commit(nxt)
        offsets.append(nxt)
        if lease_id not in cluster.leases:
            break
    releases = cluster.calls_of("release")
    assert ([list(r[2]) for r in releases] == [[a], [b]]
            or [list(r[2]) for r in releases] == [[b], [a]])
    assert all(len(r[2]) == 1 for r in releases)  # one call per table
    assert lease_id not in cluster.leases
    assert e.keeper.stopped
    assert sum(sum(rows_between(decode(x), decode(y)).values())
               for x, y in zip(offsets, offsets[1:])) == 88


def test_max_rows_spread_fairly():
    def k(b, pid=None):
        return ((1, pid), b)
    alloc = spread({k(0): 100, k(1): 3, k(2): 100}, 50)
    assert (alloc == {k(0): 24, k(1): 3, k(2): 23}
            or alloc == {k(0): 23, k(1): 3, k(2): 24})
    assert sum(alloc.values()) == 50
    assert spread({k(0): 5, k(1): 5}, 100) == {k(0): 5, k(1): 5}
    small = spread({k(b): 10 for b in range(5)}, 3)
    assert sum(small.values()) == 3 and max(small.values()) == 1
    assert spread({k(0): 0}, 10) == {k(0): 0}
    # Partitions' buckets are buckets of their own in the same fair share.
    parts = spread({k(0, 7): 100, k(1, 7): 100, k(0, 9): 100, k(1, 9): 1}, 31)
    assert parts == {k(0, 7): 10, k(1, 7): 10, k(0, 9): 10, k(1, 9): 1}


def test_unavailable_snapshot_is_listed_again_and_reacquired(pk, clock):
    real_acquire = pk.acquire_kv_snapshot_lease
    state = {"n": 0}

    def flaky(lease_id, duration_ms, tables, **kw):
        state["n"] += 1
        if state["n"] == 1:  # snapshot 3 removed by retention; 5 is the new latest
            pk.remove_snapshot("db.pk", 0, 3)
            pk.add_snapshot("db.pk", 0, 5, rows(11), 14)
        return real_acquire(lease_id, duration_ms, tables, **kw)
    pk.acquire_kv_snapshot_lease = flaky
    e = make(pk, clock)
    start = e.initial_offset()
    end = e.latest_offset(start, ReadAllAvailable())
    tid = pk.tables["db.pk"].info.table_id
    assert state["n"] == 2
    # Nothing of snapshot 3 was read: the first offset Spark logs names the pinned snapshot 5.
    assert end["tables"][str(tid)]["snapshot"]["0"] == [5, 11, 11, 14]
    assert end["tables"][str(tid)]["log"]["0"] == 14
    assert pk.leases[start["lease_id"]]["pins"] == {tid: {0: 5}}
    assert SnapshotSplit(tid, "db.pk", 0, 5, 0, 11, start["lease_id"], 14) in e.partitions(start,
                                                                                           end)


def test_acquire_retries_are_bounded(pk, clock):
    real_acquire = pk.acquire_kv_snapshot_lease
    counter = iter(range(10, 100))

    def always_gone(lease_id, duration_ms, tables, **kw):
        for sid in list(pk.tables["db.pk"].snapshots[0]):
            pk.remove_snapshot("db.pk", 0, sid)
        pk.add_snapshot("db.pk", 0, next(counter), rows(2), 1)
        return real_acquire(lease_id, duration_ms,
                            {t: {b: -1 for b in p} for t, p in tables.items()}, **kw)
    pk.acquire_kv_snapshot_lease = always_gone
    e = make(pk, clock, **{"scan.kv.snapshot.lease.acquire-retries": "2"})
    start = e.initial_offset()
    with pytest.raises(KvSnapshotNotExist) as err:
        e.latest_offset(start, ReadAllAvailable())
    msg = str(err.value)
    assert ("after 3 attempts" in msg and "'db.pk' bucket 0" in msg
            and "kv.snapshot.num-retained" in msg)
    assert not pk.leases.get(start["lease_id"], {}).get("pins")   # a failed start pins nothing


def test_log_only_modes_take_no_lease(pk, clock):
    for mode, expect in (("earliest", {"0": 0, "1": 0}), ("latest", {"0": 15, "1": 4})):
        e = make(pk, clock, **{"scan.startup.mode": mode})
        t = next(iter(e.initial_offset()["tables"].values()))
        assert t["snapshot"] == {} and t["log"] == expect
    assert pk.calls_of("acquire") == [] and pk.leases == {}
    e = make(pk, clock, **{"scan.startup.mode": "timestamp",
                                            "scan.startup.timestamp": str(BASE_TIMESTAMP_MS + 3)})
    assert next(iter(e.initial_offset()["tables"].values()))["log"] == {"0": 3, "1": 3}


def test_log_table_in_full_mode_reads_from_earliest(cluster, clock):
    cluster.add_table("db.log", pk=(), buckets=1)
    cluster.tables["db.log"].log_start[0] = 2
    cluster.append_log("db.log", 0, [("+A", {"id": i, "v": "z"}) for i in range(6)])
    e = make(cluster, clock, tables=("db.log",))
    start = e.initial_offset()
    assert next(iter(start["tables"].values()))["log"] == {"0": 2}
    end = e.latest_offset(start, ReadAllAvailable())
    assert next(iter(end["tables"].values()))["log"] == {"0": 6}
    assert cluster.calls_of("acquire") == []


def test_a_latest_offset_below_the_position_read_never_moves_it_back(cluster, clock,
                                                                    monkeypatch):
    """A bucket's latest offset that comes back below the position already read (a leader that
    has just taken over may report a lagging high watermark) means no new records there: the
    position stays, and the records before it are not read again."""
    cluster.add_table("db.log", pk=(), buckets=2)
    for b in (0, 1):
        cluster.append_log("db.log", b, [("+A", {"id": i, "v": "a"}) for i in range(10)])
    e = make(cluster, clock, tables=("db.log",))

    def log(offset):
        return next(iter(offset["tables"].values()))["log"]
    first = e.latest_offset(e.initial_offset(), ReadAllAvailable())
    assert log(first) == {"0": 10, "1": 10}
    for b in (0, 1):
        cluster.append_log("db.log", b, [("+A", {"id": i, "v": "b"}) for i in range(5)])
    listed = cluster.list_offsets
    monkeypatch.setattr(cluster, "list_offsets",
                        lambda *a, **k: {**listed(*a, **k), 0: 4})     # bucket 0 lags
    assert log(e.latest_offset(first, ReadAllAvailable())) == {"0": 10, "1": 15}
    assert log(e.latest_offset(first, ReadMaxRows(3))) == {"0": 10, "1": 13}
    monkeypatch.undo()
    assert log(e.latest_offset(first, ReadAllAvailable())) == {"0": 15, "1": 15}


def test_old_server_warns_once_and_reads_unprotected(pk, clock, caplog):
    pk.leases_supported = False
    e = make(pk, clock)
    with caplog.at_level(logging.WARNING):
        start = e.initial_offset()
        end = e.latest_offset(start, ReadAllAvailable())
        e.commit(end)
        e.latest_offset(end, ReadAllAvailable())
    warnings = [r for r in caplog.records if "UNPROTECTED" in r.getMessage()]
    assert len(warnings) == 1
    assert pk.calls_of("acquire") == [] and pk.calls_of("release") == []
    assert len(e.partitions(start, end)) == 2


def test_restart_reuses_lease_and_reasserts_pins(pk, clock):
    e = make(pk, clock, maxOffsetsPerTrigger="4")
    start = e.initial_offset()
    lease_id = start["lease_id"]
    mid = e.latest_offset(start, ReadMaxRows(4))
    e.partitions(start, mid)
    e.stop()
    pk.leases.clear()  # the pins expired while the query was down
    e2 = make(pk, clock, maxOffsetsPerTrigger="4")
    nxt = e2.latest_offset(mid, ReadMaxRows(4))  # first call of the new run
    acquires = pk.calls_of("acquire")
    assert acquires[-1][1] == lease_id and len(acquires) == 3
    assert list(pk.leases) == [lease_id]
    assert nxt["lease_id"] == lease_id


def test_restart_with_lost_snapshot_fails_by_default(pk, clock):
    e = make(pk, clock, **{"scan.kv.snapshot.lease.id": "L1"})
    start = e.initial_offset()
    mid = e.latest_offset(start, ReadMaxRows(2))
    pk.leases.clear()
    pk.remove_snapshot("db.pk", 0, 3)
    e2 = make(pk, clock)
    with pytest.raises(KvSnapshotNotExist) as err:
        e2.partitions(mid, mid)
    msg = str(err.value)
    assert "'db.pk'" in msg and "bucket 0" in msg and "snapshot 3" in msg and "'L1'" in msg
    assert "failOnDataLoss=false" in msg


def test_restart_with_lost_snapshot_continues_when_allowed(pk, clock, caplog):
    e = make(pk, clock)
    start = e.initial_offset()
    mid = e.latest_offset(start, ReadMaxRows(2))
    pk.leases.clear()
    pk.remove_snapshot("db.pk", 0, 3)
    pk.add_snapshot("db.pk", 0, 7, rows(12), 15)
    e2 = make(pk, clock, failOnDataLoss="false")
    with caplog.at_level(logging.WARNING):
        end = e2.latest_offset(mid, ReadAllAvailable())
    assert any("continuing from snapshot 7" in r.getMessage() for r in caplog.records)
    tid = pk.tables["db.pk"].info.table_id
    assert end["tables"][str(tid)]["snapshot"]["0"] == [7, 12, 12, 15]
    splits = e2.partitions(mid, end)
    assert SnapshotSplit(tid, "db.pk", 0, 7, 0, 12, mid["lease_id"], 15) in splits
    assert not any(isinstance(s, LogSplit) and s.bucket == 0 for s in splits)


def test_restart_releases_tables_finished_before_the_stop(pk, clock):
    e = make(pk, clock)
    start = e.initial_offset()
    done = e.latest_offset(start, ReadAllAvailable())  # snapshot read, never committed
    e.partitions(start, done)
    lease_id = start["lease_id"]
    assert lease_id in pk.leases
    e2 = make(pk, clock)
    e2.latest_offset(done, ReadAllAvailable())
    assert lease_id not in pk.leases


def test_min_rows_waits_up_to_max_trigger_delay(cluster, clock):
    cluster.add_table("db.log", pk=(), buckets=1)
    e = make(cluster, clock, tables=("db.log",), minOffsetsPerTrigger="5",
             maxTriggerDelay="10s")
    assert isinstance(e.default_read_limit(), ReadMinRows)
    start = e.initial_offset()
    cluster.append_log("db.log", 0, [("+A", {"id": 1, "v": "a"})] * 3)
    assert e.latest_offset(start, ReadMinRows(5)) == start
    clock.advance(11_000)
    end = e.latest_offset(start, ReadMinRows(5))
    assert next(iter(end["tables"].values()))["log"] == {"0": 3}


def test_available_now_stops_at_the_target(cluster, clock):
    cluster.add_table("db.log", pk=(), buckets=1)
    cluster.append_log("db.log", 0, [("+A", {"id": 1, "v": "a"})] * 3)
    e = make(cluster, clock, tables=("db.log",))
    start = e.initial_offset()
    e.prepare_for_available_now()
    cluster.append_log("db.log", 0, [("+A", {"id": 2, "v": "b"})] * 4)
    end = e.latest_offset(start, ReadAllAvailable())
    assert next(iter(end["tables"].values()))["log"] == {"0": 3}
    assert e.latest_offset(end, ReadAllAvailable()) == end


def test_available_now_resolves_the_tables_once_before_the_first_offset(pk, clock):
    # Spark calls prepareForTriggerAvailableNow right before the run's first initialOffset: the
    # tables it resolved serve both (one table lookup less on the way to the first batch).
    e = make(pk, clock)
    e.prepare_for_available_now()
    first = e.initial_offset()
    assert pk.calls_of("get_table") == [("get_table", "db.pk")]
    assert next(iter(first["tables"].values()))["snapshot"] == {"0": [3, 10, 0, 12]}


def test_report_latest_offset(pk, clock):
    e = make(pk, clock)
    assert e.report_latest_offset() is None
    start = e.initial_offset()
    e.latest_offset(start, ReadMaxRows(1))
    latest = decode(e.report_latest_offset())
    tid = pk.tables["db.pk"].info.table_id
    assert latest.tables[tid].snapshot[0].complete and latest.tables[tid].log[1] == 4


def test_lease_is_renewed_from_latest_offset(pk, clock):
    e = make(pk, clock, **{"scan.kv.snapshot.lease.duration": "90s"})
    start = e.initial_offset()
    end = e.latest_offset(start, ReadMaxRows(1))
    e.partitions(start, end)
    e.latest_offset(end, ReadMaxRows(1))
    assert pk.calls_of("renew") == []
    clock.advance(31_000)
    e.latest_offset(end, ReadMaxRows(1))
    assert len(pk.calls_of("renew")) == 1


def test_expired_lease_is_reacquired(pk, clock):
    e = make(pk, clock, **{"scan.kv.snapshot.lease.duration": "90s"})
    start = e.initial_offset()
    end = e.latest_offset(start, ReadMaxRows(1))
    e.partitions(start, end)
    clock.advance(200_000)  # missed renewals: the coordinator expired the lease
    pk._expire()
    assert start["lease_id"] not in pk.leases
    e.latest_offset(end, ReadMaxRows(1))  # the renewal finds it gone and re-pins at once
    assert len(pk.calls_of("renew")) == 1 and len(pk.calls_of("acquire")) == 3
    assert start["lease_id"] in pk.leases and not e.keeper.lost


def test_restart_with_other_tables_is_refused(pk, clock):
    from fluss_spark.errors import ConfigError
    pk.add_table("db.other", buckets=1)
    start = make(pk, clock).initial_offset()
    e2 = make(pk, clock, tables=("db.other",))
    with pytest.raises(ConfigError, match="new checkpointLocation"):
        e2.latest_offset(start, ReadAllAvailable())


def test_recreated_table_is_refused(pk, clock):
    from fluss_spark.errors import ConfigError
    start = make(pk, clock).initial_offset()
    del pk.tables["db.pk"]
    pk.add_table("db.pk", buckets=2)
    with pytest.raises(ConfigError, match="dropped and created again"):
        make(pk, clock).latest_offset(start, ReadAllAvailable())


def test_min_rows_does_not_stall_available_now(cluster, clock):
    cluster.add_table("db.log", pk=(), buckets=1)
    cluster.append_log("db.log", 0, [("+A", {"id": 1, "v": "a"})] * 2)
    e = make(cluster, clock, tables=("db.log",), minOffsetsPerTrigger="5")
    start = e.initial_offset()
    e.prepare_for_available_now()
    end = e.latest_offset(start, ReadMinRows(5))
    assert next(iter(end["tables"].values()))["log"] == {"0": 2}


def test_a_cluster_without_renew_is_renewed_by_acquiring_the_same_pins(pk, clock):
    pk.lease_renewal = "reacquire"
    e = make(pk, clock, **{"scan.kv.snapshot.lease.duration": "90s"})
    start = e.initial_offset()
    end = e.latest_offset(start, ReadMaxRows(1))
    e.partitions(start, end)
    clock.advance(31_000)
    e.latest_offset(end, ReadMaxRows(1))
    tid = pk.tables["db.pk"].info.table_id
    provisional, first, renewal = pk.calls_of("acquire")
    assert renewal == first == provisional and first[2] == {tid: {0: 3}}  # same id, pins, holder
    assert pk.calls_of("renew") == [] and not e.lease.lost
    assert pk.leases[start["lease_id"]]["expires"] == clock() + 90_000


def test_snapshot_splits_carry_where_a_files_reading_cluster_keeps_the_snapshot(clock):
    from fluss_spark.testing.fake_cluster import FakeCluster
    files = FakeCluster(clock, snapshot_read="files", live_kv_scan=False)
    sessions = FakeCluster(clock, live_kv_scan=False)
    for c in (files, sessions):
        c.add_table("db.pk", buckets=1)
        c.add_snapshot("db.pk", 0, 3, rows(10), 12)
    located, plain = [e.partitions(s, e.latest_offset(s, ReadAllAvailable()))[0]
                      for e in (make(files, clock), make(sessions, clock))
                      for s in [e.initial_offset()]]
    assert located.location == files.snapshot_location("db.pk", 0, 3)
    assert located.location is not None and located.location.log_offset == 12
    assert plain.location is None
    # Where the files are is not part of what the split is: a restart may plan it without.
    assert located == SnapshotSplit(**{**vars(located), "location": None})
