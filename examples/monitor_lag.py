"""Monitor a streaming read: print how far behind each Fluss table the query is, from its progress.

The fluss source reports the latest available offset with every micro-batch
(``reportLatestOffset``), so ``query.lastProgress`` holds both where the query is and where the
tables are. ``fluss_spark.connector.progress.table_lag`` turns that into snapshot rows +
changelog records still to read, per table. This example reads the given tables into the
``noop`` sink at ``--max-offsets-per-trigger`` per round and prints one ``lag {...}`` JSON line
per round, until every table's lag is 0 (``--until-caught-up``) or ``--seconds`` pass. The
bootstrap servers are ``--bootstrap-servers``, else ``$FLUSS_BOOTSTRAP_SERVERS``.

Run on ``demo.orders`` (made by ``examples/stream_pk_table.py``'s docstring) and a log table
``demo.events``::

    export FLUSS_BOOTSTRAP_SERVERS=$(fluss-spark cluster start)
    fluss-spark table create demo.events --schema "id BIGINT, kind STRING" --buckets 2
    fluss-spark produce demo.events --rows 2000
    PYSPARK_PYTHON=$(which python) spark-submit --master "local[2]" examples/monitor_lag.py \\
        --tables demo.orders,demo.events --max-offsets-per-trigger 500 --until-caught-up
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bootstrap-servers", default=os.environ.get("FLUSS_BOOTSTRAP_SERVERS"),
                   required="FLUSS_BOOTSTRAP_SERVERS" not in os.environ,
                   help="Fluss servers (default: $FLUSS_BOOTSTRAP_SERVERS, which "
                        "`fluss-spark cluster start` prints)")
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--tables", help="comma-separated db.table names")
    what.add_argument("--pattern", help="regex over db.table names")
    p.add_argument("--max-offsets-per-trigger", type=int, default=1_000)
    p.add_argument("--seconds", type=float, default=60.0, help="stop after this long")
    p.add_argument("--until-caught-up", action="store_true", help="stop once every lag is 0")
    p.add_argument("--checkpoint", default=None, help="checkpoint dir (default: a temp dir)")
    args = p.parse_args(argv)

    from pyspark.sql import SparkSession

    from fluss_spark.connector import register
    from fluss_spark.connector.progress import table_lag

    spark = SparkSession.builder.appName("fluss lag monitor").getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    register(spark)

    reader = (spark.readStream.format("fluss").option("bootstrap.servers", args.bootstrap_servers)
              .option("maxOffsetsPerTrigger", str(args.max_offsets_per_trigger)))
    reader = (reader.option("tables", args.tables) if args.tables
              else reader.option("table.pattern", args.pattern))
    checkpoint = args.checkpoint or tempfile.mkdtemp(prefix="fluss-lag-")
    query = (reader.load().writeStream.format("noop").option("checkpointLocation", checkpoint)
             .trigger(processingTime="500 milliseconds").start())
    deadline = time.time() + args.seconds
    last_batch = None
    code = 0
    try:
        while time.time() < deadline and query.isActive:
            progress = query.lastProgress
            if progress and progress["batchId"] != last_batch:
                last_batch = progress["batchId"]
                lag = table_lag(progress)
                print("lag " + json.dumps({"batch": last_batch, "rows": progress["numInputRows"],
                                           "lag": lag}, sort_keys=True), flush=True)
                if args.until_caught_up and lag and not any(lag.values()):
                    break
            time.sleep(0.2)
        if query.exception() is not None:
            print(f"error: {query.exception()}", file=sys.stderr)
            code = 1
    finally:
        query.stop()
        spark.stop()
    return code


if __name__ == "__main__":
    sys.exit(main())
