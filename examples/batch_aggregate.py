"""Batch-read a Fluss table and aggregate it: ``spark.read.format("fluss")`` + ``groupBy``.

A batch read of a primary-key table is the table as of one consistent point per bucket (the
latest KV snapshot plus the changelog up to the latest offset, folded by key, deletes applied);
a log table reads all its records. Either way it takes no lease that outlives the job. The
example groups the rows by ``--group-by`` and prints, per group, the row count and the sum of
``--sum`` (if given): once as a Spark table, once as JSON lines (``agg {...}``). The bootstrap
servers are ``--bootstrap-servers``, else ``$FLUSS_BOOTSTRAP_SERVERS``.

Run on the ``demo.orders`` table of ``examples/stream_pk_table.py`` (its docstring creates and
fills it): the orders paid and not paid, with their amounts::

    export FLUSS_BOOTSTRAP_SERVERS=$(fluss-spark cluster start)
    PYSPARK_PYTHON=$(which python) spark-submit --master "local[2]" examples/batch_aggregate.py \\
        --table demo.orders --group-by paid --sum amount

Without fluss_spark installed on the executors, ship it as a zip::

    fluss-spark package --out dist/fluss_spark.zip
    PYSPARK_PYTHON=$(which python) spark-submit --master "local[2]" \\
        --py-files dist/fluss_spark.zip examples/batch_aggregate.py \\
        --table demo.orders --group-by paid --sum amount
"""

from __future__ import annotations

import argparse
import json
import os
import sys


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bootstrap-servers", default=os.environ.get("FLUSS_BOOTSTRAP_SERVERS"),
                   required="FLUSS_BOOTSTRAP_SERVERS" not in os.environ,
                   help="Fluss servers (default: $FLUSS_BOOTSTRAP_SERVERS, which "
                        "`fluss-spark cluster start` prints)")
    p.add_argument("--table", required=True, help="db.table")
    p.add_argument("--group-by", required=True, help="column to group by")
    p.add_argument("--sum", default=None, help="numeric column to sum per group")
    args = p.parse_args(argv)

    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from fluss_spark.connector import register

    spark = SparkSession.builder.appName(f"aggregate {args.table}").getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    register(spark)

    df = (spark.read.format("fluss").option("bootstrap.servers", args.bootstrap_servers)
          .option("table", args.table).load())
    aggs = [F.count(F.lit(1)).alias("rows")]
    if args.sum:
        aggs.append(F.sum(args.sum).alias(f"sum_{args.sum}"))
    result = df.groupBy(args.group_by).agg(*aggs).orderBy(args.group_by)
    result.show(50, truncate=False)
    for row in result.collect():
        print("agg " + json.dumps(row.asDict(), sort_keys=True, default=str))
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
