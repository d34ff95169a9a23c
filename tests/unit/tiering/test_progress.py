"""Per-table progress: lag from the lake's offsets, the job's status file, and
`fluss-spark tier status`."""

from __future__ import annotations

import json

import pyarrow as pa

from fluss_spark.cli import main as cli_main
from fluss_spark.tiering.lake import LakeTable
from fluss_spark.tiering.progress import (job_status, lag_from_state, read_status,
                                          table_progress, write_status)

SCHEMA = pa.schema([pa.field("id", pa.int64(), False), ("v", pa.string())])


def make_lake(root):
    pk = LakeTable.open(root, "db.pk", clock=lambda: 1_700_000_000.0)
    pk.create(table="db.pk", table_id=1, schema=SCHEMA, primary_key=["id"], num_buckets=2)
    pk.commit_round(pa.table({"id": pa.array([1, 2], pa.int64()), "v": ["a", "b"],
                              "_change_type": ["+I", "+I"], "_log_offset": pa.array([-1, -1])}),
                    query_id="q", batch_id=0,
                    fluss_offsets={"log": {"0": 10, "1": 20},
                                   "snapshot": {"0": [3, 5, 2], "1": [4, 1, 1]}},
                    snapshot_complete=False)
    lg = LakeTable.open(root, "db.log")
    lg.create(table="db.log", table_id=2, schema=SCHEMA)
    return pk, lg


def test_lag_counts_unread_snapshot_rows_and_changelog_records(tmp_path):
    pk, _ = make_lake(tmp_path)
    m = pk.state()
    # snapshot: 3 rows left in bucket 0; changelog: 15 - 10 and 20 - 20
    assert lag_from_state(m, {0: 15, 1: 20}) == 3 + 5
    assert lag_from_state(m, {0: 10, 1: 20, 2: 4}) == 3 + 4  # a bucket the lake has not seen


def test_status_file_round_trips_and_a_foreign_one_is_ignored(tmp_path):
    assert read_status(tmp_path) == {}
    write_status(tmp_path, {"job_id": "j", "tables": {"db.pk": {"active": True, "lag": 7}}})
    assert read_status(tmp_path)["tables"]["db.pk"]["lag"] == 7
    (tmp_path / "_tiering" / "status.json").write_text(json.dumps({"version": 99}))
    assert read_status(tmp_path) == {}


def test_table_progress_merges_the_lake_with_the_jobs_status(tmp_path):
    make_lake(tmp_path)
    write_status(tmp_path, {"job_id": "j", "lease_id": "tier-j", "updated_ms": 5,
                            "tables": {"db.pk": {"active": True, "lag": 99, "error": None}}})
    rows = {r["table"]: r for r in table_progress(tmp_path)}
    assert rows["db.pk"]["rows_tiered"] == 2 and rows["db.pk"]["lake_rows"] == 2
    assert rows["db.pk"]["lag"] == 99 and rows["db.pk"]["active"] is True
    assert rows["db.pk"]["last_round_ms"] == 1_700_000_000_000 and rows["db.pk"]["batch_id"] == 0
    assert rows["db.log"]["lag"] is None and rows["db.log"]["batch_id"] is None
    exact = {r["table"]: r for r in table_progress(tmp_path, {"db.pk": {0: 10, 1: 20}})}
    assert exact["db.pk"]["lag"] == 3
    assert job_status(tmp_path)["lease_id"] == "tier-j"


def test_cli_tier_status_prints_json_and_tables(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("FLUSS_BOOTSTRAP_SERVERS", raising=False)
    make_lake(tmp_path)
    write_status(tmp_path, {"job_id": "j", "lease_id": "tier-j", "updated_ms": 5,
                            "tables": {"db.pk": {"active": False, "lag": 4}}})
    assert cli_main(["tier", "status", "--lake", str(tmp_path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["job_id"] == "j"
    assert {r["table"]: r["lag"] for r in doc["tables"]} == {"db.pk": 4, "db.log": None}
    assert cli_main(["tier", "status", "--lake", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "ROWS_TIERED" in out and "db.pk" in out and "tier-j" in out


def test_cli_tier_status_on_a_missing_lake_is_one_line_error(tmp_path, capsys):
    assert cli_main(["tier", "status", "--lake", str(tmp_path / "nope")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: lake directory") and err.count("\n") == 1


def test_cli_tier_status_says_the_lag_is_unknown_when_the_cluster_does_not_answer(
        tmp_path, capsys):
    make_lake(tmp_path)
    write_status(tmp_path, {"job_id": "j", "tables": {"db.pk": {"active": True, "lag": 0}}})
    down = "127.0.0.1:1"                       # nothing listens there
    argv = ["--bootstrap-servers", down, "--timeout", "1", "tier", "status", "--lake",
            str(tmp_path)]
    assert cli_main([*argv, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["lag_unknown"].startswith(f"the cluster at {down} did not answer")
    pk = next(r for r in doc["tables"] if r["table"] == "db.pk")
    assert pk["lag"] is None and pk["reported_lag"] == 0      # never a stale 0 as the lag
    assert cli_main(argv) == 0
    out = capsys.readouterr().out
    assert "unknown" in out and f"lag unknown: the cluster at {down} did not answer" in out
