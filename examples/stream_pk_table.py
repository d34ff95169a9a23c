"""Stream one primary-key table (KV snapshot, then changelog) to the console and to Parquet.

Two streaming queries read the same table with ``spark.readStream.format("fluss")`` in the
default ``full`` startup mode: the table's latest KV snapshot first (rows ``+I`` whose
``_log_offset`` is the snapshot's ``log_offset - 1``, the last changelog offset it includes, read
under a KV snapshot lease), then its changelog (``+I``, ``-U``, ``+U``, ``-D``) from the
snapshot's ``log_offset`` on. One query prints each micro-batch on the console; the other writes
Parquet with a checkpoint, so running the command again continues where it stopped (exactly
once). The bootstrap servers are ``--bootstrap-servers``, else ``$FLUSS_BOOTSTRAP_SERVERS``.

By default both queries stop after ``--seconds``; ``--available-now`` instead reads everything
available at start (in rounds of ``--max-offsets-per-trigger``) and stops.

Run against a local cluster (``cluster start`` prints its address; ``demo.orders`` is the table
the other examples read too). The snapshot phase reads the snapshot taken by ``snapshot
trigger``; the second ``produce`` (new values for keys 0-1099) is the changelog after it::

    export FLUSS_BOOTSTRAP_SERVERS=$(fluss-spark cluster start)
    fluss-spark table create demo.orders \\
        --schema "id BIGINT NOT NULL, paid BOOLEAN, amount DOUBLE" --primary-key id --buckets 2
    fluss-spark produce demo.orders --rows 1000 --updates 200 --deletes 50
    fluss-spark snapshot trigger demo.orders
    fluss-spark produce demo.orders --rows 1100 --seed 1
    PYSPARK_PYTHON=$(which python) spark-submit --master "local[2]" examples/stream_pk_table.py \\
        --table demo.orders --out /tmp/orders-parquet --checkpoint /tmp/orders-ckpt --available-now
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bootstrap-servers", default=os.environ.get("FLUSS_BOOTSTRAP_SERVERS"),
                   required="FLUSS_BOOTSTRAP_SERVERS" not in os.environ,
                   help="Fluss servers (default: $FLUSS_BOOTSTRAP_SERVERS, which "
                        "`fluss-spark cluster start` prints)")
    p.add_argument("--table", required=True, help="the PK table, db.table")
    p.add_argument("--out", required=True, help="Parquet output directory")
    p.add_argument("--checkpoint", required=True, help="checkpoint directory (one per query)")
    p.add_argument("--seconds", type=float, default=30.0, help="stop after this long")
    p.add_argument("--available-now", action="store_true",
                   help="read what is there now, then stop")
    p.add_argument("--max-offsets-per-trigger", type=int, default=10_000)
    args = p.parse_args(argv)

    from pyspark.sql import SparkSession

    from fluss_spark.connector import register
    from fluss_spark.connector.startup import start_one_by_one

    spark = SparkSession.builder.appName(f"stream {args.table}").getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    register(spark)

    def source():
        return (spark.readStream.format("fluss")
                .option("bootstrap.servers", args.bootstrap_servers)
                .option("table", args.table)
                .option("maxOffsetsPerTrigger", str(args.max_offsets_per_trigger))
                .load())

    def trigger(writer):
        return writer.trigger(availableNow=True) if args.available_now else \
            writer.trigger(processingTime="1 second")

    console = trigger(source().writeStream.format("console").option("truncate", "false")
                      .option("numRows", 20)
                      .option("checkpointLocation", os.path.join(args.checkpoint, "console")))
    to_parquet = trigger(source().writeStream.format("parquet").option("path", args.out)
                         .option("checkpointLocation", os.path.join(args.checkpoint, "parquet")))
    # One after another: two fluss queries starting at once can trip a Spark race
    # (fluss_spark.connector.startup).
    queries = start_one_by_one([console, to_parquet])
    deadline = time.time() + args.seconds
    for q in queries:
        left = None if args.available_now else max(0.0, deadline - time.time())
        q.awaitTermination(left)
    for q in queries:
        q.stop()
        if q.exception() is not None:
            print(f"error: query {q.name or q.id} failed: {q.exception()}", file=sys.stderr)
            return 1

    written = spark.read.parquet(args.out)
    by_type = {r["_change_type"]: r["count"] for r in
               written.groupBy("_change_type").count().collect()}
    # One JSON line a script can check: rows per change type in the Parquet output.
    print("parquet " + json.dumps({"rows": written.count(), "by_change_type": by_type},
                                  sort_keys=True))
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
