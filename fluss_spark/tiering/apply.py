"""Applying a round of changelog rows to a lake table's rows: fold by key (PK), append (log).

A round is the output of one micro-batch for one table: the table's columns plus
``_change_type`` and ``_log_offset``. For a primary-key table the lake state after the round is
the state before it with, for every key the round touches, the key's LAST record in log order
applied: ``+I``/``+U`` put that row, ``-U``/``-D`` remove the key. (Snapshot rows carry offset -1,
so they come before every changelog record; the records of one key all live in one bucket, whose
offsets are ordered.) A log table's round is appended as it is.
"""

from __future__ import annotations

from typing import Sequence

import pyarrow as pa
import pyarrow.compute as pc

from fluss_spark.client.cluster import (APPEND, CHANGE_TYPE, INSERT, LOG_OFFSET, RETRACTIONS,
                                        UPDATE_AFTER)
from fluss_spark.errors import ConfigError

UPSERT_TYPES = (INSERT, UPDATE_AFTER, APPEND)
DELETE_TYPES = RETRACTIONS


def conform(rows: pa.Table, schema: pa.Schema, *, keep: Sequence[str] = ()) -> pa.Table:
    """``rows`` with exactly ``schema``'s columns (cast to its types) plus the ``keep`` columns.

    Spark hands back its own Arrow types (e.g. microsecond timestamps); the lake stores the
    Fluss table's types, so a lake file and the table compare equal column by column.
    """
    missing = [f.name for f in schema if f.name not in rows.column_names]
    if missing:
        raise ConfigError(f"the changelog rows lack column(s) {', '.join(missing)} of the table "
                          f"(they have {', '.join(rows.column_names)})")
    arrays, fields = [], []
    for f in schema:
        col = rows.column(f.name)
        arrays.append(col if col.type == f.type else col.cast(f.type))
        fields.append(pa.field(f.name, f.type, True))
    for name in keep:
        arrays.append(rows.column(name))
        fields.append(rows.schema.field(name))
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


def last_per_key(changes: pa.Table, key: Sequence[str]) -> pa.Table:
    """The last record (highest ``_log_offset``) of every key, sorted by key."""
    if changes.num_rows == 0:
        return changes
    order = [(k, "ascending") for k in key] + [(LOG_OFFSET, "ascending")]
    ordered = changes.take(pc.sort_indices(changes, sort_keys=order))
    n = ordered.num_rows
    if n == 1:
        return ordered
    differs = None
    for k in key:
        col = ordered.column(k)
        step = pc.not_equal(col.slice(0, n - 1), col.slice(1))
        differs = step if differs is None else pc.or_(differs, step)
    last = pa.concat_arrays([differs.combine_chunks() if isinstance(differs, pa.ChunkedArray)
                             else differs, pa.array([True])])
    return ordered.filter(last)


def fold_changes(changes: pa.Table, key: Sequence[str]) -> tuple[pa.Table, pa.Table]:
    """Split a round of a PK table into (rows to put, keys touched).

    ``rows to put`` has the table's columns (no metadata); ``keys touched`` is every key that
    appears in the round, whose old lake row must go whatever happens to it.
    """
    last = last_per_key(changes, key)
    table_cols = [c for c in changes.column_names if c not in (CHANGE_TYPE, LOG_OFFSET)]
    unknown = pc.invert(pc.is_in(last.column(CHANGE_TYPE), pa.array(UPSERT_TYPES + DELETE_TYPES)))
    if pc.any(unknown).as_py():
        bad = sorted(set(last.filter(unknown).column(CHANGE_TYPE).to_pylist()))
        raise ConfigError(f"unknown change type(s) {bad} in the changelog")
    puts = last.filter(pc.is_in(last.column(CHANGE_TYPE), pa.array(UPSERT_TYPES)))
    return puts.select(table_cols), last.select(list(key))


def apply_pk(existing: pa.Table | None, changes: pa.Table, key: Sequence[str]) -> pa.Table:
    """The PK state after ``changes`` (table columns + metadata) are applied to ``existing``."""
    puts, touched = fold_changes(changes, key)
    if existing is None or existing.num_rows == 0:
        merged = puts
    else:
        existing = existing.select(puts.column_names)
        kept = existing.join(touched, keys=list(key), join_type="left anti")
        merged = pa.concat_tables([kept.select(puts.column_names).cast(puts.schema), puts])
    if merged.num_rows > 1:
        merged = merged.take(pc.sort_indices(merged, sort_keys=[(k, "ascending") for k in key]))
    return merged.combine_chunks()


def append_rows(changes: pa.Table) -> pa.Table:
    """A log table's round without its metadata columns (every record is an append)."""
    types = set(changes.column(CHANGE_TYPE).unique().to_pylist()) if changes.num_rows else set()
    if types - {APPEND, INSERT}:
        raise ConfigError(f"a log table's changelog has change type(s) {sorted(types - {APPEND})}; "
                          f"only appends ({APPEND}) are expected")
    return changes.select([c for c in changes.column_names if c not in (CHANGE_TYPE, LOG_OFFSET)])


__all__ = ["conform", "last_per_key", "fold_changes", "apply_pk", "append_rows"]
