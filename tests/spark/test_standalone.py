"""The Spark source on a Spark standalone cluster: a master and two workers, each a process of its
own with its own working directory and Python (the ``standalone`` fixture), executors apart
from the driver.

- worker 0's Python has the project's wheel installed; worker 1's has only the dependencies, and
  its executors get ``fluss_spark`` from the ``--py-files`` zip of ``fluss-spark package``;
- a PK table streamed in full mode on the embedded engine with its snapshot store on an S3
  object store, worker 0 killed -9 mid-snapshot-phase (Spark reruns its tasks on worker 1):
  exact output, one lease id;
- a PK table of Apache Fluss in full mode, remote.data.dir on the S3 object store: each
  bucket's KV snapshot files are read from it by the executors, with the s3.* source options;
- a node whose Python lacks a dependency fails the query with an error naming the package.

Marked ``standalone`` (``-m "not standalone"`` skips it in a quick local run).
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid

import pytest

from fluss_spark.local.ports import wait_until
from fluss_spark.testing.spark_driver import Driver
from fluss_spark.testing.streams import (LeaseWatcher, create_pk, fold, leases_on,
                                         source_offsets, table_state)

pytestmark = [pytest.mark.spark, pytest.mark.standalone]

ROWS, MAX_ROWS = 20_000, 1_000


def test_full_mode_on_two_workers_survives_a_killed_worker(spark, embedded_s3, table_name,
                                                           standalone, tmp_path):
    """The embedded engine, its snapshots in the object store: worker 0 killed -9 in the
    snapshot phase, worker 1 (fed by --py-files) finishes; exact output, one lease id."""
    spark_cluster, zip_path = standalone
    cluster = embedded_s3
    conn = cluster.connection(request_timeout_s=30.0)
    writer, snaps = create_pk(conn, table_name, ROWS, buckets=2)
    assert all(s.path.startswith("s3://") for s in snaps.values()), snaps
    admin = conn.admin()
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    apps = set(spark_cluster.applications())
    with conn, LeaseWatcher(admin, cluster.zookeeper_address) as watcher:
        driver = Driver(tmp_path, cluster.bootstrap_servers, table_name, str(out), str(ckpt),
                        "-1", "0", options={"maxOffsetsPerTrigger": str(MAX_ROWS)},
                        env=spark_cluster.driver_env(zip_path))
        try:
            driver.wait_for("TRIGGERED", "the query's first trigger", 240)
            wait_until(lambda: len(list((ckpt / "commits").glob("[0-9]*"))) >= 2, 240,
                       "two committed batches")
            assert leases_on(admin, table_name), "the snapshot phase ended before the kill"
            spark_cluster.kill_worker(0)        # a node dies mid-snapshot-phase
            writer.upsert([{"id": 1, "v": "after-the-kill"}])
            writer.delete([{"id": 2}])
            want = table_state(conn, table_name)

            def caught_up() -> bool:
                return (driver.proc.poll() is not None or not leases_on(admin, table_name)
                        and out.exists() and fold(spark.read.parquet(str(out))) == want)
            wait_until(caught_up, 300, "the query to read the whole table on one worker",
                       interval_s=2)
            assert driver.proc.poll() is None, driver.log_tail()
        finally:
            driver.kill()
            spark_cluster.restart_worker(0)
        result = spark.read.parquet(str(out))
        snap_rows = result.where("_commit_timestamp IS NULL")
        assert snap_rows.count() == sum(s.row_count for s in snaps.values())
        assert snap_rows.select("id").distinct().count() == snap_rows.count()   # every row once
        assert fold(result) == table_state(conn, table_name)
        lease_ids = {o["lease_id"] for o in source_offsets(ckpt)}
        assert len(lease_ids) == 1
        assert watcher.ids(admin.get_table(table_name).table_id) <= lease_ids
    # Both workers ran tasks: the one fed by --py-files too.
    assert spark_cluster.python_executors(apps) >= 2


def test_apache_fluss_full_mode_reads_snapshot_files_on_the_executors(spark, apache_fluss_s3,
                                                                     standalone, tmp_path):
    """A PK table of Apache Fluss 0.9.1 in full mode on the two workers, remote.data.dir in the
    S3 object store: each bucket's KV snapshot is read from it by the executor that reads its
    split (one of them with fluss_spark only from the --py-files zip), reaching the store
    through the s3.* source options; the fold equals pyfluss's read."""
    from fluss_spark.client.backends import open_cluster
    from fluss_spark.client.remote_storage import RemoteStorage
    from fluss_spark.testing.apache_fluss import PyFluss
    spark_cluster, zip_path = standalone
    store = apache_fluss_s3.object_store.fluss_options()
    storage = RemoteStorage(store["s3.endpoint"], store["s3.region"], store["s3.access-key"],
                            store["s3.secret-key"])
    servers, name = apache_fluss_s3.bootstrap_servers, f"sa.t_{uuid.uuid4().hex[:10]}"
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    with PyFluss(servers) as fluss, open_cluster(servers, storage=storage) as wire:
        fluss.create_table(name, "id BIGINT NOT NULL, v STRING", primary_key=["id"], buckets=2)
        fluss.upsert(name, [(i, f"v{i}") for i in range(4000)])
        loaded = wire.list_offsets(name)
        wait_until(lambda: all(b in s and s[b].log_offset >= loaded[b] for b in loaded
                               for s in [wire.latest_kv_snapshots(name)]), 120,
                   "KV snapshots covering the load")
        assert all(s.path.startswith("s3://fluss/remote/")
                   for s in wire.latest_kv_snapshots(name).values())
        apps = set(spark_cluster.applications())
        driver = Driver(tmp_path, servers, name, str(out), str(ckpt), "-1", "0",
                        options={"maxOffsetsPerTrigger": "1000", **store},
                        env=spark_cluster.driver_env(zip_path))
        try:
            driver.wait_for("TRIGGERED", "the query's first trigger", 240)
            fluss.upsert(name, [(1, "changed")])
            want = {r["id"]: r["v"] for r in fluss.rows(name, timeout_s=60)}
            wait_until(lambda: driver.proc.poll() is not None or out.exists()
                       and fold(spark.read.parquet(str(out))) == want, 240,
                       "the query to read the table", interval_s=2)
            assert driver.proc.poll() is None, driver.log_tail()
        finally:
            driver.kill()
    snap_rows = spark.read.parquet(str(out)).where("_commit_timestamp IS NULL")
    assert snap_rows.count() == 4000 == snap_rows.select("id").distinct().count()
    assert len({o["lease_id"] for o in source_offsets(ckpt)}) == 1
    # This application's executors on both workers ran Python tasks.
    assert spark_cluster.python_executors(apps) >= 2


BATCH_READ = """
import os, sys
from pyspark.sql import SparkSession
spark = (SparkSession.builder.master(sys.argv[1]).config("spark.ui.enabled", "false")
         .config("spark.submit.pyFiles", sys.argv[4]).getOrCreate())
from fluss_spark.connector.source import FlussDataSource
spark.dataSource.register(FlussDataSource)     # executors run PYSPARK_PYTHON
print(spark.read.format("fluss").option("bootstrap.servers", sys.argv[2])
      .option("table", sys.argv[3]).load().count())
"""


def test_a_node_without_a_dependency_fails_the_query_naming_the_package(cluster, conn,
                                                                        table_name,
                                                                        standalone, tmp_path):
    """One worker left, its Python without msgpack: the read's tasks fail on its executor (the
    driver's Python has everything), and the error says which package the node lacks."""
    spark_cluster, zip_path = standalone
    create_pk(conn, table_name, 10, buckets=1)
    script = tmp_path / "read.py"
    script.write_text(BATCH_READ)
    deps_only = spark_cluster.workers[1].python_bin
    spark_cluster.kill_worker(0)
    spark_cluster.restart_worker(1, spark_cluster.base / "py-no-msgpack" / "bin")
    try:
        done = subprocess.run(
            [sys.executable, str(script), spark_cluster.url, cluster.bootstrap_servers,
             table_name, str(zip_path)], capture_output=True, text=True, timeout=300,
            env={**os.environ, **spark_cluster.driver_env(zip_path),
                 "SPARK_LOCAL_IP": "127.0.0.1"})
    finally:   # the workers as the fixture made them, for the tests that follow
        spark_cluster.restart_worker(1, deps_only)
        spark_cluster.restart_worker(0)
    assert done.returncode != 0, done.stdout
    assert "fluss_spark needs the Python package(s) msgpack on every Spark node" in done.stderr, \
        done.stderr[-3000:]
    assert "Lost task" in done.stderr or "(TID" in done.stderr, done.stderr[-6000:]
