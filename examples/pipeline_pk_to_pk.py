"""Stream a primary-key table, transformed, into another primary-key table, deletes included.

``spark.readStream.format("fluss")`` reads the source in ``full`` mode (its KV snapshot, then
its changelog); each row is transformed (amount in cents, a size class) and written with
``writeStream.format("fluss")`` into the target, which the rows' ``_change_type`` keeps in step
with the source: ``+I``/``+U`` upsert, ``-D`` deletes, ``-U`` is skipped. The checkpoint makes a
restart continue where the last run stopped; a replayed micro-batch upserts the same rows again,
so the target still ends equal to the transform of the source (docs/spark_sink.md). After the
query stops, both tables are read as batches and compared; one JSON line says the result.

By default the query runs for ``--seconds``; ``--available-now`` reads what is there and stops.

Run (the address from ``$FLUSS_BOOTSTRAP_SERVERS``, e.g. a cluster from ``fluss-spark cluster
start``)::

    export FLUSS_BOOTSTRAP_SERVERS=$(fluss-spark cluster start)
    fluss-spark table create demo.orders \\
        --schema "id BIGINT NOT NULL, paid BOOLEAN, amount DOUBLE" --primary-key id --buckets 2
    fluss-spark table create demo.order_sizes \\
        --schema "id BIGINT NOT NULL, cents BIGINT, size STRING" --primary-key id --buckets 2
    fluss-spark produce demo.orders --rows 1000 --updates 200 --deletes 50
    PYSPARK_PYTHON=$(which python) spark-submit --master "local[2]" \\
        examples/pipeline_pk_to_pk.py --source demo.orders --target demo.order_sizes \\
        --checkpoint /tmp/order-sizes-ckpt --available-now
"""

from __future__ import annotations

import argparse
import json
import os
import sys


def transform(df):
    """The pipeline's per-row transform: amount -> cents and a size class (no filter: a row
    that a filter dropped after an update would leave its old version in the target)."""
    from pyspark.sql import functions as F
    cents = F.round(F.col("amount") * 100).cast("bigint")
    return df.select("id", cents.alias("cents"),
                     F.when(F.col("amount") >= 500, "large").otherwise("small").alias("size"),
                     *[c for c in ("_change_type",) if c in df.columns])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bootstrap-servers", default=os.environ.get("FLUSS_BOOTSTRAP_SERVERS"),
                   required="FLUSS_BOOTSTRAP_SERVERS" not in os.environ)
    p.add_argument("--source", required=True, help="the PK table read, db.table")
    p.add_argument("--target", required=True, help="the PK table written, db.table")
    p.add_argument("--checkpoint", required=True, help="the query's checkpoint directory")
    p.add_argument("--seconds", type=float, default=30.0, help="stop after this long")
    p.add_argument("--available-now", action="store_true",
                   help="read what is there now, then stop")
    args = p.parse_args(argv)

    from pyspark.sql import SparkSession

    from fluss_spark.connector import register

    spark = SparkSession.builder.appName(f"{args.source} -> {args.target}").getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    register(spark)

    def fluss(reader, table):
        return reader.format("fluss").option("bootstrap.servers", args.bootstrap_servers) \
            .option("table", table)

    writer = (fluss(transform(fluss(spark.readStream, args.source).load()).writeStream,
                    args.target)
              .option("checkpointLocation", args.checkpoint))
    writer = (writer.trigger(availableNow=True) if args.available_now
              else writer.trigger(processingTime="1 second"))
    query = writer.start()
    query.awaitTermination(None if args.available_now else args.seconds)
    query.stop()
    if query.exception() is not None:
        print(f"error: the pipeline failed: {query.exception()}", file=sys.stderr)
        return 1

    expected = transform(fluss(spark.read, args.source).load().drop(
        "_change_type", "_log_offset", "_commit_timestamp"))
    got = fluss(spark.read, args.target).load().drop(
        "_change_type", "_log_offset", "_commit_timestamp")
    missing, extra = expected.exceptAll(got).count(), got.exceptAll(expected).count()
    # One JSON line a script can check: the target equals the transformed source.
    print("pipeline " + json.dumps({"source_rows": expected.count(), "target_rows": got.count(),
                                    "missing": missing, "extra": extra,
                                    "equal": missing == extra == 0}, sort_keys=True))
    spark.stop()
    return 0 if missing == extra == 0 else 2


if __name__ == "__main__":
    sys.exit(main())
