"""`fluss-spark tier run --once` tiers tables from the command line; `tier status` reports them;
`tier migrate` converts a lake of the old format."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys

import pyarrow as pa
import pytest

from fluss_spark.tiering.restarts import strip_jvm_frames
from fluss_spark.tiering.lake import LakeTable, table_dir
from fluss_spark.tiering.submit import python_env

pytestmark = pytest.mark.spark


def fs(*argv, timeout=300):
    return subprocess.run([sys.executable, "-m", "fluss_spark.cli", *map(str, argv)],
                          capture_output=True, text=True, timeout=timeout, env=python_env())


def test_tier_run_once_then_status(cluster, conn, table_name, tmp_path):
    admin = conn.admin()
    pk, lg = f"{table_name}_pk", f"{table_name}_log"
    admin.create_table(pk, "id BIGINT NOT NULL, v STRING", primary_key=["id"], num_buckets=2)
    admin.create_table(lg, "k BIGINT, msg STRING", num_buckets=1)
    conn.writer(pk).upsert(pa.table({"id": pa.array(range(500), pa.int64()),
                                     "v": [f"v{i}" for i in range(500)]}))
    admin.trigger_kv_snapshot(pk)
    conn.writer(pk).upsert([{"id": 0, "v": "changed"}])
    conn.writer(pk).delete([{"id": 1}])
    conn.writer(lg).append([{"k": i, "msg": "m"} for i in range(30)])
    lake = tmp_path / "lake"

    res = fs("--bootstrap-servers", cluster.bootstrap_servers, "tier", "run", "--lake", lake,
             "--pattern", re.escape(table_name) + "_(pk|log)", "--once", "--json")
    assert res.returncode == 0, strip_jvm_frames(res.stdout + res.stderr)[-8000:]
    rows = {r["table"]: r for r in json.loads(res.stdout)}
    assert rows[pk]["lake_rows"] == 499 and rows[lg]["lake_rows"] == 30
    assert rows[pk]["snapshot_complete"] and rows[pk]["lag"] == 0 and not rows[pk]["error"]
    state = LakeTable(table_dir(lake, pk)).read().sort_by("id").to_pylist()
    assert state[0] == {"id": 0, "v": "changed"} and state[1]["id"] == 2
    # docs/tiering.md's DuckDB recipe scans the metadata file the catalog names: the newest.
    metadata = LakeTable.open(lake, pk).iceberg().metadata_location
    newest = max((table_dir(lake, pk) / "metadata").glob("*.metadata.json"))
    assert metadata == newest.as_uri()
    # The job's lease is gone with its snapshot phase.
    assert not [x for x in admin.list_kv_snapshot_leases() if x.lease_id.startswith("tier-")
                and x.tables.get(admin.get_table(pk).table_id)]

    status = fs("--bootstrap-servers", cluster.bootstrap_servers, "tier", "status", "--lake", lake,
                "--json")
    assert status.returncode == 0, status.stderr
    doc = json.loads(status.stdout)
    assert doc["job_id"] and {r["table"]: r["lag"] for r in doc["tables"]} == {pk: 0, lg: 0}
    human = fs("tier", "status", "--lake", lake)
    assert human.returncode == 0 and pk in human.stdout and "RESTARTS" in human.stdout


def test_tier_run_with_a_bad_pattern_is_a_one_line_error(cluster, tmp_path):
    res = fs("--bootstrap-servers", cluster.bootstrap_servers, "tier", "run", "--lake",
             tmp_path / "lake", "--pattern", "db.(", "--once", timeout=60)
    assert res.returncode == 1 and res.stderr.startswith("error: ") and "regex" in res.stderr
    assert "Traceback" not in res.stderr


@pytest.mark.extended      # the conversion itself: tests/unit/tiering/test_migrate.py
def test_a_lake_of_the_old_format_is_migrated_and_tiering_continues_where_it_stopped(
        cluster, conn, table_name, tmp_path):
    """The job refuses an old-format lake; `tier migrate` converts it keeping its position, and
    the next run tiers only what came after it."""
    from fluss_spark.testing.legacy_lake import LegacyLakeWriter, table_dir as legacy_table_dir
    from fluss_spark.tiering.lake import LakeTable

    admin = conn.admin()
    pk = f"{table_name}_pk"
    admin.create_table(pk, "id BIGINT NOT NULL, v STRING", primary_key=["id"], num_buckets=2)
    w = conn.writer(pk)
    w.upsert(pa.table({"id": pa.array(range(300), pa.int64()), "v": [f"v{i}" for i in range(300)]}))
    admin.trigger_kv_snapshot(pk)
    lake = tmp_path / "lake"
    args = ["--bootstrap-servers", cluster.bootstrap_servers, "tier", "run", "--lake", lake,
            "--pattern", re.escape(pk), "--once", "--json"]
    res = fs(*args)
    assert res.returncode == 0, strip_jvm_frames(res.stdout + res.stderr)[-8000:]

    # Rewrite that lake in the old format, at the same position (what an earlier version left).
    t = LakeTable.open(lake, pk)
    st, rows = t.state(), t.read()
    t.catalog.drop_table(tuple(pk.split(".")))
    shutil.rmtree(table_dir(lake, pk))
    old = LegacyLakeWriter(legacy_table_dir(lake, pk))
    old.create(table=pk, table_id=st.table_id, schema=st.schema, primary_key=["id"],
               num_buckets=2)
    changes = rows.append_column("_change_type", pa.array(["+I"] * rows.num_rows)) \
        .append_column("_log_offset", pa.array([-1] * rows.num_rows, pa.int64()))
    old.commit_round(changes, query_id=st.commit.query_id, batch_id=st.commit.batch_id,
                     fluss_offsets=st.fluss_offsets, snapshot_complete=st.snapshot_complete)

    w.upsert([{"id": 0, "v": "after"}])
    w.delete([{"id": 1}])
    refused = fs(*args)
    assert refused.returncode == 1 and "fluss-spark tier migrate --lake" in refused.stderr
    migrated = fs("tier", "migrate", "--lake", lake, "--json")
    assert migrated.returncode == 0, migrated.stderr
    assert json.loads(migrated.stdout)[0]["rows"] == 300
    res = fs(*args)
    assert res.returncode == 0, strip_jvm_frames(res.stdout + res.stderr)[-8000:]
    state = {r["id"]: r["v"] for r in LakeTable.open(lake, pk).read().to_pylist()}
    assert len(state) == 299 and state[0] == "after" and 1 not in state
    rounds = LakeTable.open(lake, pk).rounds()
    # The migrated snapshot, then the next batch of the same query: nothing tiered twice.
    assert [r.state.operation for r in rounds] == ["migrate", "round"]
    assert rounds[1].state.commit.batch_id == st.commit.batch_id + 1
    assert rounds[1].state.commit.rows_in == 3      # -U/+U of id 0 and -D of id 1


# tier compact/expire from the command line: tests/unit/tiering/test_migrate.py (without Spark).
@pytest.mark.extended
def test_tier_compact_and_expire_keep_the_copies_equal_through_both_readers(
        spark, cluster, conn, table_name, tmp_path):
    from chispa import assert_df_equality

    from fluss_spark.tiering.lake import LakeError, LakeTable
    from fluss_spark.tiering.spark_reader import read_lake_table

    admin = conn.admin()
    pk, lg = f"{table_name}_pk", f"{table_name}_log"
    admin.create_table(pk, "id BIGINT NOT NULL, v STRING", primary_key=["id"], num_buckets=2)
    admin.create_table(lg, "k BIGINT, msg STRING", num_buckets=2)
    conn.writer(pk).upsert(pa.table({"id": pa.array(range(400), pa.int64()),
                                     "v": [f"v{i}" for i in range(400)]}))
    admin.trigger_kv_snapshot(pk)
    conn.writer(pk).upsert([{"id": i, "v": "changed"} for i in range(0, 400, 7)])
    conn.writer(lg).append([{"k": i, "msg": "m"} for i in range(300)])
    lake = tmp_path / "lake"
    res = fs("--bootstrap-servers", cluster.bootstrap_servers, "tier", "run", "--lake", lake,
             "--pattern", re.escape(table_name) + "_(pk|log)", "--once",
             "--max-offsets-per-trigger", "100", "--json")
    assert res.returncode == 0, strip_jvm_frames(res.stdout + res.stderr)[-8000:]
    first = {name: LakeTable.open(lake, name).rounds()[0].snapshot_id for name in (pk, lg)}
    assert all(LakeTable.open(lake, n).state().data_files > 1 for n in (pk, lg))

    out = fs("tier", "compact", "--lake", lake, "--json")
    assert out.returncode == 0, out.stderr
    assert {r["table"]: r["files_after"] for r in json.loads(out.stdout)} == {pk: 1, lg: 1}
    out = fs("tier", "expire", "--lake", lake, "--older-than", "0s", "--retain-last", "1",
             "--orphan-grace", "0s", "--json")
    assert out.returncode == 0, out.stderr
    assert all(r["snapshots"] == 1 and r["removed_files"] > 0 for r in json.loads(out.stdout))

    for name in (pk, lg):
        df = (spark.read.format("fluss").option("bootstrap.servers", cluster.bootstrap_servers)
              .option("table", name).load())
        expected = df.select([c for c in df.columns if not c.startswith("_")])
        t = LakeTable.open(lake, name)
        copies = (spark.createDataFrame(t.read().to_pandas()), read_lake_table(spark, lake, name))
        for copy in copies:
            assert copy.count() == expected.count()
            assert_df_equality(copy, expected, ignore_row_order=True, ignore_nullable=True,
                               ignore_column_order=True)
        # The position is kept; time travel to an expired snapshot is refused by name.
        assert t.state().operation == "compact" and t.state().snapshot_complete
        with pytest.raises(LakeError, match="expired"):
            t.read(first[name])
        with pytest.raises(LakeError, match="expired"):
            read_lake_table(spark, lake, name, first[name])
