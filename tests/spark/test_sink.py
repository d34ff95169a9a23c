"""End to end: write.format("fluss") and writeStream.format("fluss") on this project's servers,
each target read back with the client's own scanners (``fluss_spark/connector/sink.py``).

Kept lean for CI: one test covers batch append, batch upsert and a streamed copy of a PK table
with deletes; one shows that bad input fails the write with nothing written. Kill -9 restarts of
the sink are in tests/spark/test_sink_restarts.py (extended).
"""

from __future__ import annotations

import pyarrow as pa
import pytest
from pyspark.sql import functions as F

from fluss_spark.testing.streams import table_state

pytestmark = pytest.mark.spark


def _log_rows(conn, table: str) -> list[tuple]:
    info = conn.admin().get_table(table)
    end = conn.admin().list_offsets(table)
    return sorted((r["id"], r["v"], r["_change_type"])
                  for b in range(info.num_buckets)
                  for batch in conn.log_scanner(table).read(b, 0, end.get(b, 0))
                  for r in batch.to_pylist())


def test_batch_append_upsert_and_a_streamed_copy_with_deletes(spark, cluster, conn, table_name,
                                                               tmp_path):
    servers = cluster.bootstrap_servers
    admin = conn.admin()
    log, src, dst = f"{table_name}_log", f"{table_name}_src", f"{table_name}_dst"
    admin.create_table(log, pa.schema([("id", pa.int64()), ("v", pa.string())]), num_buckets=2)
    pk_schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("v", pa.string())])
    for t in (src, dst):
        admin.create_table(t, pk_schema, primary_key=["id"], num_buckets=2)

    def save(df, table):
        (df.write.format("fluss").option("bootstrap.servers", servers).option("table", table)
         .mode("append").save())

    # Batch append to a log table (columns by name, in another order).
    save(spark.range(0, 50).select(F.concat(F.lit("v"), F.col("id")).alias("v"), "id"), log)
    assert _log_rows(conn, log) == [(i, f"v{i}", "+A") for i in range(50)]

    # Batch upsert to a PK table, twice: the second replaces half the keys.
    save(spark.range(0, 40).select("id", F.lit("a").alias("v")), src)
    save(spark.range(20, 60).select("id", F.lit("b").alias("v")), src)
    expected = {i: "a" if i < 20 else "b" for i in range(60)}
    assert table_state(conn, src) == expected

    # Deletes and updates in the source, then its changes streamed into another PK table (the
    # source has no KV snapshot yet: all of it comes from the changelog): the copy equals it.
    writer = conn.writer(src)
    writer.delete([{"id": i} for i in range(0, 60, 3)])
    writer.upsert([{"id": 1, "v": "z"}, {"id": 100, "v": "new"}])
    q = (spark.readStream.format("fluss").option("bootstrap.servers", servers)
         .option("table", src).load()
         .writeStream.format("fluss").option("bootstrap.servers", servers)
         .option("table", dst).option("checkpointLocation", str(tmp_path / "ckpt"))
         .trigger(availableNow=True).start())
    q.awaitTermination(120)
    assert q.exception() is None
    final = table_state(conn, src)
    assert len(final) == 41 and final[1] == "z" and 0 not in final
    assert table_state(conn, dst) == final


def test_bad_input_fails_the_write_and_writes_nothing(spark, cluster, conn, table_name):
    admin = conn.admin()
    admin.create_table(table_name, pa.schema([pa.field("id", pa.int64(), nullable=False),
                                              ("v", pa.string())]),
                       primary_key=["id"], num_buckets=1)
    df = spark.createDataFrame([(1, "a"), (None, "b")], "id BIGINT, v STRING").coalesce(1)
    with pytest.raises(Exception, match="primary-key column 'id' is null in 1 row"):
        (df.write.format("fluss").option("bootstrap.servers", cluster.bootstrap_servers)
         .option("table", table_name).mode("append").save())
    assert admin.list_offsets(table_name) == {0: 0}
    with pytest.raises(Exception, match=r"missing column\(s\) id"):
        (df.select("v").write.format("fluss")
         .option("bootstrap.servers", cluster.bootstrap_servers)
         .option("table", table_name).mode("append").save())
