"""LeaseKeeper: renews at a third of the duration, notices a lost lease, re-acquires where there
is no renew call."""

import threading

from fluss_spark.testing.clock import FakeClock
from fluss_spark.connector.lease_keeper import LeaseKeeper
from fluss_spark.connector.lease_session import LeaseSession
from fluss_spark.connector.options import parse_options
from fluss_spark.errors import UnknownServerError
from fluss_spark.testing.fake_cluster import FakeCluster


def leased(clock, lease_renewal="renew", duration_ms=30_000):
    """A fake cluster with table db.pk (snapshot 3 of bucket 0, 1 of bucket 1) pinned by L."""
    cluster = FakeCluster(clock, lease_renewal=lease_renewal)
    tid = cluster.add_table("db.pk", buckets=2).info.table_id
    cluster.add_snapshot("db.pk", 0, 3, [{"id": 1, "v": "a"}], 1)
    cluster.add_snapshot("db.pk", 1, 1, [{"id": 2, "v": "b"}], 1)
    cluster.acquire_kv_snapshot_lease("L", duration_ms, {tid: {0: 3, 1: 1}}, holder="q")
    return cluster, tid


def test_renews_at_a_third_of_the_duration(clock):
    cluster, _ = leased(clock)
    k = LeaseKeeper(cluster, "L", 30_000, clock=clock)
    assert not k.tick()
    clock.advance(9_900)
    assert not k.tick()
    clock.advance(200)
    assert k.tick() and cluster.calls_of("renew") == [("renew", "L")]
    assert k.expires_at_ms == clock() + 30_000
    assert not k.tick()
    clock.advance(10_000)
    assert k.tick() and k.renewals == 2


def test_lost_lease(clock):
    cluster, _ = leased(clock)
    cluster.drop_kv_snapshot_lease("L")
    k = LeaseKeeper(cluster, "L", 3_000, clock=clock)
    assert not k.tick(force=True)
    assert k.lost
    k.acquired()
    assert not k.lost


def test_without_a_renew_call_the_held_pins_are_acquired_again(clock):
    cluster, tid = leased(clock, lease_renewal="reacquire")
    held = {(tid, None): {0: 3, 1: 1}}
    k = LeaseKeeper(cluster, "L", 30_000, clock=clock, pins=lambda: held, holder="q")
    clock.advance(10_000)
    before = cluster.leases["L"]["expires"]
    assert k.tick() and k.renewals == 1
    assert cluster.calls_of("renew") == []
    assert cluster.calls_of("acquire")[-1] == ("acquire", "L", {tid: {0: 3, 1: 1}}, "q")
    assert cluster.leases["L"]["expires"] == before + 10_000
    assert cluster.leases["L"]["holders"] == {tid: "q"}


def test_without_a_renew_call_a_lapsed_lease_whose_snapshot_is_gone_is_lost(clock):
    cluster, tid = leased(clock, lease_renewal="reacquire")
    k = LeaseKeeper(cluster, "L", 30_000, clock=clock, pins=lambda: {(tid, None): {0: 3, 1: 1}},
                    holder="q")
    clock.advance(40_000)
    cluster.remove_snapshot("db.pk", 0, 3)    # retention, once the lease had expired
    assert not k.tick() and k.lost


def test_the_session_reacquires_what_it_holds_and_nothing_it_released(clock):
    cluster, tid = leased(clock, lease_renewal="reacquire", duration_ms=90_000)
    cluster.add_table("db.other", buckets=1)
    other = cluster.tables["db.other"].info.table_id
    cluster.add_snapshot("db.other", 0, 7, [{"id": 1, "v": "a"}], 1)
    options = parse_options({"bootstrap.servers": "h:1", "tables": "db.pk,db.other",
                             "scan.kv.snapshot.lease.duration": "90s"})
    session = LeaseSession(options, lambda: cluster, lambda: cluster, clock=clock,
                           renew_in_thread=False)
    session.bind("L", "q")
    assert session.acquire({(tid, None): {0: 3, 1: 1}, (other, None): {0: 7}}, {}) == {}
    assert session.release(tid, {}, "db.pk")
    clock.advance(30_000)
    session.tick()
    assert cluster.calls_of("acquire")[-1] == ("acquire", "L", {other: {0: 7}}, "q")
    assert cluster.leases["L"]["pins"] == {other: {0: 7}}
    assert session.keeper is not None and session.keeper.renewals == 1


def test_thread_renews_and_stops():
    cluster, _ = leased(FakeClock(), duration_ms=300)
    renewed = threading.Event()
    real = cluster.renew_kv_snapshot_lease

    def renew(lease_id, duration_ms):
        if len(cluster.calls_of("renew")) >= 1:
            renewed.set()
        return real(lease_id, duration_ms)
    cluster.renew_kv_snapshot_lease = renew
    k = LeaseKeeper(cluster, "L", 300)  # real clock: renews every 100 ms
    k.start()
    assert renewed.wait(5)
    k.stop()
    assert k.stopped and len(cluster.calls_of("renew")) >= 2
    n = len(cluster.calls_of("renew"))
    assert k._thread is not None and not k._thread.is_alive()
    assert len(cluster.calls_of("renew")) == n


def test_a_release_names_the_partitions_it_pinned_also_one_dropped_since(clock):
    """A cluster that releases a table's buckets only in the partitions it lists now (Apache
    Fluss 0.9.1) must still be told a dropped partition's pins, or the lease would stay; and
    only the partitions pinned, and in each only the buckets pinned: Fluss 0.9.1 fails a
    release naming a bucket after the table's last pinned one (here, bucket 1, which had no
    snapshot, and a partition created after the acquire)."""
    cluster = FakeCluster(clock=clock)
    cluster.add_table("db.p", schema="id BIGINT NOT NULL, dt STRING NOT NULL, v STRING",
                      pk=("id", "dt"), buckets=2, partition_keys=("dt",))
    ids = {day: cluster.create_partition("db.p", {"dt": day}).partition_id
           for day in ("2026-11-24", "2026-11-25")}
    tid = cluster.tables["db.p"].info.table_id
    released = []
    plain = cluster.release_kv_snapshot_lease

    def release(lease_id, tables, *, partitions=None):
        released.append((tables, partitions))
        return plain(lease_id, tables, partitions=partitions)
    cluster.release_kv_snapshot_lease = release   # type: ignore[method-assign]
    for day, pid in ids.items():
        cluster.add_snapshot("db.p", 0, 3, [{"id": 1, "dt": day, "v": "a"}], 1, partition=day)
    options = parse_options({"bootstrap.servers": "h:1", "table": "db.p"})
    session = LeaseSession(options, lambda: cluster, lambda: cluster, clock=clock,
                           renew_in_thread=False)
    session.bind("L", "q")
    assert session.acquire({(tid, pid): {0: 3} for pid in ids.values()}, {}) == {}
    cluster.drop_partition("db.p", {"dt": "2026-11-24"})
    cluster.create_partition("db.p", {"dt": "2026-11-26"})
    assert session.release(tid, {}, "db.p")
    assert released == [({}, {tid: {pid: [0] for pid in ids.values()}})]
    assert session.held() == {}
    # A run that holds none of the table's pins (an earlier run took them) names those of the
    # checkpoint's read units.
    later = LeaseSession(options, lambda: cluster, lambda: cluster, clock=clock,
                         renew_in_thread=False)
    later.bind("L", "q")
    pid = ids["2026-11-25"]
    assert later.release(tid, {(tid, pid): {0: 3}}, "db.p")
    assert released[-1] == ({}, {tid: {pid: [0]}})


def test_a_release_that_failed_half_way_is_repaired_by_pinning_again(clock):
    """Apache Fluss 0.9.1 can fail a release after unpinning part of it (or a release's answer
    is lost): the session pins the same snapshots again and releases them, and the lease goes."""
    cluster, tid = leased(clock, lease_renewal="reacquire")
    plain, failures = cluster.release_kv_snapshot_lease, []

    def release(lease_id, tables, *, partitions=None):
        if not failures:
            failures.append(plain(lease_id, {tid: [0]}))       # half of it, then a failure
            raise UnknownServerError("Failed to release kv snapshot lease for L")
        return plain(lease_id, tables, partitions=partitions)
    cluster.release_kv_snapshot_lease = release   # type: ignore[method-assign]
    options = parse_options({"bootstrap.servers": "h:1", "table": "db.pk"})
    session = LeaseSession(options, lambda: cluster, lambda: cluster, clock=clock,
                           renew_in_thread=False)
    session.bind("L", "q")
    assert session.acquire({(tid, None): {0: 3, 1: 1}}, {}) == {}
    assert session.release(tid, {}, "db.pk")
    assert failures and cluster.calls_of("acquire")[-1] == ("acquire", "L", {tid: {0: 3, 1: 1}},
                                                            "q")
    assert "L" not in cluster.leases and session.held() == {}


def test_the_renewal_thread_connects_its_own_cluster_only_when_it_renews(clock):
    """Starting the keeper costs the query's first batch no round trip: how the lease is
    renewed comes from the enumerator's cluster, and the keeper's own cluster is first used by
    its thread."""
    cluster, tid = leased(clock, lease_renewal="reacquire", duration_ms=90_000)

    class Untouched:
        def __getattr__(self, name):
            raise AssertionError(f"the keeper's cluster was used ({name}) before a renewal")
    options = parse_options({"bootstrap.servers": "h:1", "table": "db.pk",
                             "scan.kv.snapshot.lease.duration": "90s"})
    session = LeaseSession(options, lambda: cluster, Untouched, clock=clock)
    session.bind("L", "q")
    assert session.acquire({(tid, None): {0: 3, 1: 1}}, {}) == {}
    assert session.keeper is not None and session.keeper.reacquire
    session.keeper.stop()
