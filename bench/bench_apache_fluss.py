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

import os
import statistics
import sys
import time
from functools import partial
from pathlib import Path

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

from fluss_spark.client.backends import open_cluster  # noqa: E402
from fluss_spark.connector import register  # noqa: E402

from common import add_profile, noop_read, parser, print_profiles  # noqa: E402
from engines import APACHE, EMBEDDED, Engines  # noqa: E402 - bench/engines.py

SCHEMA = "id BIGINT, v STRING, amount DOUBLE"
TABLE = "bench.events"


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
    return noop_read(df, checkpoint)


def main(argv=None) -> int:
    ap = parser(__doc__, rows=1_000_000, buckets=2, repeat=3, write_batch_rows=50_000)
    ap.add_argument("--tablets", type=int, default=1, help="tablet servers of each cluster")
    add_profile(ap, "one client-only read per engine (cProfile, top entries)")
    args = ap.parse_args(argv)

    engines = Engines("bench-apache-fluss-", args.tablets)
    try:
        servers, work = engines.servers, engines.work
        engines.load(TABLE, SCHEMA, args.rows, args.buckets, args.write_batch_rows)
        ranges = {e: bucket_ranges(s) for e, s in servers.items()}
        for engine, r in ranges.items():
            total = sum(hi - lo for lo, hi in r.values())
            print(f"{engine}: offsets per bucket {r} ({total:,} records)")
            if total != args.rows:
                raise RuntimeError(f"{engine} holds {total} records, expected {args.rows}")

        spark = engines.start_spark("bench-apache-fluss")
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
            print_profiles("one client-only read",
                           {e: partial(client_read, servers[e], ranges[e])
                            for e in (EMBEDDED, APACHE)}, args.profile_top)
        return 0
    finally:
        engines.stop()


if __name__ == "__main__":
    sys.exit(main())
