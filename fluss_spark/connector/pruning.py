"""Partition pruning of batch reads: the filters on partition columns that Spark pushes down
decide which partitions are planned.

Spark (>= 4.1, with ``spark.sql.python.filterPushdown.enabled=true``) hands
``DataSourceReader.pushFilters`` the conjuncts of a query's filter (``AND`` is the list itself).
Those this module takes (``=``, ``<=>``, ``IN``, ``<``, ``<=``, ``>``, ``>=``, ``IS NULL``,
``IS NOT NULL`` on a partition column of the single-table layout, with a value of the column's
type) hold for a whole partition or for none of its rows, since every row of a partition has its
values: they are applied to partition names only, and Spark does not evaluate them again. Every
other filter goes back to Spark.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Any, Iterable, Iterator

import pyarrow as pa
from pyspark.sql.datasource import (EqualNullSafe, EqualTo, Filter, GreaterThan,
                                    GreaterThanOrEqual, In, IsNotNull, IsNull, LessThan,
                                    LessThanOrEqual)

from fluss_spark.client.cluster import TableInfo, partition_values

_OPS: dict[type, str] = {EqualTo: "=", EqualNullSafe: "=", In: "in", GreaterThan: ">",
                         GreaterThanOrEqual: ">=", LessThan: "<", LessThanOrEqual: "<=",
                         IsNull: "null", IsNotNull: "not null"}


@dataclass(frozen=True)
class PartitionFilter:
    """One pushed filter on a partition column: ``op`` and its values (plain data, pickled with
    the reader)."""

    column: str
    op: str
    values: tuple[Any, ...] = ()

    def holds(self, value: Any) -> bool:
        """Whether a partition whose ``column`` is ``value`` (never null) passes."""
        if self.op == "null":
            return False
        if self.op == "not null":
            return True
        if self.op in ("=", "in"):
            return value in self.values
        bound = self.values[0]
        return {">": value > bound, ">=": value >= bound, "<": value < bound,
                "<=": value <= bound}[self.op]


def _python_type(t: pa.DataType) -> type | None:
    """The Python type Spark gives a filter value on a column of Arrow type ``t``, where a
    partition value of that type compares as Spark compares the column."""
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return str
    if pa.types.is_boolean(t):
        return bool
    if pa.types.is_integer(t):
        return int
    if pa.types.is_date32(t):
        return datetime.date
    return None


def _typed(value: Any, kind: type) -> bool:
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if kind is datetime.date:
        return isinstance(value, datetime.date) and not isinstance(value, datetime.datetime)
    return isinstance(value, kind)


def push(filters: Iterable[Filter], info: TableInfo
         ) -> tuple[list[PartitionFilter], list[Filter]]:
    """Split Spark's pushed ``filters`` into the partition filters taken and the rest."""
    kinds = {k: _python_type(info.schema.field(k).type) for k in info.partition_keys}
    taken: list[PartitionFilter] = []
    rest: list[Filter] = []
    for f in filters:
        op = _OPS.get(type(f))
        attribute: tuple[str, ...] = getattr(f, "attribute", ())
        column = attribute[0] if len(attribute) == 1 else None
        kind = kinds.get(column) if column is not None else None
        if op is None or column is None or kind is None:
            rest.append(f)
            continue
        values: tuple[Any, ...] = ()
        if op == "in":
            values = tuple(getattr(f, "value"))
        elif op not in ("null", "not null"):
            values = (getattr(f, "value"),)
        # A null value (``dt = NULL`` matches nothing, ``dt <=> NULL`` no partition) holds for
        # no partition; a value of another type would compare differently here: Spark's job.
        if any(v is not None and not _typed(v, kind) for v in values):
            rest.append(f)
            continue
        if op not in ("=", "in") and any(v is None for v in values):
            rest.append(f)
            continue
        taken.append(PartitionFilter(column, op, tuple(v for v in values if v is not None)))
    return taken, rest


def column_value(text: str, t: pa.DataType) -> Any:
    """A partition value (text) as the column's Python value."""
    kind = _python_type(t)
    if kind is bool:
        return text == "true"
    if kind is int:
        return int(text)
    if kind is datetime.date:
        return datetime.date.fromisoformat(text)
    return text


def matching(info: TableInfo, filters: Iterable[PartitionFilter]) -> Iterator[tuple[int, str]]:
    """``(partition id, name)`` of the partitions of ``info`` every filter holds for, by name."""
    filters = list(filters)
    keys = list(info.partition_keys)
    for p in sorted(info.partitions, key=lambda p: p.name):
        values = dict(zip(keys, partition_values(p.name)))
        try:
            typed = {k: column_value(values[k], info.schema.field(k).type)
                     for k in {f.column for f in filters}}
        except ValueError:
            # A value the column cannot hold (a partition created by hand): no row can be in
            # it, since a row's partition is named by its own values.
            continue
        if all(f.holds(typed[f.column]) for f in filters):
            yield p.partition_id, p.name


__all__ = ["PartitionFilter", "column_value", "matching", "push"]
