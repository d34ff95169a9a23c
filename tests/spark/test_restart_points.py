"""kill -9 of the driver at every restart point: one lease id ever, exact output, and a checkpoint
that refuses any other query.

The first run is a separate Spark driver (``fluss_spark.testing.spark_driver``), killed with
SIGKILL at the point under test; the restarts run in the test's own SparkSession on the same
checkpoint.

The point "after offsets/0, before commits/0" is tested by ``test_batch0_kills.py`` on both
engines, under harsher conditions (snapshot retention of one, a concurrent writer).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from pyspark.errors import StreamingQueryException

from fluss_spark.local.ports import wait_until
from fluss_spark.metadata.lease_watch import EmbeddedLeases
from fluss_spark.testing.spark_driver import Driver
from fluss_spark.testing.streams import (LeaseWatcher, create_pk, fold, leases_on, source_offsets,
                                         table_state)

pytestmark = pytest.mark.spark

MAX_ROWS = 2_000

def count_files(d: Path) -> int:
    return len([f for f in d.iterdir() if f.name.isdigit()]) if d.exists() else 0


def restart(spark, cluster, table: str, out: Path, ckpt: Path, **options):
    """The same query as the driver's (other ``options`` make it another query)."""
    reader = (spark.readStream.format("fluss")
              .option("bootstrap.servers", cluster.bootstrap_servers)
              .option("table", table).option("maxOffsetsPerTrigger", str(MAX_ROWS)))
    for k, v in options.items():
        reader = reader.option(k, v)

    def sink(df, batch_id):
        df.write.mode("overwrite").parquet(f"{out}/batch={batch_id}")
    return (reader.load().writeStream.option("checkpointLocation", str(ckpt))
            .foreachBatch(sink).start())


def failed_start(spark, cluster, table: str, out: Path, ckpt: Path, **options) -> str:
    """The error text of a restart on ``ckpt`` that must fail."""
    q = restart(spark, cluster, table, out, ckpt, **options)
    try:
        with pytest.raises(StreamingQueryException) as err:
            q.awaitTermination(120)
    finally:
        q.stop()
    return str(err.value)


def assert_refused(spark, cluster, table, tmp_path, ckpt, message, **options):
    text = failed_start(spark, cluster, table, tmp_path / "refused-out", ckpt, **options)
    assert "does not match its checkpoint" in text and message in text, text[-3000:]
    assert "new checkpointLocation" in text


# mid-snapshot is also killed by test_batch0_kills.py (both engines, harsher): extended here.
POINTS = ["before the first offset", pytest.param("mid-snapshot", marks=pytest.mark.extended),
          "after the snapshot phase"]


@pytest.mark.parametrize("point", POINTS)
def test_driver_killed_at_each_restart_point(spark, cluster, conn, table_name, tmp_path, point):
    writer, snaps = create_pk(conn, table_name, 20_000, buckets=2)
    admin = conn.admin()
    other = table_name + "_other"
    admin.create_table(other, "id BIGINT NOT NULL, v STRING", primary_key=["id"], num_buckets=1)
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    block_at = {"mid-snapshot": 2}.get(point, -1)
    hold = "1" if point == "before the first offset" else "0"
    before = set()

    with LeaseWatcher(admin, cluster.zookeeper_address) as watcher:
        wait_until(lambda: watcher.seen, 10, "the lease watcher's first look")
        before = set(watcher.in_zookeeper)
        driver = Driver(tmp_path, cluster.bootstrap_servers, table_name, str(out), str(ckpt),
                        str(block_at), hold, options={"maxOffsetsPerTrigger": str(MAX_ROWS)})
        try:
            if block_at >= 0:
                driver.wait_for(f"IN_BATCH {block_at}", f"batch {block_at} to start")
            elif hold == "1":
                # With the coordinator stopped, the source hangs planning its first offset.
                driver.wait_for("LOADED", "the query's schema")
                driver.kill_planning_first_offset(next(
                    p["pid"] for p in cluster.processes() if p["role"] == "coordinator"))
            else:
                driver.wait_for("TRIGGERED", "the query's first trigger")
                wait_until(lambda: count_files(ckpt / "commits") >= 10
                           and not leases_on(admin, table_name), 180,
                           "the first driver to finish the snapshot phase and release its lease")
                writer.upsert([{"id": 5, "v": "changelog-before-kill"}])
                n = count_files(ckpt / "offsets")
                wait_until(lambda: count_files(ckpt / "commits") > n, 60,
                           "a changelog batch of the first driver")
        finally:
            driver.kill()

        offsets = count_files(ckpt / "offsets")
        if point == "before the first offset":
            assert offsets == 0
            assert not leases_on(admin, table_name)   # no lease before its id is logged
        elif point == "mid-snapshot":
            last = source_offsets(ckpt)[-1]["tables"]
            assert any(p[2] < p[1] for t in last.values() for p in t["snapshot"].values())
        if offsets:
            lease_id = source_offsets(ckpt)[0]["lease_id"]
            # Copies of the checkpoint as it was at the kill, for other queries to try.
            copies = {k: tmp_path / f"ckpt-{k}" for k in ("table", "mode", "recreated")}
            for copy in copies.values():
                shutil.copytree(ckpt, copy)
            assert_refused(spark, cluster, other, tmp_path, copies["table"],
                           f"this query reads ['{other}']")
            assert_refused(spark, cluster, table_name, tmp_path, copies["mode"],
                           "scan.startup.mode='full', this query has 'earliest'",
                           **{"scan.startup.mode": "earliest"})

        q = restart(spark, cluster, table_name, out, ckpt)
        try:
            q.processAllAvailable()
            writer.upsert([{"id": 1, "v": "after-restart"}])
            writer.delete([{"id": 2}])
            q.processAllAvailable()
            wait_until(lambda: not leases_on(admin, table_name), 30,
                       "the lease to be released after the snapshot phase")
        finally:
            q.stop()

    lease_ids = {o["lease_id"] for o in source_offsets(ckpt)}
    assert len(lease_ids) == 1, lease_ids
    assert watcher.ids(admin.get_table(table_name).table_id) <= lease_ids   # coordinator
    assert watcher.in_zookeeper - before <= lease_ids                        # ZooKeeper
    if offsets:
        assert lease_ids == {lease_id}
    result = spark.read.parquet(str(out))
    snap_rows = result.where("_commit_timestamp IS NULL")
    assert snap_rows.count() == sum(s.row_count for s in snaps.values())
    assert snap_rows.select("id").distinct().count() == snap_rows.count()   # every row once
    assert fold(result) == table_state(conn, table_name)

    if offsets:   # the table dropped and created again: its old checkpoint is refused
        admin.drop_table(table_name)
        create_pk(conn, table_name, 10, buckets=2)
        assert_refused(spark, cluster, table_name, tmp_path, copies["recreated"],
                       "dropped and created again")


def test_a_restart_that_cannot_start_leaves_no_new_pins(spark, cluster, conn, table_name,
                                                         tmp_path):
    writer, _ = create_pk(conn, table_name, 20_000, buckets=2, **{"kv.snapshot.num-retained": "1"})
    admin = conn.admin()
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    q = restart(spark, cluster, table_name, out, ckpt)
    try:
        wait_until(lambda: count_files(ckpt / "commits") >= 2, 120, "two batches")
    finally:
        q.stop()
    last = source_offsets(ckpt)[-1]["tables"]
    assert any(p[2] < p[1] for t in last.values() for p in t["snapshot"].values())
    lease_id = source_offsets(ckpt)[0]["lease_id"]
    # The query stays down past its lease, and retention takes bucket 0's snapshot; bucket 1's
    # is still there, so a restart could pin it before it learns that bucket 0's is gone.
    admin.drop_kv_snapshot_lease(lease_id)
    writer.upsert([{"id": i, "v": f"w{i}"} for i in range(0, 20_000, 3)])
    admin.trigger_kv_snapshot(table_name, buckets=[0])
    with EmbeddedLeases(cluster) as zk:
        for _ in range(2):                       # every attempt fails the same way
            text = failed_start(spark, cluster, table_name, out, ckpt)
            assert "KV snapshot" in text and "new checkpointLocation" in text, text[-2000:]
            assert f"fluss-spark lease drop {lease_id}" in text
            assert leases_on(admin, table_name) == []
        assert lease_id not in zk.now()
