"""Output schema: type mapping, metadata columns, multi-table layout, exact Arrow shape."""

import datetime as dt
from decimal import Decimal

import pyarrow as pa
import pytest
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (ArrayType, BinaryType, ByteType, DecimalType, IntegerType,
                               LongType, MapType, StringType, StructField, StructType,
                               TimestampNTZType, TimestampType, TimeType)

from fluss_spark.connector.schema import (Layout, output_schema, spark_type,
                                          with_snapshot_metadata)
from fluss_spark.errors import ConfigError
from fluss_spark.protocol.types import parse_schema

ALL = parse_schema("a TINYINT, b SMALLINT, c INT, d BIGINT, e FLOAT, f DOUBLE, g DECIMAL(10, 2), "
                   "h STRING, i BINARY, j BOOLEAN, k DATE, l TIMESTAMP, m TIMESTAMP_LTZ")


def test_type_mapping():
    s = output_schema([("t", ALL)], multi_table=False)
    types = {f.name: f.dataType for f in s.fields}
    assert types["a"] == ByteType()
    assert types["g"] == DecimalType(10, 2)
    assert types["l"] == TimestampNTZType()
    assert types["m"] == TimestampType()
    assert s.fieldNames()[-3:] == ["_change_type", "_log_offset", "_commit_timestamp"]
    with pytest.raises(ConfigError, match=r"column 'x\[\]'.*duration"):
        spark_type(pa.list_(pa.duration("s")), "x")


def test_nested_and_other_apache_fluss_types_map_to_spark_types():
    point = pa.struct([pa.field("x", pa.int32(), nullable=False), ("tags", pa.list_(pa.string()))])
    assert spark_type(pa.list_(point)) == ArrayType(StructType([
        StructField("x", IntegerType(), True), StructField("tags", ArrayType(StringType()), True)]))
    assert spark_type(pa.map_(pa.string(), pa.list_(pa.int64()))) == MapType(
        StringType(), ArrayType(LongType()), True)
    assert spark_type(pa.binary(16)) == BinaryType()
    assert spark_type(pa.decimal128(38, 38)) == DecimalType(38, 38)
    for t in (pa.time32("s"), pa.time32("ms"), pa.time64("us"), pa.time64("ns")):
        assert spark_type(t) == TimeType()
    for unit in ("s", "ms", "us", "ns"):
        assert spark_type(pa.timestamp(unit)) == TimestampNTZType()
        assert spark_type(pa.timestamp(unit, "UTC")) == TimestampType()


def test_shape_casts_nested_columns_and_floors_nanoseconds_at_any_depth():
    ns = pa.timestamp("ns", "UTC")
    schema = pa.schema([("l", pa.list_(pa.struct([("t", ns), ("m", pa.map_(pa.int32(), ns))]))),
                        ("b", pa.binary(2)), ("tm", pa.time32("ms")), ("t", pa.timestamp("ns"))])
    layout = Layout(output_schema([("t", schema)], False), False)
    rows = [dict(l=[{"t": -999, "m": [(1, -1001)]}, None], b=b"ab", tm=1, t=-1,
                 _change_type="+I", _log_offset=0, _commit_timestamp=None),
            dict(l=None, b=None, tm=None, t=1999, _change_type="+I", _log_offset=1,
                 _commit_timestamp=None)]
    batch = _changelog_batch(schema, rows)
    for part in (batch, batch.slice(1)):
        out = layout.shape("t", part)
        assert out.schema.equals(to_arrow_schema(layout.schema, timezone="UTC"))
        out.validate(full=True)
    out = layout.shape("t", batch)
    # 1969-12-31 23:59:59.999999001 is floored to ...999999, not truncated to 1970.
    micros = out.column("l").cast(pa.list_(pa.struct([("t", pa.int64()),
                                                      ("m", pa.map_(pa.int32(), pa.int64()))])))
    assert micros.to_pylist() == [[{"t": -1, "m": [(1, -2)]}, None], None]
    assert out.column("t").cast(pa.int64()).to_pylist() == [-1, 1]
    assert out.column("b").to_pylist() == [b"ab", None]
    assert out.column("tm").cast(pa.int64()).to_pylist() == [1_000_000, None]


def _changelog_batch(schema, rows):
    full = pa.schema(list(schema) + [pa.field("_change_type", pa.string()),
                                     pa.field("_log_offset", pa.int64()),
                                     pa.field("_commit_timestamp", pa.timestamp("ms", tz="UTC"))])
    return pa.RecordBatch.from_pylist(rows, schema=full)


def test_shape_single_table_matches_spark_arrow_schema_exactly():
    layout = Layout(output_schema([("t", ALL)], False), False)
    row = dict(a=1, b=2, c=3, d=4, e=1.5, f=2.5, g=Decimal("1.25"), h="x", i=b"y", j=True,
               k=dt.date(2024, 1, 2), l=dt.datetime(2024, 1, 2, 3, 4, 5),
               m=dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc),
               _change_type="+U", _log_offset=7, _commit_timestamp=1_700_000_000_000)
    out = layout.shape("t", _changelog_batch(ALL, [row]))
    assert out.schema.equals(to_arrow_schema(layout.schema, timezone="UTC"))
    got = out.to_pylist()[0]
    assert got["d"] == 4 and got["_change_type"] == "+U" and got["_log_offset"] == 7
    assert got["_commit_timestamp"] == dt.datetime(2023, 11, 14, 22, 13, 20,
                                                   tzinfo=dt.timezone.utc)
    assert layout.shape("t", out) is out        # already Spark's schema: passed through


def test_multi_table_layout_is_typed_and_lossless():
    a = parse_schema("id BIGINT, name STRING")
    b = parse_schema("k INT, price DECIMAL(5, 1)")
    schema = output_schema([("db.a", a), ("db.b", b)], True)
    assert schema.fieldNames() == ["_table", "db.a", "db.b", "_change_type", "_log_offset",
                                   "_commit_timestamp"]
    assert isinstance(schema["db.b"].dataType, StructType)
    layout = Layout(schema, True)
    assert layout.table_names == ("db.a", "db.b")
    batch = _changelog_batch(b, [dict(k=1, price=Decimal("2.5"), _change_type="+I",
                                      _log_offset=0, _commit_timestamp=5)])
    out = layout.shape("db.b", batch)
    assert out.schema.equals(to_arrow_schema(schema, timezone="UTC"))
    row = out.to_pylist()[0]
    assert row["_table"] == "db.b" and row["db.a"] is None
    assert row["db.b"] == {"k": 1, "price": Decimal("2.5")}


def test_narrower_user_schema_selects_columns():
    a = parse_schema("id BIGINT, name STRING, extra DOUBLE")
    full = output_schema([("t", a)], False)
    narrow = StructType([f for f in full.fields if f.name != "extra"])
    layout = Layout(narrow, False)
    batch = _changelog_batch(a, [dict(id=1, name="n", extra=1.0, _change_type="+A",
                                      _log_offset=3, _commit_timestamp=1)])
    assert layout.shape("t", batch).schema.names == ["id", "name", "_change_type", "_log_offset",
                                                     "_commit_timestamp"]


def test_snapshot_metadata():
    b = with_snapshot_metadata(pa.RecordBatch.from_pylist([{"id": 1}, {"id": 2}]), 40)
    assert b.column("_change_type").to_pylist() == ["+I", "+I"]
    assert b.column("_log_offset").to_pylist() == [39, 39]
    assert b.column("_commit_timestamp").null_count == 2


def test_table_name_clash():
    with pytest.raises(ConfigError, match="clash"):
        output_schema([("_table", parse_schema("a INT"))], True)
    assert isinstance(output_schema([("t", parse_schema("a STRING"))], False)["a"].dataType,
                      StringType)
