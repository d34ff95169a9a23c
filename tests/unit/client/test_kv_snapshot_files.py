"""Reading KV snapshots from checkpoint files: copy, open, decode, resume, cache (no cluster).

A "remote" snapshot here is a RocksDB checkpoint made with rocksdict in a local directory,
holding values encoded like Fluss's (schema id + compacted row, by the reference encoder of the
decoder's tests), and named by a ``KvSnapshotFiles`` the way GET_KV_SNAPSHOT_METADATA names one.
rocksdict's default table options (format version 6) are read through RocksDB; those of Fluss
(``fluss_options``) are decoded in memory.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Callable

import pyarrow as pa
import pytest
from rocksdict import Options, Rdict

from fluss_spark.client.apache_fluss import kv_snapshot
from fluss_spark.client.apache_fluss.checkpoint_cache import CheckpointCache
from fluss_spark.client.apache_fluss.kv_snapshot import (CheckpointScan, SnapshotValues,
                                                         count_rows, read_values)
from fluss_spark.client.apache_fluss.snapshot_files import KvSnapshotFiles, read_row_count
from fluss_spark.errors import CorruptMessage, KvSnapshotNotExist
from fluss_spark.protocol.apache_fluss import compiled
from tests.unit.protocol.test_apache_fluss_compacted_row import kv_value
from tests.unit.protocol.test_apache_fluss_rocksdb_sst import fluss_options

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("v", pa.string())])


def make_snapshot(root: Path, rows: int, *, row_count: int | None = None,
                  options: Options | None = None,
                  value: Callable[[int], bytes] = lambda i: kv_value(1, SCHEMA, [i, f"v{i}"])
                  ) -> KvSnapshotFiles:
    """A checkpoint of ``rows`` rows (keys in id order, row ``i``'s value ``value(i)``) laid
    out as Fluss stores one: private files in ``snap-0/`` (renamed), SST files in
    ``shared/``, and ``snap-0/_METADATA``."""
    db_dir = root / "db"
    db = Rdict(str(db_dir), options=options or Options(raw_mode=True))
    for i in range(rows):
        db[i.to_bytes(8, "big")] = value(i)
    db.flush()
    db.close()
    snap, shared = root / "snap-0", root / "shared"
    snap.mkdir()
    shared.mkdir()
    files = []
    for n, f in enumerate(sorted(p for p in db_dir.iterdir() if p.is_file())):
        if f.name in ("LOCK", "IDENTITY", "rocksdict-config.json") or f.name.startswith("LOG") \
                or f.name.endswith(".log"):
            continue
        target = (shared if f.suffix == ".sst" else snap) / f"file-{n}"
        f.rename(target)
        files.append((str(target), f.name))
    meta = {"version": 1, "snapshot_id": 0, "log_offset": rows}
    if row_count is not None:
        meta["row_count"] = row_count
    (snap / "_METADATA").write_text(json.dumps(meta))
    return KvSnapshotFiles(table="db.t", bucket=0, snapshot_id=0, log_offset=rows,
                           files=tuple(files))


@pytest.fixture
def cache(tmp_path):
    c = CheckpointCache(root=str(tmp_path / "cache"), capacity=1)
    yield c
    c.clear()


def scan(files, cache, start=0, limit=None, batch_bytes=1 << 20, output=SCHEMA):
    return CheckpointScan(lambda: files, lambda sid: SCHEMA, output, start_row=start,
                          limit=limit, batch_size_bytes=batch_bytes, cache=cache)


def ids(batches) -> list[int]:
    return [i for b in batches for i in b.column("id").to_pylist()]


def test_rows_in_key_order_resumed_and_in_batches(tmp_path, cache):
    files = make_snapshot(tmp_path, 1000, row_count=1000)
    assert read_row_count(files) == 1000
    batches = list(scan(files, cache, batch_bytes=2048))
    assert len(batches) > 5 and all(b.schema == SCHEMA for b in batches)
    assert ids(batches) == list(range(1000))
    assert batches[0].column("v")[3].as_py() == "v3"
    assert ids(scan(files, cache, start=990)) == list(range(990, 1000))
    assert ids(scan(files, cache, start=10, limit=5)) == list(range(10, 15))
    assert ids(scan(files, cache, start=10, limit=0)) == []
    assert ids(scan(files, cache, output=pa.schema([("id", pa.int64())]))) == list(range(1000))


def test_consecutive_splits_reuse_the_copy_and_its_position(tmp_path, cache, monkeypatch):
    files = make_snapshot(tmp_path, 300)
    got = []
    for lo in range(0, 300, 100):
        s = scan(files, cache, start=lo, limit=100)
        got += ids(s)
        s.close()
        entry = next(iter(cache._entries.values()))
        assert entry.cursor is not None and entry.cursor[0] == lo + 100
    assert got == list(range(300)) and len(cache) == 1
    # A read that is not the next one steps over the rows before it, and is still exact.
    assert ids(scan(files, cache, start=50, limit=3)) == [50, 51, 52]


def test_a_reader_that_stops_early_leaves_the_copy_consistent(tmp_path, cache):
    files = make_snapshot(tmp_path, 500)
    s = scan(files, cache, batch_bytes=256)
    first = next(s)
    s.close()
    assert 0 < first.num_rows < 500
    assert ids(scan(files, cache, start=0, limit=500)) == list(range(500))


def test_copies_beyond_capacity_and_copies_read_to_the_end_are_removed(tmp_path, cache):
    one = make_snapshot(tmp_path / "a", 10)
    two = make_snapshot(tmp_path / "b", 20)
    assert ids(scan(one, cache, limit=5)) == list(range(5))
    copy_dir = next(iter(cache._entries.values())).dir
    assert ids(scan(two, cache, limit=5)) == list(range(5))
    assert len(cache) == 1 and not os.path.exists(copy_dir)
    copy_dir = next(iter(cache._entries.values())).dir
    assert ids(scan(two, cache, start=5)) == list(range(5, 20))     # the rest, to the end
    assert len(cache) == 0 and not os.path.exists(copy_dir)


def test_count_rows_when_the_snapshot_records_none(tmp_path, cache):
    files = make_snapshot(tmp_path, 77)
    assert read_row_count(files) is None
    assert count_rows(files, cache) == 77


def test_missing_files_mean_the_snapshot_is_gone(tmp_path, cache):
    files = make_snapshot(tmp_path, 10, row_count=10)
    sst = next(remote for remote, local in files.files if local.endswith(".sst"))
    os.remove(sst)
    s = scan(files, cache)
    with pytest.raises(KvSnapshotNotExist, match="gone from remote storage"):
        next(s)
    assert len(cache) == 0 and os.listdir(cache._dir) == []
    os.remove(tmp_path / "snap-0" / "_METADATA")
    with pytest.raises(KvSnapshotNotExist, match="_METADATA"):
        read_row_count(files)


def test_garbage_instead_of_a_checkpoint_is_a_clear_error(tmp_path, cache):
    files = make_snapshot(tmp_path, 10)
    manifest = next(remote for remote, local in files.files if local.startswith("MANIFEST"))
    Path(manifest).write_bytes(b"not a manifest")
    with pytest.raises(CorruptMessage, match="RocksDB cannot open the checkpoint"):
        next(scan(files, cache))
    unsafe = KvSnapshotFiles(table="db.t", bucket=0, snapshot_id=0, log_offset=0,
                             files=((files.files[0][0], "../CURRENT"),) + files.files)
    with pytest.raises(CorruptMessage, match="unsafe checkpoint file name"):
        next(scan(unsafe, cache))


def test_copies_of_dead_processes_are_swept(tmp_path):
    root = tmp_path / "cache"
    (root / "999999999" / "x").mkdir(parents=True)
    (root / str(os.getpid())).mkdir()
    CheckpointCache(root=str(root))
    assert sorted(os.listdir(root)) == [str(os.getpid())]


def test_fluss_table_files_are_decoded_in_memory_and_read_by_row(tmp_path, cache):
    files = make_snapshot(tmp_path, 3000, options=fluss_options())
    values = read_values(files)
    assert isinstance(values, SnapshotValues) and len(values) == 3000
    assert read_values(files, max_bytes=1000) is None      # too large to hold: RocksDB
    assert count_rows(files, cache) == 3000 and len(cache) == 1
    got = []
    for lo in range(0, 3000, 1000):
        got += ids(scan(files, cache, start=lo, limit=1000, batch_bytes=4096))
        assert len(cache) == (1 if lo + 1000 < 3000 else 0)  # read to the end: let go
    assert got == list(range(3000))
    assert [b.column("v")[0].as_py() for b in scan(files, cache, start=2999)] == ["v2999"]
    # A file RocksDB alone reads (here a write-ahead log) sends the whole read through it.
    wal = tmp_path / "shared" / "wal"
    wal.write_bytes(b"")
    with_wal = KvSnapshotFiles(table="db.t", bucket=0, snapshot_id=0, log_offset=3000,
                               files=files.files + ((str(wal), "000099.log"),))
    assert read_values(with_wal) is None
    assert ids(scan(with_wal, cache, start=5, limit=3)) == [5, 6, 7]


def test_fluss_table_files_are_streamed_page_by_page_and_splits_resume(tmp_path, cache):
    """With the compiled decode (an install without it decodes in memory), a bucket's SST files
    are mapped and streamed: batches of about ``batch_size_bytes``, each split going on from
    where the one before stopped, the same rows as the decode in memory."""
    files = make_snapshot(tmp_path, 3000, options=fluss_options())
    batches = list(scan(files, cache, batch_bytes=4096))
    # About 4 KiB a batch: each value ~12 bytes plus 16 of overhead.
    assert len(batches) > 10 and all(b.num_rows <= 4096 // 16 + 1 for b in batches)
    assert ids(batches) == list(range(3000)) and len(cache) == 0     # read to the end: let go
    got = []
    for lo in range(0, 3000, 700):
        s = scan(files, cache, start=lo, limit=700, batch_bytes=4096)
        got += ids(s)
        entry = next(iter(cache._entries.values()), None)
        streamed = kv_snapshot.StreamedSnapshot if compiled.native() else SnapshotValues
        assert lo + 700 >= 3000 or isinstance(entry.db, streamed)
        # The stream stands where this split ended, for the next.
        assert lo + 700 >= 3000 or streamed is SnapshotValues or entry.cursor[0] == lo + 700
    assert got == list(range(3000))
    compiled.enabled = False
    try:
        in_memory = list(scan(files, cache, start=5, batch_bytes=4096))
    finally:
        compiled.enabled = True
    streamed = list(scan(files, cache, start=5, batch_bytes=4096))
    assert pa.Table.from_batches(streamed).equals(pa.Table.from_batches(in_memory))


def test_a_damaged_block_met_mid_stream_names_the_snapshot(tmp_path, cache):
    files = make_snapshot(tmp_path, 20_000, options=fluss_options())
    (remote, _), = [f for f in files.files if f[1].endswith(".sst")]
    data = bytearray(Path(remote).read_bytes())
    data[len(data) // 2] ^= 0xFF        # a data block in the file's middle
    Path(remote).write_bytes(bytes(data))
    s = scan(files, cache, batch_bytes=4096)
    streamed = compiled.native() is not None
    assert not streamed or next(s).num_rows > 0     # the blocks before it are read
    with pytest.raises(CorruptMessage, match="KV snapshot 0 of db.t bucket 0: SST: the block "
                                             "at byte .* does not match its checksum"
                                             if streamed else ""):
        list(s)


@pytest.mark.parametrize("options", [None, "fluss"], ids=["rocksdb", "in-memory"])
def test_batches_decoded_in_pieces_equal_batches_decoded_whole(tmp_path, cache, monkeypatch,
                                                               options):
    files = make_snapshot(tmp_path, 3000, options=fluss_options() if options else None)
    whole = list(scan(files, cache, start=7, batch_bytes=1 << 20))
    monkeypatch.setattr(kv_snapshot, "_DECODE_ROWS", 64)
    pieces = list(scan(files, cache, start=7, batch_bytes=1 << 20))
    assert [b.num_rows for b in pieces] == [b.num_rows for b in whole]
    assert pa.Table.from_batches(pieces).equals(pa.Table.from_batches(whole))
    assert ids(pieces) == list(range(7, 3000))


@pytest.mark.parametrize("threads", [1, 2], ids=["one thread", "two threads"])
def test_pages_are_decoded_where_they_are_walked_whatever_their_schema_ids(tmp_path, cache,
                                                                         threads, monkeypatch):
    """Rows written before a column was added (schema 1) and after it (schema 2): a page whose
    rows all decode by the plan the read gave its stream comes decoded from the stream (on
    the threads that walk it, with two), any other page is decoded by the reader, which then
    gives the stream the plan of that page's schema. Every row comes out whole, also from a
    stream kept at a split's end by a read of another projection (its plan is not this
    read's)."""
    v2 = SCHEMA.append(pa.field("n", pa.int32()))
    n = lambda i: None if i % 5 == 0 else i % 7     # noqa: E731
    files = make_snapshot(tmp_path, 20_000, options=fluss_options(), value=lambda i: (
        kv_value(1, SCHEMA, [i, f"v{i}"]) if i < 12_000 else kv_value(2, v2, [i, f"v{i}", n(i)])))
    want = [{"id": i, "v": f"v{i}", "n": None if i < 12_000 else n(i)} for i in range(20_000)]
    pages = {True: 0, False: 0}
    page = kv_snapshot.StreamedSnapshot.page

    def counted(self, stream, *args):
        out = page(self, stream, *args)
        pages[out[3] is not None] += len(out[1]) > 0
        return out

    monkeypatch.setattr(kv_snapshot.StreamedSnapshot, "page", counted)
    before = compiled.threads
    compiled.use_threads(threads)
    try:
        def read(start, limit, output):
            return pa.Table.from_batches(list(CheckpointScan(
                lambda: files, {1: SCHEMA, 2: v2}.__getitem__, output, start_row=start,
                limit=limit, batch_size_bytes=16 << 10, cache=cache, schema_id=2)), output)

        assert read(0, None, v2).to_pylist() == want
        assert pages[True] > 10 and pages[False] >= 2
        # The first split ends inside the rows of schema 1 with a projection; the second reads
        # on from the stream it left, whose pages come decoded by the first's plan.
        ids_and_n = pa.schema([v2.field("id"), v2.field("n")])
        first = read(0, 5_000, ids_and_n)
        assert len(cache) == 1
        rest = read(5_000, None, v2)
        assert first.to_pylist() == [{"id": r["id"], "n": r["n"]} for r in want[:5_000]]
        assert rest.to_pylist() == want[5_000:]
    finally:
        compiled.threads = before
