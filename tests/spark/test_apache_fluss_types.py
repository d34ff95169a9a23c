"""Every column type of Apache Fluss 0.9.1 read by format("fluss") from a real cluster: a log
table (Arrow log batches) and a PK table (KV snapshot values in Fluss's compacted row format, then
its changelog), in a stream and in a batch, every value compared with what pyfluss wrote.

CHAR(n) has no Arrow type pyfluss would create it from; it is encoded as STRING (unit tests:
tests/unit/protocol/test_apache_fluss_log_batch.py). pyfluss writes TIME only in whole
milliseconds, which is all Fluss keeps of one; it refuses a TIMESTAMP before 1970 with a part
of a millisecond (it makes the nanoseconds of the millisecond negative), so those values here are
whole milliseconds and the sub-millisecond ones before 1970 are unit-tested
(tests/unit/protocol/test_apache_fluss_compacted_row.py, test_apache_fluss_binary_array.py,
tests/unit/connector/test_schema.py).
"""

from __future__ import annotations

import datetime as dt
import uuid
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest

from fluss_spark.client.apache_fluss import ApacheFlussWireCluster
from fluss_spark.local.ports import wait_until
from fluss_spark.testing.apache_fluss import PyFluss

pytestmark = pytest.mark.spark

UTC = dt.timezone.utc
POINT = pa.struct([("k", pa.string()), ("v", pa.decimal128(10, 2))])
SCHEMA = pa.schema([
    pa.field("id", pa.int32(), nullable=False),
    ("ints", pa.list_(pa.int32())), ("texts", pa.list_(pa.string())),
    ("by_name", pa.map_(pa.string(), pa.list_(pa.int64()))),
    ("points", pa.list_(POINT)), ("matrix", pa.list_(pa.list_(pa.int64()))),
    ("rec", pa.struct([("x", pa.int32()), ("d", pa.decimal128(38, 10)),
                       ("when", pa.timestamp("ns")), ("tags", pa.map_(pa.string(), pa.string())),
                       ("inner", pa.struct([("b", pa.binary()), ("flag", pa.bool_())]))])),
    ("d38_10", pa.decimal128(38, 10)), ("d38_0", pa.decimal128(38, 0)),
    ("d18_4", pa.decimal128(18, 4)), ("d10_0", pa.decimal128(10, 0)),
    ("ts0", pa.timestamp("s")), ("ts3", pa.timestamp("ms")), ("ts6", pa.timestamp("us")),
    ("ts9", pa.timestamp("ns")),
    ("ltz0", pa.timestamp("s", "UTC")), ("ltz3", pa.timestamp("ms", "UTC")),
    ("ltz6", pa.timestamp("us", "UTC")), ("ltz9", pa.timestamp("ns", "UTC")),
    ("text", pa.string()), ("bin4", pa.binary(4)), ("bytes", pa.binary()),
    ("t0", pa.time32("s")), ("t3", pa.time32("ms")), ("t6", pa.time64("us")),
])
# Written out: Decimal arithmetic (even a unary minus) rounds to 28 digits.
LOW = Decimal("-9999999999999999999999999999.9999999999")
# pyfluss takes datetimes up to 9999-12-30 22:00 UTC.
EXTREME: dict[str, Any] = {
    "id": 1, "ints": [-(2**31), None, 2**31 - 1], "texts": ["", "中文 ünï 😀", None, "x" * 50],
    "by_name": {"": [-(2**63), 2**63 - 1], "null": None, "空": []},
    "points": [{"k": "a", "v": Decimal("-99999999.99")}, None, {"k": None, "v": None}],
    "matrix": [[1, None], [], None],
    "rec": {"x": -7, "d": LOW, "when": dt.datetime(1969, 12, 31, 23, 59, 59, 999000),
            "tags": {"ключ": "значение"}, "inner": {"b": b"\x00\xff", "flag": False}},
    "d38_10": LOW, "d38_0": Decimal(10**38 - 1), "d18_4": Decimal("-99999999999999.9999"),
    "d10_0": Decimal(0),
    "ts0": dt.datetime(1, 1, 1), "ts3": dt.datetime(9999, 12, 30, 21, 59, 59, 999000),
    "ts6": dt.datetime(1900, 1, 1, 0, 0, 0, 1000),
    "ts9": dt.datetime(2262, 4, 11, 23, 47, 16, 854775),
    "ltz0": dt.datetime(1901, 12, 14, 0, 0, tzinfo=UTC),
    "ltz3": dt.datetime(1969, 12, 31, 23, 59, 59, 999000, tzinfo=UTC),
    "ltz6": dt.datetime(2200, 6, 30, 12, 0, 0, 123456, tzinfo=UTC),
    "ltz9": dt.datetime(1950, 1, 1, 0, 0, 0, 1000, tzinfo=UTC),
    "text": "日本語 text", "bin4": b"\x00\x01\xfe\xff", "bytes": b"\x80" * 300,
    "t0": dt.time(23, 59, 59), "t3": dt.time(0, 0, 0, 1000), "t6": dt.time(12, 34, 56, 789000),
}
EMPTY: dict[str, Any] = {
    "id": 2, "ints": [], "texts": [], "by_name": {}, "points": [], "matrix": [[]],
    "rec": {"x": None, "d": Decimal("0.0000000001"), "when": None, "tags": {}, "inner": None},
    "d38_10": Decimal("1E-10"), "d38_0": Decimal(-(10**38 - 1)), "d18_4": Decimal("0.0001"),
    "d10_0": Decimal(-9999999999),
    "ts0": dt.datetime(1970, 1, 1), "ts3": dt.datetime(1969, 12, 31, 23, 59, 59, 999000),
    "ts6": dt.datetime(9999, 12, 30, 21, 59, 59, 999999),
    "ts9": dt.datetime(1677, 9, 22, 0, 12, 43, 145000),
    "ltz0": dt.datetime(2100, 1, 1, tzinfo=UTC), "ltz3": dt.datetime(1970, 1, 1, tzinfo=UTC),
    "ltz6": dt.datetime(1969, 12, 31, 23, 59, 59, 999000, tzinfo=UTC),
    "ltz9": dt.datetime(2262, 1, 1, 0, 0, 0, 999999, tzinfo=UTC),
    "text": "", "bin4": b"\x00\x00\x00\x00", "bytes": b"",
    "t0": dt.time(0, 0, 0), "t3": dt.time(23, 59, 59, 999000), "t6": dt.time(0, 0, 0),
}
NULLS: dict[str, Any] = {"id": 3, **{f.name: None for f in list(SCHEMA)[1:]}}
ROWS = [EXTREME, EMPTY, NULLS]


def _pyfluss_row(row: dict[str, Any]) -> dict[str, Any]:
    """``row`` as pyfluss takes it: maps as lists of pairs, at any depth."""
    def conv(t: pa.DataType, v: Any) -> Any:
        if v is None:
            return None
        if pa.types.is_map(t):
            return [(k, conv(t.item_type, x)) for k, x in v.items()]
        if pa.types.is_list(t):
            return [conv(t.value_type, x) for x in v]
        if pa.types.is_struct(t):
            return {f.name: conv(f.type, v[f.name]) for f in t}
        return v
    return {f.name: conv(f.type, row[f.name]) for f in SCHEMA}


def _plain(v: Any) -> Any:
    """A value Spark collected, comparable with the written one: Rows and maps as dicts,
    binary as bytes, instants as aware UTC datetimes."""
    if hasattr(v, "asDict"):
        return {k: _plain(x) for k, x in v.asDict().items()}
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_plain(x) for x in v]
    if isinstance(v, bytearray):
        return bytes(v)
    return v


def _rows(df) -> list[dict[str, Any]]:
    got = []
    for r in df.orderBy("id").collect():
        row = {name: _plain(r[name]) for name in SCHEMA.names}
        # Spark gives an instant as a naive datetime in this process's time zone.
        for name in ("ltz0", "ltz3", "ltz6", "ltz9"):
            if row[name] is not None:
                row[name] = row[name].astimezone(UTC)
        got.append(row)
    return got


def _stream(spark, servers: str, table: str, mode: str) -> list[dict[str, Any]]:
    query = f"types_{uuid.uuid4().hex[:8]}"
    q = (spark.readStream.format("fluss").option("bootstrap.servers", servers)
         .option("table", table).option("scan.startup.mode", mode).load()
         .writeStream.format("memory").queryName(query).trigger(availableNow=True).start())
    try:
        assert q.awaitTermination(300), "the AvailableNow query did not finish"
        assert q.exception() is None, q.exception()
        return _rows(spark.table(query)) + [
            {"_change_type": r["_change_type"], "id": r["id"], "_log_offset": r["_log_offset"]}
            for r in spark.table(query).orderBy("id").collect()]
    finally:
        q.stop()


def _batch(spark, servers: str, table: str) -> list[dict[str, Any]]:
    return _rows(spark.read.format("fluss").option("bootstrap.servers", servers)
                 .option("table", table).load())


@pytest.fixture
def time_type(spark):
    """Spark 4.x reads TIME columns in batch queries, but a streaming query or a write with one
    needs its TIME type switched on (docs/spark_source.md)."""
    before = spark.conf.get("spark.sql.timeType.enabled")
    spark.conf.set("spark.sql.timeType.enabled", "true")
    yield
    spark.conf.set("spark.sql.timeType.enabled", before)


def test_every_column_type_round_trips_through_log_batches_and_kv_snapshots(
        spark, apache_fluss, time_type):
    servers = apache_fluss.bootstrap_servers
    log, pk = f"types.log_{uuid.uuid4().hex[:8]}", f"types.pk_{uuid.uuid4().hex[:8]}"
    with PyFluss(servers) as fluss:
        fluss.create_table(log, SCHEMA)
        fluss.create_table(pk, SCHEMA, primary_key=["id"])
        fluss.append(log, [_pyfluss_row(r) for r in ROWS])
        fluss.upsert(pk, [_pyfluss_row(r) for r in ROWS])
    wire = ApacheFlussWireCluster.connect(servers, request_timeout_s=30)
    try:
        # Full mode and batch reads of the PK table take its rows from a KV snapshot.
        wait_until(lambda: 0 in wire.latest_kv_snapshots(pk)
                   and wire.latest_kv_snapshots(pk)[0].log_offset >= 3, 120,
                   f"a KV snapshot of {pk} covering its 3 rows")
    finally:
        wire.close()
    appended = ROWS + [{"_change_type": "+A", "id": r["id"], "_log_offset": i}
                       for i, r in enumerate(ROWS)]
    assert _stream(spark, servers, log, "earliest") == appended
    assert _batch(spark, servers, log) == ROWS
    # Rows of a snapshot covering offsets [0, 3) all carry _log_offset 2: read from the snapshot.
    inserted = ROWS + [{"_change_type": "+I", "id": r["id"], "_log_offset": 2} for r in ROWS]
    assert _stream(spark, servers, pk, "full") == inserted
    assert _batch(spark, servers, pk) == ROWS
