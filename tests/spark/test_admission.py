"""End to end: minOffsetsPerTrigger / maxTriggerDelay hold batches back; scan.split.max-rows cuts
a snapshot into several Spark partitions."""

from __future__ import annotations

import time

import pyarrow as pa
import pytest

from fluss_spark.local.ports import wait_until

pytestmark = pytest.mark.spark


class Batches:
    """A foreachBatch sink that keeps (rows, partitions, ids) per non-empty micro-batch."""

    def __init__(self, key: str):
        self.key = key
        self.seen: list[tuple[int, int, list]] = []

    def __call__(self, df, batch_id):
        ids = [r[0] for r in df.select(self.key).collect()]
        if ids:
            self.seen.append((len(ids), df.rdd.getNumPartitions(), ids))

    def rows(self) -> int:
        return sum(n for n, _, _ in self.seen)


def log_query(fluss_stream, table: str, sink: Batches, **options):
    """A query over a log table from its earliest offset, a trigger every 200 ms."""
    return (fluss_stream(table, **{"scan.startup.mode": "earliest", **options})
            .writeStream.foreachBatch(sink).trigger(processingTime="200 milliseconds").start())


def append(conn, table: str, start: int, n: int) -> None:
    conn.writer(table).append(pa.table({"k": pa.array(range(start, start + n), pa.int64()),
                                        "msg": ["m"] * n}))


def test_min_offsets_per_trigger_waits_for_enough_records(fluss_stream, conn, table_name):
    conn.admin().create_table(table_name, "k BIGINT, msg STRING", num_buckets=1)
    sink = Batches("k")
    q = log_query(fluss_stream, table_name, sink, minOffsetsPerTrigger=100, maxTriggerDelay="1h")
    try:
        append(conn, table_name, 0, 10)
        wait_until(lambda: q.lastProgress is not None, 60, "the first trigger")
        time.sleep(2.0)                         # ~10 more triggers
        assert sink.seen == []                  # 10 < minOffsetsPerTrigger: held back
        append(conn, table_name, 10, 95)
        wait_until(lambda: sink.rows() >= 105, 60, "the batch once 100 records are there")
        assert [n for n, _, _ in sink.seen] == [105]
        assert sorted(sink.seen[0][2]) == list(range(105))
    finally:
        q.stop()


def test_max_trigger_delay_lets_a_small_batch_through(fluss_stream, conn, table_name):
    conn.admin().create_table(table_name, "k BIGINT, msg STRING", num_buckets=2)
    sink = Batches("k")
    q = log_query(fluss_stream, table_name, sink, minOffsetsPerTrigger=1_000, maxTriggerDelay="2s")
    try:
        append(conn, table_name, 0, 10)
        wait_until(lambda: sink.rows() >= 10, 60, "the small batch after maxTriggerDelay")
        assert sorted(i for _, _, ids in sink.seen for i in ids) == list(range(10))
    finally:
        q.stop()


def test_split_max_rows_cuts_the_snapshot_into_partitions(fluss_stream, conn, table_name):
    admin = conn.admin()
    admin.create_table(table_name, "id BIGINT NOT NULL, v STRING", primary_key=["id"],
                       num_buckets=2)
    conn.writer(table_name).upsert(pa.table({"id": pa.array(range(4_000), pa.int64()),
                                             "v": [f"v{i}" for i in range(4_000)]}))
    snaps = admin.trigger_kv_snapshot(table_name)
    sink = Batches("id")
    q = (fluss_stream(table_name, **{"scan.split.max-rows": 500, "scan.batch.bytes": "16kb"})
         .writeStream.foreachBatch(sink).trigger(availableNow=True).start())
    try:
        q.awaitTermination(120)
    finally:
        q.stop()
    rows, partitions, ids = sink.seen[0]
    # Each bucket's ~2000 snapshot rows in splits of at most 500 rows: at least 4 per bucket.
    assert rows == 4_000 and partitions >= sum(-(-s.row_count // 500) for s in snaps.values())
    assert sorted(ids) == list(range(4_000))
