"""SST files decoded without RocksDB: the values match what a RocksDB iterator over the same
database returns, across files, versions and deletions; other layouts are refused clearly.

The files are written by RocksDB itself (rocksdict) with the table options Apache Fluss 0.9.1
uses for its KV store (block-based format version 5, an index restart interval of 1, LZ4),
and with other compressions, key widths and value sizes.
"""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
from rocksdict import (AccessType, BlockBasedOptions, ChecksumType, DBCompressionType, Options,
                       Rdict, WriteOptions)

from fluss_spark.errors import CorruptMessage, UnsupportedVersion
from fluss_spark.protocol.apache_fluss import compiled
from fluss_spark.protocol.apache_fluss.rocksdb_sst import (FOOTER_SIZE, _footer, _handle,
                                                           _properties, _table,
                                                           read_block, read_live_values,
                                                           read_tables, small_block_entries)

# Every test reads both ways: compiled (where the install has it) and in numpy.
pytestmark = pytest.mark.usefixtures("both_decodes")


def fluss_options(compression=DBCompressionType.lz4, format_version: int = 5,
                  checksum=ChecksumType.crc32c) -> Options:
    """Options of a raw-bytes database whose SST files are laid out as Fluss's are (Fluss
    0.9.1's RocksDB writes CRC32C block checksums)."""
    opts = Options(raw_mode=True)
    table = BlockBasedOptions()
    table.set_format_version(format_version)
    table.set_checksum_type(checksum())
    table.set_index_block_restart_interval(1)
    table.set_block_size(4096)
    opts.set_block_based_table_factory(table)
    opts.set_compression_type(compression())
    opts.set_disable_auto_compactions(True)     # several overlapping L0 files stay as they are
    return opts


def no_wal() -> WriteOptions:
    w = WriteOptions()
    w.disable_wal = True
    return w


def rocksdb_values(path: Path) -> list[bytes]:
    db = Rdict(str(path), options=Options(raw_mode=True), access_type=AccessType.read_only())
    try:
        return list(db.values())
    finally:
        db.close()


def sst_files(path: Path) -> list[np.ndarray]:
    return [np.fromfile(f, dtype=np.uint8) for f in sorted(path.glob("*.sst"))]


def sst_values(path: Path) -> list[bytes]:
    buffer, begin, end = read_live_values(sst_files(path))
    return [buffer[b:e].tobytes() for b, e in zip(begin.tolist(), end.tolist())]


def write_rounds(path: Path, opts: Options, rounds: list[dict[bytes, bytes | None]]) -> None:
    """Each round's puts (None: delete) then a flush, so that each round is one SST file."""
    db = Rdict(str(path), options=opts)
    db.set_write_options(no_wal())
    try:
        for batch in rounds:
            for k, v in batch.items():
                if v is None:
                    del db[k]
                else:
                    db[k] = v
            db.flush()
    finally:
        db.close()


def test_fluss_layout_several_files_updates_and_deletes_read_as_rocksdb_does(tmp_path):
    rng = random.Random(7)
    # Short keys (varints, as Fluss encodes a BIGINT key): under 8 bytes each.
    keys = [bytes([0x80 | (i & 0x7F), 0x80 | (i >> 7 & 0x7F), i >> 14]) for i in range(6000)]
    rounds = []
    for r in range(4):
        batch: dict[bytes, bytes | None] = {}
        for k in rng.sample(keys, 2500):
            value = b"\x01\x00" + rng.randbytes(rng.randrange(3, 40))
            batch[k] = None if rng.random() < 0.1 else value
        rounds.append(batch)
    write_rounds(tmp_path, fluss_options(), rounds)
    files = sst_files(tmp_path)
    table = read_tables(files)
    assert len(files) == 4 and len(table.runs) == 4 and (table.kind == 0).any()
    expected = rocksdb_values(tmp_path)
    assert 3000 < len(expected) < len(table)
    assert sst_values(tmp_path) == expected


@pytest.mark.parametrize("compression", [DBCompressionType.zstd, DBCompressionType.snappy,
                                         DBCompressionType.none])
def test_long_keys_large_values_and_other_compressions(tmp_path, compression):
    rng = random.Random(11)
    keys = [f"user-{rng.randrange(10**9)}-{'x' * rng.randrange(0, 30)}".encode()
            for _ in range(1500)]
    rounds = [{k: rng.randbytes(rng.choice((5, 130, 300))) for k in rng.sample(keys, 900)}
              for _ in range(3)]
    rounds.append({k: None for k in keys[:200]})
    write_rounds(tmp_path, fluss_options(compression), rounds)
    expected = rocksdb_values(tmp_path)
    assert sst_values(tmp_path) == expected and len(expected) > 1000


def test_versions_kept_by_snapshots_in_one_file_newest_wins(tmp_path):
    key = b"\x05\x06"
    db = Rdict(str(tmp_path), options=fluss_options())
    db.set_write_options(no_wal())
    db[b"\x07"] = b"gone"
    db[key] = b"v1"
    held = [db.snapshot()]      # each snapshot keeps the versions before it through the flush
    db[key] = b"v2"
    held.append(db.snapshot())
    del db[b"\x07"]
    db[key] = b"newest"
    db.flush()
    held.clear()
    db.close()
    table = read_tables(sst_files(tmp_path))
    assert len(table.runs) == 1 and sorted(table.kind.tolist()) == [0, 1, 1, 1, 1]
    assert sst_values(tmp_path) == rocksdb_values(tmp_path) == [b"newest"]


def test_other_layouts_are_refused_and_damage_is_caught(tmp_path):
    write_rounds(tmp_path / "v6", fluss_options(format_version=6), [{b"k": b"v"}])
    (v6,) = (tmp_path / "v6").glob("*.sst")
    with pytest.raises(UnsupportedVersion, match="format version 6"):
        read_live_values([np.fromfile(v6, dtype=np.uint8)])
    write_rounds(tmp_path / "v5", fluss_options(), [{bytes([i]): b"v" * 50 for i in range(200)}])
    (v5,) = (tmp_path / "v5").glob("*.sst")
    data = np.fromfile(v5, dtype=np.uint8)
    with pytest.raises(CorruptMessage, match="SST"):
        read_live_values([data[:40]])
    damaged = data.copy()
    damaged[100:140] = 0xFF     # inside the first data block
    with pytest.raises((CorruptMessage, UnsupportedVersion), match="SST"):
        read_live_values([damaged])
    flipped = data.copy()
    flipped[200] ^= 0x01        # one bit of a value: only the block's checksum tells
    with pytest.raises(CorruptMessage, match="does not match its checksum"):
        read_live_values([flipped])
    assert read_tables([]).runs.size == 0 and len(read_live_values([])[1]) == 0


def test_xxh3_checksums_are_verified_or_the_file_is_left_to_rocksdb(tmp_path):
    """XXH3 blocks (RocksDB's newer default) are checked with the xxhash package where it is
    installed; without it the file is refused, for the caller to read it with RocksDB."""
    rounds = [{bytes([i]): b"v" * 50 for i in range(200)}]
    write_rounds(tmp_path, fluss_options(checksum=ChecksumType.xxh3), rounds)
    try:
        import xxhash  # noqa: F401
    except ImportError:
        with pytest.raises(UnsupportedVersion, match="xxhash"):
            read_tables(sst_files(tmp_path))
    else:
        assert sst_values(tmp_path) == rocksdb_values(tmp_path)


def test_a_block_claiming_more_than_lz4_can_hold_is_refused_unallocated(tmp_path):
    """A data block's size prefix is read before its buffer is allocated: one saying it holds
    more than 255 times its compressed bytes (LZ4's most) is damage, not a 2 GB allocation."""
    write_rounds(tmp_path, fluss_options(checksum=ChecksumType.no_checksum),
                 [{bytes([i]): b"v" * 50 for i in range(200)}])
    (file,) = sst_files(tmp_path)
    offsets, _, _ = _table(file)
    bomb = file.copy()
    at = int(offsets[0])
    bomb[at:at + 5] = [0xFF, 0xFF, 0xFF, 0xFF, 0x07]    # 2**31 - 1 bytes, it says
    with pytest.raises(CorruptMessage, match=f"block at byte {at} says it decompresses to "
                                             "2147483647 bytes"):
        read_live_values([bomb])


@pytest.mark.parametrize("format_version, restart_interval", [(5, 1), (4, 1), (3, 1), (2, 16)])
def test_index_blocks_give_the_same_block_handles_either_way(tmp_path, format_version,
                                                             restart_interval):
    """The data blocks' handles from a file's index block, with and without value delta
    encoding (format versions 4+ and before) and with restart intervals of more than one
    entry: the compiled reading is numpy's, and an index block it cannot read (damaged) is
    left to numpy, which says why."""
    opts = fluss_options(format_version=format_version)
    table = BlockBasedOptions()
    table.set_format_version(format_version)
    table.set_checksum_type(ChecksumType.crc32c())
    table.set_index_block_restart_interval(restart_interval)
    table.set_block_size(1024)
    opts.set_block_based_table_factory(table)
    rng = random.Random(format_version)
    write_rounds(tmp_path, opts, [{rng.randbytes(10): rng.randbytes(200) for _ in range(3000)}])
    (data,) = sst_files(tmp_path)
    offsets, sizes, entries = _table(data)
    assert entries == 3000 and len(offsets) > 400 and sizes.min() > 0
    if compiled.enabled:
        compiled.enabled = False
        try:
            by_numpy = _table(data)
        finally:
            compiled.enabled = True
        assert (offsets == by_numpy[0]).all() and (sizes == by_numpy[1]).all()
    # Damage inside the index block (it sits right after the last data block).
    damaged = data.copy()
    damaged[int(offsets[-1] + sizes[-1]) + 5 + 3] ^= 0xFF
    with pytest.raises(CorruptMessage, match="checksum"):
        _table(damaged)


@pytest.mark.parametrize("compression", [DBCompressionType.none(), DBCompressionType.lz4()],
                         ids=["uncompressed", "lz4"])
def test_a_files_properties_read_alike_compiled_or_not(tmp_path, compression):
    """The meta index and properties blocks walked by the compiled code give Python's entries;
    a damaged one is refused by both, Python saying why."""
    opts = fluss_options()
    opts.set_compression_type(compression)
    rng = random.Random(7)
    write_rounds(tmp_path, opts, [{rng.randbytes(10): rng.randbytes(50) for _ in range(500)}])
    (data,) = sst_files(tmp_path)
    meta, _ = _footer(data)
    (name, value), = [e for e in small_block_entries(read_block(data, meta))
                      if e[0] == b"rocksdb.properties"]
    handle, _ = _handle(memoryview(value), 0, len(value))
    by_python = small_block_entries(read_block(data, handle))
    assert len(by_python) > 20 and _properties(data, meta) == dict(by_python)
    native = compiled.native()
    if native is not None:
        checksum = int(data[len(data) - FOOTER_SIZE])
        assert native.block_entries(data, *meta, checksum) == small_block_entries(
            read_block(data, meta))
        assert native.block_entries(data, *handle, checksum) == by_python
    damaged = data.copy()
    damaged[handle[0] + 3] ^= 0xFF
    with pytest.raises(CorruptMessage, match="checksum"):
        _properties(damaged, meta)
