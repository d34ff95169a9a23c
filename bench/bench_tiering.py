"""Tiering throughput into Apache Iceberg, end to end, against the previous Parquet format.

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

Per phase: rows (snapshot rows + changelog records) over the wall time of the run (job start to
exit: query start-up from the checkpoint and Python worker start included; the SparkSession is
already up); over the time Spark took to hand the rounds over as Arrow (the snapshot/changelog
read through ``format("fluss")``: the reference every lake writer shares); and over the time of
the Iceberg commits alone.

Then, in the same run, every round the job committed (captured as the Arrow table it handed to
the lake) is replayed, in order and on one thread, into three fresh lakes: Iceberg as the job
writes it (PK rounds: one overwrite snapshot, copy-on-write of the files holding a touched
key), Iceberg through pyiceberg's own ``upsert`` (+ a delete of the deleted keys, one
transaction: the alternative PK mechanism), and the previous Parquet + manifest format
(``fluss_spark.tiering.legacy``, copy-on-write per Fluss bucket). The lake copies are checked.
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
from fluss_spark.client.cluster import CHANGE_TYPE  # noqa: E402
from fluss_spark.tiering import legacy  # noqa: E402
from fluss_spark.tiering.apply import conform, fold_changes  # noqa: E402
from fluss_spark.tiering.lake import LakeTable, key_filter  # noqa: E402

#: (table, changes, kwargs) of every commit_round call of the job, in order.
CAPTURED: list[tuple[str, pa.Table, dict]] = []
_commit_round = LakeTable.commit_round


def _capturing_commit_round(self, changes, **kw):
    CAPTURED.append((self.name, changes, kw))
    return _commit_round(self, changes, **kw)


LakeTable.commit_round = _capturing_commit_round  # type: ignore[method-assign]


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
    # Queries run side by side: the busy times are the longest table's totals.
    read = max((sum(r[2] for r in sink.rounds) for sink in job.sinks.values()), default=0)
    commit = max((sum(r[3] for r in sink.rounds) for sink in job.sinks.values()), default=0)
    return wall, read, commit


class UpsertLake:
    """The alternative PK mechanism: pyiceberg's ``upsert`` (+ delete) in one transaction."""

    def __init__(self, lake: LakeTable):
        self.lake = lake

    def commit_round(self, changes: pa.Table, **kw) -> None:
        tbl = self.lake.iceberg()
        st = self.lake.state()
        rows = conform(changes, st.schema, keep=(CHANGE_TYPE, "_log_offset"))
        storage = tbl.schema().as_arrow()
        tx = tbl.transaction()
        if st.is_pk:
            puts, touched = fold_changes(rows, st.primary_key)
            gone = touched.join(puts.select(list(st.primary_key)), keys=list(st.primary_key),
                                join_type="left anti")
            if gone.num_rows and st.rows:
                tx.delete(key_filter(gone))
            if puts.num_rows:
                tx.upsert(puts.cast(storage), join_cols=list(st.primary_key))
        else:
            tx.append(rows.select(st.schema.names).cast(storage))
        tx.commit_transaction()


class LegacyLake:
    """The previous format's writer, called like the Iceberg one (it records no lease id)."""

    def __init__(self, lake: legacy.LakeTable):
        self.lake = lake

    def commit_round(self, changes: pa.Table, lease_id=None, **kw) -> None:
        self.lake.commit_round(changes, **kw)


def replay(make, tables: dict) -> float:
    """Seconds to apply every captured round to the lakes ``make(name)`` returns."""
    lakes = {}
    t0 = time.perf_counter()
    for name, changes, kw in CAPTURED:
        if name not in lakes:
            lakes[name] = make(name, tables[name])
        lakes[name].commit_round(changes, **kw)
    return time.perf_counter() - t0


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
        n_phase1 = len(CAPTURED)

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

        pk_lake = LakeTable.open(work / "lake", "bench.pk").read()
        log_lake = LakeTable.open(work / "lake", "bench.log").read()
        assert pk_lake.num_rows == args.pk_rows - n_del, pk_lake.num_rows
        assert log_lake.num_rows == 2 * args.log_rows, log_lake.num_rows

        print(f"tiering into Iceberg, local[2], {args.buckets} buckets, "
              f"{args.max_offsets_per_trigger or 'unlimited'} rows per round")
        print(f"{'phase':<14}{'rows':>10}{'wall s':>9}{'rows/s':>10}{'read s':>9}"
              f"{'read rows/s':>13}{'commit s':>10}{'commit rows/s':>15}")
        for phase, n, wall, read, commit in results:
            print(f"{phase:<14}{n:>10}{wall:>9.2f}{n / wall:>10.0f}{read:>9.2f}"
                  f"{n / read if read else 0:>13.0f}{commit:>10.2f}"
                  f"{n / commit if commit else 0:>15.0f}")

        # The same rounds, replayed into three fresh lakes (no longer captured).
        LakeTable.commit_round = _commit_round  # type: ignore[method-assign]
        infos = {n: admin.get_table(n) for n in ("bench.pk", "bench.log")}
        (work / "replay").mkdir()

        def iceberg(sub):
            root = work / "replay" / sub
            (root / "_tiering").mkdir(parents=True, exist_ok=True)

            def make(name, info):
                t = LakeTable.open(root, name)
                t.create(table=name, table_id=info.table_id, schema=info.schema,
                         primary_key=info.primary_key, bucket_key=info.bucket_key,
                         num_buckets=info.num_buckets)
                return t
            return make

        def upsert_make(name, info):
            return UpsertLake(iceberg("upsert")(name, info))

        def legacy_make(name, info):
            t = legacy.LakeTable(legacy.table_dir(work / "replay" / "legacy", name))
            t.create(table=name, table_id=info.table_id, schema=info.schema,
                     primary_key=info.primary_key, bucket_key=info.bucket_key,
                     num_buckets=info.num_buckets)
            return LegacyLake(t)

        total = sum(c.num_rows for _, c, _ in CAPTURED)
        pk_rounds = [c for n, c, _ in CAPTURED if n == "bench.pk"]
        print(f"\nreplay of the job's {len(CAPTURED)} rounds ({total} rows; "
              f"{len(CAPTURED) - n_phase1} after the first run), one thread")
        timings = {}
        for label, make in (("iceberg (job: copy-on-write)", iceberg("job")),
                            ("iceberg (pyiceberg upsert)", upsert_make),
                            ("parquet + manifest (previous)", legacy_make)):
            timings[label] = replay(make, infos)
        ref = timings["parquet + manifest (previous)"]
        for label, sec in timings.items():
            print(f"{label:<32}{sec:>8.2f} s{total / sec:>10.0f} rows/s"
                  f"{sec / ref:>8.2f}x the previous format's time")
        for sub in ("job", "upsert"):
            got = LakeTable.open(work / "replay" / sub, "bench.pk").read()
            assert got.num_rows == pk_lake.num_rows, (sub, got.num_rows)
        assert legacy.LakeTable(legacy.table_dir(work / "replay" / "legacy", "bench.pk")
                                ).read().num_rows == pk_lake.num_rows
        del pk_rounds
    finally:
        spark.stop()
        cluster.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
