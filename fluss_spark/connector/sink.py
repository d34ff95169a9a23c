"""``write.format("fluss")`` and ``writeStream.format("fluss")``: Arrow writers over a cluster's
``RowWriter``.

Where each piece runs: ``batch_writer``/``stream_writer`` in a driver-side worker (options parsed,
table looked up, columns checked: a bad write fails there, before any task); ``write`` in executor
tasks on a pickled copy, which holds only options and the ``WritePlan`` and opens its own
connection. docs/spark_sink.md says what a retried task or a replayed micro-batch does.
"""

from __future__ import annotations

import logging
from contextlib import closing
from dataclasses import dataclass, field
from typing import Any, Iterator

import pyarrow as pa
from pyspark.sql.datasource import (DataSourceArrowWriter, DataSourceStreamArrowWriter,
                                    WriterCommitMessage)
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from fluss_spark.client import partition_names
from fluss_spark.client.writes import TableWrites
from fluss_spark.connector.sink_options import SinkOptions, parse_sink_options
from fluss_spark.connector.sink_plan import WritePlan, plan_write
from fluss_spark.errors import ConfigError, TableNotExist, UnsupportedVersion

log = logging.getLogger(__name__)

#: How much of a task's prepared rows is held before the first is sent: a task whose bad row
#: lies within it writes nothing at all.
STAGE_BYTES = 128 << 20


@dataclass
class SinkCommit(WriterCommitMessage):
    """What one task wrote: rows per op (``append``, ``upsert``, ``delete``)."""

    rows: dict[str, int] = field(default_factory=dict)


def prepare_write(raw_options: dict[str, str], schema: StructType, overwrite: bool
                  ) -> tuple[SinkOptions, WritePlan]:
    """Driver-side checks of a write: options, mode, the table and the columns."""
    options = parse_sink_options(raw_options)
    if overwrite:
        raise ConfigError(f"write to {options.table}: overwrite (mode 'overwrite', or output "
                          "mode 'complete') is not supported; the fluss sink appends to log "
                          "tables and upserts primary-key tables: use mode 'append'")
    with closing(options.connect()) as cluster:
        capabilities = cluster.capabilities()
        if not isinstance(cluster, TableWrites):
            raise UnsupportedVersion(f"the cluster at {options.bootstrap_servers} cannot be "
                                     "written by this client")
        try:
            info = cluster.get_table(options.table)
        except TableNotExist:
            raise TableNotExist(f"write to {options.table}: the table does not exist on "
                                f"{options.bootstrap_servers}; create it first (e.g. "
                                f"`fluss-spark table create {options.table} --schema ...`)"
                                ) from None
        if info.partitioned and not capabilities.partition_admin:
            raise UnsupportedVersion(f"write to {info.name}: the table is partitioned and the "
                                     f"cluster at {options.bootstrap_servers} lists no partitions "
                                     "to this client")
    return options, plan_write(info, to_arrow_schema(schema, timezone="UTC"),
                               capabilities.partial_updates)


def write_task(options: SinkOptions, plan: WritePlan,
               batches: Iterator[pa.RecordBatch]) -> SinkCommit:
    """One task's rows: every batch checked and prepared, then written in order and flushed.

    Up to ``STAGE_BYTES`` of prepared rows are held before the first write, so a bad row in
    them (or a row of a partition that does not exist) fails the task with nothing written."""
    counts: dict[str, int] = {}
    staged: list[tuple[str, pa.Table]] = []
    staged_bytes = 0
    writer = None
    cluster = None
    try:
        for batch in batches:
            for op, rows in plan.prepare(batch):
                staged.append((op, rows))
                staged_bytes += rows.nbytes
                counts[op] = counts.get(op, 0) + rows.num_rows
            if staged_bytes >= STAGE_BYTES:
                if writer is None:
                    cluster, writer = _open(options, plan, staged)
                _send(writer, staged)
                staged, staged_bytes = [], 0
        if staged:
            if writer is None:
                cluster, writer = _open(options, plan, staged)
            _send(writer, staged)
        if writer is not None:
            writer.flush()
    finally:
        if writer is not None:
            writer.close()
        if cluster is not None:
            cluster.close()
    return SinkCommit(counts)


def _open(options: SinkOptions, plan: WritePlan, staged: list[tuple[str, pa.Table]]
          ) -> tuple[Any, Any]:
    """The task's cluster and writer, once every partition ``staged`` names exists."""
    cluster = options.connect()
    try:
        assert isinstance(cluster, TableWrites)   # checked on the driver
        if plan.partition_keys and not options.creates_partitions:
            _check_partitions(cluster, plan, staged)
        return cluster, cluster.table_writer(plan.table, options.writer_options(),
                                             columns=plan.partial)
    except BaseException:
        cluster.close()
        raise


def _check_partitions(cluster: Any, plan: WritePlan, staged: list[tuple[str, pa.Table]]) -> None:
    """``PartitionNotExist`` (or ConfigError for a value no partition can have) before anything
    is sent: the writer checks each call, but a task sends several."""
    names: set[str] = set()
    for _, rows in staged:
        names.update(partition_names.names_of_rows(plan.partition_keys, rows).unique()
                     .to_pylist())
    partition_names.check_names(plan.table, plan.partition_keys, sorted(names))
    unknown = sorted(names - {p.name for p in cluster.list_partitions(plan.table)})
    if unknown:
        raise partition_names.missing(plan.table, plan.partition_keys, unknown[0], write=True)


def _send(writer: Any, staged: list[tuple[str, pa.Table]]) -> None:
    """The staged pieces in order, each run of one op as one call: Spark hands over batches of
    10,000 rows, and fewer, larger calls cost fewer round trips."""
    run: list[pa.Table] = []
    for i, (op, rows) in enumerate(staged):
        run.append(rows)
        if i + 1 == len(staged) or staged[i + 1][0] != op:
            getattr(writer, op)(pa.concat_tables(run) if len(run) > 1 else run[0])
            run = []


def _total(messages: list[WriterCommitMessage | None]) -> dict[str, int]:
    total: dict[str, int] = {}
    for m in messages:
        if isinstance(m, SinkCommit):
            for op, n in m.rows.items():
                total[op] = total.get(op, 0) + n
    return total


class _TaskWrites:
    """What the batch and the stream writer share: options and plan, and the task's write."""

    def __init__(self, options: SinkOptions, plan: WritePlan):
        self.options = options
        self.plan = plan

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommit:
        return write_task(self.options, self.plan, iterator)


class FlussBatchWriter(_TaskWrites, DataSourceArrowWriter):
    """``df.write.format("fluss")``: every task writes its rows; nothing to commit after."""

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        log.info("wrote to %s: %s", self.plan.table, _total(messages))

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        # Fluss has no transactions: rows that tasks wrote before the failure stay.
        log.warning("write to %s failed; rows already written stay: %s", self.plan.table,
                    _total(messages))


class FlussStreamWriter(_TaskWrites, DataSourceStreamArrowWriter):
    """``writeStream.format("fluss")``: each micro-batch written like a batch write."""

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        log.info("micro-batch %d wrote to %s: %s", batchId, self.plan.table, _total(messages))

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        log.warning("micro-batch %d to %s failed; rows already written stay (a replay "
                    "writes them again): %s", batchId, self.plan.table, _total(messages))


def batch_writer(raw_options: dict[str, str], schema: StructType,
                 overwrite: bool) -> FlussBatchWriter:
    return FlussBatchWriter(*prepare_write(raw_options, schema, overwrite))


def stream_writer(raw_options: dict[str, str], schema: StructType,
                  overwrite: bool) -> FlussStreamWriter:
    return FlussStreamWriter(*prepare_write(raw_options, schema, overwrite))


__all__ = ["FlussBatchWriter", "FlussStreamWriter", "SinkCommit", "batch_writer",
           "stream_writer", "write_task"]
