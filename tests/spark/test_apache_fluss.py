"""format("fluss") against a real Apache Fluss cluster: log tables and PK changelog reads.

Full mode, batch reads and tiering of primary-key tables are in test_apache_fluss_pk.py.

Test data is written with the official Python client (pyfluss), independently of this project's
Fluss wire client; the source finds the engine from ``bootstrap.servers`` alone.
"""

from __future__ import annotations

import re
import uuid
from pathlib import Path

import pytest
from chispa import assert_df_equality
from pyspark.errors import StreamingQueryException
from pyspark.sql import functions as F

from fluss_spark.client.apache_fluss import ApacheFlussWireCluster
from fluss_spark.clock import wall_ms
from fluss_spark.connector.offsets import decode
from fluss_spark.local.ports import wait_until
from fluss_spark.testing.apache_fluss import PyFluss, remote_segment_files
from fluss_spark.testing.spark_driver import Driver
from fluss_spark.tiering.config import TieringConfig
from fluss_spark.tiering.job import TieringJob
from fluss_spark.tiering.lake import LakeTable, table_dir

pytestmark = pytest.mark.spark

SCHEMA = "id BIGINT, v STRING"


@pytest.fixture
def fluss(apache_fluss):
    """A pyfluss writer per test: a tablet server killed in one test can leave a writer unable
    to flush, which must not spill into the next test."""
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

    # timestamp: only the changes committed from that time on, with their own change types.
    cut_ms = int(spark.read.parquet(str(out)).agg(F.max("_commit_timestamp")).first()[0]
                 .timestamp() * 1000) + 1
    wait_until(lambda: wall_ms() > cut_ms, 5, "the clock to pass the last change's commit time")
    fluss.upsert(name, [(1, "a3"), (3, "c")])
    ts_out = tmp_path / "ts"
    available_now(spark, servers, name, ts_out, tmp_path / "ts-ckpt", **{
        "scan.startup.mode": "timestamp", "scan.startup.timestamp": cut_ms})
    got = [(r["id"], r["v"], r["_change_type"]) for r in
           spark.read.parquet(str(ts_out)).orderBy("_log_offset").collect()]
    assert got == [(1, "a2", "-U"), (1, "a3", "+U"), (3, "c", "+I")]

    # latest: only the changes made after the query started.
    latest_out, ckpt = tmp_path / "latest", tmp_path / "latest-ckpt"
    q = (stream(spark, servers, name, **{"scan.startup.mode": "latest"}).writeStream
         .format("parquet").option("path", str(latest_out)).option("checkpointLocation", str(ckpt))
         .trigger(processingTime="200 milliseconds").start())
    try:
        wait_until(lambda: q.lastProgress is not None, 120, "the first trigger")
        fluss.delete(name, [(3,)])
        wait_until(lambda: sum(p["numInputRows"] for p in q.recentProgress) >= 1, 120,
                   "the delete")
    finally:
        q.stop()
    got = [(r["id"], r["v"], r["_change_type"]) for r in
           spark.read.parquet(str(latest_out)).collect()]
    assert got == [(3, "c", "-D")]


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
    assert sorted(ids) == sorted([(name, i) for i in range(20)]
                                 + [(other, i) for i in range(100, 105)])

    projected = (spark.read.format("fluss").option("bootstrap.servers", servers)
                 .option("table", name).option("columns", "v").load())
    assert projected.columns[0] == "v" and "id" not in projected.columns
    assert sorted(r["v"] for r in projected.collect()) == sorted(f"v{i}" for i in range(20))


def test_tablet_killed_during_a_stream_loses_and_repeats_nothing(spark, apache_fluss_for_faults,
                                                                  name, tmp_path):
    apache_fluss = apache_fluss_for_faults
    with PyFluss(apache_fluss.bootstrap_servers) as fluss:
        servers = apache_fluss.bootstrap_servers
        # Two replicas: with one, Fluss may cut acknowledged records from a tablet killed -9 (its
        # log is truncated to the last checkpointed position, docs/apache_fluss.md), a loss of the
        # cluster's, not of the source's.
        fluss.create_table(name, SCHEMA, buckets=2, properties={"table.replication.factor": "2"})
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


@pytest.mark.extended      # test_batch0_kills.py kills and restarts drivers on Apache Fluss
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


class Batches:
    """A foreachBatch sink keeping the ``(id, v, _change_type)`` rows of every non-empty
    micro-batch, and when (wall clock, ms) each ran."""

    def __init__(self):
        self.batches: list[tuple[int, list[tuple]]] = []

    def __call__(self, df, batch_id):
        got = [tuple(r) for r in df.select("id", "v", "_change_type").collect()]
        if got:
            self.batches.append((wall_ms(), got))

    def rows(self) -> list[tuple]:
        return [r for _, got in self.batches for r in got]


def held_back_with(q, n: int) -> bool:
    """Whether a trigger of ``q`` ran no batch although its source saw ``n`` records (the
    latest offset it reported, summed over buckets: the table was read from offset 0)."""
    for p in q.recentProgress:
        latest = p["sources"][0]["latestOffset"] if p["sources"] else None
        if p["numInputRows"] == 0 and latest is not None and sum(
                off for t in decode(latest).tables.values() for off in t.log.values()) == n:
            return True
    return False


def test_min_offsets_per_trigger_and_max_trigger_delay(spark, apache_fluss, fluss, name):
    servers = apache_fluss.bootstrap_servers
    fluss.create_table(name, SCHEMA, buckets=2)
    sink = Batches()
    # Spark reports a trigger that ran no batch only every 10s by default; a report per trigger
    # is what shows that the source saw the records and still held the batch back. The query
    # copies the session's settings when it starts, so the setting is undone right after.
    spark.conf.set("spark.sql.streaming.noDataProgressEventInterval", "0")
    try:
        q = (stream(spark, servers, name, **{"scan.startup.mode": "earliest",
                                             "minOffsetsPerTrigger": 50, "maxTriggerDelay": "1h"})
             .writeStream.foreachBatch(sink).trigger(processingTime="200 milliseconds").start())
    finally:
        spark.conf.unset("spark.sql.streaming.noDataProgressEventInterval")
    try:
        fluss.append(name, rows(range(30)))
        wait_until(lambda: held_back_with(q, 30), 120, "a trigger that saw the 30 records")
        assert sink.batches == [] and not any(p["numInputRows"] for p in q.recentProgress)
        fluss.append(name, rows(range(30, 50)))
        # A batch's progress is reported after its sink ran: wait for the report.
        wait_until(lambda: sum(p["numInputRows"] for p in q.recentProgress) >= 50, 120,
                   "the batch once 50 records are there")
        batch_sizes = [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]]
    finally:
        q.stop()
    assert batch_sizes == [50] and len(sink.batches) == 1
    assert_df_equality(spark.createDataFrame(sink.rows(), expected(spark, []).schema),
                       expected(spark, range(50)), ignore_row_order=True)

    # A short maxTriggerDelay lets fewer records than minOffsetsPerTrigger through.
    other = name + "_d"
    fluss.create_table(other, SCHEMA, buckets=2)
    fluss.append(other, rows(range(10)))   # all there before the query: one batch of 10
    sink = Batches()
    started_ms = wall_ms()
    q = (stream(spark, servers, other, **{"scan.startup.mode": "earliest",
                                          "minOffsetsPerTrigger": 1_000, "maxTriggerDelay": "2s"})
         .writeStream.foreachBatch(sink).trigger(processingTime="200 milliseconds").start())
    try:
        wait_until(lambda: sum(p["numInputRows"] for p in q.recentProgress) >= 10, 120,
                   "the small batch after maxTriggerDelay")
        batch_sizes = [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]]
    finally:
        q.stop()
    assert batch_sizes == [10] and sink.batches[0][0] >= started_ms + 2_000
    assert_df_equality(spark.createDataFrame(sink.rows(), expected(spark, []).schema),
                       expected(spark, range(10)), ignore_row_order=True)


def test_fail_on_data_loss_when_retention_removed_unread_records(spark, apache_fluss, fluss,
                                                                 name, tmp_path):
    servers = apache_fluss.bootstrap_servers
    # Fluss removes records only once their segment was copied to remote storage, deleted
    # locally (all but table.log.tiered.local-segments newest segments) and has passed
    # table.log.ttl remotely; the shared cluster rolls 1 MB segments and runs that every
    # second (APACHE_FLUSS_TEST_OPTIONS in tests/conftest.py). Uncompressed batches make the
    # rows below fill segments at their own size.
    fluss.create_table(name, SCHEMA, buckets=1, properties={
        "table.log.ttl": "1s", "table.log.tiered.local-segments": "1",
        "table.log.arrow.compression.type": "NONE"})
    fluss.append(name, rows(range(10)))      # stays in the active segment: never removed
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    options = {"scan.startup.mode": "earliest", "maxOffsetsPerTrigger": 500}
    progress = available_now(spark, servers, name, out, ckpt, **options)
    checkpointed = decode(progress[-1]["sources"][0]["endOffset"])
    assert [t.log for t in checkpointed.tables.values()] == [{0: 10}]

    # While the query is down: ~3 MB more (3 segments); retention removes all but the active
    # segment, so records from offset 10 on, which the checkpoint still needs, are lost. One
    # bucket, written in order: the record at offset i is row i.
    big = [(i, f"v{i}-{uuid.uuid4().hex * 32}") for i in range(10, 3010)]
    for start in range(0, len(big), 500):
        fluss.append(name, big[start:start + 500])
    wire = ApacheFlussWireCluster.connect(servers, request_timeout_s=30)
    try:
        def retention_done() -> bool:
            # Segments leave remote storage after local disk: until the last is gone there,
            # the earliest offset still moves. Once none is left, no more writes, no change.
            return wire.list_offsets(name, spec="earliest")[0] > 10 and \
                not remote_segment_files(apache_fluss, name)
        wait_until(retention_done, 120, "retention to remove the records from offset 10 on")
        earliest = wire.list_offsets(name, spec="earliest")[0]
    finally:
        wire.close()

    # failOnDataLoss=true (the default): the restarted query fails, naming what it misses.
    q = (stream(spark, servers, name, **options).writeStream.format("parquet")
         .option("path", str(out)).option("checkpointLocation", str(ckpt))
         .trigger(availableNow=True).start())
    try:
        with pytest.raises(StreamingQueryException) as failed:
            q.awaitTermination(300)
    finally:
        q.stop()
    message = str(failed.value)
    assert "LogOffsetOutOfRange" in message and f"table '{name}' bucket 0" in message
    assert "changelog records [10, " in message and "failOnDataLoss=false" in message

    # failOnDataLoss=false: it goes on from the earliest retained record and reads what remains.
    progress = available_now(spark, servers, name, out, ckpt,
                             **{**options, "failOnDataLoss": "false"})
    assert sum(p["numInputRows"] for p in progress) == 3010 - earliest
    want = spark.createDataFrame(
        [(i, f"v{i}", "+A") for i in range(10)] + [(i, v, "+A") for i, v in big if i >= earliest],
        expected(spark, []).schema)
    assert_df_equality(spark.read.parquet(str(out)).select("id", "v", "_change_type"), want,
                       ignore_row_order=True)


def test_tiering_keeps_a_lake_copy_of_a_log_table(spark, apache_fluss, fluss, name, tmp_path):
    fluss.create_table(name, SCHEMA, buckets=2)
    fluss.append(name, rows(range(200)))
    lake = tmp_path / "lake"
    config = TieringConfig(lake=lake, bootstrap_servers=apache_fluss.bootstrap_servers,
                           table_pattern=re.escape(name), trigger_interval="300 milliseconds",
                           poll_interval_s=0.3, discover_interval_s=1.0)
    job = TieringJob(spark, config).start()
    try:
        fluss.append(name, rows(range(200, 260)))

        def caught_up():
            job.poll()
            return job.caught_up()
        wait_until(caught_up, 180, "the lake copy to catch up with the table")
    finally:
        job.stop()
    copy = LakeTable(table_dir(lake, name)).read()
    assert sorted(zip(copy.column("id").to_pylist(), copy.column("v").to_pylist())) == \
        rows(range(260))
