"""The snapshot index (layout v2): pages, the old layout still read, and its migration."""

import zlib

import pytest

from fluss_spark.errors import CorruptMessage, MetadataStoreUnavailable, StorageError
from fluss_spark.metadata import layout
from fluss_spark.testing.legacy_snapshots import write_v1_snapshots
from fluss_spark.testing.zookeeper_faults import ConnectionDies
from fluss_spark.metadata.layout import SnapshotIndexPage, SnapshotRecord
from fluss_spark.metadata.store import MetadataStore
from fluss_spark.protocol.codec import packb


def rec(table_id, bucket, snapshot_id, **kw) -> SnapshotRecord:
    fields = dict(path=f"/remote/{table_id}/{bucket}/snapshot-{snapshot_id}.arrow",
                  log_offset=snapshot_id * 10, row_count=snapshot_id, size_bytes=7, created_ms=5)
    fields.update(kw)
    return SnapshotRecord(table_id, bucket, snapshot_id, **fields)


def test_page_round_trip_orders_records_by_bucket_and_id():
    page = SnapshotIndexPage(3, 1, (rec(3, 200, 9), rec(3, 128, 4), rec(3, 200, 2)))
    back = SnapshotIndexPage.decode(page.encode())
    assert (back.table_id, back.page) == (3, 1)
    assert back.records == (rec(3, 128, 4), rec(3, 200, 2), rec(3, 200, 9))


def test_v1_page_bytes_still_decode():
    # Bytes as a v1 writer produced them: this test pins the stored format.
    columns = {"bucket": [0, 5], "snapshot_id": [1, 2], "path": ["/a", "/b"],
               "log_offset": [10, 20], "row_count": [1, 2], "size_bytes": [3, 4],
               "created_ms": [5, 6]}
    data = packb({"v": 1, "table_id": 8, "page": 0, "z": zlib.compress(packb(columns))})
    assert SnapshotIndexPage.decode(data).records == (SnapshotRecord(8, 0, 1, "/a", 10, 1, 3, 5),
                                                      SnapshotRecord(8, 5, 2, "/b", 20, 2, 4, 6))



def test_a_partition_page_keeps_its_partition_id_and_a_v1_record_has_none():
    page = SnapshotIndexPage(3, 0, (rec(3, 1, 2, partition_id=7),), partition_id=7)
    back = SnapshotIndexPage.decode(page.encode())
    assert back.partition_id == 7 and back.records == (rec(3, 1, 2, partition_id=7),)
    with pytest.raises(ValueError, match="does not belong to page 0 of table 3 partition id 8"):
        SnapshotIndexPage(3, 0, (rec(3, 1, 2, partition_id=7),), partition_id=8).encode()
    v1 = packb({"v": 1, "table_id": 3, "bucket": 1, "snapshot_id": 2, "path": "/p",
                "log_offset": 4, "row_count": 1})
    assert SnapshotRecord.decode(v1).partition_id is None
    assert SnapshotRecord.decode(rec(3, 1, 2, partition_id=7).encode()).partition_id == 7
    assert layout.snapshot_index_path(3, 0, 7) == "/fluss/snapshot_index/3/p7/0"
    assert layout.partition_of_node("p7") == 7 and layout.partition_of_node("0") is None

@pytest.mark.parametrize("data, message", [
    (packb({"v": 3, "table_id": 1, "page": 0, "z": b""}), "newer than this software"),
    (packb({"table_id": 1}), "without a version"),
    (packb({"v": 1, "table_id": 1, "page": 0, "z": b"not zlib"}), "undecodable"),
    (packb({"v": 1, "table_id": 1, "page": 0,
            "z": zlib.compress(packb({"bucket": [1]}))}), "undecodable"),
    (b"\xc1", "undecodable"),
])
def test_bad_pages_are_refused_clearly(data, message):
    with pytest.raises(CorruptMessage, match=message):
        SnapshotIndexPage.decode(data)


def test_a_record_of_another_page_is_refused():
    with pytest.raises(ValueError, match="does not belong to page 0"):
        SnapshotIndexPage(1, 0, (rec(1, 128, 1),)).encode()


@pytest.fixture
def store(zk_address):
    s = MetadataStore(zk_address).start()
    yield s
    s.close()


def write_v1(store, *records):
    """Snapshot znodes as a layout v1 writer created them."""
    write_v1_snapshots(store.zk, records)


def test_snapshots_live_in_pages_of_128_buckets(store):
    for r in (rec(1, 0, 1), rec(1, 127, 1), rec(1, 127, 2), rec(1, 128, 1), rec(2, 0, 4)):
        store.put_snapshot(r)
    assert sorted(store.zk.get_children(layout.snapshot_index_path(1))) == ["0", "1"]
    assert store.zk.get_children(layout.SNAPSHOTS) == []      # nothing in the v1 layout
    assert store.snapshot_ids(1, 127) == [1, 2] and store.snapshot_ids(1, 5) == []
    assert store.snapshot_buckets(1) == [0, 127, 128]
    assert store.snapshot(1, 127, 2) == rec(1, 127, 2)
    assert store.snapshot(1, 127, 3) is None
    assert store.snapshot_table_ids() == [1, 2]
    assert sorted(store.all_snapshots(), key=lambda r: (r.table_id, r.bucket, r.snapshot_id)) \
        == [rec(1, 0, 1), rec(1, 127, 1), rec(1, 127, 2), rec(1, 128, 1), rec(2, 0, 4)]
    store.delete_snapshot(1, 128, 1)
    assert store.zk.get_children(layout.snapshot_index_path(1)) == ["0"]   # emptied page goes
    store.delete_table_snapshots(1)
    assert store.snapshot_table_ids() == [2] and store.snapshot_buckets(1) == []


def test_two_writers_of_one_page_both_land(store, zk_address):
    other = MetadataStore(zk_address).start()
    try:
        store.put_snapshot(rec(1, 0, 1))
        # ``other`` reads the page, then ``store`` writes it before ``other`` does.
        real_get = other.zk.get
        calls = []

        def get_then_race(path, *a, **kw):
            out = real_get(path, *a, **kw)
            if not calls:
                calls.append(path)
                store.put_snapshot(rec(1, 1, 1))
            return out
        other.zk.get = get_then_race
        other.put_snapshot(rec(1, 2, 1))
        del other.zk.get
        assert store.snapshot_buckets(1) == [0, 1, 2]
    finally:
        other.close()


def test_a_page_past_the_node_limit_is_refused_with_a_clear_error(store, monkeypatch):
    monkeypatch.setattr(layout, "SNAPSHOT_PAGE_MAX_BYTES", 300)
    store.put_snapshot(rec(1, 0, 1))
    with pytest.raises(StorageError, match="table 1 buckets 0..127 would hold .* "
                                           "kv.snapshot.num-retained"):
        for s in range(2, 200):
            store.put_snapshot(rec(1, s % 128, s, path=f"/p/{s * 7919 % 1000}"))


def test_an_old_layout_tree_is_read_by_every_call(store):
    write_v1(store, rec(4, 0, 1), rec(4, 0, 2), rec(4, 3, 1))
    store.put_snapshot(rec(4, 0, 3))
    assert store.snapshot_ids(4, 0) == [1, 2, 3]
    assert store.snapshot(4, 3, 1) == rec(4, 3, 1)
    assert store.snapshot_buckets(4) == [0, 3] and store.snapshot_table_ids() == [4]
    assert len(store.all_snapshots()) == 4
    store.delete_snapshot(4, 0, 1)       # an old-layout znode goes too
    assert store.snapshot_ids(4, 0) == [2, 3]


def test_migration_moves_the_old_layout_into_pages_and_deletes_it(store):
    old = [rec(t, b, s) for t in (4, 5) for b in (0, 1, 300) for s in (1, 2)]
    write_v1(store, *old)
    store.put_snapshot(rec(4, 0, 3))
    assert store.migrate_snapshots() == len(old)
    assert store.zk.get_children(layout.SNAPSHOTS) == []
    assert sorted(store.zk.get_children(layout.snapshot_index_path(4))) == ["0", "2"]
    key = lambda r: (r.table_id, r.bucket, r.snapshot_id)  # noqa: E731
    assert sorted(store.all_snapshots(), key=key) == sorted(old + [rec(4, 0, 3)], key=key)
    assert store.migrate_snapshots() == 0


def test_a_migration_cut_off_anywhere_loses_nothing_and_the_next_one_finishes(zk_address):
    old = [rec(t, b, s) for t in (4, 5) for b in (0, 200) for s in (1, 2)]
    key = lambda r: (r.table_id, r.bucket, r.snapshot_id)  # noqa: E731
    for n in range(1, 200):
        store = MetadataStore(f"{zk_address}-{n}").start()
        try:
            write_v1(store, *old)
            store.claim_epoch()        # the coordinator migrates with fenced writes
            dies = ConnectionDies(store.zk, n)
            try:
                store.migrate_snapshots()
                failed = False
            except MetadataStoreUnavailable:
                failed = True
            finally:
                dies.heal()
            # Every snapshot reads exactly once, from wherever it is now.
            assert sorted(store.all_snapshots(), key=key) == sorted(old, key=key)
            assert store.snapshot_ids(4, 200) == [1, 2]
            store.migrate_snapshots()
            assert store.zk.get_children(layout.SNAPSHOTS) == []
            assert sorted(store.all_snapshots(), key=key) == sorted(old, key=key)
        finally:
            store.close()
        if not failed:
            break
    assert n > 4


def test_lookups_stop_asking_for_the_old_layout_once_it_is_seen_empty(store):
    store.put_snapshot(rec(1, 0, 1))
    listed = []
    real = store.zk.get_children

    def counting(path, *a, **kw):
        listed.append(path)
        return real(path, *a, **kw)
    store.zk.get_children = counting
    try:
        for _ in range(3):
            assert store.snapshot_ids(1, 0) == [1]
            assert store.snapshot(1, 0, 2) is None
        store.delete_snapshot(1, 0, 7)
    finally:
        del store.zk.get_children
    assert listed == [layout.SNAPSHOTS]      # once; nothing writes v1 znodes any more


def test_a_writer_whose_copy_of_a_page_went_stale_reads_it_again(store, zk_address):
    other = MetadataStore(zk_address).start()
    try:
        store.put_snapshot(rec(1, 0, 1))         # ``store`` keeps a copy of page 0
        other.put_snapshot(rec(1, 1, 1))         # ... which this write makes stale
        store.put_snapshot(rec(1, 2, 1))         # version check fails: read again, write
        assert other.snapshot_buckets(1) == [0, 1, 2]
        other.delete_snapshot(1, 0, 1)
        store.put_snapshot(rec(1, 0, 1))         # its copy says "already there"; it is not
        assert other.snapshot_ids(1, 0) == [1]
        store.delete_snapshot(1, 1, 1)
        assert other.snapshot_buckets(1) == [0, 2]
    finally:
        other.close()


def test_an_undecodable_old_layout_znode_is_named_in_the_error(store):
    write_v1(store, rec(4, 0, 1))
    store.zk.create(layout.snapshot_path(4, 0, 2), b"\xc1")
    with pytest.raises(CorruptMessage, match=r"layout v1 snapshot znode "
                                             r"/fluss/snapshots/4/0/0+2: undecodable .*delete it"):
        store.read_v1(4, [0])
    assert store.read_v1(4, [1]) == {}          # a bucket without a node is left out
