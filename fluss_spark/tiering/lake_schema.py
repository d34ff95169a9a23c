"""The Iceberg schema of a Fluss table, and the Fluss Arrow schema kept beside it."""

from __future__ import annotations

import base64
from typing import Sequence

import pyarrow as pa

from fluss_spark.tiering.lake_catalog import LakeError


def iceberg_schema(schema: pa.Schema, primary_key: Sequence[str]):
    """The Iceberg schema of a Fluss table: field ids 1..n, key columns required and the
    identifier fields."""
    from pyiceberg.schema import Schema
    from pyiceberg.types import NestedField
    missing = [k for k in primary_key if k not in schema.names]
    if missing:
        raise LakeError(f"primary key column(s) {missing} are not in the schema {schema.names}")
    fields = []
    for i, f in enumerate(schema, start=1):
        required = f.name in primary_key or not f.nullable
        fields.append(NestedField(i, f.name, _iceberg_type(f.name, f.type), required=required))
    ids = [schema.names.index(k) + 1 for k in primary_key]
    return Schema(*fields, identifier_field_ids=ids)


def _iceberg_type(name: str, t: pa.DataType):
    from pyiceberg import types as it
    if pa.types.is_boolean(t):
        return it.BooleanType()
    if pa.types.is_int8(t) or pa.types.is_int16(t) or pa.types.is_int32(t):
        return it.IntegerType()     # Iceberg's narrowest integer; read back as the Fluss type
    if pa.types.is_int64(t):
        return it.LongType()
    if pa.types.is_float32(t):
        return it.FloatType()
    if pa.types.is_float64(t):
        return it.DoubleType()
    if pa.types.is_decimal(t):
        return it.DecimalType(t.precision, t.scale)
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return it.StringType()
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return it.BinaryType()
    if pa.types.is_fixed_size_binary(t):
        return it.FixedType(t.byte_width)
    if pa.types.is_date(t):
        return it.DateType()
    if pa.types.is_time(t):
        return it.TimeType()
    if pa.types.is_timestamp(t):
        return it.TimestamptzType() if t.tz else it.TimestampType()
    raise LakeError(f"column {name!r} has type {t}, which the Iceberg lake does not map; "
                    "exclude the table from the tiering pattern")


def encode_schema(schema: pa.Schema) -> str:
    return base64.b64encode(schema.remove_metadata().serialize().to_pybytes()).decode()


def decode_schema(text: str) -> pa.Schema:
    return pa.ipc.read_schema(pa.py_buffer(base64.b64decode(text)))


def to_storage(rows: pa.Table, iceberg_arrow: pa.Schema) -> pa.Table:
    return rows.cast(iceberg_arrow) if rows.schema != iceberg_arrow else rows


__all__ = ["decode_schema", "encode_schema", "iceberg_schema", "to_storage"]
