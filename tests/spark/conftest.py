"""One SparkSession (local[2]) for the whole Spark test session, with the fluss source
registered; a Spark standalone cluster with two workers, and clusters whose remote storage is
an S3 object store, for the tests that run executors apart from the driver."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

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


def build_wheel(out: Path) -> Path:
    root = Path(__file__).resolve().parents[2]
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out),
                    str(root)], check=True, capture_output=True)
    (wheel,) = out.glob("fluss_spark-*.whl")
    return wheel


@pytest.fixture(scope="session")
def standalone(tmp_path_factory):
    """``(StandaloneSpark, zip)``: a master and two workers; worker 0's Python has the
    project's wheel, worker 1's only the dependencies (its executors get ``fluss_spark`` from
    ``zip``, the ``--py-files`` of ``fluss-spark package``). A test that changes the workers
    puts them back."""
    from fluss_spark.testing.standalone import StandaloneSpark, node_python
    base = tmp_path_factory.mktemp("standalone")
    t0 = time.monotonic()
    with_wheel = node_python(base / "py-wheel", wheel=build_wheel(base / "dist"))
    deps_only = node_python(base / "py-deps")
    node_python(base / "py-no-msgpack", lacks=("msgpack",))
    cluster = StandaloneSpark(base, [with_wheel, deps_only]).start()
    subprocess.run([sys.executable, "-m", "fluss_spark.cli", "package", "--out",
                    str(base / "fluss_spark.zip")], check=True, capture_output=True)
    print(f"standalone cluster with two workers ready in {time.monotonic() - t0:.1f}s")
    yield cluster, base / "fluss_spark.zip"
    cluster.stop()


@pytest.fixture(scope="session")
def apache_fluss_s3(start_apache_fluss):
    """An Apache Fluss cluster (one tablet server, KV snapshots every second) whose
    remote.data.dir is in a local S3 object store (``apache_fluss_s3.object_store``)."""
    return start_apache_fluss({"kv.snapshot.interval": "1s"}, tablets=1, remote_storage="s3")


@pytest.fixture(scope="session")
def embedded_s3(zookeeper, tmp_path_factory):
    """An embedded cluster (two tablet servers) whose snapshot store is in a local S3 object
    store (``embedded_s3.object_store``)."""
    import uuid

    from fluss_spark.local.embedded import EmbeddedProcesses
    local = EmbeddedProcesses(tmp_path_factory.mktemp("embedded-s3"), tablets=2,
                              zookeeper=f"{zookeeper.address}/fluss-s3-{uuid.uuid4().hex[:12]}",
                              remote_storage="s3")
    local.start()
    yield local
    local.stop()
