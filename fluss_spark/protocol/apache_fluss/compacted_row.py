"""Apache Fluss compacted rows (its KV store's values) decoded into Arrow, a column at a time."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np
import pyarrow as pa

from fluss_spark.errors import ConfigError, CorruptMessage, UnsupportedVersion
from fluss_spark.protocol.apache_fluss import compiled
from fluss_spark.protocol.apache_fluss.binary_array import decode_nested, nested_supported
from fluss_spark.protocol.apache_fluss.row_bytes import (NANOS_PER_MILLI, PER_MILLI, Rows,
                                                         arrow_array, big_decimal, byte_rows,
                                                         decimal128, strings, time_from_millis,
                                                         validity, spread)

# A KV value is this many bytes of schema id (int16, little-endian), then one compacted row.
SCHEMA_ID_SIZE = 2
#: Rows the numpy decode takes at a time, the pieces joined after: it needs about ten times
#: its rows' bytes in temporary arrays, which for a whole 4 MB batch was most of a Spark
#: worker's memory. (The compiled decode needs none and takes any range at once.)
NUMPY_DECODE_ROWS = 1 << 14

# Bytes of the types written with a fixed width (everything else is a varint or length-prefixed).
_FIXED_WIDTH = {pa.bool_(): 1, pa.int8(): 1, pa.int16(): 2, pa.float32(): 4, pa.float64(): 8}
_FIXED_DTYPE: dict[pa.DataType, np.dtype] = {
    pa.int8(): np.dtype(np.int8), pa.int16(): np.dtype("<i2"),
    pa.float32(): np.dtype("<f4"), pa.float64(): np.dtype("<f8")}
# Unscaled decimals of at most this many digits are written as a BIGINT varint.
_COMPACT_DECIMAL_PRECISION = 18


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
        # Nested values are length-prefixed too, so a field can be walked past whatever it holds.
        return "nested"
    return ""


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
        if not kind or (kind == "nested" and i in wanted and not nested_supported(f.type)):
            raise UnsupportedVersion(f"column {f.name!r}: Fluss compacted rows of type {f.type} "
                                     "are not supported")


def _decode(buffer: np.ndarray, starts: np.ndarray, ends: np.ndarray | None,
            schema: pa.Schema, columns: Sequence[int], row_ids: np.ndarray | None,
            prefix: str = "") -> list[pa.Array]:
    """The fields ``columns`` of the compacted rows at ``starts`` (see decode_compacted_rows);
    ``row_ids`` label the rows in errors, ``prefix`` the columns (a nested row's parent)."""
    _check_columns(schema, columns)
    n = len(starts)
    wanted = set(columns)
    last = max(columns, default=-1)
    decoded: dict[int, pa.Array] = {}
    if n == 0 or last < 0:
        return [pa.nulls(0, schema.field(i).type) for i in columns]
    if not prefix:
        arrays = _decode_compiled(buffer, starts, ends, schema, columns)
        if arrays is not None:
            return arrays
    rows = Rows(buffer, starts, ends, row_ids)
    header_size = (len(schema) + 7) // 8
    rows.column = f"{prefix}(null bits)"
    if (rows.pos < 0).any():
        rows.fail(np.flatnonzero(rows.pos < 0), None, "starts before the buffer")
    rows.check(rows.pos + header_size, None)
    header = byte_rows(buffer, rows.pos, header_size)
    rows.pos += header_size
    for i in range(last + 1):
        f = schema.field(i)
        t = f.type
        rows.column = f"{prefix}{f.name!r} ({t})"
        null = header[:, i >> 3] & np.uint8(1 << (i & 7))
        # A null field writes nothing; the others are read only at their own positions.
        sel = np.flatnonzero(null == 0) if null.any() else None
        p = rows.pos if sel is None else rows.pos[sel]
        end, array = _field(rows, t, p, sel, n, i in wanted)
        if sel is None:
            rows.pos = end
        else:
            rows.pos[sel] = end
        if array is not None:
            decoded[i] = array
    return [decoded[i] for i in columns]


# The compiled decode's layout codes (native/src/rows.rs, ``Layout``).
_BOOL, _INT, _LONG, _LONG_NANOS, _BYTES, _UTF8 = 0, -1, -2, -3, -4, -5


def _layout(t: pa.DataType, want: bool) -> int | None:
    """The compiled decode's layout of a field of type ``t`` (None: it does not build it)."""
    kind = _kind(t)
    if kind == "fixed":
        return _BOOL if t == pa.bool_() else _FIXED_WIDTH[t]
    if kind == "int":
        return _INT
    if kind == "long":
        return _LONG_NANOS if pa.types.is_timestamp(t) and t.unit in ("us", "ns") else _LONG
    if not want:
        return _BYTES   # walked past, whatever the bytes hold
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return _UTF8
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return _BYTES
    return None


def _decode_compiled(buffer: np.ndarray, starts: np.ndarray, ends: np.ndarray | None,
                     schema: pa.Schema, columns: Sequence[int], schema_id: int | None = None,
                     threads: int | None = None) -> list[pa.Array] | None:
    """The columns of _decode from the compiled decode; None where it is missing, does not
    build a column's type or finds a row it does not take (the numpy decode names it). With
    ``schema_id``, ``starts`` are KV values' and each must start with that schema id.
    ``threads``: the most it may use (default ``compiled.threads``)."""
    native = compiled.native()
    if native is None:
        return None
    plan = _compiled_plan(schema, columns)
    if plan is None:
        return None
    starts = np.ascontiguousarray(starts, dtype=np.int64)
    ends = (np.full(len(starts), len(buffer), dtype=np.int64) if ends is None
            else np.ascontiguousarray(ends, dtype=np.int64))
    try:
        out = native.decode_rows(buffer, starts, ends, 0 if schema_id is None else SCHEMA_ID_SIZE,
                                 schema_id or 0, len(schema), *plan,
                                 compiled.threads if threads is None else threads)
    except ValueError:
        return None
    return _compiled_arrays(schema, columns, out, len(starts))


def _compiled_plan(schema: pa.Schema, columns: Sequence[int]
                   ) -> tuple[list[int], list[bool]] | None:
    """The compiled decode's layout codes and wanted flags for these columns of ``schema``;
    None where it does not build a column's type."""
    wanted = set(columns)
    want = [i in wanted for i in range(max(columns) + 1)]
    layouts = [_layout(schema.field(i).type, w) for i, w in enumerate(want)]
    return None if None in layouts else (layouts, want)  # type: ignore[return-value]


def _compiled_arrays(schema: pa.Schema, columns: Sequence[int], out: Sequence[Any], n: int
                     ) -> list[pa.Array]:
    """The arrays of ``columns`` of ``schema`` from the compiled decode's buffers of ``n``
    rows, one column a wanted field, in field order."""
    built = {i: _compiled_column(schema.field(i).type, n, *column)
             for i, column in zip(sorted(set(columns)), out)}
    return [built[i] for i in columns]


def _compiled_column(t: pa.DataType, n: int, nulls: int, validity: bytes | None, first: Any,
                     second: Any) -> pa.Array:
    """An Arrow array of ``t`` from the compiled decode's buffers of one column."""
    valid = None if validity is None else pa.py_buffer(validity)
    kind = _kind(t)
    if t == pa.bool_():
        return pa.Array.from_buffers(t, n, [valid, pa.py_buffer(first)], null_count=nulls)
    if kind == "fixed":
        return arrow_array(np.frombuffer(first, dtype=_FIXED_DTYPE[t]), t, valid, nulls)
    if kind == "int":
        value = np.frombuffer(first, dtype=np.int32)
        return arrow_array(time_from_millis(value, t) if pa.types.is_time(t) else value, t,
                           valid, nulls)
    if kind == "long":
        value = np.frombuffer(first, dtype=np.int64)
        if pa.types.is_timestamp(t) and t.unit in ("us", "ns"):
            nanos = np.frombuffer(second, dtype=np.int32)
            value = value * PER_MILLI[t.unit] + nanos // (NANOS_PER_MILLI // PER_MILLI[t.unit])
        elif pa.types.is_timestamp(t) and t.unit == "s":
            value = value // 1000
        return arrow_array(decimal128(value) if pa.types.is_decimal(t) else value, t, valid,
                           nulls)
    build = pa.string() if pa.types.is_string(t) or pa.types.is_large_string(t) else pa.binary()
    array = pa.Array.from_buffers(build, n, [valid, pa.py_buffer(first), pa.py_buffer(second)],
                                  null_count=nulls)
    return array if build == t else array.cast(t)


def _field(rows: Rows, t: pa.DataType, p: np.ndarray, sel: np.ndarray | None, n: int,
           want: bool) -> tuple[np.ndarray, pa.Array | None]:
    """Where the non-null fields of type ``t`` at ``p`` end, and their column if ``want``."""
    kind = _kind(t)
    valid, nulls = validity(sel, n)
    if kind == "fixed":
        width = _FIXED_WIDTH[t]
        if not want:
            rows.check(p + width, sel)
            return p + width, None
        raw = rows.fixed(p, sel, width)
        if t == pa.bool_():
            bits = np.packbits(spread(raw[:, 0], sel, n) != 0, bitorder="little")
            return p + width, pa.Array.from_buffers(t, n, [valid, pa.py_buffer(bits)],
                                                    null_count=nulls)
        values = raw.view(_FIXED_DTYPE[t]).reshape(-1)
        return p + width, arrow_array(spread(values, sel, n), t, valid, nulls)
    if kind == "int":
        value, end = rows.varint(p, sel, wide=False)
        if not want:
            return end, None
        if pa.types.is_time(t):
            value = time_from_millis(value, t)
        return end, arrow_array(spread(value, sel, n), t, valid, nulls)
    if kind == "long":
        value, end = rows.varint(p, sel, wide=True)
        if pa.types.is_timestamp(t) and t.unit in ("us", "ns"):
            # Precision > 3: the nanoseconds of the millisecond follow the milliseconds.
            nanos, end = rows.varint(end, sel, wide=False)
            bad = (nanos < 0) | (nanos >= NANOS_PER_MILLI)
            if bad.any():
                rows.fail(np.flatnonzero(bad), sel, "nanos of millisecond out of range")
            if want:
                value = value * PER_MILLI[t.unit] + nanos // (NANOS_PER_MILLI
                                                               // PER_MILLI[t.unit])
        elif pa.types.is_timestamp(t) and t.unit == "s" and want:
            value = value // 1000
        if not want:
            return end, None
        if pa.types.is_decimal(t):
            value = decimal128(value)
        return end, arrow_array(spread(value, sel, n), t, valid, nulls)
    # "bytes" and "nested": a varint length, then that many bytes
    start, lengths = rows.lengths(p, sel)
    end = start + lengths
    if not want:
        return end, None
    if kind == "nested":
        return end, decode_nested(rows, t, start, lengths, sel, n, _nested_rows)
    if pa.types.is_decimal(t):
        return end, arrow_array(spread(big_decimal(rows, start, lengths, sel), sel, n), t,
                                valid, nulls)
    if pa.types.is_fixed_size_binary(t):
        width = t.byte_width
        if (lengths != width).any():
            rows.fail(np.flatnonzero(lengths != width), sel,
                      f"{lengths[lengths != width][0]} bytes, not {width}")
        return end, arrow_array(spread(rows.fixed(start, sel, width), sel, n), t, valid, nulls)
    return end, strings(rows, t, start, lengths, sel, n)


def _nested_rows(buffer: np.ndarray, starts: np.ndarray, ends: np.ndarray, t: pa.StructType,
                 labels: np.ndarray, prefix: str) -> list[pa.Array]:
    """Every field of the compacted rows (ROW values) at ``[starts, ends)``."""
    schema = pa.schema(list(t))
    return _decode(buffer, starts, ends, schema, range(len(schema)), labels, prefix)


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


def decode_kv_ranges(buffer: np.ndarray, begins: np.ndarray, ends: np.ndarray,
                     schema_of: Callable[[int], pa.Schema], output: pa.Schema,
                     threads: int | None = None) -> pa.RecordBatch:
    """The rows of the KV values at ``buffer[begins[i]:ends[i]]`` (a uint8 array, e.g. the
    decompressed blocks of a snapshot's files) as a batch of ``output``, as decode_kv_values;
    the compiled decode uses at most ``threads`` threads (default ``compiled.threads``)."""
    if not len(begins):
        return _empty(output)
    # The compiled decode checks every range itself: the numpy check is for the other paths.
    batch = _decode_one_schema(buffer, begins, ends, schema_of, output, threads)
    if batch is not None:
        return batch
    if ((begins < 0) | (ends < begins) | (ends > len(buffer))).any():
        raise CorruptMessage(f"a KV value range lies outside its buffer of {len(buffer)} bytes")
    pieces = [_decode_values(buffer, begins[a:a + NUMPY_DECODE_ROWS],
                             ends[a:a + NUMPY_DECODE_ROWS], schema_of, output)
              for a in range(0, len(begins), NUMPY_DECODE_ROWS)]
    return pieces[0] if len(pieces) == 1 else pa.concat_batches(pieces)


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
    return pa.record_batch([pa.nulls(0, f.type) for f in output], schema=output)


def _columns_of(schema: pa.Schema, output: pa.Schema) -> dict[str, int]:
    """The output's columns that ``schema`` has: name -> index in ``schema``."""
    names = schema.names
    return {f.name: names.index(f.name) for f in output if f.name in names}


def _as_output(arrays: dict[str, pa.Array], schema_id: int, count: int, output: pa.Schema
               ) -> list[pa.Array]:
    """The columns of ``output`` from the decoded ``arrays`` (by name) of rows of schema
    ``schema_id``: a column the schema lacks is null, one of another type is cast."""
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
    return out


def _decode_one_schema(buffer: np.ndarray, begins: np.ndarray, ends: np.ndarray,
                       schema_of: Callable[[int], pa.Schema], output: pa.Schema,
                       threads: int | None = None) -> pa.RecordBatch | None:
    """The batch of _decode_values from the compiled decode in one call, when every value has
    the first one's schema id (the usual case); None otherwise, or where it does not apply."""
    schema_id = first_schema_id(buffer, begins, ends)
    plan = None if schema_id is None else kv_plan(schema_id, schema_of, output)
    if plan is None:
        return None
    arrays = _decode_compiled(buffer, begins, ends, plan.schema, list(plan.columns.values()),
                              plan.schema_id, threads)
    return None if arrays is None else _plan_batch(plan, arrays, len(begins), output)


@dataclass(frozen=True)
class KvPlan:
    """How the compiled decode reads the KV values of one schema id into batches of an output
    schema: the output's columns the schema has (name -> field index), and the decode's layout
    codes and wanted flags for them."""

    schema_id: int
    schema: pa.Schema
    columns: dict[str, int]
    layouts: list[int]
    want: list[bool]


def kv_plan(schema_id: int, schema_of: Callable[[int], pa.Schema], output: pa.Schema
            ) -> KvPlan | None:
    """The compiled decode of KV values of ``schema_id`` into batches of ``output``; None where
    it does not apply (no compiled decode, no column in common, a type it does not build)."""
    if compiled.native() is None:
        return None
    schema = schema_of(schema_id)
    columns = _columns_of(schema, output)
    parts = _compiled_plan(schema, list(columns.values())) if columns else None
    return None if parts is None else KvPlan(schema_id, schema, columns, *parts)


def kv_batch(plan: KvPlan, out: Sequence[Any], n: int, output: pa.Schema) -> pa.RecordBatch:
    """The batch of ``output`` from the compiled decode's buffers of ``n`` rows by ``plan``."""
    return _plan_batch(plan, _compiled_arrays(plan.schema, list(plan.columns.values()), out, n),
                       n, output)


def _plan_batch(plan: KvPlan, arrays: list[pa.Array], n: int, output: pa.Schema
                ) -> pa.RecordBatch:
    """The batch of ``output`` of the ``n`` rows decoded by ``plan`` into ``arrays`` (one an
    output column the schema has)."""
    return pa.record_batch(_as_output(dict(zip(plan.columns, arrays)), plan.schema_id, n,
                                      output), schema=output)


def first_schema_id(buffer: np.ndarray, begins: np.ndarray, ends: np.ndarray) -> int | None:
    """The schema id of the first KV value at ``buffer[begins[0]:ends[0]]``; None when there is
    none, or it lies outside the buffer."""
    if not len(begins):
        return None
    at = int(begins[0])
    if ends[0] - at < SCHEMA_ID_SIZE or not 0 <= at <= len(buffer) - SCHEMA_ID_SIZE:
        return None
    return int(buffer[at:at + SCHEMA_ID_SIZE].view("<i2")[0])


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
        starts = begins + SCHEMA_ID_SIZE
        group_ends = ends
        if picked is not None:
            starts, group_ends = starts[picked], ends[picked]
        columns = _columns_of(schema, output)
        out = _as_output(dict(zip(columns, _decode(buffer, starts, group_ends, schema,
                                                   list(columns.values()), picked))),
                         schema_id, n if picked is None else len(picked), output)
        groups.append((picked, out))
    if len(groups) == 1:
        return pa.record_batch(groups[0][1], schema=output)
    # Put the rows back in input order: row k of the concatenated groups goes to order[k].
    order = np.concatenate([picked for picked, _ in groups if picked is not None])
    inverse = np.empty(n, dtype=np.int64)
    inverse[order] = np.arange(n, dtype=np.int64)
    take = arrow_array(inverse, pa.int64(), None, 0)
    columns_out = [pa.concat_arrays([arrays[j] for _, arrays in groups]).take(take)
                   for j in range(len(output))]
    return pa.record_batch(columns_out, schema=output)


__all__ = ["SCHEMA_ID_SIZE", "KvPlan", "decode_compacted_rows", "decode_kv_ranges",
           "decode_kv_values", "decode_value_batch", "first_schema_id", "kv_batch", "kv_plan"]
