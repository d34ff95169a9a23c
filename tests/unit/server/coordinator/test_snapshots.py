"""SnapshotRegistry: retention depth, lease-aware GC, list, table drop, failed deletions."""

from fluss_spark.server.coordinator.snapshots import delete_path, join_path

HOUR = 3_600_000


def test_retention_keeps_the_newest_n_per_bucket(h):
    h.retained[1] = 3
    for s in range(6):
        h.snapshot(1, 0, s)
    h.snapshot(1, 1, 0)
    assert h.stored_ids(1, 0) == [3, 4, 5]
    assert [h.file_of(1, 0, s).exists() for s in range(6)] == [False] * 3 + [True] * 3
    assert h.stored_ids(1, 1) == [0]


def test_list_and_latest_only(h):
    for b in range(2):
        for s in (1, 2):
            h.snapshot(1, b, s)
    assert [(r.bucket, r.snapshot_id) for r in h.registry.find(1)] == [(0, 1), (0, 2), (1, 1),
                                                                       (1, 2)]
    assert [(r.bucket, r.snapshot_id) for r in h.registry.find(1, latest_only=True)] == [
        (0, 2), (1, 2)]
    assert [r.snapshot_id for r in h.registry.find(1, bucket=1)] == [1, 2]
    assert h.registry.find(99) == []
    assert h.registry.counts() == {1: 4}


def test_exists_falls_back_to_zookeeper_for_records_written_by_others(h):
    h.snapshot(1, 0, 1)
    h.restart()
    assert h.registry.exists(1, 0, 1)
    from fluss_spark.metadata.layout import SnapshotRecord
    h.store.put_snapshot(SnapshotRecord(1, 0, 9, "/nowhere", 0, 0))
    assert h.registry.exists(1, 0, 9)
    assert not h.registry.exists(1, 0, 10)


def test_drop_table_deletes_every_snapshot_even_the_retained(h):
    for s in (1, 2):
        h.snapshot(1, 0, s)
    h.snapshot(2, 0, 1)
    assert h.registry.drop_table(1) == 2
    assert h.store.snapshot_buckets(1) == []
    assert not h.file_of(1, 0, 2).exists()
    assert h.alive(2, 0, 1)


def test_gc_all_removes_unpinned_snapshots_of_tables_that_no_longer_exist(h):
    h.snapshot(5, 0, 1)
    h.snapshot(5, 0, 2)
    h.leases.acquire("a", HOUR, {5: {0: 1}})
    h.retained[5] = 0          # what num_retained answers for a dropped table
    h.registry.gc_all()
    assert h.alive(5, 0, 1) and not h.alive(5, 0, 2)


def test_a_failed_file_deletion_keeps_the_znode_for_a_later_pass(h):
    calls = []

    def failing(path):
        calls.append(path)
        raise OSError("store unavailable")

    h.registry._delete_files = failing
    for s in (1, 2, 3):
        h.snapshot(1, 0, s)
    assert calls and h.store.snapshot(1, 0, 1) is not None
    h.registry._delete_files = delete_path
    assert h.registry.gc_all() == [(1, 0, 1)]
    assert h.stored_ids(1, 0) == [2, 3]


def test_delete_path_handles_files_directories_and_absent_paths(tmp_path):
    d = tmp_path / "t" / "0"
    d.mkdir(parents=True)
    (d / "f").write_text("x")
    delete_path(str(d / "f"))
    assert not (d / "f").exists()
    delete_path(join_path(str(tmp_path), "t"))
    assert not (tmp_path / "t").exists()
    delete_path(str(tmp_path / "absent"))
    delete_path("file://" + str(tmp_path / "absent"))


def test_gc_never_deletes_a_path_outside_the_snapshot_store(h, tmp_path):
    from fluss_spark.metadata.layout import SnapshotRecord
    outside = tmp_path / "not-the-store"
    outside.mkdir()
    (outside / "data").write_text("keep")
    # A record written before commits were checked, naming a directory outside the store.
    h.store.put_snapshot(SnapshotRecord(1, 0, 0, str(outside), 0, 0))
    h.restart()
    h.snapshot(1, 0, 1)
    h.snapshot(1, 0, 2)   # snapshot 0 leaves retention
    assert h.stored_ids(1, 0) == [1, 2]
    assert (outside / "data").read_text() == "keep"


def test_recovery_reads_an_old_layout_tree_and_moves_it_into_the_index(h):
    from fluss_spark.metadata import layout
    from fluss_spark.metadata.layout import SnapshotRecord
    from fluss_spark.protocol.codec import packb
    # A tree as the previous release left it: one znode per snapshot, a v3 lease inline.
    for s in (1, 2, 3):
        f = h.file_of(1, 0, s)
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_bytes(b"snapshot")
        path = layout.snapshot_path(1, 0, s)
        h.store.zk.ensure_path(path.rpartition("/")[0])
        h.store.zk.create(path, SnapshotRecord(1, 0, s, str(f), s * 10, s).encode())
    h.store.zk.create(layout.lease_path("a"), packb({
        "v": 3, "lease_id": "a", "created_ms": 1, "expires_at_ms": h.clock() + HOUR, "state": "ok",
        "holders": {}, "owner": None, "pins": [{"t": 1, "e": "sparse", "b": [0], "s": [1]}],
        "generation": 1, "chunks": 0, "payload_bytes": 0, "payload_crc": 0}))
    h.retained[1] = 1
    h.restart()
    # Snapshot 2 left retention unpinned and went; 1 stays for its lease; 3 is the newest.
    assert [r.snapshot_id for r in h.registry.find(1)] == [1, 3]
    assert h.leases.describe("a").tables == {1: {0: 1}}
    assert not h.file_of(1, 0, 2).exists() and h.alive(1, 0, 1) and h.alive(1, 0, 3)
    assert h.store.zk.get_children(layout.SNAPSHOTS) == []
    assert h.store.zk.get_children(layout.snapshot_index_path(1)) == ["0"]
    h.restart()
    assert [r.snapshot_id for r in h.registry.find(1)] == [1, 3]
