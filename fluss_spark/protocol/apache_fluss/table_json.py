"""Apache Fluss table descriptors (JSON) to and from Arrow schemas.

Two Arrow schemas per Fluss schema: ``arrow_schema`` is what this project shows (a
``TIMESTAMP_LTZ`` column is a UTC timestamp) and ``arrow_wire_schema`` is what Fluss writes in
its log record batches (every timestamp without a zone); both have the same columns in order.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from fluss_spark.errors import ConfigError, CorruptMessage

_SIMPLE: dict[str, pa.DataType] = {
    "BOOLEAN": pa.bool_(), "TINYINT": pa.int8(), "SMALLINT": pa.int16(), "INTEGER": pa.int32(),
    "BIGINT": pa.int64(), "FLOAT": pa.float32(), "DOUBLE": pa.float64(), "DATE": pa.date32(),
    "STRING": pa.string(), "CHAR": pa.string(), "BYTES": pa.binary(),
}
_UNITS = ("s", "ms", "ms", "ms", "us", "us", "us", "ns", "ns", "ns")
_PRECISION = {"s": 0, "ms": 3, "us": 6, "ns": 9}


def _unit(precision: int) -> str:
    return _UNITS[max(0, min(precision, 9))]


def arrow_type(node: dict, *, wire: bool = False) -> pa.DataType:
    """The Arrow type of a Fluss data-type JSON node (``wire``: as in log record batches)."""
    root = node.get("type")
    if root in _SIMPLE:
        return _SIMPLE[root]
    if root == "BINARY":
        return pa.binary(int(node["length"]))
    if root == "DECIMAL":
        return pa.decimal128(int(node["precision"]), int(node["scale"]))
    if root == "TIME_WITHOUT_TIME_ZONE":
        unit = _unit(int(node.get("precision", 0)))
        return pa.time32(unit) if unit in ("s", "ms") else pa.time64(unit)
    if root == "TIMESTAMP_WITHOUT_TIME_ZONE":
        return pa.timestamp(_unit(int(node.get("precision", 6))))
    if root == "TIMESTAMP_WITH_LOCAL_TIME_ZONE":
        return pa.timestamp(_unit(int(node.get("precision", 6))), None if wire else "UTC")
    if root == "ARRAY":
        return pa.list_(_arrow_field("element", node["element_type"], wire))
    if root == "MAP":
        return pa.map_(_arrow_field("key", node["key_type"], wire),
                       _arrow_field("value", node["value_type"], wire))
    if root == "ROW":
        return pa.struct([_arrow_field(f["name"], f["field_type"], wire)
                          for f in node["fields"]])
    raise CorruptMessage(f"unsupported Fluss data type {root!r}")


def _arrow_field(name: str, node: dict, wire: bool) -> pa.Field:
    return pa.field(name, arrow_type(node, wire=wire), nullable=node.get("nullable", True))


def fluss_type(t: pa.DataType, nullable: bool = True) -> dict:
    """The Fluss data-type JSON node of an Arrow type."""
    node: dict[str, Any]
    if pa.types.is_timestamp(t):
        root = "TIMESTAMP_WITH_LOCAL_TIME_ZONE" if t.tz else "TIMESTAMP_WITHOUT_TIME_ZONE"
        node = {"type": root, "precision": _PRECISION[t.unit]}
    elif pa.types.is_decimal(t):
        node = {"type": "DECIMAL", "precision": t.precision, "scale": t.scale}
    elif pa.types.is_fixed_size_binary(t):
        node = {"type": "BINARY", "length": t.byte_width}
    elif pa.types.is_time(t):
        node = {"type": "TIME_WITHOUT_TIME_ZONE", "precision": _PRECISION[t.unit]}
    elif pa.types.is_large_string(t):
        node = {"type": "STRING"}
    elif pa.types.is_large_binary(t):
        node = {"type": "BYTES"}
    elif pa.types.is_map(t):
        node = {"type": "MAP", "key_type": fluss_type(t.key_type, False),
                "value_type": fluss_type(t.item_type, t.item_field.nullable)}
    elif pa.types.is_list(t):
        node = {"type": "ARRAY",
                "element_type": fluss_type(t.value_type, t.value_field.nullable)}
    elif pa.types.is_struct(t):
        node = {"type": "ROW", "fields": [
            {"name": f.name, "field_type": fluss_type(f.type, f.nullable), "field_id": i}
            for i, f in enumerate(t)]}
    else:
        roots = {v: k for k, v in _SIMPLE.items() if k != "CHAR"}
        if t not in roots:
            raise ConfigError(f"Arrow type {t} has no Apache Fluss counterpart")
        node = {"type": roots[t]}
    if not nullable:
        node["nullable"] = False
    return node


@dataclass(frozen=True)
class FlussTableDescriptor:
    """The parts of a Fluss table descriptor this project uses."""

    schema: pa.Schema
    wire_schema: pa.Schema
    primary_key: tuple[str, ...] = ()
    bucket_key: tuple[str, ...] = ()
    partition_key: tuple[str, ...] = ()
    bucket_count: int | None = None
    properties: dict[str, str] = field(default_factory=dict)
    comment: str | None = None


def parse_schema_json(schema: dict) -> tuple[pa.Schema, pa.Schema, tuple[str, ...]]:
    """(Arrow schema, Arrow wire schema, primary key) of a Fluss schema JSON object."""
    try:
        columns = schema["columns"]
        fields = [_arrow_field(c["name"], c["data_type"], False) for c in columns]
        wire = [_arrow_field(c["name"], c["data_type"], True) for c in columns]
    except (KeyError, TypeError) as e:
        raise CorruptMessage(f"Fluss schema JSON lacks {e}") from None
    return pa.schema(fields), pa.schema(wire), tuple(schema.get("primary_key", ()))


def parse_table_json(data: bytes | str) -> FlussTableDescriptor:
    """A table descriptor from Fluss's table JSON (GET_TABLE_INFO, GET_METADATA)."""
    try:
        node = json.loads(data)
    except ValueError as e:
        raise CorruptMessage(f"Fluss table JSON does not parse: {e}") from None
    schema, wire, pk = parse_schema_json(node["schema"])
    return FlussTableDescriptor(
        schema=schema, wire_schema=wire, primary_key=pk,
        bucket_key=tuple(node.get("bucket_key", ())),
        partition_key=tuple(node.get("partition_key", ())),
        bucket_count=node.get("bucket_count"),
        properties={str(k): str(v) for k, v in node.get("properties", {}).items()},
        comment=node.get("comment"))


def table_json(schema: pa.Schema, *, primary_key: tuple[str, ...] | list[str] = (),
               bucket_key: tuple[str, ...] | list[str] | None = None, buckets: int = 1,
               properties: dict[str, str] | None = None, comment: str | None = None,
               partition_keys: tuple[str, ...] | list[str] = ()) -> bytes:
    """Fluss's table JSON for CREATE_TABLE: the schema (primary-key columns NOT NULL), the
    partition keys, one bucket key (the primary key by default) and bucket count, and table
    properties."""
    pk = list(primary_key)
    unknown = [c for c in pk + list(bucket_key or ()) + list(partition_keys)
               if c not in schema.names]
    if unknown:
        raise ConfigError(f"key column(s) {unknown} are not in the schema {schema.names}")
    columns = [{"name": f.name,
                "data_type": fluss_type(f.type, f.nullable and f.name not in pk),
                "id": i} for i, f in enumerate(schema)]
    schema_node: dict[str, Any] = {"version": 1, "columns": columns}
    if pk:
        schema_node["primary_key"] = pk
    schema_node["highest_field_id"] = len(columns) - 1
    node: dict[str, Any] = {"version": 1, "schema": schema_node}
    if comment is not None:
        node["comment"] = comment
    node["partition_key"] = list(partition_keys)
    node["bucket_key"] = list(bucket_key) if bucket_key is not None else pk
    node["bucket_count"] = int(buckets)
    node["properties"] = dict(properties or {})
    node["custom_properties"] = {}
    return json.dumps(node).encode()


__all__ = ["FlussTableDescriptor", "arrow_type", "fluss_type", "parse_schema_json",
           "parse_table_json", "table_json"]
