"""Tiering throughput, end to end: Fluss table -> format("fluss") -> foreachBatch -> lake commit.

Run::

    .venv/bin/python bench/bench_tiering.py --pk-rows 300000 --log-rows 300000 --updates 50000

It starts a local cluster (ZooKeeper, coordinator, 2 tablet servers), loads a PK table
(id BIGINT, name STRING, amount DOUBLE; 4 buckets, snapshotted) and a log table of the same
columns, then times the tiering job (``TieringJob`` in AvailableNow mode, one SparkSession,
local[2]) in three phases:

- ``snapshot+log``: the first run: the PK table's KV snapshot and the log table's records;
- ``changelog``: ``--updates`` upserts (each ``-U``/``+U``) and deletes of existing keys, tiered
  by a second run from the checkpoints (PK rounds rewrite the touched buckets' files);
- ``append``: another ``--log-rows`` appended to the log table, tiered by a third run.

Two figures per phase: rows (snapshot rows + changelog records) over the wall time of the run
(job start to exit: query start-up from the checkpoint and Python worker start included; the
SparkSession is already up), and over the time spent in rounds (reading the micro-batch into
Arrow + the lake commit; the longest table's total, as tables run side by side), which is the
steady-state rate of a long-running job. The lake copies are checked at the end.
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

from pyspark.sql import SparkSession  # noqa: E402

from fluss_spark.local.cluster import LocalCluster  # noqa: E402
from fluss_spark.tiering.job import TieringConfig, TieringJob  # noqa: E402
from fluss_spark.tiering.lake import LakeTable, table_dir  # noqa: E402


def rows(lo: int, hi: int, tag: str) -> pa.Table:
    return pa.table({"id": pa.array(range(lo, hi), pa.int64()),
                     "name": [f"{tag}{i}" for i in range(lo, hi)],
                     "amount": pa.array([i * 0.5 for i in range(lo, hi)], pa.float64())})


def load(writer, table: pa.Table, op: str, step: int = 50_000) -> None:
    for lo in range(0, table.num_rows, step):
        getattr(writer, op)(table.slice(lo, step))


def timed_run(spark, config: TieringConfig) -> tuple[float, float]:
    """(wall seconds of the run, seconds spent in rounds: reading + committing)."""
    job = TieringJob(spark, config)
    t0 = time.perf_counter()
    try:
        job.start()
        job.run()
    finally:
        job.stop()
    wall = time.perf_counter() - t0
    # Queries run side by side: the rounds' busy time is the longest table's total.
    busy = max((sum(r[2] + r[3] for r in sink.rounds) for sink in job.sinks.values()), default=0)
    return wall, busy


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pk-rows", type=int, default=300_000)
    p.add_argument("--log-rows", type=int, default=300_000)
    p.add_argument("--updates", type=int, default=50_000)
    p.add_argument("--buckets", type=int, default=4)
    p.add_argument("--max-offsets-per-trigger", type=int, default=None,
                   help="round size per table (default: everything available in one round)")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    for name in ("py4j", "fluss_spark.connector"):
        logging.getLogger(name).setLevel(logging.WARNING)

    work = Path(tempfile.mkdtemp(prefix="bench-tiering-"))
    cluster = LocalCluster(work / "cluster", tablets=2).start()
    spark = (SparkSession.builder.master("local[2]").appName("bench-tiering")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    try:
        conn = cluster.connection()
        admin = conn.admin()
        admin.create_table("bench.pk", "id BIGINT NOT NULL, name STRING, amount DOUBLE",
                           primary_key=["id"], num_buckets=args.buckets)
        admin.create_table("bench.log", "id BIGINT, name STRING, amount DOUBLE",
                           num_buckets=args.buckets)
        load(conn.writer("bench.pk"), rows(0, args.pk_rows, "p"), "upsert")
        admin.trigger_kv_snapshot("bench.pk")
        load(conn.writer("bench.log"), rows(0, args.log_rows, "l"), "append")

        config = TieringConfig(lake=work / "lake", bootstrap_servers=cluster.bootstrap_servers,
                               table_pattern=r"bench\..*", available_now=True,
                               max_offsets_per_trigger=args.max_offsets_per_trigger,
                               poll_interval_s=0.2)
        results = []
        results.append(("snapshot+log", args.pk_rows + args.log_rows, *timed_run(spark, config)))

        rnd = random.Random(1)
        keys = rnd.sample(range(args.pk_rows), min(args.updates, args.pk_rows))
        n_del = len(keys) // 10
        upd = pa.table({"id": pa.array(keys[n_del:], pa.int64()),
                        "name": ["u"] * (len(keys) - n_del),
                        "amount": pa.array([1.0] * (len(keys) - n_del), pa.float64())})
        w = conn.writer("bench.pk")
        load(w, upd, "upsert")
        w.delete(pa.table({"id": pa.array(keys[:n_del], pa.int64())}))
        results.append(("changelog", 2 * (len(keys) - n_del) + n_del, *timed_run(spark, config)))

        load(conn.writer("bench.log"), rows(args.log_rows, 2 * args.log_rows, "m"), "append")
        results.append(("append", args.log_rows, *timed_run(spark, config)))

        pk_lake = LakeTable(table_dir(work / "lake", "bench.pk")).read()
        log_lake = LakeTable(table_dir(work / "lake", "bench.log")).read()
        assert pk_lake.num_rows == args.pk_rows - n_del, pk_lake.num_rows
        assert log_lake.num_rows == 2 * args.log_rows, log_lake.num_rows

        print(f"tiering, local[2], {args.buckets} buckets, "
              f"{args.max_offsets_per_trigger or 'unlimited'} rows per round")
        print(f"{'phase':<14}{'rows':>10}{'wall s':>9}{'rows/s':>10}{'round s':>10}"
              f"{'rows/s in rounds':>18}")
        for phase, n, wall, busy in results:
            print(f"{phase:<14}{n:>10}{wall:>9.2f}{n / wall:>10.0f}{busy:>10.2f}"
                  f"{n / busy if busy else 0:>18.0f}")
    finally:
        spark.stop()
        cluster.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
