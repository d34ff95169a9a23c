"""Tiering into Apache Iceberg end to end, against the snapshot phase it reads through.

Run::

    .venv/bin/python bench/bench_tiering.py --rows 1000000 --repeat 3

It starts a local cluster (ZooKeeper, coordinator, 2 tablet servers) and one SparkSession
(local[2]), and loads a PK table (id BIGINT key, name STRING, amount DOUBLE; 4 buckets,
snapshotted) and a log table of the same columns, ``--rows`` rows each. Then:

1. **Tiering vs the snapshot phase, paired.** Each repeat, for each table, in alternating order:
   ``read``: ``readStream.format("fluss")`` in full mode (the PK table's KV snapshot; the log
   table's records) into the ``noop`` sink, AvailableNow, fresh checkpoint; ``tier``: the tiering
   job (``TieringJob``, AvailableNow, fresh lake) tiering the same table into Iceberg. Both are
   wall time from ``start()`` to the end (query start-up included on both sides) and both check
   that every row arrived (the read: the rows its micro-batches report; the tier: the Iceberg
   table's row count). Ratio = tier rows/s / read rows/s, per repeat; min/median/max printed.
2. **A job that stays up.** One job (``--trigger`` interval) tiers both tables and keeps running;
   then ``--updates`` upserts/deletes of existing keys are written to the PK table and
   ``--rows`` more rows appended to the log table, and the time from the last acknowledged write
   to the lake holding it is measured (the rounds' read + write and commit seconds split out).
"""

from __future__ import annotations

import logging
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

from common import local_spark, parser  # noqa: E402 - bench/common.py
from fluss_spark.local.embedded import EmbeddedProcesses  # noqa: E402
from fluss_spark.tiering.job import TieringConfig, TieringJob  # noqa: E402
from fluss_spark.tiering.lake import LakeTable  # noqa: E402


def rows(lo: int, hi: int, tag: str) -> pa.Table:
    return pa.table({"id": pa.array(range(lo, hi), pa.int64()),
                     "name": [f"{tag}{i}" for i in range(lo, hi)],
                     "amount": pa.array([i * 0.5 for i in range(lo, hi)], pa.float64())})


def load(writer, table: pa.Table, op: str, step: int = 100_000) -> None:
    for lo in range(0, table.num_rows, step):
        getattr(writer, op)(table.slice(lo, step))


def read_once(spark, servers: str, table: str, work: Path, expected: int) -> float:
    """Seconds for ``format("fluss")`` (full mode) to read ``table`` into noop, start to end."""
    ckpt = Path(tempfile.mkdtemp(dir=work, prefix="read-"))
    t0 = time.perf_counter()
    q = (spark.readStream.format("fluss").option("bootstrap.servers", servers)
         .option("table", table).option("scan.startup.mode", "full").load()
         .writeStream.format("noop").trigger(availableNow=True)
         .option("checkpointLocation", str(ckpt)).start())
    q.awaitTermination()
    secs = time.perf_counter() - t0
    got = sum(p["numInputRows"] for p in q.recentProgress)
    assert got == expected, f"read {got} rows of {table}, expected {expected}"
    return secs


def tier_once(spark, servers: str, table: str, work: Path, expected: int) -> float:
    """Seconds for the tiering job (AvailableNow, fresh lake) to tier ``table``, start to end."""
    lake = Path(tempfile.mkdtemp(dir=work, prefix="lake-"))
    # The job as `fluss-spark tier run --once` runs it (default poll interval: it ends when its
    # query does).
    config = TieringConfig(lake=lake, bootstrap_servers=servers,
                           table_pattern=table.replace(".", r"\."), available_now=True)
    job = TieringJob(spark, config)
    t0 = time.perf_counter()
    try:
        job.start()
        job.run()
    finally:
        job.stop()
    secs = time.perf_counter() - t0
    got = LakeTable.open(lake, table).state().rows
    assert got == expected, f"tiered {got} rows of {table}, expected {expected}"
    return secs


def spread(xs: list[float]) -> str:
    return f"{min(xs):.2f} / {statistics.median(xs):.2f} / {max(xs):.2f}"


def wait_caught_up(job: TieringJob, timeout_s: float = 600) -> float:
    t0 = time.perf_counter()
    while not job.caught_up():
        job.poll(discover=False)
        if time.perf_counter() - t0 > timeout_s:
            raise TimeoutError("the lake did not catch up")
        time.sleep(0.05)
    return time.perf_counter() - t0


def busy(job: TieringJob, table: str, since: int) -> tuple[int, float, float]:
    """(rows, seconds reading + writing, seconds committing) of ``table``'s rounds after the
    first ``since``."""
    rounds = job.sinks[table].rounds[since:]
    return (sum(r[1] for r in rounds), sum(r[2] for r in rounds), sum(r[3] for r in rounds))


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__, rows=1_000_000, updates=100_000, buckets=4, repeat=3, trigger="1 second")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s: %(message)s")

    work = Path(tempfile.mkdtemp(prefix="bench-tiering-"))
    cluster = EmbeddedProcesses(work / "cluster", tablets=2).start()
    spark = local_spark("bench-tiering")
    servers = cluster.bootstrap_servers
    n = args.rows
    try:
        conn = cluster.connection()
        admin = conn.admin()
        admin.create_table("bench.pk", "id BIGINT NOT NULL, name STRING, amount DOUBLE",
                           primary_key=["id"], num_buckets=args.buckets)
        admin.create_table("bench.log", "id BIGINT, name STRING, amount DOUBLE",
                           num_buckets=args.buckets)
        load(conn.writer("bench.pk"), rows(0, n, "p"), "upsert")
        admin.trigger_kv_snapshot("bench.pk")
        load(conn.writer("bench.log"), rows(0, n, "l"), "append")

        # Warm-up (Python workers, JIT): one small read and one tiering run, not counted.
        read_once(spark, servers, "bench.log", work, n)
        tier_once(spark, servers, "bench.log", work, n)

        print(f"tiering vs the snapshot phase: {n} rows per table, {args.buckets} buckets, "
              f"local[2], {args.repeat} paired repeats (min / median / max)")
        print(f"{'table':<11}{'read s':>20}{'tier s':>20}{'tier / read rows/s':>24}")
        for table in ("bench.pk", "bench.log"):
            reads, tiers = [], []
            for r in range(args.repeat):
                first_read = r % 2 == 0
                for side in (("read", "tier") if first_read else ("tier", "read")):
                    if side == "read":
                        reads.append(read_once(spark, servers, table, work, n))
                    else:
                        tiers.append(tier_once(spark, servers, table, work, n))
            ratios = [rd / tr for rd, tr in zip(reads, tiers)]
            print(f"{table:<11}{spread(reads):>20}{spread(tiers):>20}{spread(ratios):>24}")
            print(f"{'':<11}{'(' + f'{n / statistics.median(reads):,.0f}':>19} rows/s)"
                  f"{f'({n / statistics.median(tiers):,.0f}':>13} rows/s)")

        # A job that stays up: the snapshot phase, then changelog and appends as they come.
        lake = work / "lake-continuous"
        config = TieringConfig(lake=lake, bootstrap_servers=servers,
                               table_pattern=r"bench\..*", trigger_interval=args.trigger,
                               poll_interval_s=0.05)
        job = TieringJob(spark, config).start()
        try:
            t_first = wait_caught_up(job)
            seen = {t: len(job.sinks[t].rounds) for t in job.sinks}
            rnd = random.Random(1)
            keys = rnd.sample(range(n), min(args.updates, n))
            n_del = len(keys) // 10
            upd = pa.table({"id": pa.array(keys[n_del:], pa.int64()),
                            "name": ["u"] * (len(keys) - n_del),
                            "amount": pa.array([1.0] * (len(keys) - n_del), pa.float64())})
            w = conn.writer("bench.pk")
            load(w, upd, "upsert")
            w.delete(pa.table({"id": pa.array(keys[:n_del], pa.int64())}))
            load(conn.writer("bench.log"), rows(n, 2 * n, "m"), "append")
            t_changes = wait_caught_up(job)
            pk_rows = LakeTable.open(lake, "bench.pk").state().rows
            log_rows = LakeTable.open(lake, "bench.log").state().rows
            assert pk_rows == n - n_del and log_rows == 2 * n, (pk_rows, log_rows)
            records = {"bench.pk": 2 * (len(keys) - n_del) + n_del, "bench.log": n}
            print(f"\na job that stays up (trigger {args.trigger}): snapshot phase of both "
                  f"tables tiered in {t_first:.2f} s ({2 * n / t_first:,.0f} rows/s)")
            print(f"then {records['bench.pk']} changelog records of bench.pk and {n} appends to "
                  f"bench.log, written together: in the lake {t_changes:.2f} s after the last "
                  "write was acknowledged")
            for t in ("bench.pk", "bench.log"):
                got, rw, commit = busy(job, t, seen[t])
                print(f"  {t:<10} {got:>9} records in {len(job.sinks[t].rounds) - seen[t]} "
                      f"round(s): read + write {rw:.2f} s, commit {commit:.2f} s "
                      f"({got / (rw + commit) if rw + commit else 0:,.0f} records/s busy)")
        finally:
            job.stop()
    finally:
        spark.stop()
        cluster.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
