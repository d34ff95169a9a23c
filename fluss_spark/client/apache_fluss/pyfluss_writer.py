"""``PyflussWriter``: writes to an Apache Fluss table through the official client, pyfluss.

Why pyfluss and not this project's wire client: writing needs Fluss's record formats for both
paths (Arrow log batches for appends, KV batches of compacted rows for upserts and deletes), its
writer ids and batch sequences (idempotence), SASL and partitions; pyfluss has all of them and is
maintained with Fluss (docs/spark_sink.md, "Writes on Apache Fluss", has the measurements).
pyfluss is asynchronous: every call here runs on the writer's private event loop, so the writer
is used like a blocking one (one per Spark task, never shared between threads).

Partitioned tables: pyfluss routes each row to its partition but neither creates partitions nor
takes an Arrow batch of several, so the writer splits rows by partition, checks each partition
exists before any row of the call is queued, and creates missing ones itself where
``client.writer.dynamic-create-partition.enabled`` asks for it.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Mapping, Sequence, TypeVar

import pyarrow as pa

from fluss_spark.client import partition_names
from fluss_spark.client.embedded.writer import check_not_null, to_arrow
from fluss_spark.config import (WRITER_ACKS, WRITER_BATCH_SIZE, WRITER_BATCH_TIMEOUT,
                                WRITER_DYNAMIC_CREATE_PARTITION, WRITER_ENABLE_IDEMPOTENCE,
                                WRITER_RETRIES, CLIENT_WRITER_OPTIONS, check_known)
from fluss_spark.errors import ConfigError, FlussError, NonPrimaryKeyTable, RequestTimeout
from fluss_spark.protocol.apache_fluss.errors import to_exception
from fluss_spark.protocol.messages import TableInfo
from fluss_spark.protocol.partitions import values_of

if TYPE_CHECKING:
    from fluss_spark.client.apache_fluss.cluster import ApacheFlussWireCluster

T = TypeVar("T")


def pyfluss_config(bootstrap_servers: str, options: Mapping[str, Any],
                   credentials: tuple[str, str] | None) -> dict[str, str]:
    """pyfluss's properties for Fluss's client writer ``options`` (parsed or text, by key):
    pyfluss names them without the ``client.`` prefix and takes durations in ms."""
    check_known(options, CLIENT_WRITER_OPTIONS, "client writer option")
    acks, retries = WRITER_ACKS.get(options), WRITER_RETRIES.get(options)
    # As in Fluss: idempotence is on by default unless acks or retries rule it out.
    idempotent = (WRITER_ENABLE_IDEMPOTENCE.get(options)
                  if WRITER_ENABLE_IDEMPOTENCE.key in options
                  else acks in ("all", "-1") and retries > 0)
    props = {"bootstrap.servers": bootstrap_servers,
             "writer.batch-size": str(WRITER_BATCH_SIZE.get(options)),
             "writer.batch-timeout-ms": str(WRITER_BATCH_TIMEOUT.get(options)),
             "writer.acks": acks, "writer.retries": str(retries),
             "writer.enable-idempotence": str(idempotent).lower()}
    if credentials is not None:
        props.update({"security.protocol": "SASL", "security.sasl.mechanism": "PLAIN",
                      "security.sasl.username": credentials[0],
                      "security.sasl.password": credentials[1]})
    return props


class PyflussWriter:
    """A ``RowWriter`` of one Apache Fluss table over its own pyfluss connection.

    Appends go as Arrow batches; upserts and deletes as rows (pyfluss takes no Arrow for them).
    Calls queue rows in pyfluss's accumulator; ``flush`` waits for every acknowledgement.
    """

    def __init__(self, bootstrap_servers: str, table: TableInfo, *,
                 options: Mapping[str, Any] | None = None,
                 credentials: tuple[str, str] | None = None, request_timeout_s: float = 60.0,
                 columns: Sequence[str] | None = None):
        import fluss
        self._fluss = fluss
        self.table = table
        # A partial update: upserts give these columns only, the others keep their values.
        self.columns = (None if columns is None or set(columns) == set(table.schema.names)
                        else [c for c in table.schema.names if c in set(columns)])
        if self.columns is not None:
            missing = [c for c in table.primary_key if c not in self.columns]
            if missing:
                raise ConfigError(f"a partial update of {table.name} needs the primary key: "
                                  f"missing {', '.join(missing)}")
        self.timeout_s = request_timeout_s
        props = pyfluss_config(bootstrap_servers, dict(options or {}), credentials)
        self.dynamic_partitions = bool(WRITER_DYNAMIC_CREATE_PARTITION.get(dict(options or {})))
        self._partitions: set[str] = set()          # names known to exist
        self._loop = asyncio.new_event_loop()
        try:
            self._conn = self._run(lambda: fluss.FlussConnection.create(fluss.Config(props)))
            db, _, name = table.name.partition(".")
            self._path = fluss.TablePath(db, name)
            self._table = self._run(lambda: self._conn.get_table(self._path))
        except BaseException:
            self._loop.close()
            raise
        # A property, although the stub declares a method.
        self._arrow_schema: pa.Schema = self._table.arrow_schema
        self._writer: Any = None

    def _run(self, make: Callable[[], Awaitable[T]]) -> T:
        """``await make()`` on the loop; pyfluss's calls need a running loop even to start."""
        async def go() -> T:
            return await asyncio.wait_for(make(), self.timeout_s)
        try:
            return self._loop.run_until_complete(go())
        except asyncio.TimeoutError:
            raise RequestTimeout(f"writing {self.table.name}: Apache Fluss did not answer "
                                 f"within {self.timeout_s:.0f}s (client.request.timeout)") from None
        except FlussError:
            raise
        except Exception as e:  # noqa: BLE001 - pyfluss raises one class for every server error
            raise _translated(e, self.table.name) from e

    def _call(self, fn: Callable[[], T]) -> T:
        """``fn()`` inside the loop: pyfluss's write calls need a running event loop."""
        async def go() -> T:
            return fn()
        return self._run(go)

    def _writer_for(self, kind: str) -> Any:
        if self._writer is None:
            builder: Any = (self._table.new_append() if kind == "append"
                            else self._table.new_upsert())
            if kind != "append" and self.columns is not None:
                builder = builder.partial_update_by_name(self.columns)
            self._writer = builder.create_writer()
        return self._writer

    def append(self, data: pa.Table) -> None:
        if self.table.has_primary_key:
            raise ConfigError(f"table {self.table.name} has a primary key: use upsert/delete, "
                              "not append")
        rows = self._rows(data, "append")
        writer = self._writer_for("append")
        rows = rows.cast(self._arrow_schema) if rows.schema != self._arrow_schema else rows
        # One partition per batch: pyfluss takes a batch's partition from its first row.
        parts = [rows] if not self.table.partition_keys else list(self._by_partition(rows))
        self._call(lambda: _each(writer.write_arrow_batch,
                                 [b for part in parts for b in part.to_batches()]))

    def upsert(self, data: pa.Table) -> None:
        self._require_pk("upsert")
        rows = self._rows(data, "upsert")
        self._by_partition(rows)
        writer = self._writer_for("upsert")
        self._call(lambda: _each(writer.upsert, rows.to_pylist()))

    def delete(self, data: pa.Table) -> None:
        self._require_pk("delete")
        pk = list(self.table.primary_key)
        what = f"delete from {self.table.name}"
        keys = to_arrow(data.select(pk) if isinstance(data, pa.Table) else data,
                        pa.schema([self.table.schema.field(c) for c in pk]), what)
        check_not_null(keys, pk, what)
        self._by_partition(keys)
        writer = self._writer_for("upsert")
        self._call(lambda: _each(writer.delete, keys.to_pylist()))

    def flush(self) -> None:
        if self._writer is not None:
            self._run(self._writer.flush)

    def close(self) -> None:
        if self._loop.is_closed():
            return
        try:
            # close() waits for unacknowledged writes, which after a failure may never come.
            async def close() -> None:
                await asyncio.wait_for(self._conn.close(), 10.0)
            self._loop.run_until_complete(close())
        except Exception:  # noqa: BLE001 - closing after a failure must not hide that failure
            pass
        finally:
            self._loop.close()

    def _rows(self, data: pa.Table, op: str) -> pa.Table:
        what = f"{op} to {self.table.name}"
        schema = self.table.schema
        if self.columns is not None:
            schema = pa.schema([schema.field(c) for c in self.columns])
        rows = to_arrow(data, schema, what)
        required = list(self.table.primary_key) + [f.name for f in schema if not f.nullable]
        check_not_null(rows, list(dict.fromkeys(required)), what)
        return rows

    def _by_partition(self, rows: pa.Table) -> list[pa.Table]:
        """The rows of each partition (none for an unpartitioned table), once every partition
        they name exists: created here when the options allow, else ``PartitionNotExist``."""
        keys = self.table.partition_keys
        if not keys:
            return []
        by_name = partition_names.rows_by_partition(self.table.name, keys, rows)
        if set(by_name) - self._partitions:
            self._partitions = set(self._run(self._partition_names))
        for name in sorted(set(by_name) - self._partitions):
            if not self.dynamic_partitions:
                raise partition_names.missing(self.table.name, keys, name, write=True)
            spec = dict(zip(keys, values_of(name)))
            self._run(lambda: self._admin.create_partition(self._path, spec, True))
            # Rows sent before the new buckets have answering leaders may go unanswered.
            self._run(lambda: until_answered(lambda: self._admin.list_partition_offsets(
                self._path, name, list(range(self.table.num_buckets)),
                self._fluss.OffsetSpec.latest()), self.timeout_s))
            self._partitions.add(name)
        return list(by_name.values())

    async def _partition_names(self) -> list[str]:
        return [p.partition_name for p in await self._admin.list_partition_infos(self._path)]

    @property
    def _admin(self) -> Any:
        return self._conn.get_admin()

    def _require_pk(self, op: str) -> None:
        if not self.table.has_primary_key:
            raise NonPrimaryKeyTable(f"table {self.table.name} has no primary key: {op} needs a "
                                     "primary-key table; use append")


async def until_answered(call: Callable[[], Awaitable[Any]], timeout_s: float) -> None:
    """Await ``call()`` until it answers (every bucket it asks has a leader that answers), for
    up to ``timeout_s``; then its last error."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            await call()
            return
        except Exception:  # noqa: BLE001 - pyfluss raises one FlussError class for all
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.1)


def _each(send: Callable[[Any], Any], items: list[Any]) -> None:
    """``send`` every item, in order (pyfluss queues each; ``flush`` waits for them)."""
    for item in items:
        send(item)


def open_writer(cluster: "ApacheFlussWireCluster", table: str,
                options: Mapping[str, Any] | None = None,
                columns: Sequence[str] | None = None) -> PyflussWriter:
    """A pyfluss writer of ``table`` with ``cluster``'s servers, credentials and timeout
    (``columns``: a partial update)."""
    info = cluster.get_table(table)
    servers = ",".join(f"{h}:{p}" for h, p in cluster.conn.bootstrap)
    return PyflussWriter(servers, info, options=options, credentials=cluster.conn.credentials,
                         request_timeout_s=cluster.conn.request_timeout_s, columns=columns)


def _translated(e: Exception, table: str) -> FlussError:
    """pyfluss's error as this project's class for its Fluss error code."""
    code = getattr(e, "error_code", None)
    message = f"writing {table}: {str(e).strip().splitlines()[0] if str(e).strip() else e!r}"
    if isinstance(code, int) and code > 0:
        return to_exception(code, message)
    return FlussError(message)


__all__ = ["PyflussWriter", "open_writer", "pyfluss_config", "until_answered"]
