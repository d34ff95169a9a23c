"""End to end: format("fluss") streams and batch reads on a real SparkSession and a real cluster."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from chispa import assert_df_equality
from pyspark.sql import functions as F

from fluss_spark.client.embedded.cluster import EmbeddedCluster
from fluss_spark.connector.progress import table_lag
from fluss_spark.local.ports import wait_until
from fluss_spark.testing.streams import (LeaseWatcher, create_pk, fold, leases_on, source_offsets,
                                         table_state)

pytestmark = pytest.mark.spark


# -- tests ----------------------------------------------------------------------------------------
def test_full_mode_snapshot_then_changelog_into_parquet(spark, cluster, fluss_stream, conn,
                                                        table_name, tmp_path):
    writer, snaps = create_pk(conn, table_name, 100_000, buckets=4)
    snapshot_rows = sum(s.row_count for s in snaps.values())
    assert snapshot_rows == 100_000
    admin = conn.admin()

    stop_writing = threading.Event()

    def churn():  # concurrent upserts and deletes while the snapshot phase runs
        i = 0
        while not stop_writing.is_set() and i < 40:
            writer.upsert([{"id": k, "v": f"u{i}"} for k in range(i * 50, i * 50 + 50)])
            writer.delete([{"id": 99_999 - i}])
            writer.upsert([{"id": 200_000 + i, "v": "new"}])
            i += 1
            time.sleep(0.05)

    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    # The snapshot files are read directly (short-circuit: the tablets run on this host); the
    # other full-mode tests read them through scan sessions.
    df = fluss_stream(table_name, maxOffsetsPerTrigger=25_000,
                      **{"scan.kv.short-circuit": "true"})
    with LeaseWatcher(admin, cluster.zookeeper_address) as watcher:
        q = (df.writeStream.format("parquet").option("path", str(out))
             .option("checkpointLocation", str(ckpt)).start())
        churner = threading.Thread(target=churn)
        churner.start()
        try:
            churner.join(60)
            q.processAllAvailable()
            # commit() runs one batch late: one more batch commits the end of the snapshot phase.
            writer.upsert([{"id": 300_000, "v": "last"}])
            q.processAllAvailable()
            lease_id = source_offsets(ckpt)[0]["lease_id"]
            wait_until(lambda: lease_id not in {x.lease_id for x in
                                                admin.list_kv_snapshot_leases()},
                       20, "the lease to be released after the snapshot phase")
            lag = table_lag(q.lastProgress)
            progress = q.recentProgress
        finally:
            stop_writing.set()
            q.stop()

    # The lease was the only one, pinned every bucket's snapshot, and existed before any output.
    info = admin.get_table(table_name)
    assert watcher.ids(info.table_id) == {lease_id}
    assert lease_id in watcher.in_zookeeper
    first_seen = min(t for t, leases in watcher.seen if any(x.lease_id == lease_id for x in leases))
    pins = next(x for _, ls in watcher.seen for x in ls if x.lease_id == lease_id).tables
    assert pins == {info.table_id: {b: s.snapshot_id for b, s in snaps.items()}}
    first_file = min(p.stat().st_mtime for p in out.glob("*.parquet"))
    assert first_seen <= first_file
    # The lease id is in every checkpointed offset.
    assert {o["lease_id"] for o in source_offsets(ckpt)} == {lease_id}

    # Every micro-batch obeyed maxOffsetsPerTrigger, the snapshot phase included.
    sizes = [p["numInputRows"] for p in progress]
    assert max(sizes) <= 25_000 and sum(sizes) >= snapshot_rows
    assert lag == {table_name: 0}

    result = spark.read.parquet(str(out))
    snap_rows = result.where("_commit_timestamp IS NULL")
    assert snap_rows.count() == snapshot_rows
    assert snap_rows.select("id").distinct().count() == snapshot_rows  # each exactly once
    assert snap_rows.where("_change_type = '+I'").count() == snapshot_rows
    # Snapshot rows sit at their snapshot's last included offset: log_offset - 1.
    los = {r["_log_offset"] for r in snap_rows.select("_log_offset").distinct().collect()}
    assert los == {s.log_offset - 1 for s in snaps.values()}
    assert fold(result) == table_state(conn, table_name)


DRIVER_SCRIPT = """
import os, sys
os.environ["PYSPARK_PYTHON"] = sys.executable
from pyspark.sql import SparkSession
from fluss_spark.connector import register
servers, table, out, ckpt = sys.argv[1:5]
spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
         .config("spark.sql.shuffle.partitions", "2").getOrCreate())
register(spark)
(spark.readStream.format("fluss").option("bootstrap.servers", servers).option("table", table)
 .option("maxOffsetsPerTrigger", "2000").load()
 .writeStream.format("parquet").option("path", out).option("checkpointLocation", ckpt)
 .trigger(processingTime="300 milliseconds").start().awaitTermination())
"""


@pytest.mark.extended      # test_batch0_kills.py kills mid-snapshot on both engines
def test_driver_killed_mid_snapshot_restarts_with_the_same_lease(spark, cluster, fluss_stream,
                                                                  conn, table_name, tmp_path):
    _, snaps = create_pk(conn, table_name, 20_000, buckets=2)
    admin = conn.admin()
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    script = tmp_path / "driver.py"
    script.write_text(DRIVER_SCRIPT)

    def committed() -> int:
        d = ckpt / "commits"
        return len([f for f in d.iterdir() if f.name.isdigit()]) if d.exists() else 0

    with LeaseWatcher(admin) as watcher:
        # The first run is a separate Spark driver, killed with SIGKILL in its snapshot phase.
        proc = subprocess.Popen([sys.executable, str(script), cluster.bootstrap_servers,
                                 table_name, str(out), str(ckpt)], start_new_session=True,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_until(lambda: committed() >= 2 or proc.poll() is not None, 180,
                       "two committed micro-batches of the first driver")
            assert proc.poll() is None, "the first driver exited by itself"
        finally:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)
        lease_id = source_offsets(ckpt)[0]["lease_id"]
        mid = source_offsets(ckpt)[-1]["tables"]
        assert any(p[2] < p[1] for t in mid.values() for p in t["snapshot"].values()), \
            "the first run must die inside the snapshot phase"
        assert lease_id in {x.lease_id for x in admin.list_kv_snapshot_leases()}
        listed = subprocess.run([str(Path(sys.executable).parent / "fluss-spark"), "lease", "list",
                                 "--json", "--bootstrap-servers", cluster.bootstrap_servers],
                                capture_output=True, text=True, timeout=60, check=True)
        assert lease_id in {d["lease_id"] for d in json.loads(listed.stdout)}

        def start():
            return (fluss_stream(table_name, maxOffsetsPerTrigger=2_000)
                    .writeStream.format("parquet").option("path", str(out))
                    .option("checkpointLocation", str(ckpt)).start())

        q = start()
        try:
            q.processAllAvailable()
            conn.writer(table_name).upsert([{"id": 1, "v": "after"}])
            q.processAllAvailable()
            wait_until(lambda: not leases_on(admin, table_name), 20,
                       "the lease to be released after the restarted snapshot phase")
        finally:
            q.stop()
    assert watcher.ids(admin.get_table(table_name).table_id) == {lease_id}  # no second lease
    assert {o["lease_id"] for o in source_offsets(ckpt)} == {lease_id}
    result = spark.read.parquet(str(out))
    snap_rows = result.where("_commit_timestamp IS NULL")
    assert snap_rows.count() == sum(s.row_count for s in snaps.values())
    assert snap_rows.select("id").distinct().count() == snap_rows.count()
    assert fold(result) == table_state(conn, table_name)


def test_log_table_startup_modes_and_available_now(spark, cluster, fluss_stream, conn,
                                                   table_name, tmp_path):
    admin = conn.admin()
    admin.create_table(table_name, "id BIGINT, v STRING", num_buckets=2)
    writer = conn.writer(table_name)
    writer.append([{"id": i, "v": "early"} for i in range(30)])
    time.sleep(0.05)
    cut_ms = int(time.time() * 1000)
    time.sleep(0.05)
    writer.append([{"id": i, "v": "late"} for i in range(30, 50)])

    def run(name, **opts):
        q = (fluss_stream(table_name, **opts).writeStream.format("memory")
             .queryName(name).option("checkpointLocation", str(tmp_path / name))
             .trigger(availableNow=True).start())
        assert q.awaitTermination(120)
        return q

    q = run("log_earliest", maxOffsetsPerTrigger=15)
    rows = spark.table("log_earliest")
    assert sorted(r.id for r in rows.collect()) == list(range(50))
    assert {r._change_type for r in rows.collect()} == {"+A"}
    assert all(0 < p["numInputRows"] <= 15 for p in q.recentProgress if p["numInputRows"])
    assert len([p for p in q.recentProgress if p["numInputRows"]]) >= 4

    run("log_ts", **{"scan.startup.mode": "timestamp", "scan.startup.timestamp": cut_ms})
    assert sorted(r.id for r in spark.table("log_ts").collect()) == list(range(30, 50))

    run("log_latest", **{"scan.startup.mode": "latest"})
    assert spark.table("log_latest").count() == 0
    assert leases_on(admin, table_name) == []

    batch = (spark.read.format("fluss").option("bootstrap.servers", cluster.bootstrap_servers)
             .option("table", table_name).load())
    assert sorted(r.id for r in batch.select("id").collect()) == list(range(50))


def test_batch_read_equals_table_state(spark, cluster, conn, table_name):
    writer, snaps = create_pk(conn, table_name, 5_000, buckets=3)
    writer.upsert([{"id": i, "v": f"changed{i}"} for i in range(0, 5_000, 7)])
    writer.delete([{"id": i} for i in range(1, 5_000, 11)])
    writer.upsert([{"id": 10_000 + i, "v": "fresh"} for i in range(25)])
    df = (spark.read.format("fluss").option("bootstrap.servers", cluster.bootstrap_servers)
          .option("table", table_name).load())
    state = table_state(conn, table_name)
    expected = spark.createDataFrame(sorted(state.items()), "id long, v string")
    assert_df_equality(df.select("id", "v"), expected, ignore_row_order=True,
                       ignore_nullable=True)
    assert leases_on(conn.admin(), table_name) == []
    # The metadata columns, as docs/spark_source.md says: a key written after its bucket's
    # snapshot carries its last write's; a key served from the snapshot carries +I, the
    # snapshot's log_offset - 1 and no commit time (a KV snapshot keeps neither per row).
    meta = {r.id: (r._change_type, r._log_offset, r._commit_timestamp) for r in df.collect()}
    assert meta == expected_metadata(conn, table_name, snaps)
    assert {m[0] for m in meta.values()} == {"+I", "+U"} and any(m[2] for m in meta.values())


def expected_metadata(conn, table: str, snaps) -> dict:
    """Per live key: (change type, log offset, commit time) of its last changelog record after
    its bucket's snapshot, read independently with the log scanner, else the snapshot's."""
    cluster = EmbeddedCluster(conn)
    latest = cluster.list_offsets(table)
    out: dict = {}
    for b, snap in snaps.items():
        for row in cluster.read_snapshot(table, b, snap.snapshot_id, projection=["id"]):
            for key in row.column("id").to_pylist():
                out[key] = ("+I", snap.log_offset - 1, None)
        for batch in cluster.read_log(table, b, snap.log_offset, latest[b]):
            for r in batch.to_pylist():
                if r["_change_type"] == "-D":
                    out.pop(r["id"], None)
                elif r["_change_type"] != "-U":
                    # Spark gives naive timestamps in the session's time zone (UTC here).
                    out[r["id"]] = (r["_change_type"], r["_log_offset"],
                                    r["_commit_timestamp"].replace(tzinfo=None))
    return out


def test_several_tables_in_one_query(spark, cluster, conn, table_name, tmp_path):
    small, big, log_name = table_name + "_small", table_name + "_big", table_name + "_log"
    create_pk(conn, small, 100, buckets=2)
    create_pk(conn, big, 3_000, buckets=2)
    admin = conn.admin()
    admin.create_table(log_name, "k INT, amount DOUBLE", num_buckets=1)
    conn.writer(log_name).append([{"k": i, "amount": i / 2} for i in range(7)])
    small_id, big_id = admin.get_table(small).table_id, admin.get_table(big).table_id
    df = (spark.readStream.format("fluss").option("bootstrap.servers", cluster.bootstrap_servers)
          .option("tables", f"{small},{big},{log_name}").option("maxOffsetsPerTrigger", 500)
          .load())
    assert df.columns == ["_table", small, big, log_name, "_change_type", "_log_offset",
                          "_commit_timestamp"]
    with LeaseWatcher(admin) as watcher:
        q = (df.writeStream.format("memory").queryName("multi")
             .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True)
             .start())
        assert q.awaitTermination(120)
        # AvailableNow's last batch is never followed by commit(): the release happens anyway.
        wait_until(lambda: not leases_on(admin, big), 20, "the lease to be released")
    out = spark.table("multi")
    counts = {r["_table"]: r["count"] for r in out.groupBy("_table").count().collect()}
    assert counts == {small: 100, big: 3_000, log_name: 7}
    log_rows = out.where(F.col("_table") == log_name).select(f"`{log_name}`.*").collect()
    assert sorted((r.k, r.amount) for r in log_rows) == [(i, i / 2) for i in range(7)]
    assert out.where(F.col("_table") == log_name).where(
        F.col(f"`{small}`").isNotNull()).count() == 0
    # One lease for the query; the small table was released while the big one was still pinned.
    pin_sets = [set(x.tables) for _, ls in watcher.seen for x in ls
                if small_id in x.tables or big_id in x.tables]
    assert len(watcher.ids(big_id)) == 1
    assert {small_id, big_id} in pin_sets and {big_id} in pin_sets


def test_bad_options_and_foreign_checkpoint(spark, cluster, fluss_stream, table_name, tmp_path):
    with pytest.raises(Exception) as e:
        (spark.readStream.format("fluss").option("bootstrap.servers", cluster.bootstrap_servers)
         .option("table", table_name).option("maxOffsetPerTrigger", "5").load())
    assert "did you mean 'maxOffsetsPerTrigger'" in str(e.value)

    ckpt = tmp_path / "ck"
    q = (spark.readStream.format("rate").option("rowsPerSecond", 5).load().writeStream
         .format("noop").option("checkpointLocation", str(ckpt)).start())
    try:
        wait_until(lambda: q.lastProgress and q.lastProgress["numInputRows"] >= 0, 60,
                   "a rate batch")
    finally:
        q.stop()
    admin_table = table_name + "_t"
    from fluss_spark.client import FlussConnection
    with FlussConnection(cluster.bootstrap_servers) as c:
        c.admin().create_table(admin_table, "id BIGINT, v STRING", num_buckets=1)
    q = (fluss_stream(admin_table).writeStream.format("noop")
         .option("checkpointLocation", str(ckpt)).start())
    with pytest.raises(Exception) as e:
        q.processAllAvailable()
    assert "checkpointLocation" in str(e.value)
    q.stop()


def test_columns_are_projected_for_streams_and_batch_reads(spark, cluster, fluss_stream, conn,
                                                          table_name):
    admin = conn.admin()
    admin.create_table(table_name, "id BIGINT NOT NULL, v STRING, amount DOUBLE",
                       primary_key=["id"], num_buckets=2)
    w = conn.writer(table_name)
    w.upsert([{"id": i, "v": f"v{i}", "amount": i * 1.5} for i in range(100)])
    admin.trigger_kv_snapshot(table_name)
    w.upsert([{"id": 7, "v": "seven", "amount": -1.0}])

    df = fluss_stream(table_name, columns="amount,id")
    assert df.columns == ["amount", "id", "_change_type", "_log_offset", "_commit_timestamp"]
    q = (df.writeStream.format("memory").queryName("projected").trigger(availableNow=True)
         .start())
    try:
        q.awaitTermination(120)
    finally:
        q.stop()
    rows = spark.sql("SELECT * FROM projected").collect()
    snap = sorted((r["id"], r["amount"]) for r in rows if r["_commit_timestamp"] is None)
    assert snap == [(i, i * 1.5) for i in range(100)]
    assert sorted((r["_change_type"], r["amount"]) for r in rows
                  if r["_commit_timestamp"] is not None) == [("+U", -1.0), ("-U", 10.5)]

    # A batch read with a narrower user schema folds by key even without the key column.
    narrow = (spark.read.format("fluss").option("bootstrap.servers", cluster.bootstrap_servers)
              .option("table", table_name)
              .schema("v STRING, _change_type STRING, _log_offset BIGINT, "
                      "_commit_timestamp TIMESTAMP").load())
    assert_df_equality(narrow.select("v"),
                       spark.createDataFrame([(f"v{i}" if i != 7 else "seven",)
                                              for i in range(100)], "v STRING"),
                       ignore_row_order=True, ignore_nullable=True)

    with pytest.raises(Exception) as e:
        fluss_stream(table_name, columns="id,colour")
    assert "has no column(s) colour; its columns are id, v, amount" in str(e.value)
