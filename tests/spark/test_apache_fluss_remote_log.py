"""A log table of 200,000 rows on a real Apache Fluss cluster, most of them only in remote storage:
read through the wire client from offset 0, and by format("fluss") in a rate-limited
``earliest`` stream, a ``timestamp`` start inside the remote part and a batch read, each exact
across the remote/local boundary; and a primary-key table whose changelog after its KV
snapshot starts in remote storage, read exactly in full mode.

One table is tiered once for the module (the wait is the cost); the wire client's read is
here too, so that it shares that table.
"""

from __future__ import annotations

import uuid
from contextlib import closing

import pyarrow as pa
import pytest
from pyspark.sql import functions as F

from fluss_spark.client.apache_fluss import ApacheFlussWireCluster
from fluss_spark.local.ports import wait_until
from fluss_spark.testing.apache_fluss import (PyFluss, local_segment_starts,
                                               remote_segment_files)
from tests.spark.test_apache_fluss import available_now

pytestmark = pytest.mark.spark

ROWS = 200_000
#: A record inside the remote part: where the timestamp start begins.
INSIDE = ROWS // 10


@pytest.fixture(scope="module")
def tiered(apache_fluss):
    """A one-bucket log table of ``ROWS`` rows (~60 bytes each, uncompressed) that fill about
    a dozen 1 MB segments; with ``table.log.tiered.local-segments=1`` the older ones move to
    remote storage and leave the tablet (the shared cluster's remote-log task runs every
    second). Row ``i`` is at offset ``i``."""
    name = f"rl.t_{uuid.uuid4().hex[:10]}"
    data = [(i, f"v{i}-{uuid.uuid4().hex}") for i in range(ROWS)]
    with PyFluss(apache_fluss.bootstrap_servers) as fluss:
        fluss.create_table(name, "id BIGINT, v STRING", buckets=1, properties={
            "table.log.tiered.local-segments": "1",
            "table.log.arrow.compression.type": "NONE"})
        for start in range(0, ROWS, 20_000):
            fluss.append(name, data[start:start + 20_000])
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
        ts = stamps[INSIDE]
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
        "scan.startup.mode": "earliest", "maxOffsetsPerTrigger": 50_000})
    assert [p["numInputRows"] for p in progress] == [50_000] * 4
    streamed = spark.read.parquet(str(out))
    assert rows_of(streamed) == [(i, v, "+A") for i, v in data]
    # A timestamp start inside the remote part: from the first record committed at or after it.
    stamps = [int(r[0]) for r in streamed.orderBy("_log_offset").select(
        (F.col("_commit_timestamp").cast("double") * 1000).cast("long")).collect()]
    first = stamps.index(stamps[INSIDE])
    later = tmp_path / "later"
    available_now(spark, servers, name, later, tmp_path / "later-ckpt", **{
        "scan.startup.mode": "timestamp", "scan.startup.timestamp": stamps[INSIDE]})
    assert rows_of(spark.read.parquet(str(later))) == [(i, v, "+A") for i, v in data[first:]]
    batch = spark.read.format("fluss").option("bootstrap.servers", servers) \
        .option("table", name).load()
    assert rows_of(batch) == [(i, v, "+A") for i, v in data]


def test_full_mode_reads_a_changelog_that_starts_in_remote_storage(spark, apache_fluss,
                                                                   tmp_path):
    """A one-bucket PK table read in full mode: batch 0 pins its KV snapshot and holds (its sink
    blocks) while 8,000 new keys (~300 bytes each) fill segments that Fluss moves to remote
    storage, so the changelog after the snapshot starts there. The output: the snapshot's rows
    once, then every changelog record from the snapshot's offset once, folding to the table's
    rows."""
    import threading

    from fluss_spark.connector.offsets import decode
    from fluss_spark.testing.streams import source_offsets
    servers = apache_fluss.bootstrap_servers
    name = f"rl.pk_{uuid.uuid4().hex[:10]}"
    pad = uuid.uuid4().hex * 8
    with PyFluss(servers) as fluss, \
            closing(ApacheFlussWireCluster.connect(servers, request_timeout_s=30)) as wire:
        fluss.create_table(name, "id BIGINT NOT NULL, v STRING", primary_key=["id"], buckets=1,
                           properties={"table.log.tiered.local-segments": "1",
                                       "table.log.arrow.compression.type": "NONE"})
        fluss.upsert(name, [(i, f"a{i}") for i in range(2000)])
        wait_until(lambda: wire.latest_kv_snapshots(name).get(0) is not None
                   and wire.latest_kv_snapshots(name)[0].log_offset >= 2000, 60,
                   "a KV snapshot covering the first rows")
        hold, held = threading.Event(), threading.Event()

        def sink(df, batch_id):
            df.write.mode("overwrite").parquet(str(tmp_path / "out" / f"batch={batch_id}"))
            if batch_id == 0:
                held.set()
                hold.wait(180)
        ckpt = tmp_path / "ckpt"
        q = (spark.readStream.format("fluss").option("bootstrap.servers", servers)
             .option("table", name).option("maxOffsetsPerTrigger", 1000).load()
             .writeStream.option("checkpointLocation", str(ckpt)).foreachBatch(sink).start())
        try:
            wait_until(lambda: held.is_set() or q.exception() is not None, 120, "batch 0")
            snapshot = decode(source_offsets(ckpt)[0]).tables[wire.get_table(name).table_id]
            (pos,) = snapshot.snapshot.values()
            rows, log_offset = pos.row_count, pos.log_offset
            for lo in range(0, 8000, 2000):
                fluss.upsert(name, [(i, f"b{i}-{pad}") for i in range(10_000 + lo,
                                                                       12_000 + lo)])
            fluss.upsert(name, [(1, "last")])
            fluss.delete(name, [(2,)])
            wait_until(lambda: min(local_segment_starts(apache_fluss, name) or [0])
                       > log_offset + 1000, 120,
                       "the changelog after the snapshot to be only in remote storage")
            hold.set()
            q.processAllAvailable()
            assert q.exception() is None, q.exception()
        finally:
            hold.set()
            q.stop()
        end = wire.list_offsets(name)[0]
        want = {r["id"]: r["v"] for r in fluss.rows(name, timeout_s=60)}
    out = spark.read.parquet(str(tmp_path / "out"))
    snap = out.where("_commit_timestamp IS NULL").select("id").collect()
    assert len(snap) == rows and len(set(snap)) == rows
    offsets = [r[0] for r in out.where("_commit_timestamp IS NOT NULL")
               .select("_log_offset").collect()]
    assert sorted(offsets) == list(range(log_offset, end))       # every record once
    folded = {}
    for r in out.orderBy("_log_offset", F.col("_commit_timestamp").isNotNull()).collect():
        if r["_change_type"] in ("+I", "+U"):
            folded[r["id"]] = r["v"]
        elif r["_change_type"] == "-D":
            folded.pop(r["id"], None)
    assert folded == want and folded[1] == "last" and 2 not in folded
