"""Schema changes: which are allowed (nullable columns appended at the end) and how rows of an
older or newer schema are brought to the schema a reader wants."""

from __future__ import annotations

from typing import Sequence

import pyarrow as pa

from fluss_spark.errors import ConfigError
from fluss_spark.protocol.types import validate_table_schema

#: A column as a checkpoint records it: (name, type text).
ColumnText = tuple[str, str]


def add_columns(table: str, schema: pa.Schema, added: pa.Schema,
                primary_key: Sequence[str] = ()) -> pa.Schema:
    """``schema`` with the columns of ``added`` appended; a ``ConfigError`` names a column that
    is NOT NULL, already there, repeated, reserved, of an unsupported type, or none at all."""
    if not len(added):
        raise ConfigError(f"table {table}: no column to add; name one as 'name TYPE'")
    seen = set(schema.names)
    for f in added:
        if f.name in seen and f.name not in schema.names:
            raise ConfigError(f"table {table}: column {f.name!r} is added twice; name it once")
        if f.name in seen:
            where = "primary key column" if f.name in primary_key else "column"
            raise ConfigError(f"table {table} already has a {where} {f.name!r}; choose another "
                              "name (columns are only added, never replaced)")
        if not f.nullable:
            raise ConfigError(f"table {table}: an added column must be nullable (rows written "
                              f"before it read it as null); drop NOT NULL from {f.name!r}")
        seen.add(f.name)
    new = pa.schema(list(schema) + list(added), metadata=schema.metadata)
    validate_table_schema(new, list(primary_key), [])
    return new


def conform(data: pa.Table | pa.RecordBatch, schema: pa.Schema,
            keep: Sequence[str] = ()) -> pa.Table | pa.RecordBatch:
    """``data`` with the columns of ``schema`` in its order, a column ``data`` lacks (added
    after ``data`` was written) as nulls, then the columns named in ``keep``; others dropped."""
    names = data.schema.names
    if names == schema.names + list(keep):
        return data
    arrays = [data.column(f.name) if f.name in names else pa.nulls(data.num_rows, f.type)
              for f in schema]
    fields = list(schema)
    for name in keep:
        arrays.append(data.column(name))
        fields.append(data.schema.field(name))
    if isinstance(data, pa.RecordBatch):
        return pa.RecordBatch.from_arrays(arrays, schema=pa.schema(fields))
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


def column_texts(schema: pa.Schema) -> tuple[ColumnText, ...]:
    """The columns of ``schema`` as (name, type text) pairs."""
    return tuple((f.name, str(f.type)) for f in schema)


def additive_problem(before: Sequence[ColumnText], after: Sequence[ColumnText]) -> str | None:
    """None when ``after`` is ``before`` with columns appended (or the same); else what
    differs, in words."""
    before, after = [(c[0], c[1]) for c in before], [(c[0], c[1]) for c in after]
    if after[:len(before)] == before:
        return None
    names = [n for n, _ in after]
    for i, (name, type_) in enumerate(before):
        if name not in names:
            return f"column {name!r} is gone"
        now = after[names.index(name)]
        if now[1] != type_:
            return f"column {name!r} changed type from {type_} to {now[1]}"
        if names.index(name) != i:
            return f"column {name!r} moved from position {i + 1} to {names.index(name) + 1}"
    return "the columns changed"


__all__ = ["ColumnText", "add_columns", "additive_problem", "column_texts", "conform"]
