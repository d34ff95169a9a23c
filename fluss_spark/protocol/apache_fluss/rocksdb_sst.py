"""RocksDB block-based table files (SST) decoded without RocksDB: keys and value positions.

A KV snapshot of Apache Fluss is a RocksDB checkpoint. Taking its rows through a RocksDB
iterator costs a Python object per row; here the data blocks of a snapshot's files are
decompressed with pyarrow's codecs into one buffer and walked in numpy passes, one pass per
entry of a restart interval (every 16th entry's offset is stored in its block), so a million
entries cost a few dozen array operations. Only the layout Fluss writes is read -- block-based table
format versions 2 to 5, binary-search index and data blocks, no range deletions or merge
operands -- and everything else is refused with ``UnsupportedVersion``, for the caller to read
the file with RocksDB itself. Every read is bounds-checked, every block's checksum verified
(CRC32C, what Fluss's RocksDB writes; XXH3 when the ``xxhash`` package is there, else the file
goes to RocksDB, which verifies it) and the entries are counted against the table's own count.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np
import pyarrow as pa

from fluss_spark.errors import CorruptMessage, UnsupportedVersion
from fluss_spark.protocol.apache_fluss import compiled
from fluss_spark.protocol.apache_fluss.row_bytes import Rows, unaligned

#: The last bytes of a block-based table: checksum type, two block handles (padded), format
#: version (uint32) and the magic number (uint64), little-endian.
FOOTER_SIZE = 53
MAGIC = 0x88E241B785F4CFF7
FORMAT_VERSIONS = range(2, 6)
#: Each block is followed by its compression type (1 byte) and checksum (4 bytes).
BLOCK_TRAILER_SIZE = 5
#: The footer's checksum types (its first byte) read here.
NO_CHECKSUM, CRC32C, XXH3 = 0, 1, 4
#: A block's CRC32C is stored masked: rotated right by 15 bits plus this constant.
_CRC_MASK_DELTA = 0xA282EAD8
#: An XXH3 block checksum is the low 32 bits of XXH3-64 of the block, xor its type byte times
#: this constant.
_XXH3_LAST_BYTE_PRIME = 0x6B9083D9
#: Compression type byte -> pyarrow codec (RocksDB's LZ4 and ZSTD blocks start with a varint
#: of their uncompressed size; snappy's own format starts with it too).
CODECS = {1: "snappy", 4: "lz4_raw", 5: "lz4_raw", 7: "zstd"}
SNAPPY, LZ4, LZ4HC = 1, 4, 5
#: Value types of an internal key's last byte that a snapshot may hold.
DELETION, VALUE, SINGLE_DELETION = 0, 1, 7
#: The table properties this reader needs to be zero, by name.
_MUST_BE_ZERO = (b"rocksdb.num.range-deletions", b"rocksdb.merge.operands",
                 b"rocksdb.block.based.table.index.type")
#: Properties written as a fixed 4-byte little-endian number rather than a varint.
_FIXED32_PROPERTIES = (b"rocksdb.block.based.table.index.type",)
#: The only key order read here (Fluss's: unsigned bytes, a prefix first).
BYTEWISE = b"leveldb.BytewiseComparator"
#: LZ4 turns one byte into at most 255: a block that says it holds more is refused before its
#: buffer is allocated.
_MAX_EXPANSION = 255
#: The most bytes of live values the compiled reader puts in one buffer for ``read_live_values``.
_MAX_JOINED_BYTES = 2 << 30
#: Keys are held as big-endian 64-bit words: at most this many bytes of them per file.
_MAX_KEY_WORD_BYTES = 256 << 20
# An internal key ends with 8 bytes: sequence number << 8 | value type.
_TRAILER = 8


@dataclass(frozen=True)
class SstEntries:
    """The entries of some SST files, file after file, each in its (key) order: user keys
    (rows of big-endian uint64 words, zero-padded) and their lengths, sequence numbers, value
    types, each value's ``[begin, end)`` in ``buffer`` (the decompressed data blocks), and
    where each file's entries start (``runs``)."""

    buffer: np.ndarray
    keys: np.ndarray
    key_length: np.ndarray
    sequence: np.ndarray
    kind: np.ndarray
    begin: np.ndarray
    end: np.ndarray
    runs: np.ndarray

    def __len__(self) -> int:
        return len(self.sequence)


def _varint(data: memoryview, pos: int, end: int) -> tuple[int, int]:
    value = shift = 0
    while pos < end:
        b = data[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7
        if shift > 63:
            break
    raise CorruptMessage("SST: a varint runs past its block")


def _handle(data: memoryview, pos: int, end: int) -> tuple[tuple[int, int], int]:
    offset, pos = _varint(data, pos, end)
    size, pos = _varint(data, pos, end)
    return (offset, size), pos


def read_block(file: np.ndarray, handle: tuple[int, int]) -> np.ndarray:
    """The contents of the block at ``handle`` (offset, size), decompressed."""
    parts, _ = _blocks(file, np.array([handle[0]], np.int64), np.array([handle[1]], np.int64))
    return np.frombuffer(b"".join(parts), dtype=np.uint8)


def _blocks(file: np.ndarray, offsets: np.ndarray, sizes: np.ndarray
            ) -> tuple[list[Any], np.ndarray]:
    """The blocks at ``offsets`` (of ``sizes`` bytes) decompressed: each as a buffer (a numpy
    slice of ``file`` or a pyarrow buffer), and their lengths."""
    if ((offsets < 0) | (sizes < 0) | (offsets + sizes + BLOCK_TRAILER_SIZE > len(file))).any():
        raise CorruptMessage(f"SST: a block handle points past the file's end ({len(file)} bytes)")
    _verify(file, offsets, sizes)
    kinds = file[offsets + sizes]
    parts: list[Any] = [None] * len(offsets)
    for i in np.flatnonzero(kinds == 0).tolist():
        parts[i] = file[offsets[i]:offsets[i] + sizes[i]]
    packed = np.flatnonzero(kinds)
    if not len(packed):
        return parts, sizes
    unknown = set(np.unique(kinds[packed]).tolist()) - set(CODECS)
    if unknown:
        raise UnsupportedVersion(f"SST: compression type {min(unknown)} is not read here")
    rows = Rows(file, offsets[packed], offsets[packed] + sizes[packed], None)
    rows.column = "(SST block size)"
    length, start = rows.varint(offsets[packed], None, wide=False)
    snappy = kinds[packed] == SNAPPY
    start[snappy] = offsets[packed][snappy]     # the size is snappy's own header
    ends = offsets[packed] + sizes[packed]
    lz4 = (kinds[packed] == LZ4) | (kinds[packed] == LZ4HC)
    bomb = lz4 & (length > (ends - start) * _MAX_EXPANSION + 16)
    if bomb.any():
        at = int(np.flatnonzero(bomb)[0])
        raise CorruptMessage(f"SST: the block at byte {int(offsets[packed][at])} says it "
                             f"decompresses to {int(length[at])} bytes, more than its "
                             f"{int(ends[at] - start[at])} compressed bytes can hold")
    lengths = sizes.copy()
    lengths[packed] = length
    raw = pa.py_buffer(file)
    codecs = {k: pa.Codec(name).decompress for k, name in CODECS.items()}
    # The blocks live only until they are joined into one buffer: from the C allocator, the
    # memory they free serves the numpy arrays that follow (Arrow's own pool keeps it).
    pool = pa.system_memory_pool()
    try:
        # One call per block: the codecs take one buffer at a time.
        for i, k, b, stop, n in zip(packed.tolist(), kinds[packed].tolist(), start.tolist(),
                                    ends.tolist(), length.tolist()):
            parts[i] = codecs[k](raw.slice(b, stop - b), decompressed_size=n, memory_pool=pool)
    except (OSError, pa.ArrowException) as e:
        raise CorruptMessage(f"SST: a compressed data block does not decompress: {e}") from None
    return parts, lengths


def _checksum_function(kind: int) -> Callable[[np.ndarray], int]:
    """How a block's stored checksum is computed from its bytes and type byte."""
    if kind == CRC32C:
        import google_crc32c

        def crc32c(block: np.ndarray) -> int:
            crc = google_crc32c.value(block)
            return (((crc >> 15) | (crc << 17)) + _CRC_MASK_DELTA) & 0xFFFFFFFF
        return crc32c
    if kind == XXH3:
        try:
            import xxhash
        except ImportError:
            raise UnsupportedVersion("SST: XXH3 block checksums are verified only with the "
                                     "xxhash package") from None

        def xxh3(block: np.ndarray) -> int:
            low = xxhash.xxh3_64_intdigest(block[:-1]) & 0xFFFFFFFF
            return low ^ ((int(block[-1]) * _XXH3_LAST_BYTE_PRIME) & 0xFFFFFFFF)
        return xxh3
    raise UnsupportedVersion(f"SST: block checksum type {kind} is not read here")


def _verify(file: np.ndarray, offsets: np.ndarray, sizes: np.ndarray) -> None:
    """Check each block's checksum (over its bytes and its compression type byte) against the
    one stored after it, of the type the footer names."""
    kind = int(file[len(file) - FOOTER_SIZE])
    if kind == NO_CHECKSUM or not len(offsets):
        return
    compute = _checksum_function(kind)
    at = offsets + sizes + 1
    stored = (file[at].astype(np.uint32) | file[at + 1].astype(np.uint32) << 8
              | file[at + 2].astype(np.uint32) << 16 | file[at + 3].astype(np.uint32) << 24)
    for begin, end, want in zip(offsets.tolist(), at.tolist(), stored.tolist()):
        if compute(file[begin:end]) != want:
            raise CorruptMessage(f"SST: the block at byte {begin} does not match its checksum")


def small_block_entries(block: np.ndarray) -> list[tuple[bytes, bytes]]:
    """(key, value) of every entry of a small block (meta index, properties), one at a time."""
    data = memoryview(block.tobytes())
    if len(data) < 4:
        raise CorruptMessage("SST: a block is shorter than its footer")
    restarts = int.from_bytes(data[-4:], "little") & 0x7FFFFFFF
    end = len(data) - 4 - 4 * restarts
    if end < 0:
        raise CorruptMessage(f"SST: a block of {len(data)} bytes says it has {restarts} restarts")
    pos, key, out = 0, b"", []
    while pos < end:
        shared, pos = _varint(data, pos, end)
        unshared, pos = _varint(data, pos, end)
        size, pos = _varint(data, pos, end)
        if shared > len(key) or pos + unshared + size > end:
            raise CorruptMessage("SST: a block entry runs past its block")
        key = key[:shared] + bytes(data[pos:pos + unshared])
        pos += unshared
        out.append((key, bytes(data[pos:pos + size])))
        pos += size
    return out


def _footer(file: np.ndarray) -> tuple[tuple[int, int], tuple[int, int]]:
    """The meta index and index block handles of the file's footer."""
    if len(file) < FOOTER_SIZE:
        raise CorruptMessage(f"SST: {len(file)} bytes is less than a footer")
    foot = memoryview(file[-FOOTER_SIZE:].tobytes())
    magic = int.from_bytes(foot[-8:], "little")
    version = int.from_bytes(foot[-12:-8], "little")
    if magic != MAGIC or version not in FORMAT_VERSIONS:
        raise UnsupportedVersion(f"SST: magic {magic:#x} format version {version} is not read "
                                 f"here (block-based tables of format versions "
                                 f"{FORMAT_VERSIONS.start}-{FORMAT_VERSIONS.stop - 1} are)")
    meta, pos = _handle(foot, 1, FOOTER_SIZE - 12)
    index, _ = _handle(foot, pos, FOOTER_SIZE - 12)
    return meta, index


def _properties(file: np.ndarray, meta: tuple[int, int]) -> dict[bytes, bytes]:
    for name, value in _entries(file, meta):
        if name == b"rocksdb.properties":
            handle, _ = _handle(memoryview(value), 0, len(value))
            return dict(_entries(file, handle))
    raise UnsupportedVersion("SST: the file has no table properties")


def _entries(file: np.ndarray, handle: tuple[int, int]) -> list[tuple[bytes, bytes]]:
    """small_block_entries of the block at ``handle``; compiled where the install has it."""
    native = compiled.native()
    try:
        if native is not None:
            return native.block_entries(file, *handle, int(file[len(file) - FOOTER_SIZE]))
    except ValueError:
        pass    # read here, which says what is wrong
    return small_block_entries(read_block(file, handle))


def _property_int(props: dict[bytes, bytes], name: bytes) -> int:
    raw = props.get(name)
    if raw is None:
        raise UnsupportedVersion(f"SST: table property {name.decode()} is missing")
    if name in _FIXED32_PROPERTIES:
        return int.from_bytes(raw[:4], "little")
    return _varint(memoryview(raw), 0, len(raw))[0]


def _restart_intervals(buffer: np.ndarray, base: np.ndarray, sizes: np.ndarray
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``[start, stop)`` of every restart interval of the blocks at ``buffer[base:base+size]``,
    and each block's count of them: a block ends with its restart offsets (uint32 each) and
    their count."""
    if (sizes < 4).any():
        raise CorruptMessage("SST: a block is shorter than its footer")
    footer = _words(buffer, base + sizes - 4)
    if (footer >> 31).any():
        raise UnsupportedVersion("SST: blocks with a hash index are not read here")
    restarts = footer.astype(np.int64)
    data_end = base + sizes - 4 - 4 * restarts
    if (data_end < base).any() or (restarts < 1).any():
        raise CorruptMessage("SST: a block's restart count does not fit it")
    block = np.repeat(np.arange(len(base)), restarts)
    starts = base[block] + _words(buffer, data_end[block] + 4 * _ranks(restarts)).astype(np.int64)
    stops = np.append(starts[1:], 0)
    stops[np.cumsum(restarts) - 1] = data_end
    if ((starts < base[block]) | (starts >= stops)).any():
        raise CorruptMessage("SST: a block's restart points are out of order")
    return starts, stops, restarts


@dataclass(frozen=True)
class _Entries:
    """The entries of some blocks, in file order: bytes each key shares with the one before,
    bytes it does not (they start at ``key``), where its value starts and its size."""

    shared: np.ndarray
    unshared: np.ndarray
    key: np.ndarray
    value: np.ndarray
    size: np.ndarray
    #: Entries of each restart interval.
    counts: np.ndarray


def _varints3(rows: Rows, pos: np.ndarray) -> tuple[np.ndarray, ...]:
    """The three varints (shared, unshared, value size) at each of ``pos``, and their end."""
    buf = rows.buffer
    if len(pos) and pos.max() + 4 <= len(buf):
        head = unaligned(buf, "<u4")[pos]
        if not (head & 0x808080).any():
            # Each under 128, as keys and values of a few dozen bytes are: one byte each.
            rows.check(pos + 3, None)
            return ((head & 0xFF).astype(np.int64), ((head >> 8) & 0xFF).astype(np.int64),
                    ((head >> 16) & 0xFF).astype(np.int64), pos + 3)
    a, p = rows.varint(pos, None, wide=False)
    b, p = rows.varint(p, None, wide=False)
    c, p = rows.varint(p, None, wide=False)
    if ((a < 0) | (b < 0) | (c < 0)).any():
        raise CorruptMessage("SST: a block entry has a negative length")
    return a.astype(np.int64), b.astype(np.int64), c.astype(np.int64), p


def _walk(buffer: np.ndarray, starts: np.ndarray, stops: np.ndarray) -> _Entries:
    """Every entry of the restart intervals ``[starts[i], stops[i])`` of ``buffer``: a pass per
    position in the interval, over every interval still going."""
    rows = Rows(buffer, starts, None, None)
    rows.column = "(SST entry)"
    # Per pass: the intervals still going, then each entry's shared, unshared, key, value, size.
    found: tuple[list[np.ndarray], ...] = ([], [], [], [], [], [])
    interval = np.arange(len(starts), dtype=np.int64)
    pos = starts
    while len(interval):
        shared, unshared, size, p = _varints3(rows, pos)
        value = p + unshared
        nxt = value + size
        stop = stops[interval]
        if (nxt > stop).any():
            raise CorruptMessage("SST: a block entry runs past its restart interval")
        if not found[0] and shared.any():
            raise CorruptMessage("SST: a restart point's key shares bytes with the one before")
        for pieces, part in zip(found, (interval, shared, unshared, p, value, size)):
            pieces.append(part)
        going = nxt < stop
        interval, pos = interval[going], nxt[going]
    # Entry s of interval i goes to (entries of the intervals before i) + s.
    counts = np.bincount(np.concatenate(found[0]), minlength=len(starts))
    first = np.zeros(len(starts), dtype=np.int64)
    np.cumsum(counts[:-1], out=first[1:])
    at = np.concatenate([first[step] + s for s, step in enumerate(found[0])])
    out = []
    for parts in found[1:]:
        column = np.empty(len(at), dtype=np.int64)
        column[at] = np.concatenate(parts)
        parts.clear()       # each pass's pieces go as their column is built: a lower peak
        out.append(column)
    shared, unshared, key, value, size = out
    return _Entries(shared, unshared, key, value, size, counts)


def _data_handles(file: np.ndarray, index: tuple[int, int], delta: bool
                  ) -> tuple[np.ndarray, np.ndarray]:
    """(offsets, sizes) of the data blocks, from the index block: compiled where the install
    has it (a tenth of the numpy passes' time); numpy reads what it refuses, and says why."""
    native = compiled.native()
    if native is not None:
        try:
            offsets, sizes = native.index_handles(file, index[0], index[1],
                                                  int(file[len(file) - FOOTER_SIZE]), delta)
        except ValueError:
            pass
        else:
            return np.frombuffer(offsets, dtype=np.int64), np.frombuffer(sizes, dtype=np.int64)
    block = read_block(file, index)
    starts, stops, _ = _restart_intervals(block, np.zeros(1, np.int64),
                                          np.array([len(block)], np.int64))
    if delta:
        # Value delta encoding: ``shared, unshared, key, offset, size``, no value length. Each
        # entry must be a restart point (Fluss writes index blocks with a restart interval of
        # 1): one after it would hold a size delta only.
        rows = Rows(block, starts, stops, None)
        rows.column = "(SST index)"
        _, p = rows.varint(starts, None, wide=False)
        unshared, p = rows.varint(p, None, wide=False)
        p = p + unshared.astype(np.int64)
    else:
        entries = _walk(block, starts, stops)
        p, stops = entries.value, entries.value + entries.size
        rows = Rows(block, p, stops, None)
        rows.column = "(SST index)"
    offset, p = rows.varint(p, None, wide=True)
    size, end = rows.varint(p, None, wide=True)
    if (end != stops).any():
        raise UnsupportedVersion("SST: index entries other than one block handle per restart "
                                 "point are not read here")
    return offset, size


def _table(file: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """(offsets, sizes) of the file's data blocks and its entry count, from its footer, index
    and properties; UnsupportedVersion for a table this reader does not take."""
    meta, index = _footer(file)
    props = _properties(file, meta)
    comparator = props.get(b"rocksdb.comparator", b"")
    if comparator != BYTEWISE:
        raise UnsupportedVersion(f"SST: keys ordered by {comparator!r} are not read here")
    for name in _MUST_BE_ZERO:
        if name in props and _property_int(props, name):
            raise UnsupportedVersion(f"SST: table property {name.decode()} is not 0")
    delta = (b"rocksdb.index.value.is.delta.encoded" in props
             and _property_int(props, b"rocksdb.index.value.is.delta.encoded") != 0)
    offsets, sizes = _data_handles(file, index, delta)
    count = _property_int(props, b"rocksdb.num.data.blocks")
    if len(offsets) != count:
        raise CorruptMessage(f"SST: {len(offsets)} data blocks indexed, the table says {count}")
    return (offsets.astype(np.int64), sizes.astype(np.int64),
            _property_int(props, b"rocksdb.num.entries"))


def read_tables(files: Sequence[np.ndarray]) -> SstEntries:
    """Every entry of the SST files ``files`` (each its bytes, uint8): all their blocks are
    decompressed into one buffer and walked together, so more files cost no more passes."""
    parts: list[Any] = []
    lengths, blocks, expected = [], [], []
    for file in files:
        offsets, sizes, count = _table(file)
        some, length = _blocks(file, offsets, sizes)
        parts += some
        lengths.append(length)
        blocks.append(len(some))
        expected.append(count)
    if not parts:
        return _empty(sum(expected))
    size = np.concatenate(lengths)
    buffer = np.frombuffer(b"".join(parts), dtype=np.uint8)
    del parts, some     # the blocks, now copied into ``buffer``, go before the walk's arrays come
    base = np.zeros(len(size), dtype=np.int64)
    np.cumsum(size[:-1], out=base[1:])
    starts, stops, restarts = _restart_intervals(buffer, base, size)
    entries = _walk(buffer, starts, stops)
    # Each file's entries (those of its blocks' restart intervals) against its own count.
    per_block = np.add.reduceat(entries.counts, np.cumsum(restarts) - restarts)
    found = [int(c.sum()) for c in np.split(per_block, np.cumsum(blocks)[:-1])]
    if found != expected:
        raise CorruptMessage(f"SST: {found} entries found, the tables say {expected}")
    words, user_length, trailer = _keys(buffer, entries)
    runs = np.cumsum([0] + found[:-1]).astype(np.int64)
    return SstEntries(buffer, words, user_length, trailer >> np.uint64(8),
                      (trailer & np.uint64(0xFF)).astype(np.uint8), entries.value,
                      entries.value + entries.size, runs)


def stream_opener(files: Sequence[np.ndarray], mapped: Sequence[bool] | None = None
                  ) -> Callable[[], Any] | None:
    """A function opening a compiled stream of the files' live values in key order, a page at
    a time (``_native.SstStream``, see ``_native.pyi``), the files' indexes read once for all;
    None where the install has none or it refuses the files' layout (numpy or RocksDB reads
    them). ``mapped[i]``: file ``i`` is a read-only mapping, its pages read given back."""
    native = compiled.native()
    if native is None:
        return None
    tables = [_table(file) for file in files]
    args = (list(files), [(o, s) for o, s, _ in tables],
            [count for _, _, count in tables],
            [int(file[len(file) - FOOTER_SIZE]) for file in files],
            list(mapped) if mapped is not None else [False] * len(files))
    try:
        native.SstStream(*args)     # blocks' places, files' first compressions: checked
    except ValueError:
        return None
    return lambda: native.SstStream(*args)


def open_stream(files: Sequence[np.ndarray], mapped: Sequence[bool] | None = None) -> Any:
    """One stream of ``stream_opener`` (None as it)."""
    opener = stream_opener(files, mapped)
    return None if opener is None else opener()


def read_live_values(files: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``live_values(read_tables(files))``: compiled where the install has it, else in numpy
    (also when the compiled reader refuses the files: the numpy one then says why)."""
    stream = open_stream(files) if files else None
    if stream is not None:
        try:
            buffer, begin, end, _ = stream.page(1 << 62, _MAX_JOINED_BYTES, 0)
        except ValueError:
            pass
        else:
            return (np.frombuffer(buffer, dtype=np.uint8), np.frombuffer(begin, dtype=np.int64),
                    np.frombuffer(end, dtype=np.int64))
    return live_values(read_tables(files))


def _keys(buffer: np.ndarray, e: _Entries) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The user keys (big-endian uint64 words, zero-padded), their lengths and the internal
    keys' trailers (sequence number << 8 | value type), from the prefix-compressed keys.

    Byte c of a key is written by the nearest entry at or before it, in its restart interval,
    that shares fewer than c + 1 bytes with the key before it; a running maximum finds that
    entry for every key at once, a byte column at a time."""
    shared, unshared, key = e.shared, e.unshared, e.key
    length = shared + unshared
    user = length - _TRAILER
    if (shared[1:] > length[:-1]).any():
        raise CorruptMessage("SST: a key shares more bytes than the key before it has")
    if (user < 0).any():
        raise CorruptMessage("SST: an internal key is shorter than its sequence number")
    n = len(length)
    width = int(user.max()) if n else 0
    if n * -(-width // 8) * 8 > _MAX_KEY_WORD_BYTES:
        raise UnsupportedVersion(f"SST: keys of up to {width} bytes are not read here")
    words = np.zeros((n, max(1, -(-width // 8))), dtype=np.uint64)
    index = np.arange(n, dtype=np.int64)
    last = len(buffer) - 1

    def column(c: np.ndarray | int) -> np.ndarray:
        """Byte ``c`` (a column, or one per key) of every key; undefined past a key's end."""
        writer = index
        if (shared > c).any():
            writer = np.maximum.accumulate(np.where(shared <= c, index, 0))
        return buffer.take(np.clip(key[writer] + c - shared[writer], 0, last))

    for c in range(width):
        byte = np.where(user > c, column(c), np.uint8(0))
        words[:, c // 8] |= byte.astype(np.uint64) << np.uint64(8 * (7 - c % 8))
    # The trailer is usually all in the key's own bytes; an older version of the same key,
    # right after it, shares some of it.
    if np.all(unshared >= _TRAILER):
        at = key + unshared - _TRAILER
        if len(at) and at.max() + _TRAILER > len(buffer):
            raise CorruptMessage("SST: a key runs past its block")
        return words, user, unaligned(buffer, "<u8")[at]
    trailer = np.zeros(n, dtype=np.uint64)
    for j in range(_TRAILER):
        trailer |= column(user + j).astype(np.uint64) << np.uint64(8 * j)
    return words, user, trailer


def _ranks(counts: np.ndarray) -> np.ndarray:
    """0, 1, ... counts[i] - 1 for each i, concatenated."""
    starts = np.zeros(len(counts), dtype=np.int64)
    np.cumsum(counts[:-1], out=starts[1:])
    return np.arange(int(counts.sum()), dtype=np.int64) - np.repeat(starts, counts)


def _words(buffer: np.ndarray, at: np.ndarray) -> np.ndarray:
    """The little-endian uint32 at each of ``at``."""
    if len(at) and (at.min() < 0 or at.max() + 4 > len(buffer)):
        raise CorruptMessage("SST: a block's footer points outside it")
    return unaligned(buffer, "<u4")[at]


def _empty(expected: int) -> SstEntries:
    if expected:
        raise CorruptMessage(f"SST: no data blocks, the table says {expected} entries")
    none = np.empty(0, dtype=np.int64)
    return SstEntries(np.empty(0, dtype=np.uint8), np.empty((0, 1), dtype=np.uint64), none,
                      none.astype(np.uint64), none.astype(np.uint8), none, none, none)


def live_values(table: SstEntries) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The values a RocksDB read of these files (one database) sees, in key order: their
    buffer and each value's ``[begin, end)`` in it. Of a key's entries the newest (highest
    sequence number) wins; a deletion there hides the key."""
    keys, length, sequence, kind, begin, end, buffer = (
        table.keys, table.key_length, table.sequence, table.kind, table.begin, table.end,
        table.buffer)
    if not len(kind):
        return buffer, begin, end
    merge = len(table.runs) > 1     # a file alone is in key order, newest first
    unknown = (kind != VALUE) & (kind != DELETION) & (kind != SINGLE_DELETION)
    if unknown.any():
        raise UnsupportedVersion(f"SST: entries of value type {int(kind[unknown][0])} are not "
                                 "read here")
    if keys.shape[1] == 1 and length.max() < 8:
        # The low byte of a key of under 8 bytes is padding: the length goes there, and one
        # number orders and compares keys as their bytes do.
        keys = keys[:, 0] | length.astype(np.uint64)
        if merge:
            # The files are sorted runs, which a stable sort (timsort) merges in about a pass.
            order = np.argsort(keys, kind="stable")
            keys, sequence, kind, begin, end = (a[order] for a in (keys, sequence, kind, begin,
                                                                     end))
        differs = keys[1:] != keys[:-1]
    else:
        if merge:
            order = np.lexsort((length,) + tuple(keys[:, w] for w in
                                                 reversed(range(keys.shape[1]))))
            keys, length, sequence, kind, begin, end = (
                a[order] for a in (keys, length, sequence, kind, begin, end))
        differs = (length[1:] != length[:-1]) | (keys[1:] != keys[:-1]).any(axis=1)
    # Of the entries of one key the newest (highest sequence number) wins: a file holds them
    # newest first, files are merged in any order.
    first = np.ones(len(kind), dtype=bool)
    first[1:] = differs
    newest = first
    if not first.all():
        group = np.cumsum(first) - 1
        newest = sequence == np.maximum.reduceat(sequence, np.flatnonzero(first))[group]
    live = newest & (kind == VALUE)
    return buffer, begin[live], end[live]


__all__ = ["SstEntries", "live_values", "open_stream", "read_block", "read_live_values",
           "read_tables", "small_block_entries", "stream_opener"]
