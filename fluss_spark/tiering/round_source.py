"""The tiering query's data source: each task reads its fluss split and writes it as lake files.

``format("fluss_tier")`` is ``format("fluss")`` (same options, offsets, splits and lease) whose
partition readers hand their rows to the table's ``RoundWriter`` in the same Python worker and
yield only what it wrote (``round_files.RESULT_SCHEMA``: the files' metadata, the touched keys,
the rows read). A round's rows so never cross into the JVM and back, as they did through a
``mapInArrow`` stage over ``format("fluss")`` (twice the Arrow conversions of the read itself;
BENCHMARKS.md, "Tiering into Apache Iceberg").

The job passes the writer as option ``tier.writer`` (``RoundWriter.to_json``, built on the
driver, without the secrets of its environment); the Fluss table's columns come from the
writer's schema (the lake table's copy of it), so the source never connects to plan.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSource, InputPartition
from pyspark.sql.types import StructType

from fluss_spark.client.cluster import Cluster
from fluss_spark.connector.options import SourceOptions, parse_options
from fluss_spark.connector.readers import SplitReader, cached_cluster
from fluss_spark.connector.schema import output_schema
from fluss_spark.connector.source import FlussStreamReader
from fluss_spark.connector.splits import SnapshotSplit
from fluss_spark.errors import ConfigError
from fluss_spark.tiering.lake_schema import decode_schema
from fluss_spark.tiering.round_files import RESULT_SCHEMA, RoundWriter

#: The data source's name, and the option carrying the table's writer.
FORMAT = "fluss_tier"
WRITER_OPTION = "tier.writer"


@dataclass(frozen=True)
class BucketSplits(InputPartition):
    """Several splits of one bucket read by one task, in order: the task's fold then sees every
    record of its keys (``RoundWriter`` folds task by task)."""

    splits: tuple[InputPartition, ...]


def one_task_per_bucket(splits: list[InputPartition]) -> list[InputPartition]:
    """``splits`` where no key can reach two tasks: a bucket's splits go to one task unless they
    are all snapshot rows (disjoint row ranges of one snapshot, so disjoint keys)."""
    by_bucket: dict[tuple, list[InputPartition]] = {}
    for s in splits:
        key = (getattr(s, "table_id", None), getattr(s, "partition_id", None),
               getattr(s, "bucket", None))
        by_bucket.setdefault(key, []).append(s)
    out: list[InputPartition] = []
    for group in by_bucket.values():
        if len(group) == 1 or all(isinstance(s, SnapshotSplit) for s in group):
            out += group
        else:
            out.append(BucketSplits(tuple(group)))
    return out


class RoundSource(DataSource):
    """``format("fluss_tier")``: a fluss stream whose rows are the round files its tasks wrote."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> str:
        return RESULT_SCHEMA

    def streamReader(self, schema: StructType) -> "RoundReader":
        options = dict(self.options)
        raw = options.pop(WRITER_OPTION, None)
        if raw is None:
            raise ConfigError(f"format({FORMAT!r}) is the tiering job's source and needs option "
                              f"{WRITER_OPTION!r}; read tables with format('fluss')")
        source_options = parse_options(options)
        if len(source_options.tables) != 1 or source_options.multi_table:
            raise ConfigError(f"format({FORMAT!r}) reads one table (option 'table')")
        return RoundReader(source_options, RoundWriter.from_json(raw))


class RoundReader(FlussStreamReader):
    """The fluss stream reader (enumerator, offsets, lease) whose tasks write their rows."""

    def __init__(self, options: SourceOptions, writer: RoundWriter,
                 cluster_factory: Callable[[SourceOptions], Cluster] = cached_cluster):
        columns = output_schema([(options.tables[0], decode_schema(writer.fluss_schema))],
                                multi_table=False)
        super().__init__(options, columns)
        self.writer = writer
        self.cluster_factory = cluster_factory

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        return one_task_per_bucket(super().partitions(start, end))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        reader = SplitReader(self.options, self.layout, self.cluster_factory)
        parts = partition.splits if isinstance(partition, BucketSplits) else (partition,)
        return self.writer(batch for p in parts for batch in reader.read(p))


__all__ = ["BucketSplits", "FORMAT", "RoundReader", "RoundSource", "WRITER_OPTION",
           "one_task_per_bucket"]
