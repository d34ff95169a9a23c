"""Partitions as Fluss models them: keys, specs, names, and the values of rows.

A partitioned table names its partition keys at create time. A partition is one combination of
values of those keys, written on the command line as a spec ``key=value[,key=value...]``
(``dt=2026-11-25``). Its name is its values in key order joined by ``$`` (Fluss's
``ResolvedPartitionSpec``): ``2026-11-25``, or ``2026-11-25$eu`` for keys ``(dt, region)``. A
value is 1..200 of ``A-Z a-z 0-9 _ -`` and does not start with ``__`` (Fluss's rule for names),
so a name is also a valid ZooKeeper node name and file name.
"""

from __future__ import annotations

import datetime
import re
from typing import Any, Mapping, Sequence

import pyarrow as pa

from fluss_spark.errors import ConfigError

#: Joins the values of a partition into its name (Fluss's PARTITION_SPEC_SEPARATOR).
SEPARATOR = "$"
_VALUE = re.compile(r"[A-Za-z0-9_-]{1,200}")
#: Most partition keys a table may have.
MAX_PARTITION_KEYS = 8


def _is_partition_key_type(t: pa.DataType) -> bool:
    """Types whose values print to a partition value exactly (Fluss allows a few more)."""
    return (pa.types.is_string(t) or pa.types.is_integer(t) or pa.types.is_boolean(t)
            or pa.types.is_date32(t))


def check_partition_keys(table: str, schema: pa.Schema, primary_key: Sequence[str],
                         bucket_key: Sequence[str], partition_keys: Sequence[str]) -> list[str]:
    """Check the partition keys of a new table; return its bucket key.

    Raises ConfigError naming the problem. For a PK table every partition key must be part of
    the primary key (a key's partition is then fixed by the key), and the default bucket key is
    the primary key without the partition keys (rows of one partition spread over its buckets).
    """
    keys = list(partition_keys)
    if not keys:
        return list(bucket_key) or list(primary_key)
    if len(set(keys)) != len(keys):
        raise ConfigError(f"table {table}: partition keys {keys} name a column twice")
    if len(keys) > MAX_PARTITION_KEYS:
        raise ConfigError(f"table {table}: at most {MAX_PARTITION_KEYS} partition keys, "
                          f"got {len(keys)}")
    for k in keys:
        if k not in schema.names:
            raise ConfigError(f"table {table}: partition key {k!r} is not a column "
                              f"({', '.join(schema.names)})")
        t = schema.field(k).type
        if not _is_partition_key_type(t):
            raise ConfigError(f"table {table}: partition key {k!r} has type {t}; use a STRING, "
                              "integer, BOOLEAN or DATE column")
    pk = list(primary_key)
    if pk:
        missing = [k for k in keys if k not in pk]
        if missing:
            raise ConfigError(f"table {table}: partition key(s) {', '.join(missing)} must be part "
                              f"of the primary key ({', '.join(pk)}); add them to it")
        if not bucket_key:
            physical = [c for c in pk if c not in keys]
            if not physical:
                raise ConfigError(f"table {table}: the primary key ({', '.join(pk)}) must have a "
                                  "column besides the partition keys")
            return physical
    return list(bucket_key)


def check_value(value: str, key: str = "partition value") -> str:
    if not isinstance(value, str) or not _VALUE.fullmatch(value) or value.startswith("__"):
        raise ConfigError(f"{key} {value!r} is invalid: use 1..200 letters, digits, '_' or '-', "
                          "not starting with '__'")
    return value


def parse_spec(text: str) -> dict[str, str]:
    """``"dt=2026-11-25,region=eu"`` -> ``{"dt": "2026-11-25", "region": "eu"}``."""
    spec: dict[str, str] = {}
    for item in str(text).split(","):
        key, sep, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key:
            raise ConfigError(f"partition spec {text!r}: expected key=value[,key=value...], "
                              f"e.g. dt=2026-11-25")
        if key in spec:
            raise ConfigError(f"partition spec {text!r} names {key!r} twice")
        spec[key] = value
    return spec


def resolve(table: str, partition_keys: Sequence[str], spec: Mapping[str, str]) -> tuple:
    """The values of ``spec`` in key order; ConfigError unless it names exactly the keys."""
    keys = list(partition_keys)
    if not keys:
        raise ConfigError(f"table {table} is not partitioned; drop the partition spec")
    if set(spec) != set(keys):
        raise ConfigError(f"partition spec {spec_text(spec.keys(), spec.values())} does not "
                          f"match the partition keys of {table} ({', '.join(keys)})")
    return tuple(check_value(spec[k], f"partition value of {k!r}") for k in keys)


def partition_name(values: Sequence[str]) -> str:
    """Fluss's partition name: the values joined by ``$``."""
    return SEPARATOR.join(values)


def values_of(name: str) -> tuple:
    return tuple(name.split(SEPARATOR))


def spec_text(keys, values) -> str:
    """The command line's form of a partition: ``key=value[,key=value...]``."""
    return ",".join(f"{k}={v}" for k, v in zip(keys, values))


def value_text(value: Any) -> str:
    """The partition value of a column value (Fluss's formatting for these types)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, datetime.date) and not isinstance(value, datetime.datetime):
        return value.isoformat()
    if value is None:
        raise ConfigError("a partition key column holds null; partition values must be set")
    return str(value)


__all__ = ["MAX_PARTITION_KEYS", "SEPARATOR", "check_partition_keys",
           "check_value", "parse_spec", "partition_name", "resolve", "spec_text", "value_text",
           "values_of"]
