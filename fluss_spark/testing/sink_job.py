"""A spark-submit job for the sink's fault tests: writes rows ``[0, rows)`` (``id``, ``v`` =
``"v<id>"``) to a table with ``write.format("fluss")``, then prints one JSON line.

    spark-submit fluss_spark/testing/sink_job.py BOOTSTRAP TABLE ROWS [PARTITIONS]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

#: This file, for ``spark_submit_command``.
SCRIPT = Path(__file__).resolve()


def main(argv: list[str]) -> int:
    servers, table, rows = argv[0], argv[1], int(argv[2])
    partitions = int(argv[3]) if len(argv) > 3 else 2
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from fluss_spark.connector import register
    spark = SparkSession.builder.appName(f"sink job {table}").getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    df = spark.range(0, rows, numPartitions=partitions).select(
        "id", F.concat(F.lit("v"), F.col("id").cast("string")).alias("v"))
    (df.write.format("fluss").option("bootstrap.servers", servers).option("table", table)
     .mode("append").save())
    print("written " + json.dumps({"table": table, "rows": rows}), flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
