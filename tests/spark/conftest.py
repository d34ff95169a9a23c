"""One SparkSession (local[2]) for the whole Spark test session, with the fluss source
registered."""

from __future__ import annotations

import os
import sys

import pytest


@pytest.fixture(scope="session")
def spark():
    # Python workers must run the interpreter that has fluss_spark installed.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from fluss_spark.connector import register
    from fluss_spark.local.iceberg_jars import spark_jars

    session = (SparkSession.builder.master("local[2]").appName("fluss-spark-tests")
               # Iceberg's Spark runtime: the tiering tests read the lake through it.
               .config("spark.jars", spark_jars())
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.session.timeZone", "UTC")
               .config("spark.sql.streaming.stopTimeout", "20s")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    yield session
    session.stop()


@pytest.fixture
def fluss_stream(spark, cluster):
    """``fluss_stream(table, **options)``: readStream.format("fluss") of a test-cluster table."""
    def make(table: str, **options):
        reader = (spark.readStream.format("fluss")
                  .option("bootstrap.servers", cluster.bootstrap_servers).option("table", table))
        for k, v in options.items():
            reader = reader.option(k, str(v))
        return reader.load()
    return make
