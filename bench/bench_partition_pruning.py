"""Batch reads of a day-partitioned PK table with a partition filter: pruned against unpruned.

Run::

    .venv/bin/python bench/bench_partition_pruning.py --days 8 --rows-per-day 200000 --repeat 5

It starts a local cluster of the code on ``PYTHONPATH``, creates a PK table (id BIGINT, dt
STRING, v STRING, amount DOUBLE) partitioned by ``dt`` with ``--buckets`` buckets, writes
``--rows-per-day`` rows into each of ``--days`` partitions and snapshots them, then times, in one
SparkSession (local[2]), ``spark.read.format("fluss")...where("dt = '<one day>'")`` into a
count:

- ``pruned``: with ``spark.sql.python.filterPushdown.enabled=true``: the source plans that
  partition's buckets only;
- ``unpruned``: with the setting off: every partition is planned and read, Spark drops the other
  days' rows.

Pairing: every repeat runs both back to back, the order reversed on every other repeat, and the
ratio ``unpruned s / pruned s`` is computed per repeat, so background load hits both sides alike.
Printed: min / median / max seconds of each side and of the ratios, and the splits each planned.
Every run is checked: both count ``--rows-per-day`` rows, and the pruned read plans ``--buckets``
splits. ``--warmup`` runs (not counted) start the Python workers first.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import local_spark, make_rows, parser  # noqa: E402

from fluss_spark.connector import register  # noqa: E402
from fluss_spark.local.embedded import EmbeddedProcesses  # noqa: E402

PUSHDOWN = "spark.sql.python.filterPushdown.enabled"
SCHEMA = "id BIGINT NOT NULL, dt STRING NOT NULL, v STRING, amount DOUBLE"


def load(conn, table: str, days: list[str], rows: int, buckets: int) -> None:
    admin = conn.admin()
    admin.create_table(table, SCHEMA, primary_key=["id", "dt"], num_buckets=buckets,
                       partition_keys=["dt"])
    writer = conn.writer(table)
    for day in days:
        admin.create_partition(table, {"dt": day})
        for lo in range(0, rows, 100_000):
            part = make_rows(lo, min(rows, lo + 100_000))
            writer.upsert(part.add_column(1, "dt", pa.array([day] * part.num_rows)))
        admin.trigger_kv_snapshot(table, partition=day)


def timed(spark, servers: str, table: str, day: str, pruned: bool) -> tuple[float, int, int]:
    """(seconds, rows counted, splits planned) of one filtered batch read."""
    spark.conf.set(PUSHDOWN, "true" if pruned else "false")
    df = (spark.read.format("fluss").option("bootstrap.servers", servers)
          .option("table", table).load().where(f"dt = '{day}'"))
    t0 = time.perf_counter()
    splits = df.rdd.getNumPartitions()
    rows = df.count()
    return time.perf_counter() - t0, rows, splits


def spread(values: list[float]) -> str:
    return f"{min(values):.2f} / {statistics.median(values):.2f} / {max(values):.2f}"


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__, days=8, rows_per_day=200_000, buckets=2, repeat=5, warmup=1)
    a = ap.parse_args(argv)
    days = [f"2026-11-{d:02d}" for d in range(1, a.days + 1)]
    day = days[len(days) // 2]
    with tempfile.TemporaryDirectory(prefix="bench-pruning-") as d:
        cluster = EmbeddedProcesses(d, tablets=2)
        cluster.start()
        try:
            with cluster.connection(request_timeout_s=120) as conn:
                load(conn, "bench.days", days, a.rows_per_day, a.buckets)
            spark = local_spark("bench-partition-pruning")
            register(spark)
            for _ in range(a.warmup):
                timed(spark, cluster.bootstrap_servers, "bench.days", day, True)
                timed(spark, cluster.bootstrap_servers, "bench.days", day, False)
            times: dict[bool, list[float]] = {True: [], False: []}
            splits: dict[bool, int] = {}
            ratios = []
            for i in range(a.repeat):
                order = (True, False) if i % 2 == 0 else (False, True)
                run = {}
                for pruned in order:
                    s, rows, splits[pruned] = timed(spark, cluster.bootstrap_servers,
                                                    "bench.days", day, pruned)
                    if rows != a.rows_per_day:
                        raise SystemExit(f"{'pruned' if pruned else 'unpruned'} read counted "
                                         f"{rows} rows, expected {a.rows_per_day}")
                    times[pruned].append(s)
                    run[pruned] = s
                ratios.append(run[False] / run[True])
            if splits[True] != a.buckets:
                raise SystemExit(f"the pruned read planned {splits[True]} splits, expected "
                                 f"{a.buckets}")
            spark.stop()
        finally:
            cluster.stop()
    print(f"{a.days} partitions x {a.rows_per_day} rows, {a.buckets} buckets; a filter on one "
          f"day, {a.repeat} paired repeats (min / median / max)")
    print(f"pruned    {spread(times[True])} s   {splits[True]} splits")
    print(f"unpruned  {spread(times[False])} s   {splits[False]} splits")
    print(f"unpruned / pruned  {spread(ratios)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
