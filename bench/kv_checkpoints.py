"""KV snapshot checkpoints for the decode benchmarks: RocksDB databases laid out as Apache
Fluss 0.9.1 writes its KV store, holding the snapshot bench's table."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pyarrow as pa

from fluss_spark.protocol.apache_fluss.proto import encode_varint

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("v", pa.string()),
                    ("amount", pa.float64())])


def varint(value: int) -> bytes:
    out = bytearray()
    encode_varint(value, out)       # the same LEB128 as a compacted row's
    return bytes(out)


def write_buckets(root: Path, rows: int, buckets: int) -> list[Path]:
    """``rows`` rows of SCHEMA as KV values in ``buckets`` databases laid out as Fluss's KV
    store is (block-based format 5, LZ4, CRC32C, index restart interval 1, 4 KiB blocks),
    each in 4 level-0 files, the last one also updating 1% of the keys."""
    import struct

    from rocksdict import (BlockBasedOptions, ChecksumType, DBCompressionType, Options, Rdict,
                           WriteOptions)
    opts = Options(raw_mode=True)
    table = BlockBasedOptions()
    table.set_format_version(5)
    table.set_checksum_type(ChecksumType.crc32c())
    table.set_index_block_restart_interval(1)
    table.set_block_size(4096)
    opts.set_block_based_table_factory(table)
    opts.set_compression_type(DBCompressionType.lz4())
    opts.set_disable_auto_compactions(True)
    no_wal = WriteOptions()
    no_wal.disable_wal = True
    rng = random.Random(1)

    def value(i: int) -> bytes:
        text = f"value-{i}-{rng.randrange(10**6)}".encode()
        return (b"\x01\x00\x00" + varint(i) + varint(len(text)) + text
                + struct.pack("<d", i * 0.25))

    dirs = []
    for bucket in range(buckets):
        path = root / f"bucket-{bucket}"
        db = Rdict(str(path), options=opts)
        db.set_write_options(no_wal)
        ids = list(range(bucket, rows, buckets))
        for chunk in range(4):
            for i in ids[chunk * len(ids) // 4:(chunk + 1) * len(ids) // 4]:
                db[varint(i)] = value(i)
            if chunk == 3:
                for i in rng.sample(ids, len(ids) // 100):
                    db[varint(i)] = value(i)
            db.flush()
        db.close()
        dirs.append(path)
    return dirs


def sst_files(directory: Path) -> list[np.ndarray]:
    return [np.fromfile(f, dtype=np.uint8) for f in sorted(directory.glob("*.sst"))]
