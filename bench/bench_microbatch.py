"""Fixed cost of one more micro-batch: format("fluss") against Spark's Kafka source.

Run::

    .venv/bin/python bench/bench_microbatch.py --rows 200000 --batches 50 --repeat 3

It starts, in a temporary directory, the embedded cluster (``EmbeddedProcesses``, ``--tablets``
tablet servers) and one Apache Kafka broker (KRaft, broker and controller in one JVM, jars from
Maven Central: ``bench/kafka_local.py``), and puts the same ``--rows`` rows in each: a log table
``id BIGINT, v STRING, amount DOUBLE`` of ``--buckets`` buckets, and a topic of as many
partitions whose records have the id as key and the row as JSON as value (written by Spark's
Kafka sink). One SparkSession (local[2]) reads them with:

- ``fluss``: ``readStream.format("fluss")``, ``scan.startup.mode=earliest``;
- ``kafka``: ``readStream.format("kafka")``, ``startingOffsets=earliest`` (the connector
  ``spark-sql-kafka-0-10`` of Spark 4.2.0, the newest on Maven Central, in pyspark 4.3.0);
- ``python-floor``: a minimal Python streaming data source with admission control that makes
  the same rows from the offsets (no I/O): what any source of the Python Data Source API pays.

Each source is read twice per round into the ``noop`` sink with ``trigger(availableNow=True)``:
with ``maxOffsetsPerTrigger`` = ``--rows`` (one micro-batch) and with ``--rows // --batches``
(about ``--batches`` micro-batches). The cost of one more micro-batch is
``(time_many - time_one) / (batches_many - batches_one)``, from wall time (``start()`` to
termination) and from the summed ``triggerExecution`` of the query progress. Every run checks
that the progress counted every row once. One warm-up round (not counted), then ``--repeat``
rounds, the sources' order rotating; the ratios fluss / kafka are paired round by round. Also
printed: the mean of each ``durationMs`` phase per micro-batch of the many-batch runs (median of
the rounds), to show where a micro-batch's time goes.
"""

from __future__ import annotations

import os
import shutil
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

from pyspark.sql.datasource import (DataSource, DataSourceStreamReader,  # noqa: E402
                                    InputPartition)
from pyspark.sql.streaming.datasource import (ReadAllAvailable, ReadMaxRows,  # noqa: E402
                                              SupportsTriggerAvailableNow)

from fluss_spark.client import FlussConnection  # noqa: E402
from fluss_spark.connector import register  # noqa: E402
from fluss_spark.local.embedded import EmbeddedProcesses  # noqa: E402

from common import available_now, local_spark, make_rows, parser  # noqa: E402
from kafka_local import KafkaBroker, connector_jars  # noqa: E402 - bench/kafka_local.py

SCHEMA = "id BIGINT, v STRING, amount DOUBLE"
TABLE = "bench.events"
TOPIC = "bench-events"
SOURCES = ("fluss", "kafka", "python-floor")
PHASES = ("latestOffset", "queryPlanning", "getBatch", "walCommit", "addBatch", "commitOffsets")


class _Range(InputPartition):
    def __init__(self, lo: int, hi: int):
        self.lo, self.hi = lo, hi


class FloorSource(DataSource):
    """Rows ``[0, rows)`` made from the offsets; ``maxOffsetsPerTrigger`` bounds a batch."""

    @classmethod
    def name(cls):
        return "bench_floor"

    def schema(self):
        return SCHEMA

    def streamReader(self, schema):
        limit = self.options.get("maxOffsetsPerTrigger")
        return _FloorReader(int(self.options["rows"]), int(self.options["partitions"]),
                            int(limit) if limit else None)


class _FloorReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, rows: int, parts: int, max_rows: int | None):
        self.rows, self.parts, self.max_rows = rows, parts, max_rows

    def initialOffset(self):
        return {"row": 0}

    def getDefaultReadLimit(self):
        return ReadMaxRows(self.max_rows) if self.max_rows else ReadAllAvailable()

    def latestOffset(self, start, limit):
        if isinstance(limit, ReadMaxRows):
            return {"row": min(self.rows, start["row"] + limit.max_rows)}
        return {"row": self.rows}

    def prepareForTriggerAvailableNow(self):
        pass

    def partitions(self, start, end):
        lo, hi = start["row"], end["row"]
        step = -(-(hi - lo) // self.parts) if hi > lo else 0
        return [_Range(a, min(hi, a + step)) for a in range(lo, hi, step)] if step else []

    def read(self, partition):
        yield from make_rows(partition.lo, partition.hi).to_batches()

    def commit(self, end):
        pass


def load_fluss(servers: str, rows: int, buckets: int, chunk: int = 100_000) -> None:
    with FlussConnection(servers) as conn:
        conn.admin().create_table(TABLE, SCHEMA, num_buckets=buckets)
        writer = conn.writer(TABLE)
        for lo in range(0, rows, chunk):
            writer.append(make_rows(lo, min(rows, lo + chunk)))


def load_kafka(spark, bootstrap: str, rows: int) -> int:
    """The rows into the topic (created on first write with the broker's partition count);
    returns the records the topic holds, read back as a batch."""
    (spark.range(rows)
     .selectExpr("CAST(id AS STRING) AS key",
                 "to_json(named_struct('id', id, 'v', concat('value-', CAST(id AS STRING)), "
                 "'amount', id * 0.5)) AS value")
     .write.format("kafka").option("kafka.bootstrap.servers", bootstrap)
     .option("topic", TOPIC).save())
    return (spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", TOPIC).load().count())


def reader(spark, source: str, max_rows: int, servers: str, bootstrap: str, rows: int,
           partitions: int):
    if source == "fluss":
        return (spark.readStream.format("fluss").option("bootstrap.servers", servers)
                .option("table", TABLE).option("scan.startup.mode", "earliest")
                .option("maxOffsetsPerTrigger", str(max_rows)).load())
    if source == "kafka":
        return (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
                .option("subscribe", TOPIC).option("startingOffsets", "earliest")
                .option("maxOffsetsPerTrigger", str(max_rows)).load())
    return (spark.readStream.format("bench_floor").option("rows", str(rows))
            .option("partitions", str(partitions))
            .option("maxOffsetsPerTrigger", str(max_rows)).load())


def run(df, checkpoint: Path, rows: int, what: str) -> dict:
    """One AvailableNow query into noop: wall s, summed triggerExecution s, micro-batches that
    read rows, and the per-phase ms summed over them."""
    q, wall = available_now(df, checkpoint, what=what)
    progress = q.recentProgress
    seen = sum(p["numInputRows"] for p in progress)
    if seen != rows:
        raise RuntimeError(f"{what}: the query progress counted {seen} rows, expected {rows}")
    busy = [p for p in progress if p["numInputRows"]]
    return {"wall": wall,
            "trigger": sum(p["durationMs"]["triggerExecution"] for p in progress) / 1000.0,
            "batches": len(busy), "all_batches": len(progress),
            "phases": {k: sum(p["durationMs"].get(k, 0) for p in busy) for k in PHASES}}


def spread(values: list[float], fmt: str) -> str:
    return "/".join(format(v, fmt) for v in (min(values), statistics.median(values), max(values)))


def _raise_on_sigterm(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv=None) -> int:
    ap = parser(__doc__, rows=200_000, tablets=1, repeat=3)
    ap.add_argument("--batches", type=int, default=50, help="micro-batches of the 'many' runs")
    ap.add_argument("--buckets", type=int, default=2, help="buckets = Kafka partitions")
    args = ap.parse_args(argv)
    if args.batches < 2 or args.rows < args.batches:
        ap.error("need --batches >= 2 and --rows >= --batches")
    signal.signal(signal.SIGTERM, _raise_on_sigterm)  # so that the finally below stops all

    work = Path(tempfile.mkdtemp(prefix="bench-microbatch-"))
    cluster = broker = spark = None
    try:
        t0 = time.perf_counter()
        cluster = EmbeddedProcesses(work / "cluster", tablets=args.tablets).start()
        t1 = time.perf_counter()
        broker = KafkaBroker(work / "kafka", partitions=args.buckets).start()
        t2 = time.perf_counter()
        print(f"started the embedded cluster in {t1 - t0:.1f}s, Kafka {broker.bootstrap} in "
              f"{t2 - t1:.1f}s")
        servers = cluster.bootstrap_servers
        load_fluss(servers, args.rows, args.buckets)

        spark = local_spark("bench-microbatch", {
            "spark.jars": ",".join(str(j) for j in connector_jars()),
            "spark.sql.streaming.numRecentProgressUpdates": str(max(100, 4 * args.batches))})
        register(spark)
        spark.dataSource.register(FloorSource)
        held = load_kafka(spark, broker.bootstrap, args.rows)
        if held != args.rows:
            raise RuntimeError(f"the topic holds {held} records, expected {args.rows}")
        print(f"wrote {args.rows:,} rows into the log table ({args.buckets} buckets) and the "
              f"topic ({args.buckets} partitions) in {time.perf_counter() - t2:.1f}s")

        limits = {"one": args.rows, "many": args.rows // args.batches}
        results: dict[tuple[str, str], list[dict]] = {}
        for i in range(-1, args.repeat):  # round -1 warms up and is not counted
            k = max(i, 0)
            order = SOURCES[k % 3:] + SOURCES[:k % 3]
            for source in order:
                kinds = ("one", "many") if i % 2 == 0 else ("many", "one")
                for kind in kinds:
                    df = reader(spark, source, limits[kind], servers, broker.bootstrap,
                                args.rows, args.buckets)
                    r = run(df, work / "ck" / f"{source}-{kind}-{i}", args.rows,
                            f"{source} {kind} round {i}")
                    if i >= 0:
                        results.setdefault((source, kind), []).append(r)
                    print(f"round {i}: {source:<13}{kind:<5} {r['batches']:>3} batches "
                          f"(progress entries {r['all_batches']}), wall {r['wall']:.2f}s, "
                          f"triggerExecution {r['trigger']:.2f}s"
                          + ("  (warm-up)" if i < 0 else ""))

        per_batch: dict[tuple[str, str], list[float]] = {}
        for source in SOURCES:
            for i in range(args.repeat):
                one, many = results[(source, "one")][i], results[(source, "many")][i]
                extra = many["batches"] - one["batches"]
                for m in ("wall", "trigger"):
                    per_batch.setdefault((source, m), []).append((many[m] - one[m]) / extra)

        print(f"\n{args.rows:,} rows, {args.buckets} buckets/partitions, local[2], noop sink, "
              f"AvailableNow; min/median/max of {args.repeat} rounds")
        print(f"{'source':<14}{'batches':>10}{'one: wall s':>18}{'many: wall s':>18}"
              f"{'per extra batch:':>20}{'wall ms':>16}{'trigger ms':>16}")
        for source in SOURCES:
            one, many = results[(source, "one")], results[(source, "many")]
            batches = f"{one[0]['batches']}/{many[0]['batches']}"
            print(f"{source:<14}{batches:>10}{spread([r['wall'] for r in one], '.2f'):>18}"
                  f"{spread([r['wall'] for r in many], '.2f'):>18}{'':>20}"
                  f"{spread([1000 * v for v in per_batch[(source, 'wall')]], '.0f'):>16}"
                  f"{spread([1000 * v for v in per_batch[(source, 'trigger')]], '.0f'):>16}")
        print("\nratios per extra batch, paired by round (min/median/max)")
        for other in ("kafka", "python-floor"):
            for m in ("wall", "trigger"):
                ratios = [f / o for f, o in zip(per_batch[("fluss", m)], per_batch[(other, m)])]
                print(f"  fluss / {other:<13} {m:<8} {spread(ratios, '.2f')}")

        print("\nmean ms per micro-batch of the many-batch runs, by phase (median of rounds; "
              "triggerExecution holds the others)")
        print(f"{'source':<14}" + "".join(f"{p:>15}" for p in ("triggerExecution",) + PHASES))
        for source in SOURCES:
            many = results[(source, "many")]
            cells = [statistics.median(1000 * r["trigger"] / r["all_batches"] for r in many)]
            cells += [statistics.median(r["phases"][p] / r["batches"] for r in many)
                      for p in PHASES]
            print(f"{source:<14}" + "".join(f"{c:>15.0f}" for c in cells))
        return 0
    finally:
        if spark is not None:
            spark.stop()
        for name, proc in (("Kafka", broker), ("the embedded cluster", cluster)):
            if proc is not None:
                try:
                    proc.stop()
                except Exception as exc:  # noqa: BLE001 - keep stopping the others
                    print(f"stopping {name}: {exc}", file=sys.stderr)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
