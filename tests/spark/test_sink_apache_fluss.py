"""write.format("fluss") and writeStream.format("fluss") on a real Apache Fluss cluster, each
target read back with the official client pyfluss (``fluss_spark/connector/sink.py`` over
``fluss_spark/client/apache_fluss/pyfluss_writer.py``).

Kept lean for CI: one test covers batch append, batch upsert (full and partial) and a streamed
copy of a PK table with deletes (tests/spark/test_sink.py does the same on this project's servers).
"""

from __future__ import annotations

import uuid

import pytest
from pyspark.sql import functions as F

from fluss_spark.testing.apache_fluss import PyFluss

pytestmark = pytest.mark.spark


def test_batch_append_upsert_and_a_streamed_copy_with_deletes(spark, apache_fluss, tmp_path):
    servers = apache_fluss.bootstrap_servers
    db = f"sink_{uuid.uuid4().hex[:8]}"
    log, src, dst = f"{db}.log", f"{db}.src", f"{db}.dst"

    def save(df, table):
        (df.write.format("fluss").option("bootstrap.servers", servers).option("table", table)
         .option("client.writer.batch-timeout", "10ms").mode("append").save())

    with PyFluss(servers) as fluss:
        fluss.create_table(log, "id BIGINT, v STRING", buckets=2)
        for t in (src, dst):
            fluss.create_table(t, "id BIGINT NOT NULL, v STRING", primary_key=["id"], buckets=2)

        # Batch append to a log table (columns by name, in another order).
        save(spark.range(0, 50).select(F.concat(F.lit("v"), F.col("id")).alias("v"), "id"), log)
        assert sorted((r["id"], r["v"], k) for k, r in fluss.read_log(log)) == [
            (i, f"v{i}", "+A") for i in range(50)]

        # Batch upsert to a PK table, twice: the second replaces half the keys.
        save(spark.range(0, 40).select("id", F.lit("a").alias("v")), src)
        save(spark.range(20, 60).select("id", F.lit("b").alias("v")), src)
        assert {r["id"]: r["v"] for r in fluss.rows(src)} == {
            i: "a" if i < 20 else "b" for i in range(60)}

        # A partial update: the DataFrame lacks a nullable column, which keeps its values.
        part = f"{db}.part"
        fluss.create_table(part, "id BIGINT NOT NULL, v STRING, n INT", primary_key=["id"])
        save(spark.range(0, 4).select("id", F.lit("a").alias("v"), F.col("id").cast("int")
                                      .alias("n")), part)
        save(spark.range(0, 2).select(F.lit(7).alias("n"), "id"), part)
        assert sorted((r["id"], r["v"], r["n"]) for r in fluss.rows(part)) == [
            (0, "a", 7), (1, "a", 7), (2, "a", 2), (3, "a", 3)]

        # Deletes and updates in the source, then the source's changelog (+I, -U/+U, -D;
        # earliest mode: no KV snapshot files to fetch) streamed into another PK table with
        # format("fluss") at both ends: the copy equals the source.
        fluss.delete(src, [(i,) for i in range(0, 60, 3)])
        fluss.upsert(src, [(1, "z"), (100, "new")])
        q = (spark.readStream.format("fluss").option("bootstrap.servers", servers)
             .option("table", src).option("scan.startup.mode", "earliest").load()
             .writeStream.format("fluss").option("bootstrap.servers", servers)
             .option("table", dst).option("checkpointLocation", str(tmp_path / "ckpt"))
             .trigger(availableNow=True).start())
        q.awaitTermination(120)
        assert q.exception() is None
        source = {r["id"]: r["v"] for r in fluss.rows(src)}
        assert len(source) == 41 and source[1] == "z" and 0 not in source
        assert {r["id"]: r["v"] for r in fluss.rows(dst)} == source
