"""What a write does with a DataFrame's columns: checked once on the driver (``plan_write``),
applied to every Arrow batch on the executors (``WritePlan.prepare``).

Columns are matched by name. The source's metadata columns ``_log_offset`` and
``_commit_timestamp`` are dropped; ``_change_type``, when present, says what each row does:
``+I``/``+U`` upsert, ``-D`` deletes by key, ``-U`` is skipped (its ``+U`` follows), ``+A`` (a
log table's row) upserts; on a log table ``+A``/``+I`` append. Anything that cannot be written is
refused with one line that names the table and the column, before the batch is handed to a
writer.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from fluss_spark.client.cluster import (APPEND, CHANGE_TYPE, COMMIT_TIMESTAMP, DELETE, INSERT,
                                        LOG_OFFSET, UPDATE_AFTER, UPDATE_BEFORE, TableInfo)
from fluss_spark.errors import ConfigError

#: Source columns that carry no table data: dropped from what is written.
DROPPED = (LOG_OFFSET, COMMIT_TIMESTAMP)
#: Change types a primary-key table takes, and what each does.
PK_CHANGES = {INSERT: "upsert", UPDATE_AFTER: "upsert", DELETE: "delete", UPDATE_BEFORE: "skip",
              APPEND: "upsert"}
#: Change types a log table takes (all append).
LOG_CHANGES = {APPEND: "append", INSERT: "append"}

_INT_BITS = {pa.int8(): 8, pa.int16(): 16, pa.int32(): 32, pa.int64(): 64}


def fits(given: pa.DataType, target: pa.DataType) -> bool:
    """Whether values of ``given`` go into a column of ``target`` without a user's cast: the
    same type, a wider integer, float or decimal, any timestamp (to the column's unit and zone),
    or the large/small variant of a string or binary."""
    if given == target:
        return True
    if given in _INT_BITS and target in _INT_BITS:
        return _INT_BITS[given] <= _INT_BITS[target]
    if pa.types.is_floating(given) and pa.types.is_floating(target):
        return given.bit_width <= target.bit_width
    if pa.types.is_decimal(given) and pa.types.is_decimal(target):
        return (given.scale <= target.scale
                and given.precision - given.scale <= target.precision - target.scale)
    if pa.types.is_timestamp(given) and pa.types.is_timestamp(target):
        return True
    for kinds in ((pa.types.is_string, pa.types.is_large_string),
                  (pa.types.is_binary, pa.types.is_large_binary)):
        if any(k(given) for k in kinds) and any(k(target) for k in kinds):
            return True
    return False


@dataclass(frozen=True)
class WritePlan:
    """How the input columns become rows of one table (picklable: it travels to executors)."""

    table: str
    #: The table's schema: what every prepared piece has.
    schema: pa.Schema
    primary_key: tuple[str, ...]
    #: Input columns that hold table columns (the others are dropped or ``_change_type``).
    columns: tuple[str, ...]
    #: Whether the input has a ``_change_type`` column.
    change_type: bool
    #: A partial update of a PK table: the table columns written, in table order (the others
    #: keep their values); None: every column.
    partial: tuple[str, ...] | None = None
    #: The table's partition keys (empty: not partitioned).
    partition_keys: tuple[str, ...] = ()

    @property
    def output(self) -> pa.Schema:
        """The schema of every prepared piece: the table's, or the partial update's columns."""
        if self.partial is None:
            return self.schema
        return pa.schema([self.schema.field(c) for c in self.partial])

    @property
    def what(self) -> str:
        return f"write to {self.table}"

    def prepare(self, batch: pa.RecordBatch) -> list[tuple[str, pa.Table]]:
        """``batch`` as ``(op, rows)`` pieces, to be written in order: ``append`` (log
        table), ``upsert`` and ``delete`` (PK table); ConfigError when any row cannot be written
        (then nothing of the batch is returned)."""
        data = pa.Table.from_batches([batch])
        ops = self._ops(data)
        rows = self._conform(data)
        if not self.primary_key:
            if ops is not None:
                rows = rows.filter(pc.is_valid(ops))
            self._check_nulls(rows, self.partition_keys, "partition key")
            return [("append", rows)] if rows.num_rows else []
        upsert = pc.equal(ops, "upsert") if ops is not None else None
        delete = pc.equal(ops, "delete") if ops is not None else None
        keep = pc.or_(upsert, delete) if ops is not None else None
        self._check_nulls(rows if keep is None else rows.filter(keep), self.primary_key,
                          "primary-key")
        required = tuple(f.name for f in self.output
                         if not f.nullable and f.name not in self.primary_key)
        self._check_nulls(rows if upsert is None else rows.filter(upsert), required, "NOT NULL")
        if ops is None:
            return [("upsert", rows)] if rows.num_rows else []
        n_delete = pc.sum(delete).as_py() or 0
        if not n_delete:
            ups = rows.filter(upsert)
            return [("upsert", ups)] if ups.num_rows else []
        # Upserts and deletes are sent as two calls: keep each key's last change only, so the
        # two sets share no key and their order no longer matters (the table ends the same).
        kept = rows.filter(keep).append_column("__op", ops.filter(keep))
        last = _last_per_key(kept, list(self.primary_key))
        op = last.column("__op")
        last = last.drop_columns(["__op"])
        out = [("upsert", last.filter(pc.equal(op, "upsert"))),
               ("delete", last.filter(pc.equal(op, "delete")))]
        return [(o, t) for o, t in out if t.num_rows]

    def _ops(self, data: pa.Table) -> pa.ChunkedArray | None:
        """The op of every row (null: skipped), from ``_change_type``; None without it."""
        if not self.change_type:
            return None
        types = data.column(CHANGE_TYPE)
        allowed = PK_CHANGES if self.primary_key else LOG_CHANGES
        if types.null_count:
            raise ConfigError(f"{self.what}: column {CHANGE_TYPE} is null in "
                              f"{types.null_count} row(s); use {_listed(allowed)}")
        bad = sorted(set(pc.unique(types).to_pylist()) - set(allowed))
        if bad:
            kind = "a primary-key" if self.primary_key else "a log"
            raise ConfigError(f"{self.what}: column {CHANGE_TYPE} has value(s) "
                              f"{', '.join(map(repr, bad[:5]))} that {kind} table does not "
                              f"take; use {_listed(allowed)}")
        keys = list(allowed)
        index = pc.index_in(types, value_set=pa.array(keys))
        ops = pa.array([allowed[k] if allowed[k] != "skip" else None for k in keys], pa.string())
        return pc.take(ops, index)

    def _conform(self, data: pa.Table) -> pa.Table:
        """The table's columns in its order and types; a missing (nullable) one is null."""
        arrays = []
        for f in self.output:
            if f.name not in self.columns:
                arrays.append(pa.nulls(data.num_rows, f.type))
                continue
            col = data.column(f.name)
            if col.type != f.type:
                # Timestamps may lose sub-unit digits (a table of milliseconds); every other
                # cast that ``fits`` allows is exact, so an overflow would still be refused.
                col = col.cast(f.type, safe=not pa.types.is_timestamp(f.type))
            arrays.append(col)
        return pa.Table.from_arrays(arrays, schema=self.output)

    def _check_nulls(self, rows: pa.Table, columns: tuple[str, ...], kind: str) -> None:
        for name in columns:
            nulls = rows.column(name).null_count
            if nulls:
                raise ConfigError(f"{self.what}: {kind} column {name!r} is null in {nulls} "
                                  "row(s); filter them out or fill them before writing")


def _listed(allowed: dict[str, str]) -> str:
    return ", ".join(f"{k} ({v})" for k, v in allowed.items())


def _last_per_key(rows: pa.Table, key: list[str]) -> pa.Table:
    """The last row of each key, in the order of those last rows."""
    indexed = rows.append_column("__row", pa.array(range(rows.num_rows), pa.int64()))
    last = indexed.group_by(key, use_threads=False).aggregate([("__row", "max")])
    ends = last.column("__row_max")
    return rows.take(pc.take(ends, pc.sort_indices(ends)))


def plan_write(info: TableInfo, given: pa.Schema, partial_updates: bool = False) -> WritePlan:
    """The plan for writing columns ``given`` (the DataFrame's, as Arrow) to table ``info``;
    ConfigError for a column the table does not have, a table column that is missing and may
    not be, or a type that does not fit. A PK table's missing nullable columns make a partial
    update where the cluster has them (``partial_updates``), else are refused."""
    what = f"write to {info.name}"
    names = given.names
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ConfigError(f"{what}: the DataFrame has column(s) {', '.join(dupes)} twice")
    table_names = info.schema.names
    has_change_type = CHANGE_TYPE in names
    if has_change_type and not pa.types.is_string(given.field(CHANGE_TYPE).type):
        raise ConfigError(f"{what}: column {CHANGE_TYPE} must be a string (+I, +U, -U, -D), "
                          f"got {given.field(CHANGE_TYPE).type}")
    columns = [n for n in names if n != CHANGE_TYPE and n not in DROPPED]
    unknown = [n for n in columns if n not in table_names]
    if unknown:
        raise ConfigError(f"{what}: column(s) {', '.join(unknown)} are not in the table (it has "
                          f"{', '.join(table_names)}); drop or rename them")
    missing = [f for f in info.schema if f.name not in columns]
    must = [f.name for f in missing if not f.nullable or f.name in info.primary_key]
    if must:
        raise ConfigError(f"{what}: missing column(s) {', '.join(must)} (primary key or NOT "
                          f"NULL); the table has {', '.join(table_names)}")
    partial = None
    if missing and info.has_primary_key:
        if not partial_updates:
            raise ConfigError(f"{what}: missing column(s) {', '.join(f.name for f in missing)}: "
                              "this cluster has no partial updates of a primary-key table; "
                              "give every column (lit(None) to write nulls)")
        partial = tuple(n for n in table_names if n in columns)
    for n in columns:
        source, target = given.field(n).type, info.schema.field(n).type
        if not fits(source, target):
            raise ConfigError(f"{what}: column {n!r} has type {source}, which does not fit the "
                              f"table's {target}; cast it first")
    return WritePlan(info.name, info.schema, tuple(info.primary_key), tuple(columns),
                     has_change_type, partial, tuple(info.partition_keys))


__all__ = ["WritePlan", "fits", "plan_write"]
