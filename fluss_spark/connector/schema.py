"""Output schema of the source and the shaping of Arrow batches into it.

Single-table layout (option ``table``)::

    <table columns...>, _change_type, _log_offset, _commit_timestamp

Multi-table layout (options ``tables`` / ``table.pattern``): typed and lossless, one struct column
per table named by the table, null on the rows of every other table::

    _table, <table 1> struct<...>, <table 2> struct<...>, ..., _change_type, _log_offset,
    _commit_timestamp

Spark checks every yielded ``pyarrow.RecordBatch`` against ``to_arrow_schema(schema)`` exactly
(types and nullability), so ``Layout.shape`` casts every column to that schema.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (ArrayType, BinaryType, BooleanType, ByteType, DataType, DateType,
                               DecimalType, DoubleType, FloatType, IntegerType, LongType,
                               MapType, ShortType, StringType, StructField, StructType,
                               TimestampNTZType, TimestampType, TimeType)

from fluss_spark.client.cluster import CHANGE_TYPE, COMMIT_TIMESTAMP, INSERT, LOG_OFFSET
from fluss_spark.errors import ConfigError

TABLE_COLUMN = "_table"
META_COLUMNS = (CHANGE_TYPE, LOG_OFFSET, COMMIT_TIMESTAMP)

#: Snapshot rows are ``+I`` with no commit timestamp. Their ``_log_offset`` is the snapshot's
#: ``log_offset - 1``: the last changelog offset the snapshot includes, so ordering a bucket's rows
#: by ``_log_offset`` is ordering them in time, even across a snapshot replaced after data loss.
SNAPSHOT_CHANGE_TYPE = INSERT
#: ``_commit_timestamp`` as Spark takes it (a TimestampType column: microseconds, UTC), so the
#: snapshot rows' nulls need no cast.
_COMMIT_TIMESTAMP_TYPE = pa.timestamp("us", tz="UTC")

_META_FIELDS = [StructField(CHANGE_TYPE, StringType(), True),
                StructField(LOG_OFFSET, LongType(), True),
                StructField(COMMIT_TIMESTAMP, TimestampType(), True)]


def spark_type(t: pa.DataType, column: str = "?") -> DataType:
    """Map a table column's Arrow type to the Spark type it is read as."""
    simple = [
        (pa.types.is_int8, ByteType), (pa.types.is_int16, ShortType),
        (pa.types.is_int32, IntegerType), (pa.types.is_int64, LongType),
        (pa.types.is_float32, FloatType), (pa.types.is_float64, DoubleType),
        (pa.types.is_boolean, BooleanType), (pa.types.is_date32, DateType),
    ]
    for check, cls in simple:
        if check(t):
            return cls()
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return StringType()
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        return BinaryType()
    if pa.types.is_decimal128(t):
        return DecimalType(t.precision, t.scale)
    if pa.types.is_timestamp(t):
        # A zone-aware timestamp is an instant (Spark TIMESTAMP); a naive one is wall-clock time.
        # Spark keeps microseconds: nanoseconds are floored to them (see to_spark_arrow).
        return TimestampType() if t.tz else TimestampNTZType()
    if pa.types.is_time(t):
        return TimeType()
    if pa.types.is_list(t):
        return ArrayType(spark_type(t.value_type, f"{column}[]"), True)
    if pa.types.is_map(t):
        return MapType(spark_type(t.key_type, f"{column} key"),
                       spark_type(t.item_type, f"{column} value"), True)
    if pa.types.is_struct(t):
        return StructType([StructField(f.name, spark_type(f.type, f"{column}.{f.name}"), True)
                           for f in t])
    raise ConfigError(f"column {column!r} has type {t}, which the Spark source cannot read")


def project(table: str, schema: pa.Schema, columns: Sequence[str], what: str) -> pa.Schema:
    """``schema`` narrowed to ``columns`` (in that order); ConfigError naming unknown ones."""
    unknown = [c for c in columns if c not in schema.names]
    if unknown:
        raise ConfigError(f"{what}: table {table!r} has no column(s) {', '.join(unknown)}; its "
                          f"columns are {', '.join(schema.names)}")
    return pa.schema([schema.field(c) for c in columns])


def table_struct(schema: pa.Schema) -> StructType:
    """A table's columns as a Spark struct (every field nullable, as Spark checks nullability)."""
    return StructType([StructField(f.name, spark_type(f.type, f.name), True) for f in schema])


def output_schema(tables: list[tuple[str, pa.Schema]], multi_table: bool) -> StructType:
    """The source's Spark schema for the given ``(table name, Arrow schema)`` list."""
    if not multi_table:
        if len(tables) != 1:
            raise ConfigError(f"the single-table layout needs exactly one table, got {len(tables)}")
        return StructType(list(table_struct(tables[0][1]).fields) + _META_FIELDS)
    names = [name for name, _ in tables]
    clash = [n for n in names if n in META_COLUMNS or n == TABLE_COLUMN]
    if clash:
        raise ConfigError(f"table name(s) {clash} clash with the source's metadata columns")
    fields = [StructField(TABLE_COLUMN, StringType(), True)]
    fields += [StructField(name, table_struct(schema), True) for name, schema in tables]
    return StructType(fields + _META_FIELDS)


@dataclass(frozen=True)
class Layout:
    """How raw batches (table columns + metadata) become batches of the output schema; picklable."""

    schema: StructType
    multi_table: bool

    @property
    def arrow_schema(self) -> pa.Schema:
        return to_arrow_schema(self.schema, timezone="UTC")

    @property
    def table_names(self) -> tuple[str, ...]:
        """Tables of a multi-table layout, in column order (empty for the single-table layout)."""
        if not self.multi_table:
            return ()
        return tuple(f.name for f in self.schema.fields
                     if f.name != TABLE_COLUMN and f.name not in META_COLUMNS)

    def table_columns(self, table: str) -> list[str]:
        """The table columns this query reads (the user may have given a narrower schema)."""
        if self.multi_table:
            field = self.schema[table]
            if not isinstance(field.dataType, StructType):
                raise ConfigError(f"column {table!r} of the multi-table schema must be a struct")
            return field.dataType.fieldNames()
        return [n for n in self.schema.fieldNames() if n not in META_COLUMNS]

    def shape(self, table: str, batch: pa.RecordBatch, target: pa.Schema | None = None
              ) -> pa.RecordBatch:
        """Cast ``batch`` (table columns + the three metadata columns) to the output schema."""
        target = target or self.arrow_schema
        if not self.multi_table and batch.schema.equals(target):
            return batch        # already Spark's: nothing to cast or reassemble
        n = batch.num_rows
        meta = [_column(batch, name, target.field(name).type) for name in META_COLUMNS]
        if not self.multi_table:
            cols = [_column(batch, f.name, f.type) for f in target if f.name not in META_COLUMNS]
            return pa.RecordBatch.from_arrays(cols + meta, schema=target)
        arrays = [_constant(table, n)]
        for f in target:
            if f.name == TABLE_COLUMN or f.name in META_COLUMNS:
                continue
            if f.name == table:
                children = [_column(batch, c.name, c.type) for c in f.type]
                arrays.append(pa.StructArray.from_arrays(children, fields=list(f.type)))
            else:
                arrays.append(pa.nulls(n, f.type))
        return pa.RecordBatch.from_arrays(arrays + meta, schema=target)


def _column(batch: pa.RecordBatch, name: str, t: pa.DataType) -> pa.Array:
    idx = batch.schema.get_field_index(name)
    if idx < 0:
        raise ConfigError(f"column {name!r} is not in the table any more (columns: "
                          f"{', '.join(batch.schema.names)}); restart the query with a new schema")
    col = batch.column(idx)
    return col if col.type == t else to_spark_arrow(col, t)


def _has_nanos(t: pa.DataType) -> bool:
    if pa.types.is_timestamp(t):
        return t.unit == "ns"
    return any(_has_nanos(t.field(i).type) for i in range(t.num_fields))


def to_spark_arrow(col: pa.Array, t: pa.DataType) -> pa.Array:
    """``col`` cast to ``t``; nanosecond timestamps, at any depth, floored to microseconds (a
    plain cast truncates toward zero, moving an instant before 1970 forward in time)."""
    if not _has_nanos(col.type):
        return col.cast(t)
    if col.offset and pa.types.is_nested(col.type):
        # A slice's children are not sliced: a copy starts them at its first row.
        col = col.take(pa.Array.from_buffers(pa.int64(), len(col), [None, pa.py_buffer(
            np.arange(len(col), dtype=np.int64))]))
    mask = col.is_null() if col.null_count else None
    if pa.types.is_timestamp(col.type):
        nanos = col.cast(pa.int64()).fill_null(0).to_numpy()
        valid = col.is_valid().buffers()[1] if col.null_count else None
        return pa.Array.from_buffers(t, len(col), [valid, pa.py_buffer(nanos // 1000)],
                                     null_count=col.null_count)
    if pa.types.is_struct(col.type):
        children = [to_spark_arrow(col.field(i), t.field(i).type) for i in range(t.num_fields)]
        return pa.StructArray.from_arrays(children, fields=list(t), mask=mask)
    if pa.types.is_map(col.type):
        return pa.MapArray.from_arrays(col.offsets, to_spark_arrow(col.keys, t.key_type),
                                       to_spark_arrow(col.items, t.item_type), type=t, mask=mask)
    if pa.types.is_list(col.type):
        return pa.ListArray.from_arrays(col.offsets, to_spark_arrow(col.values, t.value_type),
                                        type=t, mask=mask)
    return col.cast(t)


def _constant(value: str, n: int) -> pa.Array:
    """``n`` times ``value`` as a string array, built from buffers: a Python list of n strings
    took 30x longer, and pyarrow's conversion of any Python value (``pa.scalar``, ``pa.array``)
    first imports pandas, ~0.2 s in each new Spark Python worker."""
    data = value.encode()
    offsets = np.arange(n + 1, dtype=np.int32) * np.int32(len(data))
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets),
                                                  pa.py_buffer(data * n)])


def _int64s(value: int, n: int) -> pa.Array:
    """``n`` times ``value`` as an int64 array, built from a buffer (see ``_constant``)."""
    return pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(np.full(n, value, np.int64))])


@functools.lru_cache(maxsize=8)
def _snapshot_meta(log_offset: int, n: int) -> tuple[pa.Array, pa.Array, pa.Array]:
    """The three metadata columns of ``n`` snapshot rows: the same for every full batch of a
    split, so they are built once (Arrow arrays are immutable and may be shared)."""
    return (_constant(SNAPSHOT_CHANGE_TYPE, n), _int64s(log_offset - 1, n),
            pa.nulls(n, _COMMIT_TIMESTAMP_TYPE))


def with_snapshot_metadata(batch: pa.RecordBatch, log_offset: int = 0) -> pa.RecordBatch:
    """Add the metadata columns of rows of a snapshot covering offsets ``[0, log_offset)``:
    ``+I``, ``_log_offset = log_offset - 1``, no commit timestamp."""
    arrays = list(batch.columns) + list(_snapshot_meta(log_offset, batch.num_rows))
    names = list(batch.schema.names) + list(META_COLUMNS)
    return pa.RecordBatch.from_arrays(arrays, names=names)
