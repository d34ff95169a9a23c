"""Partitioned tables end to end on the embedded engine: a partitioned log table streamed exactly
in earliest and latest modes while a partition appears, and a batch read whose partition filter
plans only that partition's buckets."""

from __future__ import annotations

from collections import Counter

import pytest

from fluss_spark.local.ports import wait_until

pytestmark = pytest.mark.spark

DAYS = ("2026-11-24", "2026-11-25", "2026-11-26", "2026-11-27")
LOG_SCHEMA = "id BIGINT, dt STRING, v STRING"


def day_rows(ids, day):
    return [{"id": i, "dt": day, "v": f"{day}/{i}"} for i in ids]


def keys(rows):
    return Counter((r["id"], r["dt"]) for r in rows)


def test_a_partitioned_log_table_streams_exactly_in_earliest_and_latest_modes(
        spark, cluster, fluss_stream, conn, table_name, tmp_path):
    admin = conn.admin()
    # Bucketed by id: every partition's rows reach both buckets, so each has a split to plan.
    admin.create_table(table_name, LOG_SCHEMA, num_buckets=2, partition_keys=["dt"],
                       bucket_key=["id"])
    for day in DAYS[:3]:
        admin.create_partition(table_name, {"dt": day})
    writer = conn.writer(table_name)
    before = [r for i, day in enumerate(DAYS[:3]) for r in day_rows(range(i * 100, i * 100 + 40),
                                                                      day)]
    writer.append(before)
    options = {"scan.partition.discovery.interval": "100ms", "maxOffsetsPerTrigger": 50}
    queries = {mode: (fluss_stream(table_name, **{"scan.startup.mode": mode}, **options)
                      .writeStream.format("memory").queryName(f"plog_{mode}")
                      .option("checkpointLocation", str(tmp_path / mode))
                      .trigger(processingTime="200 milliseconds").start())
               for mode in ("earliest", "latest")}
    try:
        for q in queries.values():
            q.processAllAvailable()
        # Every batch obeyed the limit over all partitions' buckets.
        assert max(p["numInputRows"] for p in queries["earliest"].recentProgress) <= 50
        # A new partition while the queries run (read from its first record), and more records
        # in an old one.
        admin.create_partition(table_name, {"dt": DAYS[3]})
        after = day_rows(range(500, 530), DAYS[3]) + day_rows(range(600, 610), DAYS[0])
        writer.append(after)

        def rows(mode):
            return spark.table(f"plog_{mode}").select("id", "dt", "_change_type").collect()
        wait_until(lambda: len(rows("earliest")) >= len(before) + len(after)
                   and len(rows("latest")) >= len(after), 60, "both queries to read the rows")
        for q in queries.values():
            q.processAllAvailable()
        assert keys(rows("earliest")) == keys(before + after)     # each exactly once
        assert keys(rows("latest")) == keys(after)
        assert {r["_change_type"] for r in rows("earliest")} == {"+A"}
    finally:
        for q in queries.values():
            q.stop()

    # A batch read: with pushdown, a filter on the partition column plans that partition's
    # buckets only; the output alone would not show it.
    def read():
        return (spark.read.format("fluss").option("bootstrap.servers", cluster.bootstrap_servers)
                .option("table", table_name).load())
    planned_all = read().where(f"dt = '{DAYS[3]}'").rdd.getNumPartitions()
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    try:
        day = read().where(f"dt = '{DAYS[3]}'")
        assert day.rdd.getNumPartitions() == 2 < planned_all == 2 * len(DAYS)
        assert keys(r.asDict() for r in day.collect()) == keys(day_rows(range(500, 530), DAYS[3]))
        some = read().where(f"dt IN ('{DAYS[0]}', '{DAYS[1]}') AND id >= 40")
        assert some.rdd.getNumPartitions() == 4
        assert keys(r.asDict() for r in some.collect()) == keys(
            [r for r in before + after if r["dt"] in DAYS[:2] and r["id"] >= 40])
    finally:
        spark.conf.unset("spark.sql.python.filterPushdown.enabled")
