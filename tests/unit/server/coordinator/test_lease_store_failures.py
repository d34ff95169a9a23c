"""LeaseManager when ZooKeeper goes away mid-call: a retriable error, memory as before or after.

Every lease mutation is run with the store's connection dying at its 1st, 2nd, ... ZooKeeper
request. Each failed attempt must raise MetadataStoreUnavailable and leave every lease, in
memory and in ZooKeeper alike, either untouched or fully changed (never half), with reference
counts that match the leases, no pinned snapshot deleted, and a retry that converges.
"""

import pytest

from fluss_spark.errors import MetadataStoreUnavailable
from fluss_spark.metadata.lease_codec import NO_PARTITION
from fluss_spark.server.coordinator.lease_pins import pin_keys
from fluss_spark.testing.zookeeper_faults import ConnectionDies
from fluss_spark.testing.coordinator import LeaseHarness

HOUR = 3_600_000


# The in-memory state is read through private fields on purpose: the public views (list,
# describe) expire leases as a side effect, which would change what is being checked.
def memory(h) -> dict:
    return {i: _fields(r) for i, r in h.leases._leases.items()}


def stored(h) -> dict:
    return {i: _fields(h.store.load_lease(i)) for i in h.store.lease_ids()}


def _fields(rec) -> tuple:
    return rec.tables, rec.partitions, rec.holders, rec.expires_at_ms, rec.created_ms


def check_refs_and_pins(h) -> None:
    """Reference counts are exactly the pins of the leases, and every pinned snapshot lives."""
    expected: dict = {}
    for rec in h.leases._leases.values():
        for (t, p, b, s) in pin_keys(rec):
            expected[(t, p, b, s)] = expected.get((t, p, b, s), 0) + 1
            partition = None if p == NO_PARTITION else p
            assert h.alive(t, b, s, partition), f"snapshot {(t, p, b, s)} is pinned but deleted"
    assert h.leases._refs == expected


def two_pins(h):
    h.snapshot(1, 0, 1)
    h.snapshot(1, 1, 1)
    h.leases.acquire("a", HOUR, {1: {0: 1, 1: 1}}, "query-1")


def pinned_old_snapshot(h):
    # Snapshot 1 is outside retention (1 kept) and stays only because lease "a" pins it.
    h.retained[1] = 1
    h.snapshot(1, 0, 1)
    h.leases.acquire("a", HOUR, {1: {0: 1}})
    h.snapshot(1, 0, 2)


def leases_on_two_tables(h):
    for t in (1, 2):
        h.snapshot(t, 0, 1)
    h.leases.acquire("a", HOUR, {1: {0: 1}, 2: {0: 1}})
    h.leases.acquire("b", HOUR, {1: {0: 1}})
    h.leases.acquire("c", HOUR, {1: {0: 1}, 2: {0: 1}})


def leases_on_partitions(h):
    for p in (7, 8):
        h.snapshot(1, 0, 1, partition_id=p)
    h.snapshot(2, 0, 1)
    h.leases.pin("a", HOUR, {2: {0: 1}}, {1: {7: {0: 1}, 8: {0: 1}}})
    h.leases.pin("b", HOUR, {}, {1: {7: {0: 1}}})


def drop_partition_7(h):
    h.dropped_partitions.add((1, 7))    # what a new coordinator's recovery then sees
    h.leases.drop_partition_pins(1, 7)


def one_expired(h):
    two_pins(h)
    h.leases.acquire("b", 3 * HOUR, {1: {0: 1}})
    h.clock.advance(2 * HOUR)


SCENARIOS = {
    "acquire a new lease": (
        lambda h: (h.snapshot(1, 0, 1), h.snapshot(1, 1, 1)),
        lambda h: h.leases.acquire("a", HOUR, {1: {0: 1, 1: 1}}, "query-1")),
    "acquire extends a lease": (two_pins, lambda h: h.leases.acquire("a", 2 * HOUR, {})),
    "acquire moves a pin, freeing a snapshot for GC": (
        pinned_old_snapshot, lambda h: h.leases.acquire("a", HOUR, {1: {0: 2}})),
    "renew": (two_pins, lambda h: h.leases.renew("a", 2 * HOUR)),
    "release one bucket": (two_pins, lambda h: h.leases.release("a", {1: [0]})),
    "release the last buckets": (two_pins, lambda h: h.leases.release("a", {1: [0, 1]})),
    "release the pin of a snapshot outside retention": (
        pinned_old_snapshot, lambda h: h.leases.release("a", {1: [0]})),
    "drop": (two_pins, lambda h: h.leases.drop("a")),
    "expiry": (one_expired, lambda h: h.leases.expire_once()),
    "drop a table's pins from every lease": (
        leases_on_two_tables, lambda h: h.leases.drop_table_pins(1)),
    "release a partition's bucket": (
        leases_on_partitions, lambda h: h.leases.release("a", {}, {1: {8: [0]}})),
    "drop a partition's pins from every lease": (leases_on_partitions, drop_partition_7),
}


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_a_lease_write_cut_off_anywhere_changes_each_lease_wholly_or_not_at_all(
        scenario, zk_address, tmp_path):
    setup, op = SCENARIOS[scenario]
    failures = 0
    for n in range(1, 100):
        h = LeaseHarness(f"{zk_address}-{n}", tmp_path / str(n))
        try:
            setup(h)
            before = memory(h)
            dies = ConnectionDies(h.store.zk, n)
            try:
                op(h)
                failed = False
            except MetadataStoreUnavailable as e:
                assert e.retriable
                failed = True
            finally:
                dies.heal()
            cut = memory(h)
            assert stored(h) == cut, "ZooKeeper and the coordinator's memory disagree"
            check_refs_and_pins(h)
            if failed:
                failures += 1
                op(h)   # the caller's retry, with ZooKeeper back
            after = memory(h)
            for lease_id in before.keys() | after.keys():
                assert cut.get(lease_id) in (before.get(lease_id), after.get(lease_id)), \
                    f"lease {lease_id} was changed half way"
            assert stored(h) == after
            check_refs_and_pins(h)
            h.restart()   # a new coordinator recovers exactly what the retry left
            assert memory(h) == after
            check_refs_and_pins(h)
        finally:
            h.close()
        if not failed:
            break
    else:
        raise AssertionError("the operation never completed")
    assert failures >= 1
