"""Spark -> Fluss: rows/s of write.format("fluss") against the plain client writer, per engine.

Run::

    .venv/bin/python bench/bench_sink.py --rows 200000 --repeat 1

It starts both engines (bench/engines.py: ZooKeeper, this project's servers, Apache Fluss) and
one SparkSession (local[2]). For each engine and each table kind (a log table, a PK table; 2
buckets; rows ``id BIGINT NOT NULL, v STRING, amount DOUBLE`` from ``common.make_rows``), in the
same run and on fresh tables:

- ``client``: the cluster's own ``table_writer`` (this project's writer, or pyfluss on Apache
  Fluss) writes the Arrow table in chunks of ``--chunk`` rows, then flushes;
- ``sink``: ``df.write.format("fluss")`` of a DataFrame of the same rows (cached and counted
  before the clock starts, ``--partitions`` tasks).

Each side is timed to the last acknowledgement; ``sink / client`` is the ratio of rows/s (the
issue's goal: at least 0.7). ``ceiling`` is the same DataFrame written once to a Python Arrow
writer that only consumes its batches: what the Data Source API itself costs. Every table's
content is checked afterwards (log: rows at the latest
offsets; PK: the rows of a batch read through format("fluss")). The order of the two sides
alternates between repeats; ``--warmup`` sink writes (not counted) start Spark's Python workers
first.
"""

from __future__ import annotations

import statistics
import sys
import time
import uuid

from pyspark.sql.datasource import DataSource, DataSourceArrowWriter, WriterCommitMessage

from common import make_rows, parser  # bench/common.py
from engines import APACHE, EMBEDDED, Engines  # bench/engines.py

SCHEMA = "id BIGINT NOT NULL, v STRING, amount DOUBLE"


class _Done(WriterCommitMessage):
    pass


class _CeilingWriter(DataSourceArrowWriter):
    """Consumes the Arrow batches Spark hands a Python writer, and nothing else."""

    def write(self, iterator):
        for _ in iterator:
            pass
        return _Done()


class CeilingSink(DataSource):
    """``format("bench_ceiling")``: what a Python Arrow writer costs before it writes anything."""

    @classmethod
    def name(cls):
        return "bench_ceiling"

    def writer(self, schema, overwrite):
        return _CeilingWriter()


def main() -> int:
    ap = parser(__doc__, rows=200_000, chunk=20_000, repeat=1, partitions=2, tablets=1, warmup=1,
                engines=f"{EMBEDDED},{APACHE}")
    args = ap.parse_args()
    engines = Engines("bench-sink-", tablets=args.tablets)
    try:
        spark = engines.start_spark("bench_sink")
        from fluss_spark.connector import register
        register(spark)
        data = make_rows(0, args.rows)
        df = spark.createDataFrame(data).repartition(args.partitions).cache()
        assert df.count() == args.rows
        for _ in range(args.warmup):      # starts the Python workers; not counted
            for engine in args.engines.split(","):
                run(engines, engine, "log", "sink", data, df, args, quiet=True)
        spark.dataSource.register(CeilingSink)
        df.write.format("bench_ceiling").mode("append").save()      # warm-up
        t0 = time.perf_counter()
        df.write.format("bench_ceiling").mode("append").save()
        ceiling = time.perf_counter() - t0
        print(f"ceiling (a Python Arrow writer that writes nothing): {ceiling:.2f}s "
              f"{args.rows / ceiling:,.0f} rows/s")
        results: dict[tuple[str, str], list[tuple[float, float]]] = {}
        for rep in range(args.repeat):
            for engine in args.engines.split(","):
                for kind in ("log", "pk"):
                    sides = ["client", "sink"] if rep % 2 == 0 else ["sink", "client"]
                    secs = {s: run(engines, engine, kind, s, data, df, args) for s in sides}
                    results.setdefault((engine, kind), []).append((secs["client"],
                                                                   secs["sink"]))
        print(f"\n{args.rows:,} rows, {args.partitions} Spark tasks, 2 buckets, "
              f"{args.repeat} repeat(s); rows/s (median), sink / client per repeat")
        print("| engine | table | client rows/s | sink rows/s | sink / client (min / median / "
              "max) |")
        print("|---|---|---|---|---|")
        for (engine, kind), runs in results.items():
            ratios = sorted(c / s for c, s in runs)
            client = statistics.median(args.rows / c for c, _ in runs)
            sink = statistics.median(args.rows / s for _, s in runs)
            print(f"| {engine} | {kind} | {client:,.0f} | {sink:,.0f} | {ratios[0]:.2f} / "
                  f"{statistics.median(ratios):.2f} / {ratios[-1]:.2f} |")
    finally:
        engines.stop()
    return 0


def run(engines: Engines, engine: str, kind: str, side: str, data, df, args,
        quiet: bool = False) -> float:
    """Seconds for ``side`` to write ``data`` into a fresh table of ``kind``; content checked."""
    from fluss_spark.client.backends import open_cluster
    from fluss_spark.testing.apache_fluss import arrow_schema
    servers = engines.servers[engine]
    table = f"bench.{side}_{kind}_{uuid.uuid4().hex[:8]}"
    pk = ["id"] if kind == "pk" else []
    with open_cluster(servers, engine=engine) as cluster:
        cluster.create_database("bench")
        cluster.create_table(table, arrow_schema(SCHEMA), primary_key=pk, buckets=2)
        if engine == APACHE:       # a fresh Apache Fluss table takes a moment to get leaders
            wait_for_leaders(cluster, table)
        t0 = time.perf_counter()
        if side == "client":
            writer = cluster.table_writer(table)
            write = writer.upsert if pk else writer.append
            for lo in range(0, args.rows, args.chunk):
                write(data.slice(lo, args.chunk))
            writer.flush()
            writer.close()
        else:
            (df.write.format("fluss").option("bootstrap.servers", servers)
             .option("table", table).mode("append").save())
        secs = time.perf_counter() - t0
        check(engines, servers, cluster, table, pk, args.rows)
    if not quiet:
        print(f"{engine:13} {kind:3} {side:6} {secs:6.2f}s {args.rows / secs:12,.0f} rows/s",
              flush=True)
    return secs


def wait_for_leaders(cluster, table: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            cluster.list_offsets(table)
            return
        except Exception:  # noqa: BLE001 - any error until the buckets have leaders
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def check(engines: Engines, servers: str, cluster, table: str, pk, rows: int) -> None:
    if not pk:
        got = sum(cluster.list_offsets(table).values())
    else:
        got = (engines.spark.read.format("fluss").option("bootstrap.servers", servers)
               .option("table", table).load().count())
    if got != rows:
        raise SystemExit(f"{table}: {got} rows, expected {rows}")


if __name__ == "__main__":
    sys.exit(main())
