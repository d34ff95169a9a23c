"""The Python data source ``fluss``: schema, streaming and batch readers (writers: ``sink``).

Where each piece runs (docs/spark_source.md, "How the source meets Spark"):
``FlussDataSource.schema()`` in a driver-side planner worker; the stream reader's offset methods
in one long-lived driver-side process per query run (the ``Enumerator``); ``read()`` in executor
workers on a pickled copy of the reader, which therefore carries only options and the output
layout, never a connection or the enumerator.
"""

from __future__ import annotations

import re
import sys
from contextlib import closing
from types import FrameType
from typing import TYPE_CHECKING, Any, Iterable, Iterator

import pyarrow as pa
from pyspark.sql.datasource import (DataSource, DataSourceReader, DataSourceStreamReader,
                                    Filter, InputPartition)
from pyspark.sql.streaming.datasource import ReadLimit, SupportsTriggerAvailableNow
from pyspark.sql.types import StructType

from fluss_spark.client.cluster import Cluster, TableInfo
from fluss_spark.client.table_formats import check_readable
from fluss_spark.connector.enumerator import Enumerator, check_partitions
from fluss_spark.connector.options import SourceOptions, parse_options
from fluss_spark.connector.pruning import PartitionFilter, matching, push
from fluss_spark.connector.schema import Layout, output_schema, project
from fluss_spark.connector.splits import LogSplit, MergedBucketSplit
from fluss_spark.errors import ConfigError, PartitionNotExist, TableNotExist

if TYPE_CHECKING:
    from fluss_spark.connector.readers import SplitReader
    from fluss_spark.connector.sink import FlussBatchWriter, FlussStreamWriter


def _split_reader(options: SourceOptions, layout: Layout) -> "SplitReader":
    """The executors' ``SplitReader``, imported only there: its imports (pyarrow.compute, the
    decoders) would add ~30 ms to the start of every query's driver-side process. Its decoding
    uses the CPUs Spark gave the task."""
    from pyspark import TaskContext

    from fluss_spark.client.backends import use_cpus
    from fluss_spark.connector.readers import SplitReader
    task = TaskContext.get()
    use_cpus(None if task is None else task.cpus())
    return SplitReader(options, layout)


def _connect(options: SourceOptions) -> Cluster:
    return options.connect()


def resolve_table_names(cluster: Cluster, options: SourceOptions) -> list[str]:
    """The tables the query reads: as listed, or every table matching ``table.pattern``."""
    if options.table_pattern is None:
        return list(options.tables)
    pattern = re.compile(options.table_pattern)
    names = sorted(n for n in cluster.list_tables() if pattern.fullmatch(n))
    if not names:
        raise ConfigError(f"option 'table.pattern' {options.table_pattern!r} matches no table on "
                          f"{options.bootstrap_servers}")
    return names


def infer_schema(cluster: Cluster, options: SourceOptions) -> StructType:
    infos = []
    for name in resolve_table_names(cluster, options):
        try:
            infos.append(check_partitions(cluster, cluster.get_table(name), options))
        except TableNotExist:
            raise TableNotExist(f"table {name!r} does not exist on {options.bootstrap_servers}; "
                                "create it or fix option 'table'/'tables'") from None
    if options.columns:
        return output_schema([(infos[0].name, project(infos[0].name, infos[0].schema,
                                                      options.columns, "option 'columns'"))],
                             multi_table=False)
    return output_schema([(i.name, i.schema) for i in infos], options.multi_table)


def check_columns_option(options: SourceOptions, layout: Layout) -> None:
    """Refuse option ``columns`` that disagrees with a schema the user also gave."""
    if not options.columns:
        return
    given = layout.table_columns(options.tables[0])
    if tuple(given) != options.columns:
        raise ConfigError(f"option 'columns' ({', '.join(options.columns)}) and the given schema "
                          f"({', '.join(given)}) name different table columns; give one of them")


def check_read_columns(info: TableInfo, layout: Layout, reads_kv: bool = True) -> None:
    """Refuse, before any task runs, a query schema naming columns the table does not have, or
    a table stored in a format the readers cannot decode (its KV rows only if ``reads_kv``)."""
    check_readable(info, reads_kv=reads_kv)
    project(info.name, info.schema, layout.table_columns(info.name), "the query's schema")


def table_names(options: SourceOptions, layout: Layout) -> list[str]:
    """Tables of a reader: from the options (single table) or the schema's struct columns."""
    return list(layout.table_names) if options.multi_table else list(options.tables)


class FlussDataSource(DataSource):
    """``format("fluss")``: Fluss tables as a stream (snapshot + changelog) or a batch."""

    @classmethod
    def name(cls) -> str:
        return "fluss"

    def _options(self) -> SourceOptions:
        return parse_options(dict(self.options))

    def schema(self) -> StructType:
        options = self._options()
        with closing(_connect(options)) as cluster:
            return infer_schema(cluster, options)

    def streamReader(self, schema: StructType) -> "FlussStreamReader":
        return FlussStreamReader(self._options(), schema)

    def reader(self, schema: StructType) -> "FlussBatchReader":
        if _spark_pushes_filters():
            return FlussPruningBatchReader(self._options(), schema)
        return FlussBatchReader(self._options(), schema)

    # The sink is imported where it is used: a read's driver-side process never needs it.
    def writer(self, schema: StructType, overwrite: bool) -> "FlussBatchWriter":
        from fluss_spark.connector.sink import batch_writer
        return batch_writer(dict(self.options), schema, overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool) -> "FlussStreamWriter":
        from fluss_spark.connector.sink import stream_writer
        return stream_writer(dict(self.options), schema, overwrite)


#: The PySpark module that calls ``reader()`` to push filters down (pyspark >= 4.1).
_PUSHDOWN_WORKER = "pyspark.sql.worker.data_source_pushdown_filters"
_PUSHDOWN_FILE = "/sql/worker/data_source_pushdown_filters.py"


def _spark_pushes_filters() -> bool:
    """Whether Spark is asking for the reader to push filters into
    (``spark.sql.python.filterPushdown.enabled=true``). Only then may the reader override
    ``pushFilters``: Spark fails a read whose reader overrides it while that setting is off, and
    the reader cannot see Spark's settings, only who calls it."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        # Run as ``python -m`` the worker module is ``__main__``: its file names it then.
        if (frame.f_globals.get("__name__") == _PUSHDOWN_WORKER
                or frame.f_code.co_filename.endswith(_PUSHDOWN_FILE)):
            return True
        frame = frame.f_back
    return False


class FlussStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Streaming reader: driver methods delegate to an ``Enumerator``; ``read`` to
    ``SplitReader``."""

    def __init__(self, options: SourceOptions, schema: StructType):
        self.options = options
        self.layout = Layout(schema, options.multi_table)
        check_columns_option(options, self.layout)
        self._enumerator: Enumerator | None = None

    def __getstate__(self) -> dict[str, Any]:
        # Executors get a copy of the reader: never ship the driver's enumerator (sockets, threads).
        state = dict(self.__dict__)
        state["_enumerator"] = None
        return state

    @property
    def enumerator(self) -> Enumerator:
        if self._enumerator is None:
            self._enumerator = Enumerator(self.options, table_names(self.options, self.layout),
                                          lambda: _connect(self.options),
                                          check_table=lambda i: check_read_columns(
                                              i, self.layout, self.options.startup_mode == "full"))
        return self._enumerator

    def initialOffset(self) -> dict[str, Any]:
        return self.enumerator.initial_offset()

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        return self.enumerator.latest_offset(start, limit)

    def getDefaultReadLimit(self) -> ReadLimit:
        return self.enumerator.default_read_limit()

    def reportLatestOffset(self) -> dict[str, Any] | None:
        return self.enumerator.report_latest_offset()

    def prepareForTriggerAvailableNow(self) -> None:
        self.enumerator.prepare_for_available_now()

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        return self.enumerator.partitions(start, end)

    def commit(self, end: dict[str, Any]) -> None:
        self.enumerator.commit(end)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _split_reader(self.options, self.layout).read(partition)

    def stop(self) -> None:
        if self._enumerator is not None:
            self._enumerator.stop()


class FlussBatchReader(DataSourceReader):
    """Batch reader: a PK table as of its latest offsets (snapshot + changelog folded by key),
    a log table from its start point (earliest, or ``scan.startup.timestamp``) to its latest offset.

    It takes no lease, so nothing is left behind: a snapshot removed before a task reads it is
    replaced by the bucket's newest one (see ``SplitReader.merged_rows``).
    """

    def __init__(self, options: SourceOptions, schema: StructType):
        self.options = options
        self.layout = Layout(schema, options.multi_table)
        check_columns_option(options, self.layout)

    def partitions(self) -> list[InputPartition]:
        with closing(_connect(self.options)) as cluster:
            return plan_batch(cluster, self.options, table_names(self.options, self.layout),
                              self.layout, self._pushed())

    def _pushed(self) -> tuple[PartitionFilter, ...]:
        return ()

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _split_reader(self.options, self.layout).read(partition)


class FlussPruningBatchReader(FlussBatchReader):
    """The batch reader where Spark pushes filters: those on partition columns decide which
    partitions are planned (fluss_spark/connector/pruning.py); the others go back to Spark."""

    def __init__(self, options: SourceOptions, schema: StructType):
        super().__init__(options, schema)
        self.partition_filters: tuple[PartitionFilter, ...] = ()

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        if self.options.multi_table:
            return filters
        with closing(_connect(self.options)) as cluster:
            info = cluster.get_table(self.options.tables[0])
        taken, rest = push(filters, info)
        self.partition_filters = tuple(taken)
        return rest

    def _pushed(self) -> tuple[PartitionFilter, ...]:
        return self.partition_filters


def plan_batch(cluster: Cluster, options: SourceOptions, names: list[str],
               layout: Layout | None = None,
               partition_filters: Iterable[PartitionFilter] = ()) -> list[InputPartition]:
    """One split per bucket (of each partition of a partitioned table that
    ``partition_filters`` keep): fixed end offsets taken now, so the read is a consistent cut."""
    splits: list[InputPartition] = []
    for name in names:
        info = check_partitions(cluster, cluster.get_table(name), options)
        if layout is not None:
            check_read_columns(info, layout)
        if not info.partitioned:
            splits += _bucket_splits(cluster, options, info, None, None)
            continue
        for pid, part in matching(info, partition_filters):
            try:
                splits += _bucket_splits(cluster, options, info, pid, part)
            except PartitionNotExist:
                continue    # dropped since it was listed: nothing of it to read
    return splits


def _bucket_splits(cluster: Cluster, options: SourceOptions, info: TableInfo,
                   pid: int | None, part: str | None) -> list[InputPartition]:
    """The splits of one table, or of its partition ``part`` (id ``pid``)."""
    name = info.name
    splits: list[InputPartition] = []
    latest = cluster.list_offsets(name, spec="latest", partition=part)
    if info.has_primary_key:
        snaps = cluster.latest_kv_snapshots(name, partition=part)
        earliest = cluster.list_offsets(name, spec="earliest", partition=part)
        for b in range(info.num_buckets):
            s = snaps.get(b)
            start = s.log_offset if s is not None else earliest.get(b, 0)
            splits.append(MergedBucketSplit(info.table_id, name, b,
                                            s.snapshot_id if s is not None else None,
                                            start, latest.get(b, start), info.primary_key,
                                            part, pid))
        return splits
    if options.startup_mode == "timestamp":
        first = cluster.list_offsets(name, spec="timestamp",
                                     timestamp_ms=options.startup_timestamp_ms, partition=part)
    elif options.startup_mode == "latest":
        first = latest
    else:
        first = cluster.list_offsets(name, spec="earliest", partition=part)
    for b in range(info.num_buckets):
        lo, hi = first.get(b, 0), latest.get(b, 0)
        if hi > lo:
            splits.append(LogSplit(info.table_id, name, b, lo, hi, part, pid))
    return splits
