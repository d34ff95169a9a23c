"""TableWriter: append, upsert and delete rows; conversion of user data to the table schema."""

from __future__ import annotations

import itertools
import random
import threading
from typing import Any, Mapping, Sequence, TypeAlias

import pyarrow as pa

from fluss_spark.client import partition_names
from fluss_spark.client.embedded import partitions
from fluss_spark.config import (CLIENT_WRITER_OPTIONS, WRITER_BATCH_SIZE,
                                WRITER_DYNAMIC_CREATE_PARTITION, check_known)
from fluss_spark.errors import ConfigError, NonPrimaryKeyTable
from fluss_spark.protocol.arrow_ipc import table_to_bytes
from fluss_spark.protocol.messages import ProduceRequest, TableInfo
from fluss_spark.protocol.rows import split_by_bucket
from fluss_spark.protocol.types import cast_columns

#: Largest Arrow payload sent in one PRODUCE request; bigger batches go in several.
MAX_REQUEST_BYTES = 8 << 20
#: Most rows sent in one PRODUCE request: half a server's default ``rpc.arrow.max-request-rows``,
#: which only a table of under 2 bytes a row reaches before ``MAX_REQUEST_BYTES``.
MAX_REQUEST_ROWS = 4_000_000

Data: TypeAlias = pa.Table | pa.RecordBatch | Sequence[dict] | Sequence[tuple]
#: Where rows go: a bucket, or ``(partition id, bucket)`` for a partitioned table.
Place: TypeAlias = int | tuple[int, int]


def to_arrow(data: Any, schema: pa.Schema, what: str = "rows") -> pa.Table:
    """Convert ``data`` to a table of exactly ``schema`` (column order and types).

    Accepts an Arrow table or batch (columns matched by name, cast safely), a list of dicts
    (keys are column names) or a list of tuples (values in schema order). Raises ConfigError
    naming a missing, extra or mistyped column.
    """
    if isinstance(data, pa.RecordBatch):
        data = pa.Table.from_batches([data])
    if isinstance(data, pa.Table):
        return _conform_table(data, schema, what)
    if hasattr(data, "to_arrow") and not isinstance(data, (list, tuple)):
        return _conform_table(data.to_arrow(), schema, what)   # e.g. a polars frame
    if isinstance(data, (list, tuple)):
        rows = list(data)
        if not rows:
            return schema.empty_table()
        if all(isinstance(r, dict) for r in rows):
            return _from_dicts(rows, schema, what)
        if all(isinstance(r, (tuple, list)) for r in rows):
            return _from_tuples(rows, schema, what)
        raise ConfigError(f"{what}: rows must be all dicts or all tuples, got a mix of "
                          f"{sorted({type(r).__name__ for r in rows})}")
    raise ConfigError(f"{what}: expected a pyarrow Table/RecordBatch or a list of dicts or tuples, "
                      f"got {type(data).__name__}")


def _check_names(given: Sequence[str], schema: pa.Schema, what: str) -> None:
    names = schema.names
    missing = [n for n in names if n not in given]
    extra = [n for n in given if n not in names]
    if missing:
        raise ConfigError(f"{what}: missing column(s) {', '.join(missing)}; the table has "
                          f"columns {', '.join(names)}")
    if extra:
        raise ConfigError(f"{what}: unknown column(s) {', '.join(extra)}; the table has "
                          f"columns {', '.join(names)}")


def _conform_table(table: pa.Table, schema: pa.Schema, what: str) -> pa.Table:
    given = table.schema.names
    if len(set(given)) != len(given):
        dup = sorted({n for n in given if given.count(n) > 1})
        raise ConfigError(f"{what}: duplicate column(s) {', '.join(dup)}")
    _check_names(given, schema, what)
    if table.schema.names == schema.names and table.schema.equals(schema, check_metadata=False):
        return table.replace_schema_metadata(None) if table.schema.metadata else table
    arrays = cast_columns(table, list(schema), lambda f, given, reason: ConfigError(
        f"{what}: column {f.name!r} has type {given}, which does not convert to {f.type}: "
        f"{reason}"))
    return pa.Table.from_arrays(arrays, schema=schema)


def _column(values: list, f: pa.Field, what: str) -> pa.Array:
    try:
        return pa.array(values, type=f.type)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError) as e:
        raise ConfigError(f"{what}: column {f.name!r} ({f.type}) got a value that does not "
                          f"convert: {_first_line(e)}") from None


def _from_dicts(rows: list[dict], schema: pa.Schema, what: str) -> pa.Table:
    keys = set().union(*(r.keys() for r in rows))
    names = set(schema.names)
    if keys != names:
        _check_names([k for k in keys], schema, what)
    return pa.Table.from_arrays([_column([r.get(f.name) for r in rows], f, what) for f in schema],
                                schema=schema)


def _from_tuples(rows: list[Sequence], schema: pa.Schema, what: str) -> pa.Table:
    n = len(schema)
    for i, r in enumerate(rows):
        if len(r) != n:
            raise ConfigError(f"{what}: row {i} has {len(r)} values, the table has {n} columns "
                              f"({', '.join(schema.names)})")
    columns = list(zip(*rows))
    return pa.Table.from_arrays([_column(list(c), f, what) for c, f in zip(columns, schema)],
                                schema=schema)


def _first_line(e: Exception) -> str:
    return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__


def check_not_null(table: pa.Table, columns: Sequence[str], what: str) -> None:
    """Refuse nulls in key columns and NOT NULL columns."""
    for name in columns:
        if table.column(name).null_count:
            raise ConfigError(f"{what}: column {name!r} must not be null")


def chunks(table: pa.Table, max_bytes: int = MAX_REQUEST_BYTES,
           max_rows: int = MAX_REQUEST_ROWS) -> list[pa.Table]:
    """Slices of ``table`` of at most about ``max_bytes`` and at most ``max_rows`` each (at
    least one row each)."""
    if table.num_rows == 0:
        return []
    size = table.nbytes
    if size <= max_bytes and table.num_rows <= max_rows:
        return [table]
    per = max(1, min(max_rows, int(table.num_rows * max_bytes / size) if size else max_rows))
    return [table.slice(i, per) for i in range(0, table.num_rows, per)]


class TableWriter:
    """Writes to one table; every call returns once the tablets have made the rows durable.

    Each call returns ``{bucket: (base_offset, end_offset)}``: the changelog offsets written;
    for a partitioned table the keys are ``(partition name, bucket)``. Rows of a partitioned
    table go to the partition their partition key values name, then to a bucket of it by the
    bucket key. A row of a partition that does not exist fails the whole call before anything
    is written (``PartitionNotExist``), unless ``client.writer.dynamic-create-partition.enabled``
    is set: then the writer creates it.
    Delivery is at least once: a request retried after a lost response may have been applied
    (for upserts that only repeats ``-U``/``+U`` pairs of the same values).
    """

    def __init__(self, conn, table: TableInfo, max_request_bytes: int = MAX_REQUEST_BYTES,
                 options: Mapping[str, Any] | None = None):
        self._conn = conn
        self.table = table
        options = dict(options or {})
        check_known(options, CLIENT_WRITER_OPTIONS, "client writer option")
        self.dynamic_create_partition = bool(WRITER_DYNAMIC_CREATE_PARTITION.get(options))
        # client.writer.batch-size, when given, bounds each PRODUCE request's Arrow payload.
        self.max_request_bytes = (WRITER_BATCH_SIZE.get(options)
                                  if WRITER_BATCH_SIZE.key in options else max_request_bytes)
        self._names: dict[int, str] = {}          # partition id -> name, as written to
        self._lock = threading.Lock()
        # Sticky bucket for log tables without a bucket key: one bucket per call, rotating.
        self._next_bucket = itertools.count(random.randrange(table.num_buckets))

    def append(self, data: Data) -> dict[Any, tuple[int, int]]:
        """Append rows to a log table (change type ``+A``)."""
        if self.table.has_primary_key:
            raise ConfigError(f"table {self.table.name} has a primary key: use upsert/delete, "
                              "not append")
        rows = self._convert(data, "append")
        if not rows.num_rows:
            return {}
        return self._produce("append", self._route(rows, self._split_log))

    def upsert(self, data: Data) -> dict[Any, tuple[int, int]]:
        """Insert or replace rows by primary key (``+I``, or ``-U``/``+U`` for existing keys)."""
        self._require_pk("upsert")
        rows = self._convert(data, "upsert")
        return self._produce("upsert", self._route(rows, self._split))

    def delete(self, data: Data) -> dict[Any, tuple[int, int]]:
        """Delete rows by primary key (``-D`` with the old row; a missing key writes nothing).

        Rows may hold only the primary-key columns or full rows.
        """
        self._require_pk("delete")
        schema = self.table.schema
        names = _given_names(data)
        pk = self.table.primary_key
        if names is not None and set(names) == set(pk):
            schema = pa.schema([schema.field(c) for c in pk])
        elif (names is None and isinstance(data, (list, tuple)) and data
              and isinstance(data[0], (list, tuple)) and len(data[0]) == len(pk) < len(schema)):
            schema = pa.schema([schema.field(c) for c in pk])   # tuples of key values
        rows = to_arrow(data, schema, f"delete from {self.table.name}")
        check_not_null(rows, self.table.primary_key, f"delete from {self.table.name}")
        return self._produce("delete", self._route(rows, self._split))

    def flush(self) -> None:
        """Nothing to wait for: every call returns once its rows are durable."""

    def close(self) -> None:
        """Nothing to release: the connection belongs to the caller."""

    def _require_pk(self, op: str) -> None:
        if not self.table.has_primary_key:
            raise NonPrimaryKeyTable(f"table {self.table.name} has no primary key: {op} needs a "
                                     "primary-key table; use append")

    def _convert(self, data: Data, op: str) -> pa.Table:
        what = f"{op} to {self.table.name}"
        rows = to_arrow(data, self.table.schema, what)
        required = list(self.table.primary_key) + [
            f.name for f in self.table.schema
            if not f.nullable and f.name not in self.table.primary_key]
        check_not_null(rows, required, what)
        return rows

    def _split(self, rows: pa.Table) -> dict[int, pa.Table]:
        key = list(self.table.bucket_key or self.table.primary_key)
        return split_by_bucket(rows, key, self.table.num_buckets)

    def _split_log(self, rows: pa.Table) -> dict[int, pa.Table]:
        if self.table.bucket_key:
            return split_by_bucket(rows, list(self.table.bucket_key), self.table.num_buckets)
        with self._lock:        # sticky: one bucket per call (per partition), rotating
            bucket = next(self._next_bucket) % self.table.num_buckets
        return {bucket: rows}

    def _route(self, rows: pa.Table, split) -> dict[Place, pa.Table]:
        """Rows by bucket, or by (partition id, bucket) for a partitioned table; every
        partition is found (or created) before anything is written."""
        if not self.table.partitioned:
            return split(rows)
        by_name = partition_names.rows_by_partition(self.table.name, self.table.partition_keys,
                                                    rows)
        ids = {name: self._partition_id(name) for name in by_name}
        return {(ids[name], b): part for name, part_rows in by_name.items()
                for b, part in split(part_rows).items()}

    def _partition_id(self, name: str) -> int:
        found = partitions.find(self._conn, self.table, name)
        if found is None:
            if not self.dynamic_create_partition:
                raise partition_names.missing(self.table.name, self.table.partition_keys, name,
                                              write=True)
            self._conn.admin().create_partition(
                self.table.name, partitions.spec_of(self.table, name), ignore_if_exists=True)
            found = partitions.find(self._conn, self._conn.refresh_table(self.table.name), name)
            if found is None:
                raise partitions.missing(self.table, name)
        self._names[found.partition_id] = name
        return found.partition_id

    def _produce(self, op: str, parts: dict[Place, pa.Table]) -> dict[Any, tuple[int, int]]:
        if len(parts) <= 1:
            return self._keyed({b: r for b, part in parts.items()
                                if (r := self._produce_bucket(op, b, part)) is not None})
        # Buckets live on different tablets: write them in parallel, each bucket in order.
        pool = self._conn.executor()
        futures = {b: pool.submit(self._produce_bucket, op, b, part)
                   for b, part in sorted(parts.items())}
        out, error = {}, None
        for b, f in futures.items():
            try:
                r = f.result()
            except BaseException as e:  # noqa: BLE001 - wait for every bucket, then re-raise
                error = error or e
                continue
            if r is not None:
                out[b] = r
        if error is not None:
            raise error
        return self._keyed(out)

    def _keyed(self, spans: dict[Place, tuple[int, int]]) -> dict[Any, tuple[int, int]]:
        """The spans by bucket, or by (partition name, bucket) for a partitioned table."""
        if not self.table.partitioned:
            return dict(spans)
        return {(self._names[place[0]], place[1]): span
                for place, span in spans.items() if isinstance(place, tuple)}

    def _produce_bucket(self, op: str, place: Place, part: pa.Table) -> tuple[int, int] | None:
        pid, bucket = place if isinstance(place, tuple) else (None, place)
        span: tuple[int, int] | None = None       # [first chunk's base, last chunk's end)
        for chunk in chunks(part, self.max_request_bytes):
            resp = self._conn.call_bucket(self.table, bucket, ProduceRequest(
                table_id=self.table.table_id, bucket=bucket, op=op,
                records=table_to_bytes(chunk), partition_id=pid), pid)
            span = (resp.base_offset if span is None else span[0], resp.end_offset)
        return span


def _given_names(data: Any) -> list[str] | None:
    if isinstance(data, (pa.Table, pa.RecordBatch)):
        return data.schema.names
    if isinstance(data, (list, tuple)) and data and all(isinstance(r, dict) for r in data):
        return list(set().union(*(r.keys() for r in data)))
    return None
