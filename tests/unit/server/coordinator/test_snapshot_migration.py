"""The move of layout v1 snapshot znodes into the index after recovery: answers while it runs,
retention that waits for it, races with drops and moves on demand, and fencing."""

import pytest

from fluss_spark.errors import NotCoordinatorLeader
from fluss_spark.local.ports import wait_until
from fluss_spark.metadata import layout
from fluss_spark.metadata.layout import SnapshotRecord
from fluss_spark.server.coordinator.snapshot_migration import SnapshotMigration
from fluss_spark.testing.coordinator import LeaseHarness
from fluss_spark.testing.legacy_snapshots import write_v1_snapshots

HOUR = 3_600_000


def old_layout(h, keys) -> list[SnapshotRecord]:
    """Snapshot files and their layout v1 znodes, as a previous release left them."""
    recs = []
    for t, b, s in keys:
        f = h.file_of(t, b, s)
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_bytes(b"snapshot")
        recs.append(SnapshotRecord(t, b, s, str(f), s * 10, s))
    write_v1_snapshots(h.store.zk, recs)
    return recs


def ids(h, table_id, bucket=None):
    return [(r.bucket, r.snapshot_id) for r in h.registry.find(table_id, bucket)]


def test_answers_during_the_move_see_the_old_layout_and_retention_waits_for_it(h):
    old_layout(h, [(1, b, s) for b in range(3) for s in (1, 2, 3)]
               + [(2, b, s) for b in range(200) for s in (1, 2)])
    h.retained[1] = 1
    h.restart()         # recovery reads the index only: nothing is moved yet
    assert h.registry.unmoved_buckets() == 203 and h.registry.counts() == {}
    assert all(h.alive(1, b, s) for b in range(3) for s in (1, 2, 3))   # GC waited
    # A lease pins an old-layout snapshot; a missing one is refused.
    grant = h.leases.pin("job", HOUR, {1: {0: 1, 1: 9}})
    assert grant.unavailable == {1: {1: 9}}
    # A new snapshot of an unmoved bucket goes to the index; its retention waits too.
    h.snapshot(1, 1, 4)
    assert h.store.zk.get_children(layout.snapshots_path(1, 1)) == [f"{s:020d}" for s in (1, 2, 3)]
    assert all(h.alive(1, 1, s) for s in (1, 2, 3, 4))
    # Listing a bucket moves it first, then applies its retention: 2 goes, 1 stays pinned.
    assert ids(h, 1, 0) == [(0, 1), (0, 3)]
    assert not h.file_of(1, 0, 2).exists() and h.registry.unmoved_buckets() == 202
    assert h.registry.migrate_step() == 200       # the rest of table 1: one step
    assert ids(h, 1) == [(0, 1), (0, 3), (1, 4), (2, 3)]
    assert h.registry.migrate_step() == 72        # 128 buckets of table 2 per step
    assert h.registry.migrate_step() == 0
    assert h.store.zk.get_children(layout.SNAPSHOTS) == []
    assert len(h.registry.find(2)) == 400
    before = {t: ids(h, t) for t in (1, 2)}
    h.restart()
    assert {t: ids(h, t) for t in (1, 2)} == before and h.registry.unmoved_buckets() == 0
    assert h.leases.describe("job").tables == {1: {0: 1}}


@pytest.mark.parametrize("race", ["drop the table", "move the bucket on demand",
                                  "unpin a snapshot outside retention"])
def test_a_step_writes_nothing_back_that_changed_while_it_read(h, monkeypatch, race):
    old_layout(h, [(1, 0, 1), (1, 1, 1), (1, 1, 2)])
    h.retained[1] = 1
    h.restart()
    real_read = h.store.read_v1

    def read_then_race(table_id, buckets):
        found = real_read(table_id, buckets)
        monkeypatch.setattr(h.store, "read_v1", real_read)      # race once
        if race == "drop the table":
            h.drop_table(1)
        elif race == "move the bucket on demand":
            assert ids(h, 1, 1) == [(1, 2)]
        else:   # a pin on v1 snapshot 1, a newer snapshot, then the pin goes: 1 may be deleted
            assert h.leases.pin("x", HOUR, {1: {1: 1}}).unavailable == {}
            h.snapshot(1, 1, 3)
            h.leases.drop("x")
            assert h.alive(1, 1, 1)     # its bucket's retention waits for the move
        return found
    monkeypatch.setattr(h.store, "read_v1", read_then_race)
    assert h.registry.migrate_step() == 0
    expected = {"drop the table": [], "move the bucket on demand": [(0, 1), (1, 2)],
                "unpin a snapshot outside retention": [(0, 1), (1, 3)]}[race]
    assert ids(h, 1) == expected
    stored = h.store.all_snapshots()
    assert sorted((r.bucket, r.snapshot_id) for r in stored) == expected
    assert all(h.file_of(1, r.bucket, r.snapshot_id).exists() for r in stored)
    assert h.store.zk.get_children(layout.SNAPSHOTS) == []


def test_a_coordinator_fenced_mid_move_stops_and_the_next_one_finishes(h, zk_address, tmp_path):
    old = old_layout(h, [(1, b, s) for b in range(300) for s in (1, 2)])
    h.restart()
    h.store.claim_epoch()
    assert h.registry.migrate_step() == 172
    nxt = LeaseHarness(zk_address, h.snapshot_dir)
    try:
        nxt.restart()
        nxt.store.claim_epoch()        # a failover: the first coordinator's writes now fail
        with pytest.raises(NotCoordinatorLeader):
            h.registry.migrate_step()
        fenced = SnapshotMigration(h.registry)
        fenced.start(0, active=lambda: True)
        wait_until(lambda: not fenced.running, 10, "the fenced migration thread to end")
        assert h.store.zk.get_children(layout.snapshots_path(1))     # it moved nothing more
        assert nxt.registry.unmoved_buckets() == 172
        migration = SnapshotMigration(nxt.registry)
        migration.start(0, active=lambda: True)
        wait_until(lambda: nxt.registry.unmoved_buckets() == 0, 10, "the migration")
        wait_until(lambda: not migration.running, 10, "the migration thread to end")
        key = lambda r: (r.table_id, r.bucket, r.snapshot_id)  # noqa: E731
        assert sorted(nxt.store.all_snapshots(), key=key) == sorted(old, key=key)
        assert nxt.store.zk.get_children(layout.SNAPSHOTS) == []
    finally:
        nxt.close()
