"""Batch reads of partitioned tables: filters on partition columns plan only the partitions they
match (counted in splits), every other filter goes back to Spark."""

from __future__ import annotations

import datetime

import pytest
from pyspark.sql.datasource import (EqualNullSafe, EqualTo, GreaterThan, GreaterThanOrEqual, In,
                                    IsNotNull, IsNull, LessThan, LessThanOrEqual, Not,
                                    StringStartsWith)

from fluss_spark.connector.options import parse_options
from fluss_spark.connector.source import (FlussBatchReader, FlussPruningBatchReader,
                                          infer_schema)
from fluss_spark.connector.splits import LogSplit, MergedBucketSplit

DAYS = ("2026-11-24", "2026-11-25", "2026-11-26")


@pytest.fixture
def cluster(cluster, monkeypatch):
    """db.p (PK (id, dt), by dt STRING) and db.l (log table, by n INT and d DATE), 2 buckets;
    every bucket of every partition holds records. Readers connect to this fake."""
    cluster.add_table("db.p", schema="id BIGINT, dt STRING, v STRING", pk=("id", "dt"),
                      partition_keys=("dt",))
    cluster.add_table("db.l", schema="id BIGINT, n INT, d DATE", pk=(), partition_keys=("n", "d"))
    for day in DAYS:
        cluster.add_partition("db.p", day)
        for b in (0, 1):
            cluster.append_log("db.p", b, [("+I", {"id": b, "dt": day, "v": "x"})], partition=day)
    for name in ("1$2026-11-24", "2$2026-11-25", "10$2026-11-26"):
        cluster.add_partition("db.l", name)
        n, d = name.split("$")
        for b in (0, 1):
            cluster.append_log("db.l", b, [("+A", {"id": b, "n": int(n),
                                                   "d": datetime.date.fromisoformat(d)})],
                               partition=name)
    monkeypatch.setattr("fluss_spark.connector.source._connect", lambda options: cluster)
    return cluster


def planned(cluster, table, filters):
    """The partitions planned by a pruning reader given ``filters``, and the filters returned."""
    o = parse_options({"bootstrap.servers": "h:1", "table": table})
    reader = FlussPruningBatchReader(o, infer_schema(cluster, o))
    rest = list(reader.pushFilters(filters))
    splits = reader.partitions()
    assert all(isinstance(s, (LogSplit, MergedBucketSplit)) for s in splits)
    return sorted({s.partition for s in splits}), len(splits), rest


def test_equality_plans_only_that_partitions_buckets(cluster):
    parts, n, rest = planned(cluster, "db.p", [EqualTo(("dt",), DAYS[1])])
    assert (parts, n, rest) == ([DAYS[1]], 2, [])
    # Without pushdown every partition is planned: two splits per partition.
    o = parse_options({"bootstrap.servers": "h:1", "table": "db.p"})
    assert len(FlussBatchReader(o, infer_schema(cluster, o)).partitions()) == 6


@pytest.mark.parametrize("filters, days", [
    ([In(("dt",), (DAYS[0], DAYS[2], "2030-01-01"))], [DAYS[0], DAYS[2]]),
    ([GreaterThan(("dt",), DAYS[0])], [DAYS[1], DAYS[2]]),
    ([GreaterThanOrEqual(("dt",), DAYS[1]), LessThan(("dt",), DAYS[2])], [DAYS[1]]),
    ([LessThanOrEqual(("dt",), DAYS[1])], [DAYS[0], DAYS[1]]),
    ([EqualNullSafe(("dt",), DAYS[2])], [DAYS[2]]),
    ([IsNull(("dt",))], []),
    ([IsNotNull(("dt",))], list(DAYS)),
    ([EqualTo(("dt",), DAYS[0]), EqualTo(("dt",), DAYS[1])], []),       # AND of both
])
def test_comparisons_and_their_conjunction(cluster, filters, days):
    parts, n, rest = planned(cluster, "db.p", filters)
    assert (parts, n, rest) == (days, 2 * len(days), [])


def test_filters_it_cannot_apply_go_back_to_spark(cluster):
    others = [EqualTo(("v",), "x"), Not(EqualTo(("dt",), DAYS[0])),
              StringStartsWith(("dt",), "2026"), EqualTo(("dt",), 20261124)]
    parts, n, rest = planned(cluster, "db.p", [*others, EqualTo(("dt",), DAYS[0])])
    assert parts == [DAYS[0]] and n == 2
    assert all(a is b for a, b in zip(rest, others)) and len(rest) == len(others)


def test_typed_partition_columns(cluster):
    assert planned(cluster, "db.l", [GreaterThan(("n",), 1)])[0] == ["10$2026-11-26",
                                                                     "2$2026-11-25"]
    assert planned(cluster, "db.l", [EqualTo(("d",), datetime.date(2026, 11, 25))])[0] == [
        "2$2026-11-25"]
    # A string compared with an INT column is Spark's to evaluate.
    assert planned(cluster, "db.l", [EqualTo(("n",), "1")])[2] == [EqualTo(("n",), "1")]


def test_the_multi_table_layout_returns_every_filter(cluster):
    o = parse_options({"bootstrap.servers": "h:1", "tables": "db.p,db.l"})
    reader = FlussPruningBatchReader(o, infer_schema(cluster, o))
    filters = [EqualTo(("db.p", "dt"), DAYS[0])]
    assert reader.pushFilters(filters) is filters and len(reader.partitions()) == 12


def test_the_pruning_reader_only_where_spark_pushes_filters(cluster):
    # Spark fails a read whose reader overrides pushFilters while
    # spark.sql.python.filterPushdown.enabled is off: only its pushdown worker gets one.
    from fluss_spark.connector.source import FlussDataSource
    source = FlussDataSource({"bootstrap.servers": "h:1", "table": "db.p"})
    schema = source.schema()
    assert type(source.reader(schema)) is FlussBatchReader
    worker = {"__name__": "pyspark.sql.worker.data_source_pushdown_filters", "source": source,
              "schema": schema}
    exec("reader = source.reader(schema)", worker)
    assert type(worker["reader"]) is FlussPruningBatchReader
