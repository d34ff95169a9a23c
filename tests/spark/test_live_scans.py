"""Full mode through live KV scans (``scan.kv.read=live``) on the embedded engine, whose live
sessions have Apache Fluss's SCAN_KV semantics: a session reads the bucket's current state, says
at its open which changelog offset that state reflects, cannot be resumed and expires when idle.

The driver opens one session per admitted bucket while planning, so the offset log holds the
offset before any row is read; a driver killed after writing offsets/0 leaves sessions its
restart cannot use, and the replayed batch must return exactly the rows the first run did.
"""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

import pytest

from fluss_spark.local.ports import wait_until
from fluss_spark.testing.spark_driver import Driver
from fluss_spark.testing.streams import (create_pk, fold, leases_on, source_offsets,
                                         table_state)

pytestmark = pytest.mark.spark

LIVE = {"scan.kv.read": "live", "scan.kv.live.max-buckets-per-trigger": "2"}


def live_offsets(ckpt: Path) -> list[dict[str, int]]:
    """Per batch of the offset log: the live entries (bucket -> offset) of its one table."""
    return [next(iter(o["tables"].values())).get("live", {}) for o in source_offsets(ckpt)]


def snapshot_rows(df):
    return df.where("_commit_timestamp IS NULL")


def test_each_bucket_is_read_whole_by_a_live_scan_then_its_changelog(spark, cluster, conn,
                                                                     table_name, tmp_path):
    writer, _ = create_pk(conn, table_name, 20_000, buckets=4)
    admin = conn.admin()
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    done = threading.Event()

    def churn():
        # Upserts and deletes while the snapshot phase is planned and read, then it stops (a
        # stream that never pauses would keep processAllAvailable waiting).
        try:
            for i in range(400):
                writer.upsert([{"id": (i * 7919) % 24_000, "v": f"w{i}"}])
                if i % 5 == 0:
                    writer.delete([{"id": (i * 104_729) % 20_000}])
        finally:
            done.set()

    def sink(df, batch_id):
        df.write.mode("overwrite").parquet(f"{out}/batch={batch_id}")

    reader = (spark.readStream.format("fluss")
              .option("bootstrap.servers", cluster.bootstrap_servers)
              .option("table", table_name))
    for k, v in LIVE.items():
        reader = reader.option(k, v)
    thread = threading.Thread(target=churn, daemon=True)
    thread.start()
    q = reader.load().writeStream.option("checkpointLocation", str(ckpt)).foreachBatch(sink).start()
    try:
        wait_until(done.is_set, 120, "the writer to finish")
        q.processAllAvailable()
    finally:
        q.stop()
        thread.join(30)

    lives = live_offsets(ckpt)
    assert len(lives[0]) == 2                         # at most 2 buckets per trigger
    assert sorted(lives[-1]) == ["0", "1", "2", "3"]  # every bucket read by a live scan
    for earlier in lives:                             # an entry never changes once logged
        assert all(lives[-1][b] == off for b, off in earlier.items())
    result = spark.read.parquet(str(out))
    snap = snapshot_rows(result)
    assert snap.select("id").distinct().count() == snap.count()        # every key once
    assert fold(result) == table_state(conn, table_name)
    assert not leases_on(admin, table_name)
    table_id = admin.get_table(table_name).table_id
    assert not [s for s in admin.list_scanners() if s.get("table_id") == table_id]


@pytest.mark.parametrize("after_kill", [pytest.param("quiet", marks=pytest.mark.extended),
                                        "written"])
def test_a_batch_replayed_after_a_driver_kill_returns_the_same_rows(spark, cluster, conn,
                                                                     table_name, tmp_path,
                                                                     after_kill):
    """``quiet``: a new session reflects the same offset and is read instead (same rows, same
    order); ``written``: every bucket moved on, so the state at the logged offset is rebuilt
    from the leased snapshot and the changelog."""
    writer, _ = create_pk(conn, table_name, 6_000, buckets=2)
    writer.upsert([{"id": i, "v": f"after-snapshot-{i}"} for i in range(0, 6_000, 3)])
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    driver = Driver(tmp_path, cluster.bootstrap_servers, table_name, str(out), str(ckpt), "0",
                    "0", options=LIVE)
    try:
        driver.wait_for("IN_BATCH 0", "batch 0 to be written")
    finally:
        driver.kill()
    first_run = tmp_path / "first-run-batch-0"
    shutil.copytree(out / "batch=0", first_run)
    logged = live_offsets(ckpt)
    assert len(logged) == 1 and sorted(logged[0]) == ["0", "1"]
    if after_kill == "written":
        writer.upsert([{"id": i, "v": f"after-kill-{i}"} for i in range(0, 6_000, 2)])
        writer.delete([{"id": i} for i in range(1, 6_000, 10)])

    reader = (spark.readStream.format("fluss")
              .option("bootstrap.servers", cluster.bootstrap_servers)
              .option("table", table_name))
    for k, v in LIVE.items():
        reader = reader.option(k, v)

    def sink(df, batch_id):
        df.write.mode("overwrite").parquet(f"{out}/batch={batch_id}")
    q = reader.load().writeStream.option("checkpointLocation", str(ckpt)).foreachBatch(sink).start()
    try:
        q.processAllAvailable()
    finally:
        q.stop()

    columns = ["id", "v", "_change_type", "_log_offset"]
    before = spark.read.parquet(str(first_run)).select(*columns)
    replayed = spark.read.parquet(str(out / "batch=0")).select(*columns)
    assert before.count() == 6_000
    assert sorted(map(tuple, replayed.collect())) == sorted(map(tuple, before.collect()))
    assert live_offsets(ckpt)[0] == logged[0]
    assert len({o["lease_id"] for o in source_offsets(ckpt)}) == 1
    assert fold(spark.read.parquet(str(out))) == table_state(conn, table_name)
    assert not leases_on(conn.admin(), table_name)
