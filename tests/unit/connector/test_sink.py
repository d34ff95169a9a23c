"""The sink without Spark: options, the driver-side checks of a write, and what a task sends
for each batch (``fluss_spark/connector/sink.py``, ``sink_plan.py``, ``sink_options.py``)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql.types import (IntegerType, LongType, StringType, StructField, StructType,
                               TimestampType)

from fluss_spark.connector import sink
from fluss_spark.connector.options import options_table_markdown
from fluss_spark.connector.sink_options import SINK_OPTIONS, SinkOptions, parse_sink_options
from fluss_spark.connector.sink_plan import fits
from fluss_spark.errors import ConfigError, PartitionNotExist, TableNotExist

OPTS = {"bootstrap.servers": "h:1", "table": "db.t"}


@pytest.fixture
def connected(cluster, monkeypatch):
    """The sink's connections all go to the fake cluster, which has a PK and a log table."""
    cluster.add_table("db.pk", "id BIGINT NOT NULL, v STRING, n INT", pk=("id",))
    cluster.add_table("db.log", "id BIGINT, v STRING", pk=())
    monkeypatch.setattr(SinkOptions, "connect", lambda self: cluster)
    return cluster


def _schema(*fields) -> StructType:
    return StructType([StructField(n, t) for n, t in fields])


PK_INPUT = _schema(("id", LongType()), ("v", StringType()), ("n", IntegerType()))
CHANGES = _schema(("id", LongType()), ("v", StringType()), ("n", IntegerType()),
                  ("_change_type", StringType()), ("_log_offset", LongType()),
                  ("_commit_timestamp", TimestampType()))


def _batch(schema: StructType, rows: list[tuple]) -> pa.RecordBatch:
    from pyspark.sql.pandas.types import to_arrow_schema
    arrow = to_arrow_schema(schema, timezone="UTC")
    return pa.RecordBatch.from_pylist([dict(zip(arrow.names, r)) for r in rows], schema=arrow)


def _write(cluster, table: str, schema: StructType, *batches: list[tuple]):
    writer = sink.batch_writer({**OPTS, "table": table}, schema, False)
    return writer.write(iter([_batch(schema, b) for b in batches]))


def test_options_parse_fluss_writer_names_and_refuse_the_rest():
    o = parse_sink_options({**OPTS, "client.writer.batch-size": "1mb",
                            "CLIENT.WRITER.ACKS": "1", "client.writer.batch-timeout": "5ms"})
    assert o.table == "db.t" and o.writer_options() == {
        "client.writer.batch-size": 1 << 20, "client.writer.batch-timeout": 5,
        "client.writer.acks": "1"}
    assert parse_sink_options({"bootstrap.servers": "h:1", "path": "db.x"}).table == "db.x"
    with pytest.raises(ConfigError, match="option 'table' is required"):
        parse_sink_options({"bootstrap.servers": "h:1"})
    with pytest.raises(ConfigError, match="did you mean 'client.writer.retries'"):
        parse_sink_options({**OPTS, "client.writer.retry": "3"})
    with pytest.raises(ConfigError, match="needs client.writer.acks=all"):
        parse_sink_options({**OPTS, "client.writer.enable-idempotence": "true",
                            "client.writer.acks": "0"})


def test_docs_sink_option_table_is_current():
    docs = Path(__file__).resolve().parents[3] / "docs" / "spark_sink.md"
    assert options_table_markdown(SINK_OPTIONS) in docs.read_text(), \
        "regenerate the table in docs/spark_sink.md from options_table_markdown(SINK_OPTIONS)"


def test_type_fits():
    assert fits(pa.int32(), pa.int64()) and not fits(pa.int64(), pa.int32())
    assert fits(pa.timestamp("us", tz="UTC"), pa.timestamp("ms"))
    assert fits(pa.large_string(), pa.string()) and not fits(pa.string(), pa.int64())
    assert fits(pa.decimal128(10, 2), pa.decimal128(12, 3))
    assert not fits(pa.decimal128(10, 2), pa.decimal128(10, 3))


def test_batch_upsert_and_append(connected):
    commit = _write(connected, "db.pk", PK_INPUT, [(1, "a", 10), (2, None, 20)])
    assert commit.rows == {"upsert": 2}
    assert connected.written == [("db.pk", "upsert", [{"id": 1, "v": "a", "n": 10},
                                                      {"id": 2, "v": None, "n": 20}]),
                                 ("db.pk", "flush", [])]
    connected.written.clear()
    # A log table: a missing nullable column is written as null; int32 widens to BIGINT.
    _write(connected, "db.log", _schema(("id", IntegerType())), [(7,)])
    assert connected.written[0] == ("db.log", "append", [{"id": 7, "v": None}])


def test_change_types_upsert_delete_and_skip_in_order(connected):
    rows = [(1, "a", 1, "+I", 0, None), (2, "b", 2, "+I", 1, None),
            (1, "a", 1, "-U", 2, None), (1, "a2", 1, "+U", 3, None),
            (2, "b", 2, "-D", 4, None), (3, "c", 3, "+I", 5, None),
            (3, "c", 3, "-D", 6, None), (3, "c2", 3, "+I", 7, None)]
    commit = _write(connected, "db.pk", CHANGES, rows)
    # Each key's last change wins: 1 -> a2, 2 deleted, 3 -> c2 (its delete came before).
    ops = {op: r for _, op, r in connected.written if op != "flush"}
    assert ops == {"upsert": [{"id": 1, "v": "a2", "n": 1}, {"id": 3, "v": "c2", "n": 3}],
                   "delete": [{"id": 2, "v": "b", "n": 2}]}
    assert commit.rows == {"upsert": 2, "delete": 1}
    connected.written.clear()
    _write(connected, "db.pk", CHANGES, [(7, "x", 7, "+A", 0, None)])   # a log stream's row
    assert connected.written[0] == ("db.pk", "upsert", [{"id": 7, "v": "x", "n": 7}])


@pytest.mark.parametrize("table, schema, rows, error", [
    ("db.pk", _schema(("v", StringType()), ("n", IntegerType())), None,
     r"write to db.pk: missing column\(s\) id \(primary key"),
    ("db.pk", _schema(("id", StringType()), ("v", StringType()), ("n", IntegerType())), None,
     "column 'id' has type string, which does not fit the table's int64; cast it"),
    ("db.pk", _schema(("id", LongType()), ("v", StringType())), None,
     "this cluster has no partial updates of a primary-key table; give every column"),
    ("db.log", _schema(("id", LongType()), ("extra", StringType())), None,
     r"column\(s\) extra are not in the table"),
    ("db.pk", PK_INPUT, [(1, "a", 1), (None, "b", 2)],
     "primary-key column 'id' is null in 1 row"),
    ("db.pk", CHANGES, [(1, "a", 1, "+I", 0, None), (2, "b", 2, "U", 1, None)],
     r"_change_type has value\(s\) 'U' that a primary-key table does not take; use \+I"),
    ("db.log", _schema(("id", LongType()), ("_change_type", StringType())), [(1, "-D")],
     "that a log table does not take"),
])
def test_bad_input_is_refused_in_one_line_and_nothing_is_written(connected, table, schema,
                                                                 rows, error):
    with pytest.raises(ConfigError, match=error) as e:
        _write(connected, table, schema, rows or [])
    assert "\n" not in str(e.value)
    assert connected.written == []


def test_missing_nullable_columns_make_a_partial_update_where_the_cluster_has_them(connected):
    connected.partial_updates = True
    _write(connected, "db.pk", _schema(("n", IntegerType()), ("id", LongType())), [(5, 1)])
    assert connected.calls[-1] == ("table_writer", "db.pk", {}, ["id", "n"])
    assert connected.written[0] == ("db.pk", "upsert", [{"id": 1, "n": 5}])


def test_a_bad_batch_after_good_ones_fails_the_task_before_any_write(connected):
    with pytest.raises(ConfigError, match="null"):
        _write(connected, "db.pk", PK_INPUT, [(1, "a", 1)], [(2, "b", 2)], [(None, "c", 3)])
    assert connected.written == []


def test_unknown_table_and_overwrite_are_refused_on_the_driver(connected):
    with pytest.raises(TableNotExist, match="write to db.nope: the table does not exist on h:1;"
                                            " create it first"):
        sink.batch_writer({**OPTS, "table": "db.nope"}, PK_INPUT, False)
    with pytest.raises(ConfigError, match="overwrite .* is not supported.*use mode 'append'"):
        sink.stream_writer({**OPTS, "table": "db.pk"}, PK_INPUT, True)


DAY_INPUT = _schema(("id", LongType()), ("dt", StringType()), ("v", StringType()))


def test_a_partitioned_table_is_written_once_every_partition_its_rows_name_exists(connected):
    connected.add_table("db.days", "id BIGINT, dt STRING, v STRING", pk=(),
                        partition_keys=("dt",))
    connected.add_partition("db.days", "2026-11-25")
    rows = [(1, "2026-11-25", "a"), (2, "2026-11-25", "b")]
    assert _write(connected, "db.days", DAY_INPUT, rows).rows == {"append": 2}
    assert [(op, [r["dt"] for r in got]) for _, op, got in connected.written] == [
        ("append", ["2026-11-25", "2026-11-25"]), ("flush", [])]
    connected.written.clear()
    # A row of a partition that does not exist, after good batches: nothing is written.
    with pytest.raises(PartitionNotExist, match="partition dt=2026-11-26 of table db.days does "
                                                "not exist.*dynamic-create-partition"):
        _write(connected, "db.days", DAY_INPUT, rows, [(3, "2026-11-26", "c")])
    # A null partition value, or one no partition can have.
    with pytest.raises(ConfigError, match="partition key column 'dt' is null in 1 row"):
        _write(connected, "db.days", DAY_INPUT, rows, [(3, None, "c")])
    with pytest.raises(ConfigError, match="partition value of 'dt'"):
        _write(connected, "db.days", DAY_INPUT, [(3, "2026/11/26", "c")])
    assert connected.written == []
    # With dynamic creation on, the check is the writer's (which creates the partition).
    writer = sink.batch_writer({**OPTS, "table": "db.days",
                                "client.writer.dynamic-create-partition.enabled": "true"},
                               DAY_INPUT, False)
    assert writer.write(iter([_batch(DAY_INPUT, [(3, "2026-11-26", "c")])])).rows == {
        "append": 1}
    assert ("table_writer", "db.days", {"client.writer.dynamic-create-partition.enabled": True},
            None) in connected.calls
