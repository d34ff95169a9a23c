"""Coordinator writes are fenced by the coordinator epoch (real ZooKeeper)."""

from __future__ import annotations

import pytest

from fluss_spark.errors import NotCoordinatorLeader
from fluss_spark.metadata.layout import LeaseRecord, SnapshotRecord
from fluss_spark.metadata.store import MetadataStore


@pytest.fixture
def stores(zk_address):
    a, b = MetadataStore(zk_address).start(), MetadataStore(zk_address).start()
    yield a, b
    a.close()
    b.close()


def snap(sid: int) -> SnapshotRecord:
    return SnapshotRecord(table_id=1, bucket=0, snapshot_id=sid, path=f"/s/{sid}", log_offset=sid,
                          row_count=1, size_bytes=1, created_ms=1)


def test_a_deposed_writer_changes_nothing_and_is_told_so(stores):
    old, new = stores
    assert old.claim_epoch() == 1
    old.put_snapshot(snap(1))
    old.save_lease(LeaseRecord("l", 1, 10**13, {1: {0: 1}}))
    fenced = []
    old.on_fenced = lambda: fenced.append(True)
    assert new.claim_epoch() == 2
    assert not old.still_writer() and new.still_writer()
    for write in (lambda: old.put_snapshot(snap(2)),
                  lambda: old.delete_snapshot(1, 0, 1),
                  lambda: old.save_lease(LeaseRecord("l", 1, 1, {})),
                  lambda: old.delete_lease("l"),
                  lambda: old.delete_table_snapshots(1)):
        with pytest.raises(NotCoordinatorLeader):
            write()
    assert fenced and len(fenced) == 5
    assert new.snapshot_ids(1, 0) == [1]
    assert new.load_lease("l").tables == {1: {0: 1}}
    new.put_snapshot(snap(2))
    new.delete_lease("l")
    assert new.snapshot_ids(1, 0) == [1, 2] and new.lease_ids() == []


def test_a_store_that_never_claimed_writes_unfenced(stores):
    tablet, coordinator = stores
    coordinator.claim_epoch()
    tablet.put_snapshot(snap(3))        # tablets and tools write without a fence
    assert coordinator.snapshot_ids(1, 0) == [3]
