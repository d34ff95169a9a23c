"""Bounds-checked, vectorised reads of Fluss's binary row formats, shared by its compacted rows
and its binary arrays and maps: one numpy pass over all values, never one value at a time."""

from __future__ import annotations

from typing import NoReturn

import numpy as np
import pyarrow as pa

from fluss_spark.errors import CorruptMessage
from fluss_spark.protocol.arrow_arrays import fixed_width as arrow_array

_sliding = np.lib.stride_tricks.sliding_window_view

# Java's BigInteger.toByteArray of any unscaled value of precision <= 38 fits in 16 bytes.
DECIMAL128_BYTES = 16
NANOS_PER_MILLI = 1_000_000
# Units of a time or timestamp per millisecond (a second has its own branch).
PER_MILLI = {"ms": 1, "us": 1_000, "ns": 1_000_000}
_INT32_MAX = 2**31 - 1


def unaligned(buffer: np.ndarray, dtype: str) -> np.ndarray:
    """``buffer`` (uint8) seen as numbers of ``dtype`` starting at every byte: element i is the
    number whose bytes are ``buffer[i:i + size]`` (the views overlap; nothing is copied).
    Indexing it gathers numbers at arbitrary offsets in one pass."""
    size = np.dtype(dtype).itemsize
    return np.ndarray((max(0, len(buffer) - size + 1),), dtype=dtype, buffer=buffer,
                      strides=(1,))


def byte_rows(buffer: np.ndarray, p: np.ndarray, width: int) -> np.ndarray:
    """The ``width`` bytes at each of ``p`` (all within ``buffer``) as rows of a (len(p),
    width) uint8 array."""
    if width in (1, 2, 4, 8):
        # A gather of whole numbers is several times faster than of rows of a window view.
        return unaligned(buffer, f"u{width}")[p].view(np.uint8).reshape(-1, width)
    return _sliding(buffer, width)[p]


class Rows:
    """The rows being decoded: their buffer, read positions, bounds and labels for errors."""

    def __init__(self, buffer: np.ndarray, starts: np.ndarray, ends: np.ndarray | None,
                 row_ids: np.ndarray | None):
        self.buffer = buffer
        self.pos = np.array(starts, dtype=np.int64)
        # Reads past a row's bound are caught after the fact (see check), so a bound past the
        # buffer must be clamped to it: np.take(mode="clip") would read the last byte again.
        self.lim: np.ndarray | int = (len(buffer) if ends is None
                                      else np.minimum(np.asarray(ends, np.int64), len(buffer)))
        self.row_ids = row_ids
        self.column = ""

    def fail(self, local: np.ndarray, sel: np.ndarray | None, what: str) -> NoReturn:
        """Raise CorruptMessage for the first of ``local`` (indexes into ``sel``, if given)."""
        r = int(local[0]) if sel is None else int(sel[local[0]])
        row = r if self.row_ids is None else int(self.row_ids[r])
        raise CorruptMessage(f"compacted row {row}, column {self.column}: {what}")

    def labels(self, sel: np.ndarray | None) -> np.ndarray:
        """The error labels (outer row numbers) of the rows ``sel`` (all if None)."""
        local = np.arange(len(self.pos), dtype=np.int64) if sel is None else sel
        return local if self.row_ids is None else self.row_ids[local]

    def limit(self, sel: np.ndarray | None) -> np.ndarray | int:
        return self.lim if sel is None or isinstance(self.lim, int) else self.lim[sel]

    def check(self, end: np.ndarray, sel: np.ndarray | None) -> None:
        """Fail unless every read of the rows ``sel`` stayed before ``end`` <= their bound."""
        bad = end > self.limit(sel)
        if bad.any():
            self.fail(np.flatnonzero(bad), sel, "truncated (reads past the end of the row)")

    def varint(self, p: np.ndarray, sel: np.ndarray | None, wide: bool
               ) -> tuple[np.ndarray, np.ndarray]:
        """The unsigned LEB128 varints at ``p`` as int32 (int64 if ``wide``), and their ends."""
        most = 10 if wide else 5
        utype = np.dtype(np.uint64 if wide else np.uint32)
        buf = self.buffer
        # Clipped reads cannot fail; a read past a row's bound shows as an end past it.
        b = np.take(buf, p, mode="clip")
        value: np.ndarray = (b & 0x7F).astype(utype)
        size = np.ones(len(p), dtype=np.int64)
        more = np.flatnonzero(b & 0x80)
        shift = 7
        # Each pass reads one more byte of the varints still going, so its cost shrinks with them.
        while more.size:
            if shift == 7 * most:
                self.check(p[more] + size[more], more if sel is None else sel[more])
                self.fail(more, sel, f"varint longer than {most} bytes")
            b = np.take(buf, p[more] + size[more], mode="clip")
            # Bits past the type's width are dropped, as a Java int or long drops them.
            value[more] |= np.left_shift((b & 0x7F).astype(utype), utype.type(shift))
            size[more] += 1
            more = more[b >= 0x80]
            shift += 7
        end = p + size
        self.check(end, sel)
        return value.view(np.int64 if wide else np.int32), end

    def fixed(self, p: np.ndarray, sel: np.ndarray | None, width: int) -> np.ndarray:
        """The ``width`` bytes at each of ``p`` as rows of a (len(p), width) uint8 array."""
        self.check(p + width, sel)
        if not len(p):
            return np.empty((0, width), dtype=np.uint8)
        return byte_rows(self.buffer, p, width)

    def words(self, p: np.ndarray, sel: np.ndarray | None, width: int, dtype: str
              ) -> np.ndarray:
        """The little-endian numbers of ``width`` bytes (numpy ``dtype``) at each of ``p``."""
        return np.ascontiguousarray(self.fixed(p, sel, width)).view(dtype).reshape(-1)

    def lengths(self, p: np.ndarray, sel: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """Where the length-prefixed values at ``p`` start, and their lengths."""
        length, start = self.varint(p, sel, wide=False)
        if (length < 0).any():
            self.fail(np.flatnonzero(length < 0), sel, "negative length")
        lengths = length.astype(np.int64)
        self.check(start + lengths, sel)
        return start, lengths

    def gather(self, start: np.ndarray, lengths: np.ndarray, sel: np.ndarray | None, n: int
               ) -> tuple[np.ndarray, np.ndarray]:
        """Arrow offsets (int64, n + 1) and bytes of the ranges of rows ``sel`` (others empty)."""
        full = lengths if sel is None else np.zeros(n, dtype=np.int64)
        if sel is not None:
            full[sel] = lengths
        offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(full, out=offsets[1:])
        total = int(offsets[-1])
        if not total:
            return offsets, np.empty(0, dtype=np.uint8)
        # The source of output byte k of a row is k - (row's offset) + (row's start).
        before = offsets[:-1] if sel is None else offsets[:-1][sel]
        index = np.repeat(start - before, lengths)
        index += np.arange(total, dtype=np.int64)
        return offsets, self.buffer[index]


def validity(sel: np.ndarray | None, n: int) -> tuple[pa.Buffer | None, int]:
    if sel is None:
        return None, 0
    valid = np.zeros(n, dtype=bool)
    valid[sel] = True
    return pa.py_buffer(np.packbits(valid, bitorder="little")), n - len(sel)


def spread(values: np.ndarray, sel: np.ndarray | None, n: int) -> np.ndarray:
    """``values`` of the rows ``sel`` laid out over all ``n`` rows (zero for the others)."""
    if sel is None:
        return values
    full = np.zeros((n,) + values.shape[1:], dtype=values.dtype)
    full[sel] = values
    return full


def decimal128(unscaled: np.ndarray) -> np.ndarray:
    """Arrow decimal128 storage (n x 2 int64: low word, sign-extended high word) of int64s."""
    out = np.empty((len(unscaled), 2), dtype=np.int64)
    out[:, 0] = unscaled
    out[:, 1] = unscaled >> 63
    return out


def big_decimal(rows: Rows, start: np.ndarray, lengths: np.ndarray,
                 sel: np.ndarray | None) -> np.ndarray:
    """Arrow decimal128 storage (n x 16 uint8, little-endian) of big-endian two's complements."""
    bad = (lengths < 1) | (lengths > DECIMAL128_BYTES)
    if bad.any():
        rows.fail(np.flatnonzero(bad), sel, f"decimal of {lengths[bad][0]} bytes")
    m = len(start)
    out = np.zeros((m, DECIMAL128_BYTES), dtype=np.uint8)
    # Sign-extend: rows whose first (most significant) byte is negative start all ones.
    out[rows.buffer[start] >= 0x80] = 0xFF
    offsets = np.zeros(m + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    total = int(offsets[-1])
    row = np.repeat(np.arange(m, dtype=np.int64), lengths)
    k = np.arange(total, dtype=np.int64) - offsets[:-1][row]
    # Big-endian byte k of an L-byte value is little-endian byte L - 1 - k.
    out[row, lengths[row] - 1 - k] = rows.buffer[start[row] + k]
    return out


def strings(rows: Rows, t: pa.DataType, start: np.ndarray, lengths: np.ndarray,
             sel: np.ndarray | None, n: int) -> pa.Array:
    valid, nulls = validity(sel, n)
    offsets, data = rows.gather(start, lengths, sel, n)
    large = pa.types.is_large_string(t) or pa.types.is_large_binary(t)
    is_string = pa.types.is_string(t) or pa.types.is_large_string(t)
    build = t
    if not large:
        if offsets[-1] <= _INT32_MAX:
            offsets = offsets.astype(np.int32)
        else:   # too much for int32 offsets: built large, the cast below says why it cannot be
            build = pa.large_string() if is_string else pa.large_binary()
    array = pa.Array.from_buffers(build, n, [valid, pa.py_buffer(offsets),
                                             pa.py_buffer(data)], null_count=nulls)
    if is_string:
        try:
            array.validate(full=True)
        except pa.ArrowInvalid:
            _bad_utf8(rows, array)
    return array if build == t else array.cast(t)


def _bad_utf8(rows: Rows, array: pa.Array) -> NoReturn:
    # Only once the whole column failed to validate: look for the first bad row, one at a time.
    bad = next((i for i in range(len(array)) if _invalid_utf8(array[i : i + 1])), 0)
    rows.fail(np.array([bad]), None, "string is not valid UTF-8")


def _invalid_utf8(one: pa.Array) -> bool:
    try:
        one.validate(full=True)
    except pa.ArrowInvalid:
        return True
    return False




def time_from_millis(millis: np.ndarray, t: pa.DataType) -> np.ndarray:
    """Fluss's TIME (int milliseconds of the day, whatever its precision) in ``t``'s unit."""
    if t.unit == "s":
        return millis // 1000
    if t.unit == "ms":
        return millis
    return millis.astype(np.int64) * PER_MILLI[t.unit]


def expand(values: pa.Array, sel: np.ndarray | None, n: int) -> pa.Array:
    """``values`` of the rows ``sel`` laid out over all ``n`` rows (null for the others)."""
    if sel is None:
        return values
    index = np.zeros(n, dtype=np.int64)
    index[sel] = np.arange(len(sel), dtype=np.int64)
    valid, nulls = validity(sel, n)
    return values.take(arrow_array(index, pa.int64(), valid, nulls))
