"""Apache Fluss compacted rows (its KV store's values) decoded into Arrow, a column at a time."""

from __future__ import annotations

from typing import Callable, NoReturn, Sequence

import numpy as np
import pyarrow as pa

from fluss_spark.errors import ConfigError, CorruptMessage, UnsupportedVersion

# A KV value is this many bytes of schema id (int16, little-endian), then one compacted row.
SCHEMA_ID_SIZE = 2

_sliding = np.lib.stride_tricks.sliding_window_view

# Bytes of the types written with a fixed width (everything else is a varint or length-prefixed).
_FIXED_WIDTH = {pa.bool_(): 1, pa.int8(): 1, pa.int16(): 2, pa.float32(): 4, pa.float64(): 8}
_FIXED_DTYPE: dict[pa.DataType, np.dtype] = {
    pa.int8(): np.dtype(np.int8), pa.int16(): np.dtype("<i2"),
    pa.float32(): np.dtype("<f4"), pa.float64(): np.dtype("<f8")}
# Unscaled decimals of at most this many digits are written as a BIGINT varint.
_COMPACT_DECIMAL_PRECISION = 18
# Java's BigInteger.toByteArray of any unscaled value of precision <= 38 fits in 16 bytes.
_DECIMAL128_BYTES = 16
_NANOS_PER_MILLI = 1_000_000
# Units of a time or timestamp per millisecond (a second has its own branch).
_PER_MILLI = {"ms": 1, "us": 1_000, "ns": 1_000_000}
_INT32_MAX = 2**31 - 1


def _kind(t: pa.DataType) -> str:
    """How a field of Arrow type ``t`` is laid out in a compacted row ('' if it cannot be)."""
    if t in _FIXED_WIDTH:
        return "fixed"
    if t in (pa.int32(), pa.date32()) or pa.types.is_time(t):
        return "int"
    if t == pa.int64() or pa.types.is_timestamp(t):
        return "long"
    if pa.types.is_decimal128(t):
        return "long" if t.precision <= _COMPACT_DECIMAL_PRECISION else "bytes"
    if (pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t)
            or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t)):
        return "bytes"
    if pa.types.is_list(t) or pa.types.is_map(t) or pa.types.is_struct(t):
        # Nested values are length-prefixed too: they can be skipped, not decoded.
        return "nested"
    return ""


def _arrow(values: np.ndarray, type_: pa.DataType, validity: pa.Buffer | None,
           null_count: int) -> pa.Array:
    """A fixed-width Arrow array over ``values``; not pa.array(ndarray), which imports pandas."""
    return pa.Array.from_buffers(type_, len(values), [validity, pa.py_buffer(values)],
                                 null_count=null_count)


class _Rows:
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
                self.check(p[more] + size[more], None if sel is None else sel[more])
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
        return _sliding(self.buffer, width)[p]

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


def _validity(sel: np.ndarray | None, n: int) -> tuple[pa.Buffer | None, int]:
    if sel is None:
        return None, 0
    valid = np.zeros(n, dtype=bool)
    valid[sel] = True
    return pa.py_buffer(np.packbits(valid, bitorder="little")), n - len(sel)


def _spread(values: np.ndarray, sel: np.ndarray | None, n: int) -> np.ndarray:
    """``values`` of the rows ``sel`` laid out over all ``n`` rows (zero for the others)."""
    if sel is None:
        return values
    full = np.zeros((n,) + values.shape[1:], dtype=values.dtype)
    full[sel] = values
    return full


def _decimal128(unscaled: np.ndarray) -> np.ndarray:
    """Arrow decimal128 storage (n x 2 int64: low word, sign-extended high word) of int64s."""
    out = np.empty((len(unscaled), 2), dtype=np.int64)
    out[:, 0] = unscaled
    out[:, 1] = unscaled >> 63
    return out


def _big_decimal(rows: _Rows, start: np.ndarray, lengths: np.ndarray,
                 sel: np.ndarray | None) -> np.ndarray:
    """Arrow decimal128 storage (n x 16 uint8, little-endian) of big-endian two's complements."""
    bad = (lengths < 1) | (lengths > _DECIMAL128_BYTES)
    if bad.any():
        rows.fail(np.flatnonzero(bad), sel, f"decimal of {lengths[bad][0]} bytes")
    m = len(start)
    out = np.zeros((m, _DECIMAL128_BYTES), dtype=np.uint8)
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


def _strings(rows: _Rows, t: pa.DataType, start: np.ndarray, lengths: np.ndarray,
             sel: np.ndarray | None, n: int) -> pa.Array:
    validity, nulls = _validity(sel, n)
    offsets, data = rows.gather(start, lengths, sel, n)
    large = pa.types.is_large_string(t) or pa.types.is_large_binary(t)
    is_string = pa.types.is_string(t) or pa.types.is_large_string(t)
    build = t
    if not large:
        if offsets[-1] <= _INT32_MAX:
            offsets = offsets.astype(np.int32)
        else:   # too much for int32 offsets: built large, the cast below says why it cannot be
            build = pa.large_string() if is_string else pa.large_binary()
    array = pa.Array.from_buffers(build, n, [validity, pa.py_buffer(offsets),
                                             pa.py_buffer(data)], null_count=nulls)
    if is_string:
        try:
            array.validate(full=True)
        except pa.ArrowInvalid:
            _bad_utf8(rows, array)
    return array if build == t else array.cast(t)


def _bad_utf8(rows: _Rows, array: pa.Array) -> NoReturn:
    # Only once the whole column failed to validate: look for the first bad row, one at a time.
    bad = next((i for i in range(len(array)) if _invalid_utf8(array[i : i + 1])), 0)
    rows.fail(np.array([bad]), None, "string is not valid UTF-8")


def _invalid_utf8(one: pa.Array) -> bool:
    try:
        one.validate(full=True)
    except pa.ArrowInvalid:
        return True
    return False


def _check_columns(schema: pa.Schema, columns: Sequence[int]) -> None:
    """Fail before reading anything if a field to decode or to walk past has no layout."""
    for i in columns:
        if not 0 <= i < len(schema):
            raise ConfigError(f"column index {i} is not in a schema of {len(schema)} fields")
    last = max(columns, default=-1)
    wanted = set(columns)
    for i in range(last + 1):
        f = schema.field(i)
        kind = _kind(f.type)
        if not kind or (kind == "nested" and i in wanted):
            raise UnsupportedVersion(f"column {f.name!r}: Fluss compacted rows of type {f.type} "
                                     "are not supported")


def _decode(buffer: np.ndarray, starts: np.ndarray, ends: np.ndarray | None,
            schema: pa.Schema, columns: Sequence[int], row_ids: np.ndarray | None
            ) -> list[pa.Array]:
    _check_columns(schema, columns)
    n = len(starts)
    wanted = set(columns)
    last = max(columns, default=-1)
    decoded: dict[int, pa.Array] = {}
    if n == 0 or last < 0:
        return [pa.array([], type=schema.field(i).type) for i in columns]
    rows = _Rows(buffer, starts, ends, row_ids)
    header_size = (len(schema) + 7) // 8
    rows.column = "(null bits)"
    if (rows.pos < 0).any():
        rows.fail(np.flatnonzero(rows.pos < 0), None, "starts before the buffer")
    rows.check(rows.pos + header_size, None)
    header = _sliding(buffer, header_size)[rows.pos]
    rows.pos += header_size
    for i in range(last + 1):
        f = schema.field(i)
        t = f.type
        rows.column = f"{f.name!r} ({t})"
        null = header[:, i >> 3] & np.uint8(1 << (i & 7))
        # A null field writes nothing; the others are read only at their own positions.
        sel = np.flatnonzero(null == 0) if null.any() else None
        p = rows.pos if sel is None else rows.pos[sel]
        want = i in wanted
        kind = _kind(t)
        array: pa.Array | None = None
        if kind == "fixed":
            width = _FIXED_WIDTH[t]
            end = p + width
            if want:
                raw = rows.fixed(p, sel, width)
                validity, nulls = _validity(sel, n)
                if t == pa.bool_():
                    bits = np.packbits(_spread(raw[:, 0], sel, n) != 0, bitorder="little")
                    array = pa.Array.from_buffers(t, n, [validity, pa.py_buffer(bits)],
                                                  null_count=nulls)
                else:
                    values = raw.view(_FIXED_DTYPE[t]).reshape(-1)
                    array = _arrow(_spread(values, sel, n), t, validity, nulls)
            else:
                rows.check(end, sel)
        elif kind == "int":
            value, end = rows.varint(p, sel, wide=False)
            if want:
                if pa.types.is_time(t):
                    # Fluss keeps a TIME as int milliseconds of the day, whatever its precision.
                    if t.unit == "s":
                        value = value // 1000
                    elif t.unit != "ms":
                        value = value.astype(np.int64) * _PER_MILLI[t.unit]
                validity, nulls = _validity(sel, n)
                array = _arrow(_spread(value, sel, n), t, validity, nulls)
        elif kind == "long":
            value, end = rows.varint(p, sel, wide=True)
            if pa.types.is_timestamp(t) and t.unit in ("us", "ns"):
                # Precision > 3: the nanoseconds of the millisecond follow the milliseconds.
                nanos, end = rows.varint(end, sel, wide=False)
                bad = (nanos < 0) | (nanos >= _NANOS_PER_MILLI)
                if bad.any():
                    rows.fail(np.flatnonzero(bad), sel, "nanos of millisecond out of range")
                if want:
                    value = value * _PER_MILLI[t.unit] + nanos // (_NANOS_PER_MILLI
                                                                      // _PER_MILLI[t.unit])
            elif pa.types.is_timestamp(t) and t.unit == "s" and want:
                value = value // 1000
            if want:
                validity, nulls = _validity(sel, n)
                if pa.types.is_decimal(t):
                    value = _decimal128(value)
                array = _arrow(_spread(value, sel, n), t, validity, nulls)
        else:   # "bytes" and "nested": a varint length, then that many bytes
            start, lengths = rows.lengths(p, sel)
            end = start + lengths
            if want:
                if pa.types.is_decimal(t):
                    validity, nulls = _validity(sel, n)
                    array = _arrow(_spread(_big_decimal(rows, start, lengths, sel), sel, n),
                                   t, validity, nulls)
                elif pa.types.is_fixed_size_binary(t):
                    width = t.byte_width
                    if (lengths != width).any():
                        rows.fail(np.flatnonzero(lengths != width), sel,
                                  f"{lengths[lengths != width][0]} bytes, not {width}")
                    validity, nulls = _validity(sel, n)
                    array = _arrow(_spread(rows.fixed(start, sel, width), sel, n), t,
                                   validity, nulls)
                else:
                    array = _strings(rows, t, start, lengths, sel, n)
        if sel is None:
            rows.pos = end
        else:
            rows.pos[sel] = end
        if array is not None:
            decoded[i] = array
    return [decoded[i] for i in columns]


def decode_compacted_rows(buffer: np.ndarray, starts: np.ndarray, schema: pa.Schema,
                          columns: Sequence[int] | None = None,
                          ends: np.ndarray | None = None) -> list[pa.Array]:
    """The Arrow arrays of fields ``columns`` (all if None) of the compacted rows at ``starts``.

    ``buffer`` is a uint8 array; row r starts (null bits first) at ``starts[r]`` and must end by
    ``ends[r]`` (by the end of ``buffer`` if ``ends`` is None). The fields before the last one
    requested are walked; only the requested ones are built, typed as in ``schema``.
    """
    if buffer.dtype != np.uint8 or buffer.ndim != 1:
        raise ConfigError(f"buffer must be a 1-D uint8 array, not {buffer.ndim}-D {buffer.dtype}")
    wanted = list(range(len(schema))) if columns is None else [int(c) for c in columns]
    return _decode(buffer, np.asarray(starts), ends, schema, wanted, None)


def decode_kv_values(values: Sequence[bytes], schema_of: Callable[[int], pa.Schema],
                     output: pa.Schema) -> pa.RecordBatch:
    """The rows of KV values (schema id, then a compacted row) as a batch of ``output``.

    Columns are matched by name: one missing from a row's schema (older than an ADD COLUMN) is
    null for that row, and one of another type is cast to the output type.
    """
    n = len(values)
    if n == 0:
        return _empty(output)
    sizes = np.fromiter(map(len, values), dtype=np.int64, count=n)
    ends = np.cumsum(sizes)
    return _decode_values(np.frombuffer(b"".join(values), dtype=np.uint8), ends - sizes, ends,
                          schema_of, output)


#: A value record batch: int32 length (of what follows), int8 magic, int32 record count.
_VALUE_BATCH_HEADER = 9
_VALUE_BATCH_MAGIC = 0


def decode_value_batch(records: bytes | memoryview, schema_of: Callable[[int], pa.Schema],
                       output: pa.Schema) -> pa.RecordBatch:
    """The rows of a value record batch (Fluss's SCAN_KV ``records``) as a batch of ``output``.

    Layout, little-endian: int32 length of the rest, int8 magic 0, int32 record count, then per
    record an int32 length of the rest and a KV value (schema id, compacted row)."""
    data = np.frombuffer(records, dtype=np.uint8)
    if len(data) < _VALUE_BATCH_HEADER:
        raise CorruptMessage(f"a value record batch of {len(data)} bytes is shorter than its "
                             "header")
    length = int(data[:4].view("<i4")[0])
    magic, count = int(data[4]), int(data[5:9].view("<i4")[0])
    if length != len(data) - 4:
        raise CorruptMessage(f"a value record batch says it has {length} bytes after its length, "
                             f"it has {len(data) - 4}")
    if magic != _VALUE_BATCH_MAGIC:
        raise UnsupportedVersion(f"value record batch magic {magic} is not supported (this "
                                 f"client reads magic {_VALUE_BATCH_MAGIC})")
    # Every record takes at least its length and schema id: a count the bytes cannot hold is
    # refused before it sizes any array.
    if count < 0 or count > (len(data) - _VALUE_BATCH_HEADER) // (4 + SCHEMA_ID_SIZE):
        raise CorruptMessage(f"a value record batch of {len(data)} bytes says it has {count} "
                             "records")
    begins = np.empty(count, dtype=np.int64)
    ends = np.empty(count, dtype=np.int64)
    pos, size = _VALUE_BATCH_HEADER, len(data)
    # Records are found one after another (each says its own length): a short scalar loop.
    for i in range(count):
        if pos + 4 > size:
            raise CorruptMessage(f"value record {i} of {count} starts past the batch's end")
        n = int(data[pos:pos + 4].view("<i4")[0])
        begins[i], pos = pos + 4, pos + 4 + n
        if n < SCHEMA_ID_SIZE or pos > size:
            raise CorruptMessage(f"value record {i} of {count} has a bad length {n}")
        ends[i] = pos
    if pos != size:
        raise CorruptMessage(f"a value record batch has {size - pos} bytes after its "
                             f"{count} records")
    if count == 0:
        return _empty(output)
    return _decode_values(data, begins, ends, schema_of, output)


def _empty(output: pa.Schema) -> pa.RecordBatch:
    return pa.record_batch([pa.array([], type=f.type) for f in output], schema=output)


def _decode_values(buffer: np.ndarray, begins: np.ndarray, ends: np.ndarray,
                   schema_of: Callable[[int], pa.Schema], output: pa.Schema) -> pa.RecordBatch:
    """KV values at ``buffer[begins[i]:ends[i]]`` as a batch of ``output`` (see above)."""
    n = len(begins)
    short = ends - begins < SCHEMA_ID_SIZE
    if short.any():
        raise CorruptMessage(f"KV value {int(np.flatnonzero(short)[0])} is shorter than its "
                             "schema id")
    ids = (buffer[begins].astype(np.uint16) | (buffer[begins + 1].astype(np.uint16) << 8)
           ).view(np.int16)
    unique = np.unique(ids)
    groups: list[tuple[np.ndarray | None, list[pa.Array]]] = []
    for schema_id in unique.tolist():
        # Usually every row has the newest schema: then no row is moved.
        picked = None if len(unique) == 1 else np.flatnonzero(ids == schema_id)
        schema = schema_of(schema_id)
        names = schema.names
        present = [f.name for f in output if f.name in names]
        columns = [names.index(name) for name in present]
        starts = begins + SCHEMA_ID_SIZE
        group_ends = ends
        if picked is not None:
            starts, group_ends = starts[picked], ends[picked]
        arrays = dict(zip(present, _decode(buffer, starts, group_ends, schema, columns,
                                           picked)))
        count = n if picked is None else len(picked)
        out: list[pa.Array] = []
        for f in output:
            array = arrays.get(f.name)
            if array is None:
                array = pa.nulls(count, type=f.type)
            elif array.type != f.type:
                try:
                    array = array.cast(f.type)
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
                    raise UnsupportedVersion(f"column {f.name!r} of schema {schema_id}: "
                                             f"{array.type} does not cast to {f.type}: {e}"
                                             ) from None
            out.append(array)
        groups.append((picked, out))
    if len(groups) == 1:
        return pa.record_batch(groups[0][1], schema=output)
    # Put the rows back in input order: row k of the concatenated groups goes to order[k].
    order = np.concatenate([picked for picked, _ in groups if picked is not None])
    inverse = np.empty(n, dtype=np.int64)
    inverse[order] = np.arange(n, dtype=np.int64)
    take = _arrow(inverse, pa.int64(), None, 0)
    columns_out = [pa.concat_arrays([arrays[j] for _, arrays in groups]).take(take)
                   for j in range(len(output))]
    return pa.record_batch(columns_out, schema=output)


__all__ = ["SCHEMA_ID_SIZE", "decode_compacted_rows", "decode_kv_values", "decode_value_batch"]
