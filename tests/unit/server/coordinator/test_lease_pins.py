"""Leases over partitions: pins per (table, partition, bucket), their GC, release and drops,
on a real ZooKeeper store with an injected clock."""

import pytest

from fluss_spark.errors import InvalidRequest, LeaseHeldByOther, LeaseNotFound
from fluss_spark.server.coordinator.lease_pins import PinEdit

HOUR = 3_600_000
T, P1, P2 = 1, 7, 8


def test_partition_pins_are_checked_granted_stored_and_described(h):
    h.snapshot(T, 0, 1, partition_id=P1)
    h.snapshot(T, 1, 1, partition_id=P1)
    h.snapshot(T, 0, 2, partition_id=P2)
    h.snapshot(2, 0, 5)
    grant = h.leases.pin("a", HOUR, {2: {0: 5}},
                         {T: {P1: {0: 1, 1: 1}, P2: {0: 1, 1: 2}}}, holder="q")
    # P2 has snapshot 2 of bucket 0, not 1, and nothing for bucket 1: each partition is its own.
    assert grant.unavailable == {}
    assert grant.unavailable_partitions == {T: {P2: {0: 1, 1: 2}}}
    rec = h.leases.describe("a")
    assert rec.tables == {2: {0: 5}} and rec.partitions == {T: {P1: {0: 1, 1: 1}}}
    assert rec.holders == {2: "q", T: "q"} and rec.pin_count() == 3
    assert h.leases.is_pinned(T, 0, 1, P1) and not h.leases.is_pinned(T, 0, 1)
    assert h.leases.pinned_by(T, 1, 1, P1) == ["a"] and h.leases.pinned_by(T, 1, 1, P2) == []
    assert h.leases.pinned_tables("a") == [T, 2]
    stored = h.store.load_lease("a")
    assert (stored.tables, stored.partitions) == (rec.tables, rec.partitions)
    # Moving a partition's pin; a table pinned only through partitions still has a holder.
    h.leases.pin("a", HOUR, {}, {T: {P2: {0: 2}}}, holder="q")
    assert h.leases.describe("a").partitions == {T: {P1: {0: 1, 1: 1}, P2: {0: 2}}}
    with pytest.raises(LeaseHeldByOther, match="pins table id 1 for holder 'q', not 'r'"):
        h.leases.pin("a", HOUR, {}, {T: {P1: {0: 1}}}, holder="r")
    with pytest.raises(InvalidRequest, match="partition id -1 is negative"):
        h.leases.pin("a", HOUR, {}, {T: {-1: {0: 1}}})
    with pytest.raises(InvalidRequest, match="bucket -2 of table 1 partition id 7 is negative"):
        h.leases.pin("a", HOUR, {}, {T: {P1: {-2: 1}}})
    assert h.store.load_lease("a").partitions == {T: {P1: {0: 1, 1: 1}, P2: {0: 2}}}


def test_gc_keeps_a_pinned_partition_snapshot_until_its_pin_goes(h):
    h.retained[T] = 1
    for p in (P1, P2):
        h.snapshot(T, 0, 1, partition_id=p)
    h.leases.pin("a", HOUR, {}, {T: {P1: {0: 1}}})
    h.leases.pin("b", 2 * HOUR, {}, {T: {P1: {0: 1}}})
    for p in (P1, P2):
        h.snapshot(T, 0, 2, partition_id=p)
    assert h.alive(T, 0, 1, P1), "the pinned snapshot left retention and was deleted"
    assert not h.alive(T, 0, 1, P2)
    h.restart()     # the pins are reloaded before any GC: still kept
    assert h.alive(T, 0, 1, P1) and h.leases.pin_refs(T, 0, 1, P1) == 2
    assert h.leases.release("a", {}, {T: {P1: [0]}}) == 0
    assert h.alive(T, 0, 1, P1), "deleted while lease b still pins it"
    with pytest.raises(LeaseNotFound):
        h.leases.describe("a")
    h.clock.advance(2 * HOUR)
    assert h.leases.expire_once() == ["b"]
    assert not h.alive(T, 0, 1, P1) and h.alive(T, 0, 2, P1)


def test_releasing_a_tables_buckets_releases_them_in_every_partition(h):
    for p in (P1, P2):
        for b in (0, 1):
            h.snapshot(T, b, 1, partition_id=p)
    h.snapshot(T, 0, 1)
    pins = {P1: {0: 1, 1: 1}, P2: {0: 1, 1: 1}}
    h.leases.pin("a", HOUR, {T: {0: 1}}, {T: pins})
    assert h.leases.release("a", {}, {T: {P2: [1], 99: [0]}}) == 4
    assert h.leases.describe("a").partitions == {T: {P1: {0: 1, 1: 1}, P2: {0: 1}}}
    assert h.leases.release("a", {T: [0]}) == 1
    assert (h.leases.describe("a").tables, h.leases.describe("a").partitions) == \
        ({}, {T: {P1: {1: 1}}})
    assert h.leases.release("a", {T: [0, 1]}) == 0
    assert h.store.lease_ids() == []


def test_dropping_a_partition_removes_its_pins_from_every_lease(h):
    for p in (P1, P2):
        h.snapshot(T, 0, 1, partition_id=p)
    h.snapshot(2, 0, 1)
    h.leases.pin("a", HOUR, {2: {0: 1}}, {T: {P1: {0: 1}, P2: {0: 1}}}, holder="q")
    h.leases.pin("b", HOUR, {}, {T: {P1: {0: 1}}}, holder="q")
    assert h.leases.pin_refs(T, 0, 1, P1) == 2
    h.drop_partition(T, P1)
    assert h.leases.describe("a").partitions == {T: {P2: {0: 1}}}
    assert h.store.load_lease("a").partitions == {T: {P2: {0: 1}}}
    assert "b" not in h.store.lease_ids(), "a lease left without pins stays"
    assert not h.leases.is_pinned(T, 0, 1, P1) and h.leases.partition_ids() == {(T, P2)}
    # A drop interrupted before the pins went: the next coordinator removes them.
    h.dropped_partitions.add((T, P2))
    h.restart()
    assert h.leases.describe("a").partitions == {} and h.leases.describe("a").holders == {2: "q"}
    # Dropping a table takes its partitions' pins too.
    h.snapshot(3, 0, 1, partition_id=9)
    h.leases.pin("c", HOUR, {}, {3: {9: {0: 1}}})
    assert h.leases.table_ids() == {2, 3}
    h.drop_table(3)
    assert "c" not in h.store.lease_ids() and h.leases.table_ids() == {2}


def test_an_edit_copies_only_the_groups_it_changes():
    from fluss_spark.metadata.layout import LeaseRecord
    rec = LeaseRecord("a", 0, 10, tables={2: {0: 1}}, partitions={T: {P1: {0: 1}, P2: {0: 1}}})
    edit = PinEdit(rec)
    edit.pin(T, P1, [(1, 3), (0, 1)])
    edit.unpin(T, P2, [0, 5])
    new = edit.record()
    assert rec.partitions == {T: {P1: {0: 1}, P2: {0: 1}}}, "the old record was changed"
    assert new.partitions == {T: {P1: {0: 1, 1: 3}}}
    assert new.tables[2] is rec.tables[2], "an untouched group was copied"
    assert edit.changed == {(T, P1): {1}, (T, P2): {0}}
    assert edit.added == [(T, P1, 1, 3)] and edit.removed == [(T, P2, 0, 1)]
