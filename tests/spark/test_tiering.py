"""End to end: the tiering job keeps Iceberg copies of a PK and a log table equal to the tables.

Every check reads the lake twice, through independent readers: pyiceberg's scan, and Spark
through Iceberg's own Spark runtime (``fluss_spark.tiering.spark_reader``)."""

from __future__ import annotations

import logging
import re
import threading
import time
from collections import Counter

import pyarrow as pa
import pytest
from chispa import assert_df_equality

from fluss_spark.client.cluster import CHANGE_TYPE, LOG_OFFSET
from fluss_spark.local.ports import wait_until
from fluss_spark.tiering.config import TieringConfig, TieringError
from fluss_spark.tiering.job import TieringJob
from fluss_spark.tiering.lake import LakeTable
from fluss_spark.tiering.progress import job_status
from fluss_spark.tiering.spark_reader import read_lake_table
from fluss_spark.testing.streams import table_state

pytestmark = pytest.mark.spark


def pk_state(conn, table: str) -> pa.Table:
    """The PK table's current rows, through live scans of every bucket."""
    info = conn.admin().get_table(table)
    parts = [batch for b in range(info.num_buckets) for batch in
             conn.kv_scanner(table).scan(b, live=True)]
    return pa.Table.from_batches(parts, schema=info.schema) if parts else info.schema.empty_table()


def changelog(conn, table: str, ends: dict[int, int] | None = None) -> pa.Table:
    """The records of every bucket from offset 0 to ``ends`` (default: the latest offsets),
    with their change type and offset."""
    admin = conn.admin()
    info = admin.get_table(table)
    ends = ends if ends is not None else admin.list_offsets(table, spec="latest")
    scanner = conn.log_scanner(table)
    batches = [rb for b in info.buckets if ends.get(b) for rb in scanner.read(b, 0, ends[b])]
    cols = info.schema.names + [CHANGE_TYPE, LOG_OFFSET]
    return (pa.Table.from_batches(batches).select(cols) if batches
            else pa.table({c: [] for c in cols}))


def log_rows(conn, table: str, ends: dict[int, int] | None = None) -> pa.Table:
    """Every record of a log table up to ``ends``, read bucket by bucket from the changelog."""
    info = conn.admin().get_table(table)
    return changelog(conn, table, ends).select(info.schema.names)


def pk_state_at(conn, table: str, ends: dict[int, int]) -> pa.Table:
    """The PK table's rows at offsets ``ends``: its changelog folded key by key (in Python,
    independently of the lake's own fold)."""
    info = conn.admin().get_table(table)
    state: dict = {}
    for rec in changelog(conn, table, ends).to_pylist():
        key = tuple(rec[k] for k in info.primary_key)
        if rec[CHANGE_TYPE] in ("+I", "+U"):
            state[key] = {c: rec[c] for c in info.schema.names}
        else:
            state.pop(key, None)
    return pa.Table.from_pylist(list(state.values()), schema=info.schema)


def assert_equal_tables(spark, lake: pa.Table, expected: pa.Table):
    assert_df_equality(spark.createDataFrame(lake.to_pandas()),
                       spark.createDataFrame(expected.select(lake.column_names).to_pandas()),
                       ignore_row_order=True, ignore_nullable=True)


def assert_lake_equals(spark, lake_root, table: str, expected: pa.Table,
                       snapshot_id: int | None = None):
    """The lake copy (at ``snapshot_id``) equals ``expected`` through pyiceberg AND through
    Iceberg's Spark runtime, with no duplicate rows."""
    through_pyiceberg = LakeTable.open(lake_root, table).read(snapshot_id)
    assert through_pyiceberg.num_rows == expected.num_rows
    assert_equal_tables(spark, through_pyiceberg, expected)
    through_spark = read_lake_table(spark, lake_root, table, snapshot_id)
    assert through_spark.count() == expected.num_rows
    assert_df_equality(through_spark.select(*expected.column_names),
                       spark.createDataFrame(expected.to_pandas()), ignore_row_order=True,
                       ignore_nullable=True)


def offsets_of(state) -> dict[int, int]:
    return {int(b): int(o) for b, o in state.fluss_offsets.get("log", {}).items()}


def create_tables(conn, prefix: str, pk_rows: int = 6_000, log_rows_n: int = 1_500):
    admin = conn.admin()
    pk, lg = f"{prefix}_pk", f"{prefix}_log"
    admin.create_table(pk, "id BIGINT NOT NULL, v STRING, n INT", primary_key=["id"],
                       num_buckets=3)
    admin.create_table(lg, "k BIGINT, msg STRING", num_buckets=2)
    pw, lw = conn.writer(pk), conn.writer(lg)
    pw.upsert(pa.table({"id": pa.array(range(pk_rows), pa.int64()),
                        "v": [f"v{i}" for i in range(pk_rows)],
                        "n": pa.array([i % 7 for i in range(pk_rows)], pa.int32())}))
    admin.trigger_kv_snapshot(pk)
    lw.append(pa.table({"k": pa.array(range(log_rows_n), pa.int64()),
                        "msg": [f"m{i}" for i in range(log_rows_n)]}))
    return pk, lg, pw, lw


def churn(pw, lw, stop: threading.Event, rounds: int = 30):
    """Concurrent upserts, deletes and appends while the job tiers."""
    for i in range(rounds):
        if stop.is_set():
            return
        pw.upsert([{"id": k, "v": f"u{i}", "n": i} for k in range(i * 40, i * 40 + 40)])
        pw.delete([{"id": 5_999 - i}])
        pw.upsert([{"id": 100_000 + i, "v": "new", "n": -1}])
        lw.append([{"k": 10_000 + i * 10 + j, "msg": f"late{i}"} for j in range(10)])
        time.sleep(0.05)


def test_tiering_keeps_pk_and_log_lake_copies_equal_under_concurrent_writes(
        spark, cluster, conn, table_name, tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="fluss_spark.tiering")
    pk, lg, pw, lw = create_tables(conn, table_name)
    lake_root = tmp_path / "lake"
    config = TieringConfig(lake=lake_root, bootstrap_servers=cluster.bootstrap_servers,
                           table_pattern=re.escape(table_name) + "_(pk|log|new)",
                           trigger_interval="300 milliseconds", max_offsets_per_trigger=2_500,
                           poll_interval_s=0.3, discover_interval_s=1.0,
                           copy_on_write="tasks")   # as on a cluster (local masters: "driver")
    job = TieringJob(spark, config).start()
    stop = threading.Event()
    writer = threading.Thread(target=churn, args=(pw, lw, stop))
    admin = conn.admin()
    pk_id = admin.get_table(pk).table_id
    pinning = set()   # leases seen pinning the PK table's snapshot
    new = f"{table_name}_new"
    try:
        assert sorted(job.queries) == sorted([pk, lg])
        writer.start()
        def observe():
            pinning.update(x.lease_id for x in admin.list_kv_snapshot_leases()
                           if pk_id in x.tables)
            job.poll()

        while writer.is_alive():
            observe()
            time.sleep(0.3)
        writer.join()
        # A table created while the job runs is picked up by the next discovery.
        admin.create_table(new, "k BIGINT, msg STRING", num_buckets=1)
        conn.writer(new).append([{"k": i, "msg": "n"} for i in range(50)])
        wait_until(lambda: observe() or new in job.queries, 30, "the new table to be tiered")

        def caught_up():
            observe()
            return job.caught_up()
        wait_until(caught_up, 120, "the lake copies to catch up with the tables")
        lease_id = job.record.lease_id
        assert pinning == {lease_id}   # one job-scoped lease, the job's own

        def lease_gone():
            job.poll()
            return lease_id not in {x.lease_id for x in admin.list_kv_snapshot_leases()}
        wait_until(lease_gone, 30, "the job's lease to be gone after the snapshot phase")
        status = {r["table"]: r for r in job_status(lake_root)["tables"]}
        # Dropping a table stops its query; the job goes on and keeps the lake copy.
        admin.drop_table(new)
        wait_until(lambda: observe() or new in job.errors, 60, "the dropped table's query to stop")
        assert "dropped" in job.errors[new] and job.queries[pk].isActive
    finally:
        stop.set()
        job.stop()

    pk_lake = LakeTable.open(lake_root, pk)
    log_lake = LakeTable.open(lake_root, lg)
    expected_pk = pk_state(conn, pk)
    assert_lake_equals(spark, lake_root, pk, expected_pk)
    # The lake's offsets are the table's latest: folding the changelog up to them gives the
    # same rows again.
    assert offsets_of(pk_lake.state()) == conn.admin().list_offsets(pk, spec="latest")
    expected_log = log_rows(conn, lg)
    assert expected_log.num_rows == 1_500 + 30 * 10
    assert_lake_equals(spark, lake_root, lg, expected_log)
    assert sorted(LakeTable.open(lake_root, new).read().column("k").to_pylist()) == \
        list(range(50))
    # Several rounds, the snapshot phase among them, and progress visible per table.
    m = pk_lake.state()
    rounds = pk_lake.rounds()
    assert len(rounds) >= 3 and m.snapshot_complete and m.commit.lease_id == lease_id
    assert [r.state.commit.batch_id for r in rounds] == sorted({r.state.commit.batch_id
                                                                for r in rounds})
    assert status[pk]["rows_tiered"] >= 6_000 and status[pk]["lake_rows"] == pk_lake.read().num_rows
    assert status[lg]["rows_tiered"] == status[lg]["lake_rows"] == 1_800
    assert status[pk]["last_round_ms"] and status[lg]["batch_id"] is not None
    assert not status[pk]["error"]
    # Every round was written by the tasks that read it: none was folded on the driver.
    assert not [r for r in caplog.records if "folded on the driver" in r.getMessage()]

    # Time travel: an older snapshot of each copy is the table at that round's offsets.
    done = [r for r in rounds if r.state.snapshot_complete]
    assert len(done) >= 2
    older = done[0]
    assert older.snapshot_id != m.snapshot_id and offsets_of(older.state) != offsets_of(m)
    assert_lake_equals(spark, lake_root, pk, pk_state_at(conn, pk, offsets_of(older.state)),
                       older.snapshot_id)
    log_rounds = log_lake.rounds()
    assert len(log_rounds) >= 2
    mid = log_rounds[len(log_rounds) // 2 - 1]
    assert_lake_equals(spark, lake_root, lg, log_rows(conn, lg, offsets_of(mid.state)),
                       mid.snapshot_id)


def test_a_query_failed_by_a_tablet_outage_is_restarted_and_the_lake_stays_exact(
        spark, cluster, conn, table_name, tmp_path):
    pk, lg, pw, lw = create_tables(conn, table_name, pk_rows=6_000, log_rows_n=1_500)
    lake_root = tmp_path / "lake"
    # A short client timeout so the outage outlasts the source's own retries and fails a query.
    config = TieringConfig(lake=lake_root, bootstrap_servers=cluster.bootstrap_servers,
                           table_pattern=re.escape(table_name) + "_(pk|log)",
                           trigger_interval="300 milliseconds", max_offsets_per_trigger=1_000,
                           poll_interval_s=0.3, restart_backoff_s=1.0, max_restarts=5,
                           source_options={"client.request.timeout": "2s"})
    job = TieringJob(spark, config).start()
    pk_lake = LakeTable.open(lake_root, pk)
    try:
        wait_until(lambda: job.poll() and pk_lake.state().commit is not None, 120,
                   "the first PK round in the lake")
        cluster.kill("tablet", 0)
        try:
            wait_until(lambda: [q for q in job.queries.values() if not q.isActive], 60,
                       "a table query to fail while tablet 0 is down")
        finally:
            cluster.restart("tablet", 0)
            cluster.wait_registered()
        churn(pw, lw, threading.Event(), rounds=5)

        def caught_up():
            job.poll()
            return job.caught_up() and not job.restarting
        wait_until(caught_up, 180, "the restarted queries to catch up")
        assert sum(map(len, job.restarts.values())) >= 1 and not job.errors
        assert all(q.isActive for q in job.queries.values())
    finally:
        job.stop()
    assert_lake_equals(spark, lake_root, pk, pk_state(conn, pk))
    expected_log = log_rows(conn, lg)
    assert expected_log.num_rows == 1_500 + 5 * 10
    assert_lake_equals(spark, lake_root, lg, expected_log)
    restarted = {r["table"]: r["restarts"] for r in job_status(lake_root)["tables"]}
    assert sum(restarted.values()) >= 1


def test_a_second_job_writing_the_same_iceberg_tables_is_refused(spark, cluster, conn,
                                                                 table_name, tmp_path):
    """Two jobs (two lake directories, so two checkpoints) pointed at one catalog: the second
    one's commit is refused by the lake, which keeps the first job's copy exactly."""
    lg = f"{table_name}_log"
    conn.admin().create_table(lg, "k BIGINT, msg STRING", num_buckets=2)
    w = conn.writer(lg)
    w.append([{"k": i, "msg": "a"} for i in range(100)])
    catalog = {"type": "sql", "uri": f"sqlite:///{tmp_path / 'shared.db'}",
               "warehouse": (tmp_path / "warehouse").as_uri()}

    def run(lake: str) -> TieringJob:
        config = TieringConfig(lake=tmp_path / lake, bootstrap_servers=cluster.bootstrap_servers,
                               table_pattern=re.escape(lg), available_now=True,
                               poll_interval_s=0.3, max_restarts=0, catalog=catalog)
        job = TieringJob(spark, config)
        try:
            job.start()
            job.run()
        finally:
            job.stop()
        return job

    run("lake1")
    w.append([{"k": 100 + i, "msg": "b"} for i in range(50)])
    with pytest.raises(TieringError, match="was written by streaming query"):
        run("lake2")
    # The shared table is still the first job's copy: 100 rows, once each.
    first = pa.table({"k": pa.array(range(100), pa.int64()), "msg": ["a"] * 100})
    assert_lake_equals(spark, tmp_path / "lake1", lg, first)
    assert_lake_equals(spark, tmp_path / "lake2", lg, first)   # the same catalog, same table


DAYS = ("2026-11-24", "2026-11-25", "2026-11-26")


def pyiceberg_rows(lake_root, table: str) -> list[dict]:
    """The lake table's rows through pyiceberg's own scan (not ``LakeTable.read``)."""
    return LakeTable.open(lake_root, table).iceberg().scan().to_arrow().to_pylist()


def partitioned_log(conn, table: str) -> Counter:
    """Every record of every partition of a log table, read partition by partition."""
    admin = conn.admin()
    out: Counter = Counter()
    for p in admin.get_table(table).partitions:
        ends = admin.list_offsets(table, spec="latest", partition=p.name)
        scanner = conn.log_scanner(table, partition=p.name)
        for b, end in ends.items():
            for rb in (scanner.read(b, 0, end) if end else ()):
                out.update((r["id"], r["dt"], r["v"]) for r in rb.to_pylist())
    return out


def test_partitioned_tables_are_tiered_per_partition_and_a_dropped_partition_stays_in_the_lake(
        spark, cluster, conn, table_name, tmp_path):
    admin = conn.admin()
    pk, lg = f"{table_name}_ppk", f"{table_name}_plog"
    admin.create_table(pk, "id BIGINT NOT NULL, dt STRING NOT NULL, v STRING",
                       primary_key=["id", "dt"], num_buckets=2, partition_keys=["dt"])
    admin.create_table(lg, "id BIGINT, dt STRING, v STRING", num_buckets=2,
                       partition_keys=["dt"], bucket_key=["id"])
    pw, lw = conn.writer(pk), conn.writer(lg)
    for day in DAYS:
        admin.create_partition(pk, {"dt": day})
        admin.create_partition(lg, {"dt": day})
        pw.upsert([{"id": i, "dt": day, "v": "a"} for i in range(300)])
        admin.trigger_kv_snapshot(pk, partition=day)
        lw.append([{"id": i, "dt": day, "v": "m"} for i in range(100)])
    lake_root = tmp_path / "lake"
    config = TieringConfig(lake=lake_root, bootstrap_servers=cluster.bootstrap_servers,
                           table_pattern=re.escape(table_name) + "_p(pk|log)",
                           trigger_interval="300 milliseconds", poll_interval_s=0.3)
    stop = threading.Event()

    def churn():     # the first day is left alone: it is dropped later with nothing unread
        for i in range(1, 21):
            if stop.wait(0.05):
                return
            for day in DAYS[1:]:
                pw.upsert([{"id": k, "dt": day, "v": f"u{i}"} for k in range(i * 10, i * 10 + 15)])
                pw.delete([{"id": 300 - i, "dt": day}])
                lw.append([{"id": 1000 + i, "dt": day, "v": f"late{i}"}])

    def caught_up():
        job.poll()
        return job.caught_up()

    job = TieringJob(spark, config).start()
    writer = threading.Thread(target=churn)
    try:
        writer.start()
        writer.join()
        wait_until(caught_up, 120, "the partitioned lake copies to catch up")
        lease_id = job.record.lease_id
        wait_until(lambda: job.poll() and lease_id not in {
            x.lease_id for x in admin.list_kv_snapshot_leases()}, 30,
            "the lease to go after every partition's snapshot phase")
        for t in (pk, lg):
            spec = LakeTable.open(lake_root, t).iceberg().spec()
            assert [(f.name, str(f.transform)) for f in spec.fields] == [("dt", "identity")]
        state = table_state(conn, pk)
        assert {dt for _, dt in state} == set(DAYS)
        lake = pyiceberg_rows(lake_root, pk)
        assert len(lake) == len(state) and {(r["id"], r["dt"]): r["v"] for r in lake} == state
        assert Counter((r["id"], r["dt"], r["v"]) for r in pyiceberg_rows(lake_root, lg)) == \
            partitioned_log(conn, lg)
        # Fluss drops the first day; the lake keeps it (history) while the others go on.
        dropped_pk = {k: v for k, v in state.items() if k[1] == DAYS[0]}
        dropped_log = Counter({k: n for k, n in partitioned_log(conn, lg).items()
                               if k[1] == DAYS[0]})
        for t in (pk, lg):
            admin.drop_partition(t, {"dt": DAYS[0]})
        pw.upsert([{"id": 7, "dt": DAYS[1], "v": "after"}])
        pw.delete([{"id": 8, "dt": DAYS[2]}])
        lw.append([{"id": 2000, "dt": DAYS[2], "v": "after"}])
        wait_until(caught_up, 60, "the lake copies to catch up after the drop")
        assert not job.errors and all(q.isActive for q in job.queries.values())
    finally:
        stop.set()
        job.stop()
    lake = pyiceberg_rows(lake_root, pk)
    assert len(lake) == len(dropped_pk) + len(table_state(conn, pk))
    assert {(r["id"], r["dt"]): r["v"] for r in lake} == {**dropped_pk, **table_state(conn, pk)}
    assert Counter((r["id"], r["dt"], r["v"]) for r in pyiceberg_rows(lake_root, lg)) == \
        dropped_log + partitioned_log(conn, lg)
    # The lag sums over the partitions the tables have now: nothing left to tier.
    assert {r["table"]: r["lag"] for r in job_status(lake_root)["tables"]} == {pk: 0, lg: 0}
