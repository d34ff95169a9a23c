"""write.format("fluss") and writeStream.format("fluss") into partitioned tables, on both engines:
rows go to the partitions their values name; a row of a partition that does not exist fails the
write with nothing written, unless the writer may create partitions; a partitioned PK table
streamed into another keeps its deletes. Each target is read back independently: with this
project's scanners on the embedded engine, with pyfluss on Apache Fluss."""

from __future__ import annotations

import uuid

import pyarrow as pa
import pytest
from pyspark.sql import functions as F

from fluss_spark.testing.streams import table_state

pytestmark = pytest.mark.spark

DAYS = ("2026-11-25", "2026-11-26", "2026-11-27")
LOG_SCHEMA = pa.schema([("id", pa.int64()), ("dt", pa.string()), ("v", pa.string())])
PK_SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False),
                       pa.field("dt", pa.string(), nullable=False), ("v", pa.string())])


class Embedded:
    """This project's servers, read back with its own scanners."""

    def __init__(self, cluster, conn):
        self.servers, self.conn = cluster.bootstrap_servers, conn

    def create(self, name: str, schema: pa.Schema, pk: list[str]) -> None:
        admin = self.conn.admin()
        admin.create_table(name, schema, primary_key=pk, num_buckets=2, partition_keys=["dt"])
        for day in DAYS[:2]:
            admin.create_partition(name, {"dt": day})

    def partitions(self, name: str) -> set[str]:
        return {p.name for p in self.conn.admin().get_table(name).partitions}

    def log(self, name: str) -> list[tuple]:
        out = []
        for part in sorted(self.partitions(name)):
            end = self.conn.admin().list_offsets(name, partition=part)
            scanner = self.conn.log_scanner(name, partition=part)
            out += [(r["id"], r["dt"], r["v"]) for b, e in end.items()
                    for batch in scanner.read(b, 0, e) for r in batch.to_pylist()]
        return sorted(out)

    def state(self, name: str) -> dict:
        return table_state(self.conn, name)

    def change(self, name: str, upserts: list[tuple], deletes: list[tuple]) -> None:
        writer = self.conn.writer(name)
        writer.delete([{"id": i, "dt": dt} for i, dt in deletes])
        writer.upsert([{"id": i, "dt": dt, "v": v} for i, dt, v in upserts])


class Apache:
    """Apache Fluss 0.9.1, written and read back with pyfluss."""

    def __init__(self, local):
        from fluss_spark.testing.apache_fluss import PyFluss
        self.servers = local.bootstrap_servers
        self.fluss = PyFluss(self.servers)

    def create(self, name: str, schema: pa.Schema, pk: list[str]) -> None:
        self.fluss.create_table(name, schema, primary_key=pk, buckets=2, partition_keys=["dt"])
        for day in DAYS[:2]:
            self.fluss.create_partition(name, {"dt": day})

    def partitions(self, name: str) -> set[str]:
        return set(self.fluss.partitions(name))

    def log(self, name: str) -> list[tuple]:
        return sorted((r["id"], r["dt"], r["v"]) for _, r in self.fluss.read_log(name, 60))

    def state(self, name: str) -> dict:
        return {(r["id"], r["dt"]): r["v"] for r in self.fluss.rows(name, timeout_s=60)}

    def change(self, name: str, upserts: list[tuple], deletes: list[tuple]) -> None:
        self.fluss.delete(name, deletes)
        self.fluss.upsert(name, upserts)


@pytest.fixture(params=["embedded", "apache-fluss"])
def engine(request):
    if request.param == "embedded":
        yield Embedded(request.getfixturevalue("cluster"), request.getfixturevalue("conn"))
    else:
        e = Apache(request.getfixturevalue("apache_fluss"))
        yield e
        e.fluss.close()


def rows_of(spark, rows: list[tuple]):
    return spark.createDataFrame(rows, "id BIGINT, dt STRING, v STRING")


def test_partitioned_tables_are_written_by_partition_and_a_stream_keeps_its_deletes(
        spark, engine, tmp_path):
    servers = engine.servers
    db = f"sinkp_{uuid.uuid4().hex[:8]}"
    log, src, dst = f"{db}.log", f"{db}.src", f"{db}.dst"

    def save(df, table, **options):
        w = (df.write.format("fluss").option("bootstrap.servers", servers)
             .option("table", table).option("client.writer.batch-timeout", "10ms"))
        for k, v in options.items():
            w = w.option(k, v)
        w.mode("append").save()

    engine.create(log, LOG_SCHEMA, [])
    for t in (src, dst):
        engine.create(t, PK_SCHEMA, ["id", "dt"])

    # Batch append over two partitions (columns by name, in another order).
    appended = [(i, DAYS[i % 2], f"v{i}") for i in range(60)]
    save(rows_of(spark, appended).select("v", "dt", "id"), log)
    assert engine.log(log) == sorted(appended)

    # A row of a partition that does not exist fails the write: nothing of it is written.
    with pytest.raises(Exception, match=f"partition dt={DAYS[2]} of table {log} does not exist"):
        save(rows_of(spark, [(100, DAYS[0], "x"), (101, DAYS[2], "y")]).coalesce(1), log)
    assert engine.log(log) == sorted(appended) and DAYS[2] not in engine.partitions(log)
    # With the writer allowed to create partitions, it creates it.
    save(rows_of(spark, [(100, DAYS[0], "x"), (101, DAYS[2], "y")]), log,
         **{"client.writer.dynamic-create-partition.enabled": "true"})
    assert engine.log(log) == sorted(appended + [(100, DAYS[0], "x"), (101, DAYS[2], "y")])
    assert DAYS[2] in engine.partitions(log)

    # Batch upserts into a partitioned PK table; then deletes and updates in it, and its
    # changelog streamed into another: the copy equals the source, per partition.
    save(rows_of(spark, [(i, DAYS[i % 2], "a") for i in range(40)]), src)
    save(rows_of(spark, [(i, DAYS[i % 2], "b") for i in range(20, 50)]), src)
    engine.change(src, upserts=[(1, DAYS[1], "z"), (200, DAYS[0], "new")],
                  deletes=[(i, DAYS[i % 2]) for i in range(0, 50, 5)])
    q = (spark.readStream.format("fluss").option("bootstrap.servers", servers)
         .option("table", src).option("scan.startup.mode", "earliest").load()
         .writeStream.format("fluss").option("bootstrap.servers", servers)
         .option("table", dst).option("checkpointLocation", str(tmp_path / "ckpt"))
         .trigger(availableNow=True).start())
    q.awaitTermination(180)
    assert q.exception() is None, q.exception()
    source = engine.state(src)
    assert len(source) == 50 - 10 + 1 and source[(1, DAYS[1])] == "z"
    assert (0, DAYS[0]) not in source and source[(32, DAYS[0])] == "b"
    assert engine.state(dst) == source
    # Spark's own view: the partition column is an ordinary column of the copy.
    copy = (spark.read.format("fluss").option("bootstrap.servers", servers).option("table", dst)
            .load().groupBy("dt").agg(F.count("*").alias("n")).collect())
    assert {r["dt"]: r["n"] for r in copy} == {
        d: sum(1 for _, day in source if day == d) for d in DAYS[:2]}
