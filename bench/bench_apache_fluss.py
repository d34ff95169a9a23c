"""Log-table streaming throughput: a real Apache Fluss cluster against the embedded one.

Run::

    .venv/bin/python bench/bench_apache_fluss.py --rows 1000000 --repeat 3

It starts one ZooKeeper, then both clusters on it in temporary directories -- the embedded
``EmbeddedProcesses`` (coordinator + ``--tablets`` tablet servers) and Apache Fluss 0.9.1
(``ApacheFlussProcesses``: coordinator + ``--tablets`` Java tablet servers; jars from Maven Central)
-- and writes the same ``--rows`` rows into a log table of each (``id BIGINT, v STRING, amount
DOUBLE``, ``--buckets`` buckets, no bucket key): into the embedded one with
``FlussConnection.writer(table).append`` in Arrow chunks of ``--write-batch-rows`` rows, into
Apache Fluss with the official client through ``fluss_spark.testing.apache_fluss.PyFluss.append``
in chunks of the same size (the write times are printed but are not what is measured).

Measured, per engine, ``--repeat`` times alternating the engines (and which goes first), the
median counts:

- ``spark``: ``spark.readStream.format("fluss")`` with ``scan.startup.mode=earliest`` to the
  ``noop`` sink, ``trigger(availableNow=True)``, one SparkSession (local[2]) for all runs: wall
  time from ``start()`` to termination (query start-up included), and on a line of its own
  ``spark (batches)``: only the micro-batches that read rows (``triggerExecution`` in the query
  progress), without the query's fixed start-up;
- ``client``: no Spark; ``open_cluster(servers).read_log(table, bucket, start, end)`` of every
  bucket, one after the other, in this process (the backend the source's readers use).

The table gives rows/s and the ratio Apache Fluss / embedded (of rows/s: below 1 means Apache
Fluss is slower). ``--profile`` then runs one client-only read per engine under cProfile and
prints its top entries.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import statistics
import sys
import time
from pathlib import Path

import pyarrow as pa

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

from pyspark.sql import SparkSession  # noqa: E402

from fluss_spark.client import FlussConnection  # noqa: E402
from fluss_spark.client.backends import open_cluster  # noqa: E402
from fluss_spark.connector import register  # noqa: E402
from fluss_spark.testing.apache_fluss import PyFluss  # noqa: E402

from engines import APACHE, EMBEDDED, Engines  # noqa: E402 - bench/engines.py

SCHEMA = "id BIGINT, v STRING, amount DOUBLE"
TABLE = "bench.events"


def make_rows(lo: int, hi: int) -> pa.Table:
    return pa.table({"id": pa.array(range(lo, hi), pa.int64()),
                     "v": pa.array([f"value-{i}" for i in range(lo, hi)], pa.string()),
                     "amount": pa.array([i * 0.5 for i in range(lo, hi)], pa.float64())})


def load_embedded(servers: str, rows: int, buckets: int, chunk: int) -> float:
    t0 = time.perf_counter()
    with FlussConnection(servers) as conn:
        conn.admin().create_table(TABLE, SCHEMA, num_buckets=buckets)
        writer = conn.writer(TABLE)
        for lo in range(0, rows, chunk):
            writer.append(make_rows(lo, min(rows, lo + chunk)))
    return time.perf_counter() - t0


def load_apache(servers: str, rows: int, buckets: int, chunk: int) -> float:
    t0 = time.perf_counter()
    with PyFluss(servers) as pf:
        pf.create_table(TABLE, SCHEMA, buckets=buckets)
        for lo in range(0, rows, chunk):
            # PyFluss.append takes rows (tuples in schema order); pyfluss batches them itself.
            pf.append(TABLE, make_rows(lo, min(rows, lo + chunk)).to_pylist())
    return time.perf_counter() - t0


def bucket_ranges(servers: str) -> dict[int, tuple[int, int]]:
    """``{bucket: (earliest, latest)}`` of the log table."""
    cluster = open_cluster(servers)
    try:
        earliest = cluster.list_offsets(TABLE, spec="earliest")
        latest = cluster.list_offsets(TABLE, spec="latest")
        return {b: (earliest[b], latest[b]) for b in sorted(latest)}
    finally:
        cluster.close()


def client_read(servers: str, ranges: dict[int, tuple[int, int]]) -> tuple[float, int]:
    """Read every bucket's log with the backend's ``read_log``; (seconds, rows)."""
    t0 = time.perf_counter()
    cluster = open_cluster(servers)
    rows = 0
    try:
        for bucket, (start, end) in ranges.items():
            for batch in cluster.read_log(TABLE, bucket, start, end):
                rows += batch.num_rows
    finally:
        cluster.close()
    return time.perf_counter() - t0, rows


def spark_read(spark, servers: str, checkpoint: Path) -> tuple[float, float, int]:
    """One AvailableNow query to the noop sink: (wall s from start() to termination, s of the
    micro-batches that read rows, rows read)."""
    df = (spark.readStream.format("fluss").option("bootstrap.servers", servers)
          .option("table", TABLE).option("scan.startup.mode", "earliest").load())
    t0 = time.perf_counter()
    q = (df.writeStream.format("noop").trigger(availableNow=True)
         .option("checkpointLocation", str(checkpoint)).start())
    q.awaitTermination()
    wall = time.perf_counter() - t0
    if q.exception():
        raise RuntimeError(str(q.exception()))
    busy = [p for p in q.recentProgress if p["numInputRows"]]
    return (wall, sum(p["durationMs"]["triggerExecution"] for p in busy) / 1000.0,
            sum(p["numInputRows"] for p in busy))


def profile_client(servers: str, ranges, top: int) -> str:
    prof = cProfile.Profile()
    prof.enable()
    client_read(servers, ranges)
    prof.disable()
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(top)
    return out.getvalue()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--buckets", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--tablets", type=int, default=1, help="tablet servers of each cluster")
    ap.add_argument("--write-batch-rows", type=int, default=50_000)
    ap.add_argument("--profile", action="store_true",
                    help="then profile one client-only read per engine (cProfile, top entries)")
    ap.add_argument("--profile-top", type=int, default=15)
    args = ap.parse_args(argv)

    engines = Engines("bench-apache-fluss-", args.tablets)
    spark = None
    try:
        servers, work = engines.servers, engines.work

        for engine, load in ((EMBEDDED, load_embedded), (APACHE, load_apache)):
            secs = load(servers[engine], args.rows, args.buckets, args.write_batch_rows)
            print(f"wrote {args.rows:,} rows into {engine} in {secs:.1f}s "
                  f"({args.rows / secs:,.0f} rows/s)")
        ranges = {e: bucket_ranges(s) for e, s in servers.items()}
        for engine, r in ranges.items():
            total = sum(hi - lo for lo, hi in r.values())
            print(f"{engine}: offsets per bucket {r} ({total:,} records)")
            if total != args.rows:
                raise RuntimeError(f"{engine} holds {total} records, expected {args.rows}")

        spark = (SparkSession.builder.master("local[2]").appName("bench-apache-fluss")
                 .config("spark.ui.enabled", "false")
                 .config("spark.ui.showConsoleProgress", "false")
                 .config("spark.sql.shuffle.partitions", "2")
                 .config("spark.sql.session.timeZone", "UTC").getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        register(spark)

        # Warm-up (Python workers, JIT of the Spark side, connections), not counted.
        for engine in (EMBEDDED, APACHE):
            spark_read(spark, servers[engine], work / "ck" / f"warm-{engine}")
            client_read(servers[engine], ranges[engine])

        times: dict[tuple[str, str], list[float]] = {}
        for i in range(args.repeat):
            order = (EMBEDDED, APACHE) if i % 2 == 0 else (APACHE, EMBEDDED)
            for engine in order:
                wall, batches, n = spark_read(spark, servers[engine], work / "ck" / f"{engine}-{i}")
                if n != args.rows:
                    raise RuntimeError(f"spark read {n} rows from {engine}, expected {args.rows}")
                secs, n = client_read(servers[engine], ranges[engine])
                if n != args.rows:
                    raise RuntimeError(f"read_log gave {n} rows from {engine}, expected "
                                       f"{args.rows}")
                times.setdefault((engine, "spark"), []).append(wall)
                times.setdefault((engine, "spark (batches)"), []).append(batches)
                times.setdefault((engine, "client"), []).append(secs)
                print(f"run {i}: {engine:<13} spark {wall:.2f}s (batches {batches:.2f}s), "
                      f"client {secs:.2f}s")

        print(f"\n{args.rows:,} rows, log table, {args.buckets} buckets, {args.tablets} tablet "
              f"server(s) each, local[2], median of {args.repeat}")
        print(f"{'engine':<14}{'reader':<17}{'rows':>10}{'seconds':>9}{'rows/s':>13}"
              f"{'ratio':>8}")
        for reader in ("spark", "spark (batches)", "client"):
            med = {e: statistics.median(times[(e, reader)]) for e in (EMBEDDED, APACHE)}
            for engine in (EMBEDDED, APACHE):
                ratio = med[EMBEDDED] / med[engine] if engine == APACHE else 1.0
                print(f"{engine:<14}{reader:<17}{args.rows:>10,}{med[engine]:>9.2f}"
                      f"{args.rows / med[engine]:>13,.0f}{ratio:>8.2f}")

        if args.profile:
            for engine in (EMBEDDED, APACHE):
                print(f"\n=== cProfile of one client-only read, {engine} (by own time)")
                print(profile_client(servers[engine], ranges[engine], args.profile_top))
        return 0
    finally:
        if spark is not None:
            spark.stop()
        engines.stop()


if __name__ == "__main__":
    sys.exit(main())
