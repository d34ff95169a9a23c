"""Compiled (numba) decode of Apache Fluss KV snapshots against the numpy decode, in one process.

The measurement behind keeping the snapshot decode in numpy (BENCHMARKS.md, "Compiled decode
with numba: measured, not adopted"). numba is not a dependency of fluss-spark; install it first::

    pip install numba
    .venv/bin/python bench/bench_numba_decode.py --rows 1000000 [--repeat 7]
    .venv/bin/python bench/bench_numba_decode.py --checkpoint DIR [--checkpoint DIR ...]

Without ``--checkpoint`` it writes ``--rows`` rows of the snapshot bench's table (``id BIGINT NOT
NULL, v STRING, amount DOUBLE``, key ``id``) as KV values into ``--buckets`` RocksDB databases
laid out as Apache Fluss 0.9.1 writes its KV store (as ``fluss_options`` of
tests/unit/protocol/test_apache_fluss_rocksdb_sst.py does), each in 4 level-0 files with some
keys updated; with it, it reads the SST files of those directories (e.g. copies of
bench/bench_apache_fluss_snapshot.py's Apache Fluss checkpoints). Every bucket is then read
``--repeat`` times both ways, alternating, and the minimum CPU seconds (process time) of each
phase printed: decompressing the blocks (shared), walking the entries and rebuilding the keys,
merging the files (newest version wins), decoding the compacted rows into Arrow in pieces of
16k rows (what ``kv_snapshot.CheckpointScan`` does). The compiled results are checked against
the numpy ones (the same entries, values and Arrow batches). Last, in fresh processes: the time
of ``import numba`` and of the first read with numba's on-disk cache cold (compiling) and warm.

The kernels here (``_walk``, ``_merge``, ``_fields``, ``_gather``) walk each block and each row
once, every read bounds-checked; they report an error code where the numpy code raises.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Sequence

import numpy as np
import pyarrow as pa
from numba import njit
from numba import uint64 as _u

from fluss_spark.errors import CorruptMessage, UnsupportedVersion
from fluss_spark.protocol.apache_fluss import compiled, rocksdb_sst
from fluss_spark.protocol.apache_fluss.compacted_row import _kind, decode_kv_ranges
from fluss_spark.protocol.apache_fluss.row_bytes import (NANOS_PER_MILLI, PER_MILLI, arrow_array,
                                                         decimal128, time_from_millis)
from kv_checkpoints import SCHEMA, sst_files, write_buckets  # bench/kv_checkpoints.py

#: Rows decoded at a time, as kv_snapshot.CheckpointScan decodes them.
PIECE_ROWS = 1 << 14
_TRAILER = 8
_MAX_KEY_WORD_BYTES = 256 << 20
# Indexes are cast to unsigned (``_u``) where they cannot be negative: numba then leaves out the
# wrap-around of negative indexes, which took half the time of a byte-at-a-time copy.
#: Layouts of a compacted-row field other than a fixed width (1, 2, 4 or 8 bytes).
_INT, _LONG, _LONG_NANOS, _BYTES = -1, -2, -3, -4
_FIXED_BITS = {pa.int8(): ("u1", "i1"), pa.int16(): ("<u2", "<i2"),
               pa.float32(): ("<u4", "<f4"), pa.float64(): ("<u8", "<f8")}


# -- the kernels -------------------------------------------------------------------------------

@njit(cache=True, nogil=True)
def _u32(buffer, at):
    return (np.int64(buffer[_u(at)]) | np.int64(buffer[_u(at + 1)]) << 8
            | np.int64(buffer[_u(at + 2)]) << 16 | np.int64(buffer[_u(at + 3)]) << 24)


@njit(cache=True, nogil=True)
def _varint32(buffer, pos, stop):
    """(value as a Java int, end); end -1 when it runs past ``stop`` or 5 bytes."""
    value = np.uint32(0)
    for i in range(5):
        if pos >= stop:
            return np.int64(0), np.int64(-1)
        b = buffer[_u(pos)]
        pos += 1
        # Bits past 32 are dropped, as the numpy walk's uint32 arithmetic drops them.
        value |= np.uint32(np.uint32(b & 0x7F) << np.uint32(7 * i))
        if b < 0x80:
            return np.int64(np.int32(value)), pos
    return np.int64(0), np.int64(-1)


@njit(cache=True, nogil=True)
def _intervals(buffer, base, sizes, block):
    """(error, first restart offset, restart count, data end) of block ``block``."""
    b, size = base[block], sizes[block]
    if size < 4:
        return 1, 0, 0, 0
    footer = _u32(buffer, b + size - 4)
    if footer >> 31:
        return 2, 0, 0, 0
    data_end = b + size - 4 - 4 * footer
    if data_end < b or footer < 1:
        return 3, 0, 0, 0
    return 0, data_end, footer, data_end


@njit(cache=True, nogil=True)
def _walk(buffer, base, sizes, fill, keys, key_length, sequence, kind, begin, end, counts,
          scratch):
    """Walk every entry of the blocks ``buffer[base[i]:base[i] + sizes[i]]`` in order.

    Without ``fill``: (error, entries, longest internal key), every check made, and each
    block's entry count in ``counts``. With it: keys, lengths, sequence numbers, value types and
    value ranges written into the arrays (sized by a run without it)."""
    n = 0
    longest = 0
    words = keys.shape[1]
    prev_length = 0
    for block in range(len(base)):
        err, table, restarts, data_end = _intervals(buffer, base, sizes, block)
        if err:
            return err, n, longest
        start_block = n
        for j in range(restarts):
            at = table + 4 * j
            if at + 4 > len(buffer):
                return 4, n, longest
            start = base[block] + _u32(buffer, at)
            if j + 1 < restarts:
                if at + 8 > len(buffer):
                    return 4, n, longest
                stop = base[block] + _u32(buffer, at + 4)
            else:
                stop = data_end
            if start < base[block] or start >= stop or stop > data_end:
                return 5, n, longest
            pos = start
            first = True
            while pos < stop:
                shared, pos = _varint32(buffer, pos, stop)
                if pos < 0:
                    return 6, n, longest
                unshared, pos = _varint32(buffer, pos, stop)
                if pos < 0:
                    return 6, n, longest
                size, pos = _varint32(buffer, pos, stop)
                if pos < 0:
                    return 6, n, longest
                if shared < 0 or unshared < 0 or size < 0:
                    return 7, n, longest
                value = pos + unshared
                nxt = value + size
                if nxt > stop:
                    return 6, n, longest
                if first and shared:
                    return 8, n, longest
                if n and shared > prev_length:
                    return 9, n, longest
                length = shared + unshared
                if length < _TRAILER:
                    return 10, n, longest
                if fill:
                    for k in range(unshared):
                        scratch[_u(shared + k)] = buffer[_u(pos + k)]
                    user = length - _TRAILER
                    for w in range(words):
                        word = np.uint64(0)
                        for c in range(8):
                            i = w * 8 + c
                            if i < user:
                                word |= np.uint64(scratch[_u(i)]) << np.uint64(8 * (7 - c))
                        keys[_u(n), _u(w)] = word
                    t = np.uint64(0)
                    for c in range(_TRAILER):
                        t |= np.uint64(scratch[_u(user + c)]) << np.uint64(8 * c)
                    key_length[_u(n)] = user
                    sequence[_u(n)] = t >> np.uint64(8)
                    kind[_u(n)] = np.uint8(t & np.uint64(0xFF))
                    begin[_u(n)] = value
                    end[_u(n)] = nxt
                longest = max(longest, length)
                prev_length = length
                first = False
                n += 1
                pos = nxt
        counts[block] = n - start_block
    return 0, n, longest


@njit(cache=True, nogil=True)
def _keep(group, size, newest, sequence, kind, value_kind, begin, end, out_begin, out_end,
          kept):
    """Append the values of one key's entries ``group[:size]`` of sequence number ``newest``
    to the output at ``kept``; returns the new count."""
    for j in range(size):
        e = group[_u(j)]
        if sequence[_u(e)] == newest and kind[_u(e)] == value_kind:
            out_begin[_u(kept)] = begin[_u(e)]
            out_end[_u(kept)] = end[_u(e)]
            kept += 1
    return kept


@njit(cache=True, nogil=True)
def _merge(keys, sequence, kind, begin, end, runs, value_kind, out_begin, out_end, group):
    """Merge the sorted runs (files) of entries by ``keys``, ties in run order; of each key's
    entries keep those of its highest sequence number that are values. Returns (error, kept);
    error 1 when a run is out of order."""
    n, k = len(keys), len(runs)
    head = runs.copy()
    stop = np.empty(k, dtype=np.int64)
    stop[:k - 1] = runs[1:]
    stop[k - 1] = n
    kept = size = 0
    newest = key = np.uint64(0)
    while True:
        best = -1
        least = np.uint64(0)
        for r in range(k):
            if head[r] < stop[r]:
                candidate = keys[_u(head[r])]
                if best < 0 or candidate < least:
                    best, least = r, candidate
        if best < 0:
            break
        i = head[best]
        head[best] += 1
        if head[best] < stop[best] and keys[_u(head[best])] < least:
            return 1, kept
        if size and least != key:
            kept = _keep(group, size, newest, sequence, kind, value_kind, begin, end, out_begin,
                         out_end, kept)
            size = 0
        if size == 0 or sequence[_u(i)] > newest:
            newest = sequence[_u(i)]
        key = least
        group[_u(size)] = i
        size += 1
    return 0, _keep(group, size, newest, sequence, kind, value_kind, begin, end, out_begin,
                    out_end, kept)


@njit(cache=True, nogil=True)
def _varint(buffer, pos, lim, most):
    """(value, end, error) of the varint at ``pos``: bits past 32 (``most`` 5) or 64 are
    dropped, as Java drops them."""
    value = np.uint64(0)
    for i in range(most):
        if pos >= lim:
            return np.uint64(0), pos, 2
        b = buffer[_u(pos)]
        pos += 1
        value |= np.uint64(b & 0x7F) << np.uint64(7 * i)
        if b < 0x80:
            if most == 5:
                value &= np.uint64(0xFFFFFFFF)
            return value, pos, 0
    return np.uint64(0), pos, 3 if most == 5 else 4


@njit(cache=True, nogil=True)
def _fields(buffer, starts, ends, header_size, layout, slot, values, extra, valid):
    """Read the fields ``layout`` of every row; field ``f`` with ``slot[f] >= 0`` is kept in
    row ``slot[f]`` of ``values`` (number, or bytes' start), ``extra`` (nanoseconds, bytes'
    length) and ``valid``. Returns (error, row, field); field -1 is the null bits."""
    for r in range(len(starts)):
        pos = starts[_u(r)]
        lim = min(ends[_u(r)], len(buffer))
        if pos < 0:
            return 1, r, -1
        if pos + header_size > lim:
            return 2, r, -1
        header = pos
        pos += header_size
        for f in range(len(layout)):
            s = slot[_u(f)]
            if buffer[_u(header + (f >> 3))] & (1 << (f & 7)):
                if s >= 0:
                    valid[_u(s), _u(r)] = 0
                    values[_u(s), _u(r)] = 0
                    extra[_u(s), _u(r)] = 0
                continue
            kind = layout[_u(f)]
            number = np.int64(0)
            more = np.int64(0)
            if kind > 0:
                if pos + kind > lim:
                    return 2, r, f
                raw = np.uint64(0)
                for k in range(kind):
                    raw |= np.uint64(buffer[_u(pos + k)]) << np.uint64(8 * k)
                number = np.int64(raw)
                pos += kind
            elif kind == _INT:
                v, pos, err = _varint(buffer, pos, lim, 5)
                if err:
                    return err, r, f
                number = np.int64(np.int32(np.uint32(v)))
            elif kind == _BYTES:
                v, pos, err = _varint(buffer, pos, lim, 5)
                if err:
                    return err, r, f
                length = np.int64(np.int32(np.uint32(v)))
                if length < 0:
                    return 5, r, f
                if pos + length > lim:
                    return 2, r, f
                number, more = pos, length
                pos += length
            else:
                v, pos, err = _varint(buffer, pos, lim, 10)
                if err:
                    return err, r, f
                number = np.int64(v)
                if kind == _LONG_NANOS:
                    n, pos, err = _varint(buffer, pos, lim, 5)
                    if err:
                        return err, r, f
                    more = np.int64(np.int32(np.uint32(n)))
                    if more < 0 or more >= 1_000_000:
                        return 6, r, f
            if s >= 0:
                valid[_u(s), _u(r)] = 1
                values[_u(s), _u(r)] = number
                extra[_u(s), _u(r)] = more
    return 0, 0, 0


@njit(cache=True, nogil=True)
def _gather(buffer, start, length, offsets, data):
    """Copy each range ``buffer[start[i]:start[i] + length[i]]`` to ``data[offsets[i]:]``."""
    for i in range(len(start)):
        at = offsets[_u(i)]
        src = start[_u(i)]
        for k in range(length[_u(i)]):
            data[_u(at + k)] = buffer[_u(src + k)]



# -- their Python wrappers ---------------------------------------------------------------------

def walk_blocks(buffer: np.ndarray, base: np.ndarray, sizes: np.ndarray, max_key_bytes: int
                ) -> tuple[np.ndarray, ...]:
    """Every entry of the data blocks ``buffer[base[i]:base[i] + sizes[i]]``: user keys (rows
    of big-endian uint64 words, zero-padded), their lengths, sequence numbers, value types,
    value ``[begin, end)`` and each block's entry count."""
    counts = np.zeros(len(base), dtype=np.int64)
    none = np.empty(0, dtype=np.int64)
    code, n, longest = _walk(buffer, base, sizes, False, np.empty((0, 1), np.uint64), none,
                             none.view(np.uint64), none.view(np.uint8), none, none, counts,
                             np.empty(0, np.uint8))
    if code:
        raise CorruptMessage(f"SST: error {code} of the walk")
    width = max(0, longest - _TRAILER)
    if n * -(-width // 8) * 8 > max_key_bytes:
        raise UnsupportedVersion(f"SST: keys of up to {width} bytes are not read here")
    keys = np.zeros((n, max(1, -(-width // 8))), dtype=np.uint64)
    length, begin, end = (np.empty(n, dtype=np.int64) for _ in range(3))
    sequence = np.empty(n, dtype=np.uint64)
    kind = np.empty(n, dtype=np.uint8)
    code, _, _ = _walk(buffer, base, sizes, True, keys, length, sequence, kind, begin, end,
                       counts, np.zeros(max(longest, 1), dtype=np.uint8))
    if code:
        raise CorruptMessage(f"SST: error {code} of the walk")
    return keys, length, sequence, kind, begin, end, counts


def merge_runs(keys: np.ndarray, sequence: np.ndarray, kind: np.ndarray, begin: np.ndarray,
               end: np.ndarray, runs: np.ndarray, value_kind: int
               ) -> tuple[np.ndarray, np.ndarray] | None:
    """``[begin, end)`` of the values a read of the runs (files, each in the order of
    ``keys``: uint64 numbers that order and compare as the keys do) sees, in key order: of a
    key's entries the newest (highest sequence number) wins, kept if it is a value
    (``value_kind``). None when a run is out of order."""
    n = len(keys)
    out_begin, out_end, group = (np.empty(n, dtype=np.int64) for _ in range(3))
    code, kept = _merge(keys, sequence, kind, begin, end, runs, value_kind, out_begin, out_end,
                        group)
    if code:
        return None
    return out_begin[:kept], out_end[:kept]


def _layout(kind: str, t: pa.DataType) -> int:
    """The kernel's layout code of a field of compacted-row ``kind`` and Arrow type ``t``."""
    if kind == "fixed":
        return 1 if t == pa.bool_() else t.bit_width // 8
    if kind == "int":
        return _INT
    if kind == "long":
        return _LONG_NANOS if pa.types.is_timestamp(t) and t.unit in ("us", "ns") else _LONG
    return _BYTES


def _built(kind: str, t: pa.DataType) -> bool:
    """Whether this module builds the Arrow column of a field (rather than the numpy decode)."""
    if kind == "bytes":
        return (pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t)
                or pa.types.is_large_binary(t))
    return kind in ("fixed", "int", "long")


def decode_rows(buffer: np.ndarray, starts: np.ndarray, ends: np.ndarray, schema: pa.Schema,
                columns: Sequence[int], kinds: Sequence[str], row_ids: np.ndarray | None
                ) -> list[pa.Array] | None:
    """The fields ``columns`` of the compacted rows at ``buffer[starts[r]:ends[r]]`` (``kinds``:
    the layout of each field up to the last of them), or None when one of them is of a type
    left to the numpy decode."""
    if not all(_built(kinds[i], schema.field(i).type) for i in columns):
        return None
    n = len(starts)
    layout = np.array([_layout(k, schema.field(i).type) for i, k in enumerate(kinds)],
                      dtype=np.int64)
    slot = np.full(len(kinds), -1, dtype=np.int64)
    wanted = sorted(set(columns))
    slot[wanted] = np.arange(len(wanted))
    values = np.empty((len(wanted), n), dtype=np.int64)
    extra = np.empty((len(wanted), n), dtype=np.int64)
    valid = np.empty((len(wanted), n), dtype=np.uint8)
    code, row, field = _fields(buffer, np.asarray(starts, np.int64), np.asarray(ends, np.int64),
                               (len(schema) + 7) // 8, layout, slot, values, extra, valid)
    if code:
        where = ("(null bits)" if field < 0
                 else f"{schema.field(field).name!r} ({schema.field(field).type})")
        label = row if row_ids is None else int(row_ids[row])
        raise CorruptMessage(f"compacted row {label}, column {where}: error {code}")
    out = {}
    for i in wanted:
        s = slot[i]
        out[i] = _column(buffer, starts, ends, row_ids, schema.field(i), values[s], extra[s],
                         valid[s])
    return [out[i] for i in columns]


def _column(buffer: np.ndarray, starts: np.ndarray, ends: np.ndarray,
            row_ids: np.ndarray | None, f: pa.Field, values: np.ndarray, extra: np.ndarray,
            valid: np.ndarray) -> pa.Array:
    """The Arrow column of a field from the numbers (or byte ranges) the kernel read."""
    t, n = f.type, len(values)
    nulls = n - int(np.count_nonzero(valid))
    bits = pa.py_buffer(np.packbits(valid, bitorder="little")) if nulls else None
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t) \
            or pa.types.is_large_binary(t):
        offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(extra, out=offsets[1:])
        data = np.empty(int(offsets[-1]), dtype=np.uint8)
        _gather(buffer, values, extra, offsets, data)
        array = pa.Array.from_buffers(t, n, [bits, pa.py_buffer(offsets.astype(np.int32)),
                                             pa.py_buffer(data)], null_count=nulls)
        array.validate(full=True)
        return array
    if t == pa.bool_():
        return pa.Array.from_buffers(t, n, [bits, pa.py_buffer(
            np.packbits(values != 0, bitorder="little"))], null_count=nulls)
    if t in _FIXED_BITS:
        # The kernel kept a fixed-width field's little-endian bytes as a number.
        unsigned, dtype = _FIXED_BITS[t]
        return arrow_array(values.astype(unsigned).view(dtype), t, bits, nulls)
    if t in (pa.int32(), pa.date32()) or pa.types.is_time(t):
        number = values.astype(np.int32)
        if pa.types.is_time(t):
            number = time_from_millis(number, t)
        return arrow_array(number, t, bits, nulls)
    if pa.types.is_timestamp(t):
        if t.unit in ("us", "ns"):
            values = values * PER_MILLI[t.unit] + extra // (NANOS_PER_MILLI // PER_MILLI[t.unit])
        elif t.unit == "s":
            values = values // 1000
    if pa.types.is_decimal(t):
        values = decimal128(values)
    return arrow_array(values, t, bits, nulls)



# -- reads, both ways ---------------------------------------------------------------------------

def decompressed(files: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray,
                                                       list[int], list[int]]:
    """The data blocks of ``files`` decompressed into one buffer, as ``read_tables`` does:
    buffer, each block's base and size, blocks and entries (by the properties) per file."""
    parts: list = []
    lengths, blocks, expected = [], [], []
    for file in files:
        offsets, sizes, count = rocksdb_sst._table(file)
        some, length = rocksdb_sst._blocks(file, offsets, sizes)
        parts += some
        lengths.append(length)
        blocks.append(len(some))
        expected.append(count)
    size = np.concatenate(lengths)
    buffer = np.frombuffer(b"".join(parts), dtype=np.uint8)
    base = np.zeros(len(size), dtype=np.int64)
    np.cumsum(size[:-1], out=base[1:])
    return buffer, base, size, blocks, expected


def compiled_tables(files: Sequence[np.ndarray]) -> rocksdb_sst.SstEntries:
    """``rocksdb_sst.read_tables`` with the compiled walk."""
    buffer, base, size, blocks, expected = decompressed(files)
    keys, length, sequence, kind, begin, end, per_block = walk_blocks(buffer, base, size,
                                                                      _MAX_KEY_WORD_BYTES)
    found = [int(c.sum()) for c in np.split(per_block, np.cumsum(blocks)[:-1])]
    if found != expected:
        raise CorruptMessage(f"SST: {found} entries found, the tables say {expected}")
    runs = np.cumsum([0] + found[:-1]).astype(np.int64)
    return rocksdb_sst.SstEntries(buffer, keys, length, sequence, kind, begin, end, runs)


def compiled_live(table: rocksdb_sst.SstEntries) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``rocksdb_sst.live_values`` with the compiled merge (keys of under 8 bytes only)."""
    if table.keys.shape[1] != 1 or table.key_length.max() >= 8:
        raise UnsupportedVersion("the compiled merge here takes keys of under 8 bytes only")
    keys = table.keys[:, 0] | table.key_length.astype(np.uint64)
    merged = merge_runs(keys, table.sequence, table.kind, table.begin, table.end, table.runs,
                        rocksdb_sst.VALUE)
    if merged is None:
        raise CorruptMessage("SST: a file's keys are out of order")
    return table.buffer, merged[0], merged[1]


def compiled_decode(buffer: np.ndarray, begin: np.ndarray, end: np.ndarray
                    ) -> list[pa.RecordBatch]:
    """``decode_kv_ranges`` of every piece of ``PIECE_ROWS`` rows, with the compiled decode."""
    kinds = [_kind(f.type) for f in SCHEMA]
    out = []
    for a in range(0, len(begin), PIECE_ROWS):
        b, e = begin[a:a + PIECE_ROWS], end[a:a + PIECE_ROWS]
        ids = buffer[b].astype(np.uint16) | buffer[b + 1].astype(np.uint16) << 8
        if (ids != 1).any():
            raise UnsupportedVersion("rows of schema ids other than 1 are not decoded here")
        arrays = decode_rows(buffer, b + 2, e, SCHEMA, range(len(SCHEMA)), kinds, None)
        assert arrays is not None
        out.append(pa.record_batch(arrays, schema=SCHEMA))
    return out


def numpy_decode(buffer: np.ndarray, begin: np.ndarray, end: np.ndarray) -> list[pa.RecordBatch]:
    return [decode_kv_ranges(buffer, begin[a:a + PIECE_ROWS], end[a:a + PIECE_ROWS],
                             lambda _: SCHEMA, SCHEMA) for a in range(0, len(begin), PIECE_ROWS)]


def compiled_read(files: Sequence[np.ndarray]) -> list[pa.RecordBatch]:
    return compiled_decode(*compiled_live(compiled_tables(files)))


# -- data -------------------------------------------------------------------------------------

# -- measuring --------------------------------------------------------------------------------

def check_equal(files: Sequence[np.ndarray]) -> int:
    """The compiled read's entries, values and batches equal the numpy read's; its row count."""
    want, got = rocksdb_sst.read_tables(files), compiled_tables(files)
    for name in ("buffer", "keys", "key_length", "sequence", "kind", "begin", "end", "runs"):
        x, y = getattr(want, name), getattr(got, name)
        assert x.dtype == y.dtype and np.array_equal(x, y), name
    live_want, live_got = rocksdb_sst.live_values(want), compiled_live(got)
    assert all(np.array_equal(x, y) for x, y in zip(live_want, live_got))
    batches = compiled_decode(*live_got)
    assert all(x.equals(y) for x, y in zip(batches, numpy_decode(*live_want)))
    return sum(b.num_rows for b in batches)


def timed(phases: dict[str, list[float]], name: str, fn, *args):
    start = time.process_time()
    out = fn(*args)
    phases.setdefault(name, []).append(time.process_time() - start)
    return out


def one_read(phases: dict[str, list[float]], files: Sequence[np.ndarray]) -> None:
    timed(phases, "decompress (shared)", decompressed, files)
    table = timed(phases, "numpy: decompress + walk", rocksdb_sst.read_tables, files)
    live = timed(phases, "numpy: merge", rocksdb_sst.live_values, table)
    timed(phases, "numpy: decode", numpy_decode, *live)
    table = timed(phases, "numba: decompress + walk", compiled_tables, files)
    live = timed(phases, "numba: merge", compiled_live, table)
    timed(phases, "numba: decode", compiled_decode, *live)


_FRESH = """
import sys, time
t0 = time.perf_counter()
import numba
t1 = time.perf_counter()
sys.path.insert(0, {bench!r})
import bench_numba_decode as bench
files = bench.sst_files(bench.Path({directory!r}))
t2 = time.perf_counter()
bench.compiled_read(files)
t3 = time.perf_counter()
print(f"{{t1 - t0:.3f}} {{t3 - t2:.3f}}")
"""


def fresh_processes(directory: Path) -> list[tuple[float, float]]:
    """(import numba, first read) seconds in a fresh process: numba's cache cold, then warm."""
    out = []
    with tempfile.TemporaryDirectory(prefix="numba-cache-") as cache:
        env = dict(os.environ, NUMBA_CACHE_DIR=cache)
        code = _FRESH.format(bench=str(Path(__file__).resolve().parent), directory=str(directory))
        for _ in range(2):
            done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                                  text=True, check=True)
            importing, first = done.stdout.split()
            out.append((float(importing), float(first)))
    return out


def main() -> None:
    # Its reference is the numpy decode: the compiled one (native/) stays out of it.
    compiled.enabled = False
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--buckets", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--checkpoint", action="append", type=Path, default=[],
                    help="a directory of SST files (repeatable); default: write --rows rows")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-numba-") as tmp:
        dirs = args.checkpoint or write_buckets(Path(tmp), args.rows, args.buckets)
        buckets = [sst_files(d) for d in dirs]
        rows = sum(check_equal(files) for files in buckets)
        print(f"{rows:,} rows in {len(buckets)} bucket(s), {sum(len(f) for f in buckets)} SST "
              f"files: the compiled read equals the numpy read")
        phases: dict[str, list[float]] = {}
        for _ in range(args.repeat):
            per_read: dict[str, list[float]] = {}
            for files in buckets:
                one_read(per_read, files)
            for name, seconds in per_read.items():
                phases.setdefault(name, []).append(sum(seconds))
        print(f"CPU seconds, all buckets, min of {args.repeat}:")
        for name, seconds in phases.items():
            print(f"  {name:28s} {min(seconds):.3f}")
        for way in ("numpy", "numba"):
            total = sum(min(s) for n, s in phases.items() if n.startswith(way))
            print(f"  {way + ': whole read':28s} {total:.3f} ({total / rows * 1e9:.0f} ns a row)")
        (cold, warm) = fresh_processes(dirs[0])
        print(f"fresh process: import numba {cold[0]:.2f} s / {warm[0]:.2f} s; first read of "
              f"bucket 0 with numba's cache cold (compiling) {cold[1]:.2f} s, warm {warm[1]:.2f} s")


if __name__ == "__main__":
    main()
