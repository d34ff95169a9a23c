"""format("fluss") against a real Apache Fluss cluster: log tables and changelog-only PK reads.

Test data is written with the official Python client (pyfluss), independently of this project's
Fluss wire client; the source finds the engine from ``bootstrap.servers`` alone.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from chispa import assert_df_equality
from pyspark.errors import StreamingQueryException
from pyspark.sql import functions as F

from fluss_spark.clock import wall_ms
from fluss_spark.local.ports import wait_until
from fluss_spark.testing.apache_fluss import PyFluss
from fluss_spark.testing.spark_driver import Driver

pytestmark = pytest.mark.spark

SCHEMA = "id BIGINT, v STRING"


@pytest.fixture(scope="module")
def fluss(apache_fluss):
    with PyFluss(apache_fluss.bootstrap_servers) as client:
        yield client


@pytest.fixture
def name():
    return f"sp.t_{uuid.uuid4().hex[:10]}"


def rows(ids) -> list[tuple[int, str]]:
    return [(i, f"v{i}") for i in ids]


def stream(spark, servers: str, table: str, **options):
    reader = spark.readStream.format("fluss").option("bootstrap.servers", servers)
    reader = reader.option("tables" if "," in table else "table", table)
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return reader.load()


def available_now(spark, servers: str, table: str, out: Path, ckpt: Path, **options):
    """Run the query with Trigger.AvailableNow to its end; returns its progress reports."""
    q = (stream(spark, servers, table, **options).writeStream.format("parquet")
         .option("path", str(out)).option("checkpointLocation", str(ckpt))
         .trigger(availableNow=True).start())
    try:
        assert q.awaitTermination(300), "the AvailableNow query did not finish"
        assert q.exception() is None, q.exception()
        return [p for p in q.recentProgress if p["numInputRows"]]
    finally:
        q.stop()


def expected(spark, ids, change_type="+A"):
    return spark.createDataFrame([(i, f"v{i}", change_type) for i in ids],
                                 "id BIGINT, v STRING, _change_type STRING")


def test_log_table_earliest_rate_limited_then_resumed_exactly_once(spark, apache_fluss, fluss,
                                                                   name, tmp_path):
    servers = apache_fluss.bootstrap_servers
    fluss.create_table(name, SCHEMA, buckets=2)
    fluss.append(name, rows(range(300)))
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    progress = available_now(spark, servers, name, out, ckpt, **{
        "scan.startup.mode": "earliest", "maxOffsetsPerTrigger": 100})
    assert len(progress) >= 3 and all(p["numInputRows"] <= 100 for p in progress)
    got = spark.read.parquet(str(out))
    assert_df_equality(got.select("id", "v", "_change_type"), expected(spark, range(300)),
                       ignore_row_order=True)
    # More rows, and the same checkpoint: only the new ones arrive, each once.
    fluss.append(name, rows(range(300, 350)))
    available_now(spark, servers, name, out, ckpt, **{
        "scan.startup.mode": "earliest", "maxOffsetsPerTrigger": 100})
    got = spark.read.parquet(str(out))
    # Row for row, so a record read twice would show as a duplicate.
    assert_df_equality(got.select("id", "v", "_change_type"), expected(spark, range(350)),
                       ignore_row_order=True)


def test_startup_latest_and_timestamp(spark, apache_fluss, fluss, name, tmp_path):
    servers = apache_fluss.bootstrap_servers
    fluss.create_table(name, SCHEMA, buckets=1)
    fluss.append(name, rows(range(10)))
    before = spark.read.format("fluss").option("bootstrap.servers", servers) \
        .option("table", name).load()
    cut = before.agg(F.max("_commit_timestamp")).first()[0]
    cut_ms = int(cut.timestamp() * 1000) + 1
    wait_until(lambda: wall_ms() > cut_ms, 5, "the clock to pass the first rows' commit time")
    fluss.append(name, rows(range(10, 15)))
    out = tmp_path / "ts"
    available_now(spark, servers, name, out, tmp_path / "ts-ckpt", **{
        "scan.startup.mode": "timestamp", "scan.startup.timestamp": cut_ms})
    assert_df_equality(spark.read.parquet(str(out)).select("id", "v", "_change_type"),
                       expected(spark, range(10, 15)), ignore_row_order=True)

    # latest: only what is written after the query started.
    out, ckpt = tmp_path / "latest", tmp_path / "latest-ckpt"
    q = (stream(spark, servers, name, **{"scan.startup.mode": "latest"}).writeStream
         .format("parquet").option("path", str(out)).option("checkpointLocation", str(ckpt))
         .trigger(processingTime="200 milliseconds").start())
    try:
        wait_until(lambda: q.lastProgress is not None, 120, "the first trigger")
        fluss.append(name, rows(range(15, 20)))
        wait_until(lambda: sum(p["numInputRows"] for p in q.recentProgress) >= 5, 120,
                   "the new rows")
    finally:
        q.stop()
    assert_df_equality(spark.read.parquet(str(out)).select("id", "v", "_change_type"),
                       expected(spark, range(15, 20)), ignore_row_order=True)


def test_pk_table_changelog_has_exact_change_types(spark, apache_fluss, fluss, name, tmp_path):
    servers = apache_fluss.bootstrap_servers
    fluss.create_table(name, "id BIGINT NOT NULL, v STRING", primary_key=["id"], buckets=1)
    fluss.upsert(name, [(1, "a"), (2, "b")])
    fluss.upsert(name, [(1, "a2")])
    fluss.delete(name, [(2,)])
    out = tmp_path / "out"
    available_now(spark, servers, name, out, tmp_path / "ckpt", **{"scan.startup.mode": "earliest"})
    got = [(r["id"], r["v"], r["_change_type"]) for r in
           spark.read.parquet(str(out)).orderBy("_log_offset").collect()]
    assert got == [(1, "a", "+I"), (2, "b", "+I"), (1, "a", "-U"), (1, "a2", "+U"),
                   (2, "b", "-D")]


def test_reads_of_kv_snapshots_are_refused_at_the_start_with_what_to_do(spark, apache_fluss,
                                                                         fluss, name, tmp_path):
    servers = apache_fluss.bootstrap_servers
    fluss.create_table(name, "id BIGINT NOT NULL, v STRING", primary_key=["id"], buckets=1)
    with pytest.raises(Exception, match="scan.startup.mode=earliest, latest or timestamp"):
        spark.read.format("fluss").option("bootstrap.servers", servers).option(
            "table", name).load().collect()
    q = (stream(spark, servers, name).writeStream.format("noop")
         .option("checkpointLocation", str(tmp_path / "ckpt")).start())
    try:
        with pytest.raises(StreamingQueryException,
                           match="primary-key table and scan.startup.mode=full reads its KV "
                                 "snapshot"):
            q.awaitTermination(120)
    finally:
        q.stop()


def test_several_tables_projection_and_batch_read(spark, apache_fluss, fluss, name, tmp_path):
    servers = apache_fluss.bootstrap_servers
    other = name + "_b"
    fluss.create_table(name, SCHEMA, buckets=2)
    fluss.create_table(other, SCHEMA, buckets=1)
    fluss.append(name, rows(range(20)))
    fluss.append(other, rows(range(100, 105)))
    out = tmp_path / "multi"
    available_now(spark, servers, f"{name},{other}", out, tmp_path / "multi-ckpt",
                  **{"scan.startup.mode": "earliest"})
    got = spark.read.parquet(str(out))
    ids = [(r["_table"], r["id"]) for r in got.select(
        "_table", F.coalesce(F.col(f"`{name}`.id"), F.col(f"`{other}`.id")).alias("id")).collect()]
    assert sorted(ids) == sorted([(name, i) for i in range(20)] + [(other, i) for i in range(100, 105)])

    projected = (spark.read.format("fluss").option("bootstrap.servers", servers)
                 .option("table", name).option("columns", "v").load())
    assert projected.columns[0] == "v" and "id" not in projected.columns
    assert sorted(r["v"] for r in projected.collect()) == sorted(f"v{i}" for i in range(20))


def test_tablet_killed_during_a_stream_loses_and_repeats_nothing(spark, apache_fluss, fluss,
                                                                  name, tmp_path):
    servers = apache_fluss.bootstrap_servers
    fluss.create_table(name, SCHEMA, buckets=2)
    fluss.append(name, rows(range(100)))
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    q = (stream(spark, servers, name, **{"scan.startup.mode": "earliest",
                                         "maxOffsetsPerTrigger": 20}).writeStream
         .format("parquet").option("path", str(out)).option("checkpointLocation", str(ckpt))
         .trigger(processingTime="200 milliseconds").start())
    try:
        wait_until(lambda: sum(p["numInputRows"] for p in q.recentProgress) >= 20, 120,
                   "the first rows")
        apache_fluss.kill("tablet", 0)
        apache_fluss.restart("tablet", 0)
        fluss.append(name, rows(range(100, 150)))
        wait_until(lambda: q.exception() is not None
                   or sum(p["numInputRows"] for p in q.recentProgress) >= 150, 300,
                   "every row after the tablet came back")
        assert q.exception() is None, q.exception()
    finally:
        q.stop()
    assert_df_equality(spark.read.parquet(str(out)).select("id", "v", "_change_type"),
                       expected(spark, range(150)), ignore_row_order=True)


def test_driver_killed_then_restarted_from_its_checkpoint(spark, apache_fluss, fluss, name,
                                                          tmp_path):
    servers = apache_fluss.bootstrap_servers
    fluss.create_table(name, SCHEMA, buckets=2)
    fluss.append(name, rows(range(500)))
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    options = {"scan.startup.mode": "earliest", "maxOffsetsPerTrigger": "100"}
    driver = Driver(tmp_path, servers, name, str(out), str(ckpt), "2", "0", options=options)
    try:
        driver.wait_for("IN_BATCH 2", "the first driver to be inside batch 2")
    finally:
        driver.kill()
    # The restart replays batch 2 (its sink never returned) and goes on to the end.
    reader = stream(spark, servers, name, **options)

    def sink(df, batch_id):
        df.write.mode("overwrite").parquet(f"{out}/batch={batch_id}")
    q = (reader.writeStream.option("checkpointLocation", str(ckpt)).foreachBatch(sink)
         .trigger(availableNow=True).start())
    try:
        assert q.awaitTermination(300)
        assert q.exception() is None, q.exception()
    finally:
        q.stop()
    got = spark.read.parquet(str(out))
    assert_df_equality(got.select("id", "v", "_change_type"), expected(spark, range(500)),
                       ignore_row_order=True)
