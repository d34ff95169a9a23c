"""Table schemas: parse and print SQL-like column lists ("id BIGINT, name STRING") as Arrow, and
cast batches to them."""

from __future__ import annotations

import re
from typing import Callable

import pyarrow as pa

from fluss_spark.errors import ConfigError
from fluss_spark.protocol.changelog import CHANGE_TYPE, COMMIT_TIMESTAMP, LOG_OFFSET

_SIMPLE = {
    "TINYINT": pa.int8(), "INT8": pa.int8(),
    "SMALLINT": pa.int16(), "INT16": pa.int16(),
    "INT": pa.int32(), "INTEGER": pa.int32(), "INT32": pa.int32(),
    "BIGINT": pa.int64(), "INT64": pa.int64(), "LONG": pa.int64(),
    "FLOAT": pa.float32(), "REAL": pa.float32(),
    "DOUBLE": pa.float64(),
    "STRING": pa.string(), "VARCHAR": pa.string(), "TEXT": pa.string(),
    "BINARY": pa.binary(), "BYTES": pa.binary(), "VARBINARY": pa.binary(),
    "BOOLEAN": pa.bool_(), "BOOL": pa.bool_(),
    "DATE": pa.date32(),
    "TIMESTAMP": pa.timestamp("us"),
    "TIMESTAMP_LTZ": pa.timestamp("us", tz="UTC"),
}
_DECIMAL = re.compile(r"^DECIMAL\s*\(\s*(\d+)\s*,\s*(\d+)\s*\)$")
_COLUMN = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s+(.+?)\s*(NOT\s+NULL)?\s*$", re.IGNORECASE)

#: Column names the changelog (and the multi-table source layout's ``_table``) adds; a table
#: may not use them.
RESERVED_COLUMNS = (CHANGE_TYPE, LOG_OFFSET, COMMIT_TIMESTAMP, "_table")


def parse_type(text: str) -> pa.DataType:
    t = " ".join(text.strip().upper().split())
    if t in _SIMPLE:
        return _SIMPLE[t]
    m = _DECIMAL.match(t)
    if m:
        precision, scale = int(m.group(1)), int(m.group(2))
        if not 1 <= precision <= 38 or not 0 <= scale <= precision:
            raise ConfigError(f"DECIMAL({precision}, {scale}) is out of range: precision 1..38, "
                              "scale 0..precision")
        return pa.decimal128(precision, scale)
    raise ConfigError(f"unknown column type {text.strip()!r}; use one of "
                      f"{', '.join(sorted(set(_SIMPLE)))} or DECIMAL(p, s)")


def parse_schema(text: str) -> pa.Schema:
    """Parse ``"id BIGINT NOT NULL, name STRING, amount DECIMAL(10, 2)"`` into an Arrow schema."""
    fields, names = [], set()
    for part in _split_columns(text):
        m = _COLUMN.match(part)
        if not m:
            raise ConfigError(f"cannot parse column {part.strip()!r}: expected 'name TYPE'")
        name, type_text, not_null = m.group(1), m.group(2), m.group(3)
        if name.lower() in names:
            raise ConfigError(f"column {name!r} is declared twice")
        names.add(name.lower())
        fields.append(pa.field(name, parse_type(type_text), nullable=not not_null))
    if not fields:
        raise ConfigError("the schema has no columns")
    return pa.schema(fields)


def format_type(t: pa.DataType) -> str:
    for name, simple in _SIMPLE.items():
        if simple == t:
            return name
    if pa.types.is_decimal(t):
        return f"DECIMAL({t.precision}, {t.scale})"
    if pa.types.is_timestamp(t):
        return "TIMESTAMP_LTZ" if t.tz else "TIMESTAMP"
    return str(t).upper()


def is_supported_type(t: pa.DataType) -> bool:
    return (t in _SIMPLE.values() or pa.types.is_decimal128(t)
            or (pa.types.is_timestamp(t) and t.tz in (None, "UTC")))


def format_schema(schema: pa.Schema) -> str:
    return ", ".join(f"{f.name} {format_type(f.type)}{'' if f.nullable else ' NOT NULL'}"
                     for f in schema)


def validate_table_schema(schema: pa.Schema, primary_key: list[str], bucket_key: list[str]) -> None:
    """Check a table definition; raises ConfigError naming the problem."""
    names = schema.names
    for f in schema:
        if f.name in RESERVED_COLUMNS:
            raise ConfigError(f"column name {f.name!r} is reserved for changelog metadata")
        if not is_supported_type(f.type):
            raise ConfigError(f"column {f.name!r} has unsupported type {f.type}")
    for kind, cols in (("primary key", primary_key), ("bucket key", bucket_key)):
        for c in cols:
            if c not in names:
                raise ConfigError(f"{kind} column {c!r} is not in the schema ({', '.join(names)})")
    if primary_key and bucket_key and not set(bucket_key) <= set(primary_key):
        raise ConfigError("the bucket key of a primary-key table must be a subset of the "
                          "primary key")


def cast_columns(data: pa.Table, fields: list[pa.Field],
                 refuse: Callable[[pa.Field, pa.DataType, str], Exception]
                 ) -> list[pa.ChunkedArray]:
    """``data``'s columns named by ``fields``, each cast losslessly to its field's type;
    ``refuse(field, given type, reason)`` builds the error for a column that does not convert."""
    out = []
    for f in fields:
        col = data.column(f.name)
        if col.type != f.type:
            try:
                col = col.cast(f.type, safe=True)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
                raise refuse(f, col.type, str(e).splitlines()[0] if str(e) else type(e).__name__
                             ) from None
        out.append(col)
    return out


def _split_columns(text: str) -> list[str]:
    """Split on commas that are not inside parentheses (DECIMAL(10, 2)).

    An empty definition (``"id BIGINT,,"``, a leading or trailing comma) is refused, as are
    unbalanced parentheses; an empty or blank text has no columns (the caller says so)."""
    if not text.strip():
        return []
    parts: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth < 0:
                raise ConfigError(f"unbalanced ')' in the schema {text.strip()!r}")
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if depth:
        raise ConfigError(f"unbalanced '(' in the schema {text.strip()!r}")
    parts.append("".join(cur))
    for n, part in enumerate(parts, 1):
        if not part.strip():
            raise ConfigError(f"column {n} of {len(parts)} in the schema {text.strip()!r} is "
                              f"empty (a comma too many?); expected 'name TYPE, ...'")
    return parts
