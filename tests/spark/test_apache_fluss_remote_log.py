"""A log table of a real Apache Fluss cluster whose older records are only in remote storage:
read through the wire client from offset 0, and by format("fluss") in a rate-limited
``earliest`` stream, a ``timestamp`` start inside the remote part and a batch read, each exact
across the remote/local boundary.

One table is tiered once for the module (the wait is the cost); the wire client's read is
here too, so that it shares that table.
"""

from __future__ import annotations

import uuid

import pyarrow as pa
import pytest
from pyspark.sql import functions as F

from fluss_spark.client.apache_fluss import ApacheFlussWireCluster
from fluss_spark.local.ports import wait_until
from fluss_spark.testing.apache_fluss import (PyFluss, local_segment_starts,
                                               remote_segment_files)
from tests.spark.test_apache_fluss import available_now

pytestmark = pytest.mark.spark

ROWS = 3000


@pytest.fixture(scope="module")
def tiered(apache_fluss):
    """A one-bucket log table of ``ROWS`` rows (~1 KB each, uncompressed) that fill three 1 MB
    segments; with ``table.log.tiered.local-segments=1`` the older ones move to remote storage
    and leave the tablet (the shared cluster's remote-log task runs every second). Row ``i`` is
    at offset ``i``."""
    name = f"rl.t_{uuid.uuid4().hex[:10]}"
    data = [(i, f"v{i}-{uuid.uuid4().hex * 32}") for i in range(ROWS)]
    with PyFluss(apache_fluss.bootstrap_servers) as fluss:
        fluss.create_table(name, "id BIGINT, v STRING", buckets=1, properties={
            "table.log.tiered.local-segments": "1",
            "table.log.arrow.compression.type": "NONE"})
        for start in range(0, ROWS, 500):
            fluss.append(name, data[start:start + 500])
    wait_until(lambda: remote_segment_files(apache_fluss, name)
               and min(local_segment_starts(apache_fluss, name) or [0]) > ROWS // 2, 120,
               "most of the log to be only in remote storage")
    return name, data


def test_wire_client_reads_remote_then_local_records_exactly(apache_fluss, tiered):
    name, data = tiered
    local_start = min(local_segment_starts(apache_fluss, name))
    wire = ApacheFlussWireCluster.connect(apache_fluss.bootstrap_servers, request_timeout_s=30)
    try:
        assert wire.list_offsets(name, spec="earliest") == {0: 0}
        got = pa.Table.from_batches(list(wire.read_log(name, 0, 0, ROWS)))
        assert got.column("id").to_pylist() == [i for i, _ in data]
        assert got.column("v").to_pylist() == [v for _, v in data]
        assert got.column("_log_offset").to_pylist() == list(range(ROWS))
        # Resumed inside a remote segment, and across the boundary with a projection.
        mid = pa.Table.from_batches(list(wire.read_log(name, 0, 7, local_start + 5, ["id"])))
        assert mid.column("id").to_pylist() == list(range(7, local_start + 5))
        # A timestamp inside the remote part finds the first record written at or after it.
        stamps = got.column("_commit_timestamp").cast(pa.int64()).to_pylist()
        ts = stamps[600]
        first = stamps.index(ts)
        assert wire.list_offsets(name, spec="timestamp", timestamp_ms=ts) == {0: first}
    finally:
        wire.close()


def test_stream_from_earliest_and_batch_read_cross_remote_storage(spark, apache_fluss, tiered,
                                                                  tmp_path):
    name, data = tiered
    servers = apache_fluss.bootstrap_servers

    def rows_of(df) -> list[tuple]:
        # Row for row, so a record read twice would show as a duplicate.
        return sorted(tuple(r) for r in df.select("id", "v", "_change_type").collect())

    out = tmp_path / "out"
    progress = available_now(spark, servers, name, out, tmp_path / "ckpt", **{
        "scan.startup.mode": "earliest", "maxOffsetsPerTrigger": 1500})
    assert [p["numInputRows"] for p in progress] == [1500, 1500]
    streamed = spark.read.parquet(str(out))
    assert rows_of(streamed) == [(i, v, "+A") for i, v in data]
    # A timestamp start inside the remote part: from the first record committed at or after it.
    stamps = [int(r[0]) for r in streamed.orderBy("_log_offset").select(
        (F.col("_commit_timestamp").cast("double") * 1000).cast("long")).collect()]
    first = stamps.index(stamps[600])
    later = tmp_path / "later"
    available_now(spark, servers, name, later, tmp_path / "later-ckpt", **{
        "scan.startup.mode": "timestamp", "scan.startup.timestamp": stamps[600]})
    assert rows_of(spark.read.parquet(str(later))) == [(i, v, "+A") for i, v in data[first:]]
    batch = spark.read.format("fluss").option("bootstrap.servers", servers) \
        .option("table", name).load()
    assert rows_of(batch) == [(i, v, "+A") for i, v in data]
