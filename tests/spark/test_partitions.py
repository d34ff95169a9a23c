"""Partitioned tables end to end on the embedded engine: a day-partitioned PK table read in full
mode under concurrent upserts and deletes while one partition appears and one is dropped; a
partitioned log table streamed exactly in earliest and latest modes while a partition appears,
and a batch read whose partition filter plans only that partition's buckets."""

from __future__ import annotations

import json
import threading
from collections import Counter

import pyarrow as pa
import pytest

from fluss_spark.connector.offsets import decode
from fluss_spark.connector.progress import partitions_gone
from fluss_spark.local.ports import wait_until
from fluss_spark.testing.logged_source import LoggedFlussDataSource
from fluss_spark.testing.streams import (LeaseWatcher, fold, leases_on, source_offsets,
                                         table_state)

pytestmark = pytest.mark.spark

DAYS = ("2026-11-24", "2026-11-25", "2026-11-26", "2026-11-27")
LOG_SCHEMA = "id BIGINT, dt STRING, v STRING"


PK_SCHEMA = "id BIGINT NOT NULL, dt STRING NOT NULL, v STRING"
ROWS = 1000


def test_full_mode_over_day_partitions_while_one_appears_and_one_is_dropped(
        spark, cluster, conn, table_name, tmp_path):
    admin = conn.admin()
    admin.create_table(table_name, PK_SCHEMA, primary_key=["id", "dt"], num_buckets=2,
                       partition_keys=["dt"])
    writer = conn.writer(table_name)
    for day in DAYS[:3]:
        admin.create_partition(table_name, {"dt": day})
        writer.upsert(pa.table({"id": pa.array(range(ROWS), pa.int64()), "dt": [day] * ROWS,
                                "v": [f"{day}/0"] * ROWS}))
        admin.trigger_kv_snapshot(table_name, partition=day)
    tid = admin.get_table(table_name).table_id
    live = [DAYS[1], DAYS[2]]            # the days the writer changes (DAYS[3] once it exists)
    stop = threading.Event()

    def churn():                          # concurrent upserts and deletes, a round every 50 ms
        i = 0
        while not stop.wait(0.05):
            i += 1
            for day in list(live):
                writer.upsert([{"id": k, "dt": day, "v": f"{day}/{i}"}
                               for k in range(i * 7, i * 7 + 20)])
                writer.delete([{"id": ROWS - i, "dt": day}])

    spark.dataSource.register(LoggedFlussDataSource)
    log_file = tmp_path / "driver.log"
    stream = (spark.readStream.format("fluss_logged")
              .option("bootstrap.servers", cluster.bootstrap_servers).option("table", table_name)
              .option("maxOffsetsPerTrigger", 800).option("failOnDataLoss", "false")
              .option("scan.partition.discovery.interval", "200ms")
              .option("log.file", str(log_file)).load())
    ckpt = tmp_path / "ckpt"
    with LeaseWatcher(admin, cluster.zookeeper_address) as watcher:
        q = (stream.writeStream.format("memory").queryName("pk_days")
             .option("checkpointLocation", str(ckpt))
             .trigger(processingTime="200 milliseconds").start())
        writing = threading.Thread(target=churn)
        writing.start()
        try:
            wait_until(lambda: q.lastProgress is not None, 120, "the first micro-batch")
            # Mid-snapshot: a new day with rows and a snapshot, and the first day dropped.
            admin.create_partition(table_name, {"dt": DAYS[3]})
            writer.upsert([{"id": k, "dt": DAYS[3], "v": "new"} for k in range(500)])
            admin.trigger_kv_snapshot(table_name, partition=DAYS[3])
            live.append(DAYS[3])
            admin.drop_partition(table_name, {"dt": DAYS[0]})
            wait_until(lambda: not leases_on(admin, table_name), 120,
                       "the snapshot phase to end and its lease to go")
            stop.set()
            writing.join(30)
            writer.upsert([{"id": 0, "dt": DAYS[1], "v": "last"}])
            q.processAllAvailable()
            progress = q.lastProgress
        finally:
            stop.set()
            q.stop()

    offsets = [decode(o) for o in source_offsets(ckpt)]
    lease_ids = {o.lease_id for o in offsets}
    assert len(lease_ids) == 1 and watcher.ids(tid) == lease_ids     # one lease, ever
    lease_id = next(iter(lease_ids))
    ids = {p.name: p.partition_id for p in admin.get_table(table_name).partitions}
    # Its ZooKeeper record pinned the snapshots of every partition of the start.
    pinned = {pid for t, pid in watcher.partitions_in_zookeeper[lease_id] if t == tid}
    assert set(offsets[0].tables[tid].partitions) <= pinned and len(pinned) >= 3
    # The new day joined the snapshot phase (others still had snapshot rows to read): with its
    # snapshot, pinned under the same lease, or from offset 0 where it had none yet.
    new = ids[DAYS[3]]
    joined = next(o.tables[tid].partitions for o in offsets if new in o.tables[tid].partitions)
    assert any(not p.snapshot_complete for pid, p in joined.items() if pid != new)
    if joined[new].snapshot:
        assert new in pinned
    else:
        assert set(joined[new].log.values()) == {0}
    assert not leases_on(admin, table_name)
    # The dropped day: one WARN naming it, counted in the progress.
    warnings = [line for line in log_file.read_text().splitlines() if f"dt={DAYS[0]}" in line]
    assert len(warnings) == 1 and "was dropped while the query read it" in warnings[0], warnings
    assert partitions_gone(progress)[table_name]["partitions"] == 1
    # Every live day folds to the table, as the client's own scanner reads it.
    result = fold(spark.table("pk_days").where(f"dt <> '{DAYS[0]}'"), key=("id", "dt"))
    assert result == table_state(conn, table_name)
    assert {dt for _, dt in result} == set(DAYS[1:])


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
        for q in queries.values():
            wait_until(lambda: DAYS[3] in json.dumps(q.lastProgress["sources"][0]["endOffset"]),
                       60, "the new partition to be found")
            q.processAllAvailable()

        def rows(mode):
            return spark.table(f"plog_{mode}").select("id", "dt", "_change_type").collect()
        assert keys(rows("earliest")) == keys(before + after)     # each exactly once
        assert keys(rows("latest")) == keys(after)
        assert {r["_change_type"] for r in rows("earliest")} == {"+A"}
    finally:
        for q in queries.values():
            q.stop()

    # A batch read: with pushdown, a filter on the partition column plans that partition's
    # buckets only (2 of 8); the output alone would not show it.
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    try:
        day = (spark.read.format("fluss").option("bootstrap.servers", cluster.bootstrap_servers)
               .option("table", table_name).load().where(f"dt = '{DAYS[3]}'"))
        assert day.rdd.getNumPartitions() == 2
        assert keys(r.asDict() for r in day.collect()) == keys(day_rows(range(500, 530), DAYS[3]))
    finally:
        spark.conf.unset("spark.sql.python.filterPushdown.enabled")


# -- kill -9 of the driver ------------------------------------------------------------------------
#: Source options of the first driver and of the restart (the same query).
KILL_OPTIONS = {"maxOffsetsPerTrigger": "1500", "scan.kv.read": "snapshot"}


# Extended: in CI the same kill points are covered by tests/unit/connector/test_partitions.py
# (test_a_driver_killed_inside_batch_0_or_mid_snapshot_restarts_exactly, against the fake
# cluster), and real pins per partition by the full-mode test above.
@pytest.mark.extended
@pytest.mark.parametrize("point", ["offsets/0", "mid-snapshot"])
def test_a_driver_killed_inside_batch_0_or_mid_snapshot_restarts_exactly(
        spark, cluster, conn, table_name, tmp_path, point):
    """A KV snapshot per partition every second, one retained: the restart must read exactly
    the snapshots offsets/0 names (pinned under its lease) and the changelog after them."""
    from fluss_spark.testing.spark_driver import Driver
    admin = conn.admin()
    admin.create_table(table_name, PK_SCHEMA, primary_key=["id", "dt"], num_buckets=2,
                       partition_keys=["dt"], properties={"kv.snapshot.interval": "1s",
                                                          "kv.snapshot.num-retained": "1"})
    writer = conn.writer(table_name)
    for day in DAYS[:3]:
        admin.create_partition(table_name, {"dt": day})
        writer.upsert([{"id": k, "dt": day, "v": "0"} for k in range(2000)])
        admin.trigger_kv_snapshot(table_name, partition=day)
    stop = threading.Event()

    def churn():
        i = 0
        while not stop.wait(0.1):
            i += 1
            for day in DAYS[:3]:
                writer.upsert([{"id": (i * 31 + k) % 2000, "dt": day, "v": str(i)}
                               for k in range(30)])
                writer.delete([{"id": (i * 17) % 2000, "dt": day}])
    writing = threading.Thread(target=churn)
    writing.start()
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    driver = Driver(tmp_path, cluster.bootstrap_servers, table_name, str(out), str(ckpt),
                    "2" if point == "mid-snapshot" else "-1", "0", options=KILL_OPTIONS)
    try:
        if point == "offsets/0":
            wait_until(lambda: (ckpt / "offsets" / "0").exists() or driver.proc.poll() is not None,
                       240, "offsets/0 of the first driver", interval_s=0.01)
        else:
            driver.wait_for("IN_BATCH 2", "the first driver inside batch 2", 240)
    finally:
        driver.kill()
    first = decode(source_offsets(ckpt)[0])
    tid = admin.get_table(table_name).table_id
    snapshots = {pos.name: pos.snapshot for pos in first.tables[tid].partitions.values()}

    def sink(df, batch_id):
        df.write.mode("overwrite").parquet(f"{out}/batch={batch_id}")
    reader = (spark.readStream.format("fluss")
              .option("bootstrap.servers", cluster.bootstrap_servers).option("table", table_name))
    for k, v in KILL_OPTIONS.items():
        reader = reader.option(k, v)
    q = reader.load().writeStream.option("checkpointLocation", str(ckpt)).foreachBatch(sink).start()
    try:
        wait_until(lambda: q.exception() is not None or not leases_on(admin, table_name), 240,
                   "the restarted snapshot phase to end")
        stop.set()
        writing.join(30)
        q.processAllAvailable()
        assert q.exception() is None, str(q.exception())[:3000]
    finally:
        stop.set()
        q.stop()
    assert {o["lease_id"] for o in source_offsets(ckpt)} == {first.lease_id}
    result = spark.read.parquet(str(out))
    snap = result.where("_commit_timestamp IS NULL").select("id", "dt").collect()
    # offsets/0's snapshots, each row exactly once (a replaced snapshot would differ in count).
    assert Counter(r["dt"] for r in snap) == {day: sum(s.row_count for s in snapshots[day].values())
                                             for day in DAYS[:3]}
    assert len(set(snap)) == len(snap)
    assert fold(result, key=("id", "dt")) == table_state(conn, table_name)
