"""Partitioned tables end to end: on the embedded engine, a day-partitioned PK table read in full
mode under concurrent upserts and deletes while one partition appears and one is dropped; a
partitioned log table streamed exactly in earliest and latest modes while a partition appears,
and a batch read whose partition filter plans only that partition's buckets. On Apache Fluss
0.9.1 (the tests at the end), the same full-mode scenario, and an auto-partitioned log table in
earliest and latest modes while Fluss expires one of its partitions."""

from __future__ import annotations

import datetime
import json
import threading
import uuid
from collections import Counter
from contextlib import closing

import pyarrow as pa
import pytest

from fluss_spark.client.apache_fluss import ApacheFlussWireCluster
from fluss_spark.connector.offsets import decode
from fluss_spark.connector.progress import partitions_gone
from fluss_spark.local.ports import wait_until
from fluss_spark.metadata.lease_watch import FlussLeases
from fluss_spark.testing.apache_fluss import PyFluss
from fluss_spark.testing.logged_source import LoggedFlussDataSource
from fluss_spark.testing.streams import (LeaseWatcher, fold, leases_on, source_offsets,
                                         table_state)

pytestmark = pytest.mark.spark

DAYS = ("2026-11-24", "2026-11-25", "2026-11-26", "2026-11-27")
LOG_SCHEMA = "id BIGINT, dt STRING, v STRING"


PK_SCHEMA = "id BIGINT NOT NULL, dt STRING NOT NULL, v STRING"
ROWS = 1000


def full_stream(spark, servers: str, table: str, query: str, tmp_path, max_offsets: int):
    """A full-mode query of ``table`` into the memory table ``query`` (failOnDataLoss=false,
    partitions looked for every 200 ms); checkpoint ``tmp_path/ckpt``, warnings in
    ``tmp_path/driver.log``."""
    spark.dataSource.register(LoggedFlussDataSource)
    stream = (spark.readStream.format("fluss_logged").option("bootstrap.servers", servers)
              .option("table", table).option("maxOffsetsPerTrigger", max_offsets)
              .option("failOnDataLoss", "false")
              .option("scan.partition.discovery.interval", "200ms")
              .option("log.file", str(tmp_path / "driver.log")).load())
    return to_memory(stream, query, tmp_path / "ckpt")


def assert_dropped_once(log_file, day: str, progress: dict, table: str) -> None:
    """One WARN names the dropped ``day``, and the progress counts one partition gone."""
    warnings = [line for line in log_file.read_text().splitlines() if f"dt={day}" in line]
    assert len(warnings) == 1 and "was dropped while the query read it" in warnings[0], warnings
    assert partitions_gone(progress)[table]["partitions"] == 1
#: What Fluss's coordinator logs at each auto-partition check.
AUTO_PARTITION_CHECK = "Start auto partitioning for"


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

    log_file, ckpt = tmp_path / "driver.log", tmp_path / "ckpt"
    with LeaseWatcher(admin, cluster.zookeeper_address) as watcher:
        q = full_stream(spark, cluster.bootstrap_servers, table_name, "pk_days", tmp_path, 800)
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
    assert_dropped_once(log_file, DAYS[0], progress, table_name)
    # Every live day folds to the table, as the client's own scanner reads it.
    result = fold(spark.table("pk_days").where(f"dt <> '{DAYS[0]}'"), key=("id", "dt"))
    assert result == table_state(conn, table_name)
    assert {dt for _, dt in result} == set(DAYS[1:])


def day_rows(ids, day):
    return [{"id": i, "dt": day, "v": f"{day}/{i}"} for i in ids]


def keys(rows):
    return Counter((r["id"], r["dt"]) for r in rows)


def first_rows(days) -> list[dict]:
    """40 rows in each of ``days``: ids 0-39 in the first, 100-139 in the second, ..."""
    return [r for i, day in enumerate(days) for r in day_rows(range(i * 100, i * 100 + 40), day)]


def to_memory(df, query: str, checkpoint):
    """The stream ``df`` into the memory table ``query``, a trigger every 200 ms."""
    return (df.writeStream.format("memory").queryName(query)
            .option("checkpointLocation", str(checkpoint))
            .trigger(processingTime="200 milliseconds").start())


def test_a_partitioned_log_table_streams_exactly_in_earliest_and_latest_modes(
        spark, cluster, fluss_stream, conn, table_name, tmp_path):
    admin = conn.admin()
    # Bucketed by id: every partition's rows reach both buckets, so each has a split to plan.
    admin.create_table(table_name, LOG_SCHEMA, num_buckets=2, partition_keys=["dt"],
                       bucket_key=["id"])
    for day in DAYS[:3]:
        admin.create_partition(table_name, {"dt": day})
    writer = conn.writer(table_name)
    before = first_rows(DAYS[:3])
    writer.append(before)
    options = {"scan.partition.discovery.interval": "100ms", "maxOffsetsPerTrigger": 50}
    queries = {mode: to_memory(fluss_stream(table_name, **{"scan.startup.mode": mode}, **options),
                               f"plog_{mode}", tmp_path / mode)
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


# -- the same on a real Apache Fluss 0.9.1 cluster -------------------------------------------------
# Written with pyfluss (the official client); the expected table is read back with it too. The
# lease is watched in Fluss's own ZooKeeper (FlussLeases: its record and the per-table pin files
# it names).

def fluss_table(prefix: str) -> str:
    return f"{prefix}.t_{uuid.uuid4().hex[:10]}"


def fluss_state(fluss, name: str) -> dict:
    """``{(id, dt): v}`` of every partition, as pyfluss reads the changelog."""
    return {(r["id"], r["dt"]): r["v"] for r in fluss.rows(name, timeout_s=120)}


def test_full_mode_over_day_partitions_on_apache_fluss(spark, apache_fluss, tmp_path):
    servers = apache_fluss.bootstrap_servers
    name, rows = fluss_table("pdays"), 300
    with PyFluss(servers) as fluss, closing(ApacheFlussWireCluster.connect(
            servers, request_timeout_s=30)) as wire, closing(FlussLeases(apache_fluss)) as leases:
        tid = fluss.create_table(name, PK_SCHEMA, primary_key=["id", "dt"], buckets=2,
                                 partition_keys=["dt"])
        for day in DAYS[:3]:
            fluss.create_partition(name, {"dt": day})
            fluss.upsert(name, [(k, day, f"{day}/0") for k in range(rows)])
        for day in DAYS[:3]:        # a KV snapshot every 5 s on the shared cluster
            wait_until(lambda: len(wire.latest_kv_snapshots(name, partition=day)) == 2, 60,
                       f"the KV snapshots of {day}")
        live = [DAYS[1], DAYS[2]]
        stop = threading.Event()
        errors: list[BaseException] = []

        def churn():                # concurrent upserts and deletes with a writer of its own
            try:
                with PyFluss(servers) as w:
                    i = 0
                    while not stop.wait(0.5):
                        i += 1
                        for day in list(live):
                            w.upsert(name, [(k, day, f"{day}/{i}")
                                            for k in range(i * 7, i * 7 + 20)])
                            # A key that exists: Fluss gives the delete of a missing key an
                            # offset without a record, which pyfluss's reader waits for.
                            w.delete(name, [(i * 7, day)])
            except BaseException as e:  # noqa: BLE001 - reported by the test
                errors.append(e)

        log_file, ckpt = tmp_path / "driver.log", tmp_path / "ckpt"
        q = full_stream(spark, servers, name, "af_pk_days", tmp_path, 300)
        writing = threading.Thread(target=churn)
        writing.start()
        try:
            wait_until(lambda: q.lastProgress is not None, 120, "the first micro-batch")
            # Mid-snapshot: a new day with rows, and the first day dropped.
            fluss.create_partition(name, {"dt": DAYS[3]})
            fluss.upsert(name, [(k, DAYS[3], "new") for k in range(100)])
            live.append(DAYS[3])
            fluss.drop_partition(name, {"dt": DAYS[0]})
            lease_id = source_offsets(ckpt)[0]["lease_id"]
            wait_until(lambda: q.exception() is not None or (
                lease_id in leases.seen and lease_id not in leases.now()), 120,
                "the snapshot phase to end and its lease to go")
            stop.set()
            writing.join(60)
            assert not errors, errors
            fluss.upsert(name, [(0, DAYS[1], "last")])
            q.processAllAvailable()
            assert q.exception() is None, q.exception()
            progress = q.lastProgress
        finally:
            stop.set()
            q.stop()
        offsets = [decode(o) for o in source_offsets(ckpt)]
        assert {o.lease_id for o in offsets} == {lease_id} and leases.seen == {lease_id}
        assert lease_id not in leases.now()
        # The lease's record pinned the snapshots of the three days of the start.
        pinned = {pid for t, pid in leases.partitions[lease_id] if t == tid}
        assert set(offsets[0].tables[tid].partitions) <= pinned and len(pinned) >= 3
        ids = fluss.partitions(name)
        assert DAYS[3] in ids and any(ids[DAYS[3]] in o.tables[tid].partitions for o in offsets)
        assert_dropped_once(log_file, DAYS[0], progress, name)
        result = fold(spark.table("af_pk_days").where(f"dt <> '{DAYS[0]}'"), key=("id", "dt"))
        assert result == fluss_state(fluss, name)
        assert {dt for _, dt in result} == set(DAYS[1:]) and result[(0, DAYS[1])] == "last"


def test_auto_partitioned_log_table_streams_exactly_while_fluss_expires_a_partition(
        spark, apache_fluss, tmp_path):
    """Earliest and latest modes over a table Fluss partitions by day (today and tomorrow made
    by Fluss, yesterday by hand, within a retention of 2); a partition of 2020 made by hand is
    past retention, so Fluss's own check (every 3 s on the shared cluster) drops it while both
    queries read it: neither fails, with failOnDataLoss=true, and each logs one WARN."""
    servers = apache_fluss.bootstrap_servers
    name = fluss_table("pauto")
    today = datetime.datetime.now(datetime.timezone.utc).date()
    days = [(today + datetime.timedelta(days=n)).strftime("%Y%m%d") for n in (-1, 0, 1)]
    old = "20200101"
    with PyFluss(servers) as fluss:
        fluss.create_table(name, LOG_SCHEMA, buckets=2, partition_keys=["dt"], properties={
            "table.auto-partition.enabled": "true", "table.auto-partition.time-unit": "DAY",
            "table.auto-partition.num-precreate": "2", "table.auto-partition.num-retention": "2",
            "table.auto-partition.time-zone": "UTC"})
        fluss.create_partition(name, {"dt": days[0]}, ignore_if_exists=True)
        wait_until(lambda: set(fluss.partitions(name)) == set(days), 30,
                   "Fluss to create today's and tomorrow's partitions")
        before = first_rows(days)
        fluss.append(name, before)
        spark.dataSource.register(LoggedFlussDataSource)
        queries = {mode: to_memory(spark.readStream.format("fluss_logged")
                                   .option("bootstrap.servers", servers).option("table", name)
                                   .option("scan.startup.mode", mode)
                                   .option("failOnDataLoss", "true")
                                   .option("scan.partition.discovery.interval", "100ms")
                                   .option("log.file", str(tmp_path / f"{mode}.log")).load(),
                                   f"af_auto_{mode}", tmp_path / mode)
                   for mode in ("earliest", "latest")}
        try:
            for q in queries.values():
                q.processAllAvailable()
            # Right after one of Fluss's checks, so the next one (3 s later) finds the old
            # partition with its rows, after the queries found it.
            coordinator_log = apache_fluss.log_path("coordinator")
            seen = coordinator_log.read_text().count(AUTO_PARTITION_CHECK)
            wait_until(lambda: coordinator_log.read_text().count(AUTO_PARTITION_CHECK) > seen,
                       30, "an auto-partition check of Fluss", interval_s=0.02)
            fluss.create_partition(name, {"dt": old})
            fluss.append(name, day_rows(range(900, 990), old))
            for q in queries.values():
                wait_until(lambda: old in json.dumps(q.lastProgress["sources"][0]["endOffset"]),
                           30, "the old partition to be found")
            wait_until(lambda: old not in fluss.partitions(name), 30, "Fluss to expire it")
            after = day_rows(range(500, 530), days[1]) + day_rows(range(600, 610), days[0])
            fluss.append(name, after)
            for q in queries.values():
                q.processAllAvailable()
                assert q.isActive and q.exception() is None, q.exception()

            def got(mode):
                rows = spark.table(f"af_auto_{mode}").select("id", "dt").collect()
                return keys(r.asDict() for r in rows if r["dt"] != old), \
                    keys(r.asDict() for r in rows if r["dt"] == old)
            for mode, want in (("earliest", before + after), ("latest", after)):
                live, expired = got(mode)
                assert live == keys(want), mode          # each exactly once
                assert set(expired) <= set(keys(day_rows(range(900, 990), old))) and \
                    max(expired.values(), default=1) == 1, mode
                warnings = [ln for ln in (tmp_path / f"{mode}.log").read_text().splitlines()
                            if f"dt={old}" in ln]
                assert len(warnings) == 1 and "expired by retention" in warnings[0], warnings
        finally:
            for q in queries.values():
                q.stop()
