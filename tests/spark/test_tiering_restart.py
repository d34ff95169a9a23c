"""kill -9 of a tiering job (spark-submit) in the middle of a round, then restart: still exact.

The lake is read through pyiceberg and through Iceberg's Spark runtime; both equal the tables."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import threading
import time
from pathlib import Path

import pyarrow as pa
import pytest
from chispa import assert_df_equality

from fluss_spark.local.ports import wait_until
from fluss_spark.tiering.lake import LakeTable, table_dir
from fluss_spark.tiering.lake_files import referenced_files
from fluss_spark.tiering.spark_reader import read_lake_table
from fluss_spark.tiering.restarts import strip_jvm_frames
from fluss_spark.tiering.submit import python_env, spark_submit_command
from fluss_spark.testing import tier_pause

pytestmark = pytest.mark.spark

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "tier_tables.py"


def table_rows(spark, cluster, table: str):
    """The table's content through a batch read of format("fluss") (table columns only)."""
    df = (spark.read.format("fluss").option("bootstrap.servers", cluster.bootstrap_servers)
          .option("table", table).load())
    return df.select([c for c in df.columns if not c.startswith("_")])


# after-commit (a replayed round the lake already has) is also covered without Spark by
# tests/unit/tiering/test_round_files.py (a replay is skipped): extended here.
@pytest.mark.parametrize("point", [pytest.param("after-commit", marks=pytest.mark.extended),
                                   "mid-commit"])
def test_kill_9_mid_round_then_restart_is_exact_with_no_duplicates_and_no_lease(
        spark, cluster, conn, table_name, tmp_path, point):
    """``after-commit``: killed once a round is in the lake, before Spark marks its batch done
    (the restarted query replays a round the lake has). ``mid-commit``: killed once a round's
    data files and manifests are written, before the catalog commit (they become orphans; the
    restarted query applies the round)."""
    admin = conn.admin()
    pk, lg = f"{table_name}_pk", f"{table_name}_log"
    admin.create_table(pk, "id BIGINT NOT NULL, v STRING", primary_key=["id"], num_buckets=2)
    admin.create_table(lg, "k BIGINT, msg STRING", num_buckets=2)
    pw, lw = conn.writer(pk), conn.writer(lg)
    pw.upsert(pa.table({"id": pa.array(range(3_000), pa.int64()),
                        "v": [f"v{i}" for i in range(3_000)]}))
    admin.trigger_kv_snapshot(pk)
    lw.append(pa.table({"k": pa.array(range(800), pa.int64()), "msg": ["m"] * 800}))

    lake = tmp_path / "lake"
    marker = tmp_path / "in-round"
    args = ["--bootstrap-servers", cluster.bootstrap_servers, "--lake", lake,
            "--pattern", re.escape(table_name) + "_(pk|log)",
            "--trigger-interval", "300 milliseconds",
            "--lease-duration", "2min"]
    log1 = open(tmp_path / "run1.log", "w")
    # The job of SCRIPT, pausing at `point` of a round (fluss_spark/testing/tier_pause.py).
    first = subprocess.Popen(spark_submit_command(tier_pause.SCRIPT,
                                                  [point, "120", marker, *args,
                                                   "--max-offsets-per-trigger", "1000"]),
                             cwd=tmp_path, env=python_env(), stdout=log1,
                             stderr=subprocess.STDOUT, start_new_session=True)
    stop = threading.Event()

    def churn():
        i = 0
        while not stop.is_set() and i < 200:
            pw.upsert([{"id": k, "v": f"u{i}"} for k in range(i * 10, i * 10 + 10)])
            pw.delete([{"id": 2_999 - i}])
            lw.append([{"k": 10_000 + i, "msg": "late"}])
            i += 1
            time.sleep(0.05)

    writer = threading.Thread(target=churn)
    writer.start()
    try:
        wait_until(lambda: marker.exists() or first.poll() is not None, 180,
                   "the tiering job to be inside a round")
        assert first.poll() is None, (tmp_path / "run1.log").read_text()[-4000:]
        lease_id = "tier-" + json.loads((lake / "_tiering" / "job.json").read_text())["job_id"]
        # Each table has its own query: the PK one takes the lease even if the other is paused.
        wait_until(lambda: lease_id in {x.lease_id for x in admin.list_kv_snapshot_leases()}, 60,
                   "the job's lease")
        os.killpg(first.pid, signal.SIGKILL)   # driver JVM, Python driver and workers at once
        first.wait(30)
    finally:
        stop.set()
        writer.join(30)
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
        log1.close()

    pk_lake, log_lake = LakeTable.open(lake, pk), LakeTable.open(lake, lg)
    replayed, orphans = [], []
    for name, t in ((pk, pk_lake), (lg, log_lake)):
        if point == "mid-commit":
            # The killed round wrote files no snapshot names; the lake is behind Spark's log.
            ice = t.iceberg()
            used = referenced_files(ice, ice.metadata.snapshots)
            orphans += [p for p in (table_dir(lake, name) / "data").glob("*.parquet")
                        if str(p) not in used]
            logged = max(int(p.name) for p in
                         (lake / "_tiering" / "checkpoints" / name / "offsets").iterdir()
                         if p.name.isdigit())
            st = t.state()
            assert st.commit is None or st.commit.batch_id < logged
            continue
        # The killed round is in the lake but not in Spark's commit log: it will be replayed.
        commits = lake / "_tiering" / "checkpoints" / name / "commits"
        st = t.state()
        if st.commit is not None and not (commits / str(st.commit.batch_id)).exists():
            replayed.append((name, st.commit.batch_id, st.snapshot_id))
            # The lake's commit holds the round's end offsets: those Spark logged for the batch.
            offsets = json.loads((lake / "_tiering" / "checkpoints" / name / "offsets" /
                                  str(st.commit.batch_id)).read_text().splitlines()[-1])
            assert offsets["version"] and st.commit.lease_id == lease_id
    if point == "mid-commit":
        assert orphans, "the job was not killed between writing a round and committing it"
    else:
        assert replayed, "the job was not killed between a lake commit and Spark's commit"
    assert not pk_lake.state().snapshot_complete   # killed inside the snapshot phase
    assert lease_id in {x.lease_id for x in admin.list_kv_snapshot_leases()}

    # Restart with the same command (no fault injection); --once catches up and exits.
    # A restart may change the rate limit: catch up in fewer, larger rounds.
    second = subprocess.run(spark_submit_command(SCRIPT, args + ["--max-offsets-per-trigger",
                                                                 "50000", "--once"]),
                            cwd=tmp_path,
                            env=python_env(), capture_output=True, text=True, timeout=300)
    (tmp_path / "run2.log").write_text(second.stdout + second.stderr)
    assert second.returncode == 0, strip_jvm_frames(second.stdout + second.stderr)[-8000:]
    status = {d["table"]: d for d in (json.loads(ln) for ln in second.stdout.splitlines()
                                      if ln.startswith("{"))}
    assert status[pk]["lag"] == 0 and status[lg]["lag"] == 0, status

    for name, t in ((pk, pk_lake), (lg, log_lake)):
        expected = table_rows(spark, cluster, name)
        through_pyiceberg = spark.createDataFrame(t.read().to_pandas())
        through_spark = read_lake_table(spark, lake, name)
        for copy in (through_pyiceberg, through_spark):
            assert copy.count() == expected.count()       # no duplicates, nothing lost
            assert_df_equality(copy, expected, ignore_row_order=True, ignore_nullable=True,
                               ignore_column_order=True)
    # The replayed round was applied once: its batch id is in exactly one round snapshot.
    for name, batch_id, snapshot_id in replayed:
        t = LakeTable.open(lake, name)
        holders = [r.snapshot_id for r in t.rounds() if r.state.commit.batch_id == batch_id]
        assert holders == [snapshot_id], (name, batch_id, holders)
    assert len({r.state.commit.query_id for r in pk_lake.rounds()}) == 1
    # The killed round's orphans are invisible, and `expire` deletes them (no snapshot is old
    # enough to expire here); the copies are unchanged.
    if orphans:
        for t in (pk_lake, log_lake):
            t.expire(0, retain_last=1, orphan_grace_ms=0)
        assert not [p for p in orphans if p.exists()]
        for name, t in ((pk, pk_lake), (lg, log_lake)):
            assert t.read().num_rows == table_rows(spark, cluster, name).count()
    # No lease left behind once the snapshot phases are over.
    assert lease_id not in {x.lease_id for x in admin.list_kv_snapshot_leases()}
