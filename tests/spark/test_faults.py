"""End to end under faults: lost snapshots, a killed tablet server, an old server without leases."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql import functions as F
from pyspark.sql.window import Window

from fluss_spark.local.ports import wait_until

pytestmark = pytest.mark.spark


def table_state(conn, table: str) -> dict[int, str]:
    info = conn.admin().get_table(table)
    return {row["id"]: row["v"] for b in range(info.num_buckets)
            for batch in conn.kv_scanner(table).scan(b, live=True) for row in batch.to_pylist()}


def fold(df) -> dict[int, str]:
    w = Window.partitionBy("id").orderBy(F.col("_log_offset").desc())
    last = (df.withColumn("_rn", F.row_number().over(w)).where("_rn = 1")
            .where(F.col("_change_type").isin("+I", "+U")))
    return {r["id"]: r["v"] for r in last.select("id", "v").collect()}


def last_offset(checkpoint: Path) -> dict:
    files = [f for f in (checkpoint / "offsets").iterdir() if f.name.isdigit()]
    latest = max(files, key=lambda f: int(f.name))
    return json.loads(latest.read_text().strip().splitlines()[-1])


def load_pk(conn, table: str, rows: int, buckets: int = 2, **props) -> dict:
    conn.admin().create_table(table, "id BIGINT NOT NULL, v STRING", primary_key=["id"],
                              num_buckets=buckets, properties=props or None)
    conn.writer(table).upsert(pa.table({"id": pa.array(range(rows), pa.int64()),
                                        "v": [f"v{i}" for i in range(rows)]}))
    return conn.admin().trigger_kv_snapshot(table)


def start_query(spark, servers: str, table: str, out: Path, ckpt: Path, **opts):
    reader = (spark.readStream.format("fluss").option("bootstrap.servers", servers)
              .option("table", table))
    for k, v in opts.items():
        reader = reader.option(k, str(v))
    return (reader.load().writeStream.format("parquet").option("path", str(out))
            .option("checkpointLocation", str(ckpt)).trigger(processingTime="200 milliseconds")
            .start())


def run_until_two_batches(q) -> None:
    try:
        wait_until(lambda: len([p for p in q.recentProgress if p["numInputRows"]]) >= 2, 120,
                   "two micro-batches")
    finally:
        q.stop()


def test_lost_snapshot_fails_or_continues(spark, cluster, conn, table_name, tmp_path):
    snaps = load_pk(conn, table_name, 6_000, **{"kv.snapshot.num-retained": "1"})
    admin = conn.admin()
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    servers = cluster.bootstrap_servers
    run_until_two_batches(start_query(spark, servers, table_name, out, ckpt,
                                      maxOffsetsPerTrigger=1_000))
    mid = last_offset(ckpt)
    lease_id = mid["lease_id"]
    assert any(p[2] < p[1] for t in mid["tables"].values() for p in t["snapshot"].values())

    # An operator drops the lease while the query is down; retention then removes the snapshots.
    admin.drop_kv_snapshot_lease(lease_id)
    conn.writer(table_name).upsert([{"id": i, "v": f"w{i}"} for i in range(0, 6_000, 3)])
    admin.trigger_kv_snapshot(table_name)
    old = {s.snapshot_id for s in snaps.values()}
    try:
        wait_until(lambda: not old & {s.snapshot_id for s in admin.list_kv_snapshots(table_name)},
                   30, "the old snapshots to be collected")
    except TimeoutError:
        raise AssertionError(f"{admin.list_kv_snapshots(table_name)} "
                             f"{admin.list_kv_snapshot_leases()}")

    q = start_query(spark, servers, table_name, out, ckpt, maxOffsetsPerTrigger=1_000)
    with pytest.raises(Exception) as err:
        q.processAllAvailable()
    q.stop()
    msg = str(err.value)
    assert table_name in msg and "bucket" in msg and lease_id in msg
    assert "failOnDataLoss=false" in msg

    q = start_query(spark, servers, table_name, out, ckpt, maxOffsetsPerTrigger=1_000,
                    failOnDataLoss="false")
    try:
        q.processAllAvailable()
        conn.writer(table_name).upsert([{"id": 7, "v": "end"}])
        q.processAllAvailable()
        wait_until(lambda: lease_id not in {x.lease_id for x in admin.list_kv_snapshot_leases()},
                   20, "the lease to be released")
    finally:
        q.stop()
    assert fold(spark.read.parquet(str(out))) == table_state(conn, table_name)


def test_old_server_without_leases_reads_unprotected(spark, zookeeper, tmp_path):
    from fluss_spark.client import FlussConnection
    from fluss_spark.local.embedded import EmbeddedProcesses

    old = EmbeddedProcesses(tmp_path / "old", tablets=1,
                            zookeeper=f"{zookeeper.address}/fluss-old-{uuid.uuid4().hex[:8]}",
                            disabled_apis=("kv_snapshot_lease",)).start()
    try:
        with FlussConnection(old.bootstrap_servers) as conn:
            assert not conn.admin().supports_leases()
            load_pk(conn, "db.t", 500)
            conn.writer("db.t").upsert([{"id": 1, "v": "changed"}])
            q = (spark.readStream.format("fluss").option("bootstrap.servers", old.bootstrap_servers)
                 .option("table", "db.t").load().writeStream.format("memory")
                 .queryName("old_server").option("checkpointLocation", str(tmp_path / "ck"))
                 .trigger(availableNow=True).start())
            assert q.awaitTermination(120)
            assert q.exception() is None
            out = spark.table("old_server")
            assert out.where("_commit_timestamp IS NULL").count() == 500
            assert fold(out) == table_state(conn, "db.t")
    finally:
        old.stop()


def test_tablet_server_killed_during_snapshot_phase(spark, cluster, conn, table_name, tmp_path):
    snaps = load_pk(conn, table_name, 20_000, buckets=2)
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    q = start_query(spark, cluster.bootstrap_servers, table_name, out, ckpt,
                    maxOffsetsPerTrigger=2_000, **{"scan.batch.bytes": "64kb"})
    try:
        wait_until(lambda: any(p["numInputRows"] for p in q.recentProgress), 120,
                   "the first micro-batch")
        cluster.kill("tablet", 0)
        time.sleep(1.0)
        cluster.restart("tablet", 0)
        cluster.wait_registered()
        conn.writer(table_name).upsert([{"id": 3, "v": "after-restart"}])
        q.processAllAvailable()
        conn.writer(table_name).upsert([{"id": 4, "v": "later"}])
        q.processAllAvailable()
    finally:
        q.stop()
    result = spark.read.parquet(str(out))
    snap_rows = result.where("_commit_timestamp IS NULL")
    assert snap_rows.count() == sum(s.row_count for s in snaps.values())
    assert snap_rows.select("id").distinct().count() == snap_rows.count()
    assert fold(result) == table_state(conn, table_name)
