"""LeaseManager on a real ZooKeeper store with an injected clock: the Fluss scenarios and ours."""

import threading

import pytest

from fluss_spark.errors import InvalidLeaseId, InvalidRequest, LeaseNotFound
from fluss_spark.metadata import layout

HOUR = 3_600_000


def test_acquire_then_release_removes_the_lease(h):
    for b in range(3):
        h.snapshot(1, b, 0)
    unavailable, expires = h.leases.acquire("job-1", HOUR, {1: {0: 0, 1: 0, 2: 0}})
    assert unavailable == {}
    assert expires == h.clock() + HOUR
    assert h.leases.describe("job-1").tables == {1: {0: 0, 1: 0, 2: 0}}
    assert h.leases.is_pinned(1, 2, 0)
    assert h.leases.release("job-1", {1: [0, 1]}) == 1
    assert h.leases.describe("job-1").tables == {1: {2: 0}}
    assert not h.leases.is_pinned(1, 0, 0)
    assert h.leases.release("job-1", {1: [2]}) == 0
    with pytest.raises(LeaseNotFound):
        h.leases.describe("job-1")
    assert h.store.lease_ids() == []


def test_drop_removes_every_pin_and_unknown_drop_is_a_no_op(h):
    h.snapshot(1, 0, 5)
    h.leases.acquire("a", HOUR, {1: {0: 5}})
    assert h.leases.drop("a") is True
    assert not h.leases.is_pinned(1, 0, 5)
    assert h.store.lease_ids() == []
    assert h.leases.drop("a") is False
    assert h.leases.drop("never-existed") is False
    assert h.leases.release("never-existed", {1: [0]}) == 0


def test_acquiring_a_snapshot_that_does_not_exist_is_reported_unavailable(h):
    h.snapshot(1, 0, 1)
    unavailable, _ = h.leases.acquire("a", HOUR, {1: {0: 1, 1: 7}, 9: {0: 3}})
    assert unavailable == {1: {1: 7}, 9: {0: 3}}
    assert h.leases.describe("a").tables == {1: {0: 1}}
    assert not h.leases.is_pinned(1, 1, 7)
    # Stored state agrees with memory: the unavailable ones were not persisted.
    assert h.store.load_lease("a").tables == {1: {0: 1}}


def test_acquiring_buckets_beyond_the_current_array_size_and_releasing_beyond_it(h):
    h.snapshot(1, 0, 1)
    h.leases.acquire("a", HOUR, {1: {0: 1}})
    for b in (1, 2, 50):
        h.snapshot(1, b, 2)
    unavailable, _ = h.leases.acquire("a", HOUR, {1: {1: 2, 2: 2, 50: 2}})
    assert unavailable == {}
    assert h.store.load_lease("a").tables == {1: {0: 1, 1: 2, 2: 2, 50: 2}}
    # Releasing a bucket beyond anything pinned is a no-op, not an error.
    assert h.leases.release("a", {1: [999], 7: [0]}) == 4
    assert h.leases.release("a", {1: [50]}) == 3
    assert h.store.load_lease("a").tables == {1: {0: 1, 1: 2, 2: 2}}


def test_re_acquiring_a_bucket_moves_the_pin(h):
    h.snapshot(1, 0, 1)
    h.snapshot(1, 0, 2)
    h.leases.acquire("a", HOUR, {1: {0: 1}})
    h.leases.acquire("a", HOUR, {1: {0: 2}})
    assert h.leases.describe("a").tables == {1: {0: 2}}
    assert not h.leases.is_pinned(1, 0, 1) and h.leases.is_pinned(1, 0, 2)


def test_reference_count_across_leases(h):
    h.snapshot(1, 0, 1)
    h.leases.acquire("a", HOUR, {1: {0: 1}})
    h.leases.acquire("b", HOUR, {1: {0: 1}})
    assert h.leases.pin_refs(1, 0, 1) == 2
    assert h.leases.pinned_by(1, 0, 1) == ["a", "b"]
    h.leases.drop("a")
    assert h.leases.pinned_by(1, 0, 1) == ["b"]
    assert h.leases.pin_refs(1, 0, 1) == 1


def test_a_leased_snapshot_survives_two_newer_snapshots_and_is_collected_after_release(h):
    h.snapshot(1, 0, 1)
    h.leases.acquire("a", HOUR, {1: {0: 1}})
    h.snapshot(1, 0, 2)
    h.snapshot(1, 0, 3)
    h.snapshot(1, 0, 4)
    assert h.alive(1, 0, 1), "a pinned snapshot must survive retention"
    assert not h.alive(1, 0, 2), "unpinned snapshot outside retention must go"
    assert h.stored_ids(1, 0) == [1, 3, 4]
    h.leases.release("a", {1: [0]})
    # Collected at once, not at the bucket's next snapshot.
    assert not h.alive(1, 0, 1)
    assert not h.file_of(1, 0, 1).exists()
    assert h.stored_ids(1, 0) == [3, 4]


def test_a_pinned_snapshot_inside_retention_stays_after_release(h):
    h.snapshot(1, 0, 1)
    h.leases.acquire("a", HOUR, {1: {0: 1}})
    h.leases.drop("a")
    assert h.alive(1, 0, 1)


def test_expiry_removes_the_lease_and_collects_what_it_alone_pinned(h):
    h.snapshot(1, 0, 1)
    h.leases.acquire("short", 1000, {1: {0: 1}})
    h.leases.acquire("long", HOUR, {})
    h.snapshot(1, 0, 2)
    h.snapshot(1, 0, 3)
    assert h.alive(1, 0, 1)
    h.clock.advance(999)
    assert h.leases.expire_once() == []
    h.clock.advance(1)
    assert h.leases.expire_once() == ["short"]
    assert not h.alive(1, 0, 1)
    assert [r.lease_id for r in h.leases.live()] == ["long"]
    assert h.store.lease_ids() == ["long"]


def test_expiry_thread_runs_on_its_interval(h):
    h.snapshot(1, 0, 1)
    h.leases.acquire("a", 10, {1: {0: 1}})
    h.clock.advance(11)
    h.leases.start_expiry(20)
    try:
        from fluss_spark.local.ports import wait_until
        wait_until(lambda: h.store.lease_ids() == [], 5, "the expiry thread", interval_s=0.02)
    finally:
        h.leases.stop_expiry()
    assert not h.leases.is_pinned(1, 0, 1)


def test_renew_extends_and_renew_after_expiry_is_lease_not_found(h):
    h.snapshot(1, 0, 1)
    h.leases.acquire("a", 1000, {1: {0: 1}})
    h.clock.advance(500)
    assert h.leases.renew("a", 1000) == h.clock() + 1000
    assert h.store.load_lease("a").expires_at_ms == h.clock() + 1000
    h.clock.advance(1000)
    with pytest.raises(LeaseNotFound, match="does not exist or has expired"):
        h.leases.renew("a", 1000)
    assert not h.leases.is_pinned(1, 0, 1)
    with pytest.raises(LeaseNotFound):
        h.leases.renew("unknown", 1000)


def test_acquire_on_an_expired_lease_starts_a_fresh_one(h):
    h.snapshot(1, 0, 1)
    h.snapshot(1, 1, 1)
    h.leases.acquire("a", 1000, {1: {0: 1}})
    created = h.leases.describe("a").created_ms
    h.clock.advance(2000)
    h.leases.acquire("a", 1000, {1: {1: 1}})
    rec = h.leases.describe("a")
    assert rec.tables == {1: {1: 1}}
    assert rec.created_ms == created + 2000
    assert not h.leases.is_pinned(1, 0, 1)


@pytest.mark.parametrize("bad", ["", "a/b", "..", ".", "x" * 129, "spa ce", "ü", None, 7])
def test_invalid_lease_ids_are_refused(h, bad):
    with pytest.raises(InvalidLeaseId):
        h.leases.acquire(bad, HOUR, {})
    with pytest.raises(InvalidLeaseId):
        h.leases.renew(bad, HOUR)
    assert h.store.lease_ids() == []


def test_the_longest_valid_lease_id_is_accepted(h):
    lease_id = "a.B_c-" + "9" * 122
    assert layout.check_lease_id(lease_id) == lease_id
    h.leases.acquire(lease_id, HOUR, {})
    assert h.store.lease_ids() == [lease_id]


@pytest.mark.parametrize("duration", [0, -5, "10s", None, True, 2**63 - 1, 365 * 86_400_000 + 1])
def test_bad_durations_are_refused(h, duration):
    with pytest.raises(InvalidRequest, match="duration_ms"):
        h.leases.acquire("a", duration, {})


def test_table_drop_clears_pins_from_every_lease(h):
    for t in (1, 2):
        h.snapshot(t, 0, 1)
    h.leases.acquire("a", HOUR, {1: {0: 1}, 2: {0: 1}})
    h.leases.acquire("b", HOUR, {1: {0: 1}})
    h.leases.drop_table_pins(1)
    assert h.leases.describe("a").tables == {2: {0: 1}}
    assert h.store.load_lease("a").tables == {2: {0: 1}}
    # A lease whose only table was dropped has no pins left and is removed.
    with pytest.raises(LeaseNotFound):
        h.leases.describe("b")
    assert not h.leases.is_pinned(1, 0, 1)


def test_restart_keeps_every_lease_and_pin(h):
    for b in range(4):
        h.snapshot(1, b, 1)
        h.snapshot(2, b, 1)
    h.leases.acquire("a", HOUR, {1: {0: 1, 3: 1}, 2: {1: 1}})
    h.leases.acquire("b", 2 * HOUR, {1: {0: 1}})
    before = {r.lease_id: (r.tables, r.expires_at_ms, r.created_ms) for r in h.leases.live()}
    h.restart()
    after = {r.lease_id: (r.tables, r.expires_at_ms, r.created_ms) for r in h.leases.live()}
    assert after == before
    assert h.leases.pin_refs(1, 0, 1) == 2
    # The pins still protect: two newer snapshots later the pinned one is alive.
    h.snapshot(1, 3, 2)
    h.snapshot(1, 3, 3)
    assert h.alive(1, 3, 1)


def test_restart_expires_leases_that_ran_out_while_down(h):
    h.snapshot(1, 0, 1)
    h.leases.acquire("a", 1000, {1: {0: 1}})
    h.snapshot(1, 0, 2)
    h.snapshot(1, 0, 3)
    h.clock.advance(5000)
    h.restart()
    assert h.leases.live() == []
    assert not h.alive(1, 0, 1)
    assert h.stored_ids(1, 0) == [2, 3]


def test_metrics_count_leases_and_leased_snapshots_per_table(h):
    h.snapshot(1, 0, 1)
    h.snapshot(1, 1, 1)
    h.snapshot(2, 0, 1)
    h.leases.acquire("a", HOUR, {1: {0: 1, 1: 1}})
    h.leases.acquire("b", HOUR, {1: {0: 1}, 2: {0: 1}})
    totals, per_table = h.leases.metrics()
    assert totals == {"lease_count": 2, "leased_snapshot_count": 3, "lease_pin_count": 4}
    assert per_table == {1: {"leased_snapshot_count": 2, "lease_pin_count": 3},
                         2: {"leased_snapshot_count": 1, "lease_pin_count": 1}}


def test_a_failed_store_write_changes_nothing(h):
    h.snapshot(1, 0, 1)
    h.snapshot(1, 1, 1)
    h.leases.acquire("a", HOUR, {1: {0: 1}})
    real_save = h.store.save_lease

    def broken(record, changed=None):
        raise RuntimeError("ZooKeeper is down")

    h.leases._store.save_lease = broken
    with pytest.raises(RuntimeError):
        h.leases.renew("a", 5)
    with pytest.raises(RuntimeError):
        h.leases.acquire("a", HOUR, {1: {0: 1, 1: 1}})
    h.leases._store.save_lease = real_save
    assert h.leases.describe("a").expires_at_ms == h.clock() + HOUR
    assert h.leases.describe("a").tables == {1: {0: 1}}


def test_concurrent_acquire_release_drop_from_several_threads_stay_consistent(h):
    buckets = 16
    for b in range(buckets):
        h.snapshot(1, b, 1)
        h.snapshot(1, b, 2)
    errors = []

    def worker(n):
        try:
            lease_id = f"lease-{n % 4}"
            for i in range(30):
                b = (n * 7 + i) % buckets
                op = (n + i) % 5
                if op in (0, 1):
                    h.leases.acquire(lease_id, HOUR, {1: {b: 1 + (i % 2)}})
                elif op == 2:
                    h.leases.release(lease_id, {1: [b]})
                elif op == 3:
                    h.leases.drop(lease_id)
                else:
                    h.leases.live()
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    # Memory, reference counts and ZooKeeper all agree.
    expected_refs = {}
    for rec in h.leases.live():
        for t, pins in rec.tables.items():
            for b, s in pins.items():
                expected_refs[(t, -1, b, s)] = expected_refs.get((t, -1, b, s), 0) + 1
    assert h.leases._refs == expected_refs
    stored = {r.lease_id: r.tables for r in h.store.load_leases()}
    assert stored == {r.lease_id: r.tables for r in h.leases.live()}


def test_table_ids_lists_every_pinned_table(h):
    h.snapshot(1, 0, 1)
    h.snapshot(3, 2, 1)
    h.leases.acquire("a", HOUR, {1: {0: 1}})
    h.leases.acquire("b", HOUR, {3: {2: 1}})
    assert h.leases.table_ids() == {1, 3}
