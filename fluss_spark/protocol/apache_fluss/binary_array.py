"""Apache Fluss binary arrays and maps (its ARRAY and MAP values) decoded into Arrow, a column at
a time.

A binary array of n elements, little-endian::

    int32 n | null bits (bit k of byte k // 8), in whole 4-byte words | n slots | pad to 8 bytes |
    variable part

A slot is 1 byte (BOOLEAN, TINYINT), 2 (SMALLINT), 4 (INT, FLOAT, DATE, and TIME as milliseconds
of the day) or 8 bytes (the rest). The 8-byte slot of a variable-length value holds its offset
from the array's first byte (high 32 bits) and its length (low 32 bits); a STRING or BYTES value
of at most 7 bytes is kept in the slot itself instead, its last byte 0x80 | length. A DECIMAL of
precision <= 18 and a TIMESTAMP of precision <= 3 are the slot's long (unscaled value, epoch
milliseconds). A larger DECIMAL points at its unscaled big-endian two's complement. A TIMESTAMP of
precision > 3 has the offset of its epoch milliseconds (a long) in the high 32 bits and the
nanoseconds of the millisecond in the low 32 bits. ARRAY, MAP and ROW elements point at a binary
array, a binary map and a compacted row.

A binary map is an int32 byte size of its key array, the key array, then the value array.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import pyarrow as pa

from fluss_spark.protocol.apache_fluss.row_bytes import (NANOS_PER_MILLI, PER_MILLI, Rows,
                                                         arrow_array, big_decimal, decimal128,
                                                         expand, spread, strings,
                                                         time_from_millis, validity)

#: Decodes every field of the compacted rows at ``[starts, ends)`` of ``buffer`` as the fields of
#: a struct type; ``labels`` name the rows in errors, the string prefixes the column names.
RowDecoder = Callable[[np.ndarray, np.ndarray, np.ndarray, pa.StructType, np.ndarray, str],
                      list[pa.Array]]

# Slot widths and numpy types of the values kept in a slot as they are.
_SLOT: dict[pa.DataType, tuple[int, str]] = {
    pa.int8(): (1, "i1"), pa.int16(): (2, "<i2"), pa.int32(): (4, "<i4"),
    pa.date32(): (4, "<i4"), pa.float32(): (4, "<f4"), pa.int64(): (8, "<i8"),
    pa.float64(): (8, "<f8")}
_COMPACT_DECIMAL_PRECISION = 18
# The high bit of an 8-byte slot marks a value of at most 7 bytes kept in the slot itself.
_INLINE_MAX = 7
_LOW_32 = 0xFFFFFFFF
_INT32_MAX = 2**31 - 1


def nested_supported(t: pa.DataType) -> bool:
    """Whether values of ``t`` can be decoded here (nested) or by the compacted row decoder."""
    if pa.types.is_list(t):
        return nested_supported(t.value_type)
    if pa.types.is_map(t):
        return nested_supported(t.key_type) and nested_supported(t.item_type)
    if pa.types.is_struct(t):
        return all(nested_supported(f.type) for f in t)
    return (t in _SLOT or t == pa.bool_() or pa.types.is_time(t) or pa.types.is_timestamp(t)
            or pa.types.is_decimal128(t) or pa.types.is_string(t) or pa.types.is_binary(t)
            or pa.types.is_large_string(t) or pa.types.is_large_binary(t)
            or pa.types.is_fixed_size_binary(t))


def _slot_width(t: pa.DataType) -> int:
    if t in _SLOT:
        return _SLOT[t][0]
    if t == pa.bool_():
        return 1
    return 4 if pa.types.is_time(t) else 8


def decode_nested(rows: Rows, t: pa.DataType, start: np.ndarray, lengths: np.ndarray,
                  sel: np.ndarray | None, n: int, decode_row: RowDecoder) -> pa.Array:
    """The ARRAY, MAP or ROW values at ``[start, start + lengths)`` of the rows ``sel`` (all if
    None) of ``rows`` as an Arrow array of type ``t`` over all ``n`` rows (null for the others).
    The ranges must already lie within their rows."""
    labels = rows.labels(sel)
    return expand(_dense(rows.buffer, t, start, lengths, labels, rows.column, decode_row), sel, n)


def _dense(buffer: np.ndarray, t: pa.DataType, start: np.ndarray, lengths: np.ndarray,
           labels: np.ndarray, column: str, decode_row: RowDecoder) -> pa.Array:
    """The non-null values of type ``t`` at ``[start, start + lengths)``, one per range."""
    if pa.types.is_struct(t):
        children = decode_row(buffer, start, start + lengths, t, labels, f"{column}.")
        return pa.StructArray.from_arrays(children, fields=list(t))
    if pa.types.is_list(t):
        counts, values = _array(buffer, t.value_type, start, lengths, labels, f"{column}[]",
                                decode_row)
        return pa.ListArray.from_arrays(_offsets(counts, labels, column), values, type=t)
    return _map(buffer, t, start, lengths, labels, column, decode_row)


def _offsets(counts: np.ndarray, labels: np.ndarray, column: str) -> pa.Array:
    offsets = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    if offsets[-1] > _INT32_MAX:
        rows = Rows(np.zeros(1, np.uint8), np.zeros(len(counts), np.int64), None, labels)
        rows.column = column
        rows.fail(np.array([0]), None, f"{offsets[-1]} elements are more than one Arrow array "
                                       "holds")
    return arrow_array(offsets.astype(np.int32), pa.int32(), None, 0)


def _leading_int32(buffer: np.ndarray, start: np.ndarray, lengths: np.ndarray,
                   labels: np.ndarray, column: str, what: str, first: str
                   ) -> tuple[Rows, np.ndarray]:
    """The values at ``[start, start + lengths)`` as rows for errors, and the int32 each starts
    with (``first``, named in the error when a value is too short to hold it)."""
    rows = Rows(buffer, start, start + lengths, labels)
    rows.column = column
    short = lengths < 4
    if short.any():
        rows.fail(np.flatnonzero(short), None, f"{what} of {lengths[short][0]} bytes is shorter "
                                               f"than {first}")
    return rows, rows.words(start, None, 4, "<i4").astype(np.int64)


def _array(buffer: np.ndarray, t: pa.DataType, start: np.ndarray, lengths: np.ndarray,
           labels: np.ndarray, column: str, decode_row: RowDecoder
           ) -> tuple[np.ndarray, pa.Array]:
    """The element counts of the binary arrays at ``[start, start + lengths)`` and all their
    elements (of type ``t``) as one Arrow array."""
    ends = start + lengths
    rows, size = _leading_int32(buffer, start, lengths, labels, column, "an array", "its size")
    if (size < 0).any():
        rows.fail(np.flatnonzero(size < 0), None, f"array size {size[size < 0][0]}")
    width = _slot_width(t)
    header = 4 + (size + 31) // 32 * 4
    # Every element has its slot inside the array's bytes: the element count is bounded by the
    # bytes read before anything is sized by it.
    over = header + width * size > lengths
    if over.any():
        rows.fail(np.flatnonzero(over), None, f"an array of {size[over][0]} elements does not "
                                              f"fit in {lengths[over][0]} bytes")
    total = int(size.sum())
    owner = np.repeat(np.arange(len(start), dtype=np.int64), size)
    first = np.zeros(len(start), dtype=np.int64)
    np.cumsum(size[:-1], out=first[1:])
    k = np.arange(total, dtype=np.int64) - first[owner]
    base = start[owner]
    null = (buffer[base + 4 + (k >> 3)] >> (k & 7).astype(np.uint8)) & 1
    slots = base + header[owner] + k * width
    elements = Rows(buffer, slots, ends[owner], labels[owner])
    elements.column = column
    sel = np.flatnonzero(null == 0) if null.any() else None
    return size, _elements(elements, t, base, sel, total, decode_row)


def _elements(rows: Rows, t: pa.DataType, base: np.ndarray, sel: np.ndarray | None, n: int,
              decode_row: RowDecoder) -> pa.Array:
    """The elements whose slots are at ``rows.pos`` (non-null: ``sel``) of arrays at ``base``."""
    p = rows.pos if sel is None else rows.pos[sel]
    valid, nulls = validity(sel, n)
    if t == pa.bool_():
        bits = np.packbits(spread(rows.fixed(p, sel, 1)[:, 0], sel, n) != 0, bitorder="little")
        return pa.Array.from_buffers(t, n, [valid, pa.py_buffer(bits)], null_count=nulls)
    if t in _SLOT:
        width, dtype = _SLOT[t]
        return arrow_array(spread(rows.words(p, sel, width, dtype), sel, n), t, valid, nulls)
    if pa.types.is_time(t):
        millis = rows.words(p, sel, 4, "<i4")
        return arrow_array(spread(time_from_millis(millis, t), sel, n), t, valid, nulls)
    word = rows.words(p, sel, 8, "<i8")
    if pa.types.is_timestamp(t) and t.unit in ("s", "ms"):
        value = word // 1000 if t.unit == "s" else word
        return arrow_array(spread(value, sel, n), t, valid, nulls)
    if pa.types.is_decimal(t) and t.precision <= _COMPACT_DECIMAL_PRECISION:
        return arrow_array(spread(decimal128(word), sel, n), t, valid, nulls)
    b = base if sel is None else base[sel]
    start, length = b + (word >> 32), word & _LOW_32
    if (pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t)
            or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t)):
        inline = word < 0
        if inline.any():
            start = np.where(inline, p, start)
            length = np.where(inline, (word >> 56) & 0x7F, length)
            bad = inline & (length > _INLINE_MAX)
            if bad.any():
                rows.fail(np.flatnonzero(bad), sel, f"{length[bad][0]} bytes kept in an 8-byte "
                                                    "slot")
    elif (word < 0).any():
        rows.fail(np.flatnonzero(word < 0), sel, "negative offset")
    if pa.types.is_timestamp(t):
        # The low word is the nanoseconds of the millisecond; the millis are a long at start.
        bad = length >= NANOS_PER_MILLI
        if bad.any():
            rows.fail(np.flatnonzero(bad), sel, "nanos of millisecond out of range")
        value = (rows.words(start, sel, 8, "<i8") * PER_MILLI[t.unit]
                 + length // (NANOS_PER_MILLI // PER_MILLI[t.unit]))
        return arrow_array(spread(value, sel, n), t, valid, nulls)
    rows.check(start + length, sel)
    if pa.types.is_decimal(t):
        return arrow_array(spread(big_decimal(rows, start, length, sel), sel, n), t, valid,
                           nulls)
    if pa.types.is_fixed_size_binary(t):
        width = t.byte_width
        if (length != width).any():
            rows.fail(np.flatnonzero(length != width), sel,
                      f"{length[length != width][0]} bytes, not {width}")
        return arrow_array(spread(rows.fixed(start, sel, width), sel, n), t, valid, nulls)
    if pa.types.is_list(t) or pa.types.is_map(t) or pa.types.is_struct(t):
        return decode_nested(rows, t, start, length, sel, n, decode_row)
    return strings(rows, t, start, length, sel, n)


def _map(buffer: np.ndarray, t: pa.MapType, start: np.ndarray, lengths: np.ndarray,
         labels: np.ndarray, column: str, decode_row: RowDecoder) -> pa.Array:
    """The binary maps at ``[start, start + lengths)`` as a map array of type ``t``."""
    rows, key_bytes = _leading_int32(buffer, start, lengths, labels, column, "a map",
                                     "its key array's size")
    bad = (key_bytes < 0) | (key_bytes > lengths - 4)
    if bad.any():
        rows.fail(np.flatnonzero(bad), None, f"a key array of {key_bytes[bad][0]} bytes in a map "
                                             f"of {lengths[bad][0]}")
    counts, keys = _array(buffer, t.key_type, start + 4, key_bytes, labels, f"{column} keys",
                          decode_row)
    value_counts, items = _array(buffer, t.item_type, start + 4 + key_bytes,
                                 lengths - 4 - key_bytes, labels, f"{column} values", decode_row)
    bad = counts != value_counts
    if bad.any():
        rows.fail(np.flatnonzero(bad), None, f"{counts[bad][0]} keys but {value_counts[bad][0]} "
                                             "values")
    if keys.null_count:
        owner = np.repeat(np.arange(len(start), dtype=np.int64), counts)
        first_null = int(np.flatnonzero(~keys.is_valid().to_numpy(zero_copy_only=False))[0])
        rows.fail(owner[first_null:first_null + 1], None, "a null map key")
    return pa.MapArray.from_arrays(_offsets(counts, labels, column), keys, items, type=t)


__all__ = ["RowDecoder", "decode_nested", "nested_supported"]
