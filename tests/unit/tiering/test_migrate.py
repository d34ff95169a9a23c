"""Converting an old Parquet-manifest lake into Iceberg: content, position, resumability, CLI."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from fluss_spark.cli import main as cli_main
from fluss_spark.testing.legacy_lake import LegacyLakeWriter, table_dir
from fluss_spark.tiering.config import TieringConfig, TieringError
from fluss_spark.tiering.job import TieringJob
from fluss_spark.tiering.lake import LakeTable
from fluss_spark.tiering.migrate import legacy_tables, migrate_lake

SCHEMA = pa.schema([pa.field("id", pa.int64(), False), ("v", pa.string())])


def changes(ids, ct, start, tag="v"):
    return pa.table({"id": pa.array(ids, pa.int64()), "v": [f"{tag}{i}" for i in ids],
                     "_change_type": [ct] * len(ids),
                     "_log_offset": pa.array(range(start, start + len(ids)), pa.int64())})


def old_lake(root):
    pk = LegacyLakeWriter(table_dir(root, "db.pk"))
    pk.create(table="db.pk", table_id=11, schema=SCHEMA, primary_key=["id"], num_buckets=2)
    pk.commit_round(changes(range(50), "+I", -1), query_id="q-pk", batch_id=0,
                    fluss_offsets={"log": {"0": 0, "1": 0}}, snapshot_complete=True)
    pk.commit_round(pa.concat_tables([changes([3], "-D", 0), changes([4], "+U", 1, "u")]),
                    query_id="q-pk", batch_id=1, fluss_offsets={"log": {"0": 2, "1": 0}})
    lg = LegacyLakeWriter(table_dir(root, "db.log"))
    lg.create(table="db.log", table_id=12, schema=SCHEMA)
    for b in range(3):
        lg.commit_round(changes(range(b * 10, b * 10 + 10), "+A", b * 10), query_id="q-log",
                        batch_id=b, fluss_offsets={"log": {"0": b * 10 + 10}})
    (root / "_tiering").mkdir(exist_ok=True)
    (root / "_tiering" / "job.json").write_text(json.dumps({"lease_id": "tier-old"}))
    return {"db.pk": pk.read(), "db.log": lg.read()}


def test_a_legacy_lake_is_converted_with_its_position_and_the_job_refuses_it_before(tmp_path):
    before = old_lake(tmp_path)
    assert sorted(legacy_tables(tmp_path)) == ["db.log", "db.pk"]
    cfg = TieringConfig(lake=tmp_path, bootstrap_servers="h:1", table_pattern="db\\..*")
    with pytest.raises(TieringError, match="fluss-spark tier migrate --lake"):
        TieringJob(None, cfg)._check_lake()
    with pytest.raises(Exception, match="tier migrate"):
        LakeTable.open(tmp_path, "db.pk").state()

    rows = {r["table"]: r for r in migrate_lake(tmp_path)}
    assert rows["db.pk"]["rows"] == 49 and rows["db.log"]["rows"] == 30
    assert legacy_tables(tmp_path) == {}
    for name, old in before.items():
        t = LakeTable.open(tmp_path, name)
        assert sorted(t.read().to_pylist(), key=lambda r: r["id"]) == \
            sorted(old.to_pylist(), key=lambda r: r["id"])
    pk = LakeTable.open(tmp_path, "db.pk").state()
    # The position the old manifest recorded: the job continues with the next batch.
    assert pk.commit.query_id == "q-pk" and pk.commit.batch_id == 1
    assert pk.fluss_offsets == {"log": {"0": 2, "1": 0}}
    assert pk.commit.lease_id == "tier-old" and pk.operation == "migrate" and pk.is_pk
    assert pk.primary_key == ("id",) and pk.table_id == 11 and pk.num_buckets == 2
    # The old directories were moved aside; the Iceberg table took the table's place.
    assert (tmp_path / "_tiering" / "legacy" / "db" / "pk" / "_manifest").is_dir()
    assert not (tmp_path / "db" / "pk" / "_manifest").exists()
    # Running it again converts nothing and changes nothing.
    assert migrate_lake(tmp_path) == []
    assert LakeTable.open(tmp_path, "db.pk").state().snapshot_id == pk.snapshot_id
    TieringJob(None, cfg)._check_lake()


def test_a_conversion_interrupted_after_the_move_is_finished_by_the_next_run(tmp_path):
    old_lake(tmp_path)
    moved = tmp_path / "_tiering" / "legacy" / "db" / "log"
    moved.parent.mkdir(parents=True)
    (tmp_path / "db" / "log").rename(moved)      # what a run killed after the move leaves
    assert "db.log" in legacy_tables(tmp_path)
    migrate_lake(tmp_path)
    assert LakeTable.open(tmp_path, "db.log").read().num_rows == 30


def test_cli_tier_migrate_compact_and_expire(tmp_path, capsys):
    old_lake(tmp_path)
    assert cli_main(["tier", "migrate", "--lake", str(tmp_path), "--json"]) == 0
    assert {r["table"] for r in json.loads(capsys.readouterr().out)} == {"db.pk", "db.log"}
    assert cli_main(["tier", "migrate", "--lake", str(tmp_path)]) == 0
    assert "no table in the old format" in capsys.readouterr().out
    t = LakeTable.open(tmp_path, "db.log")
    for b in range(3, 6):
        t.commit_round(changes([100 + b], "+A", b * 10), query_id="q-log", batch_id=b)
    assert t.state().data_files == 4
    assert cli_main(["tier", "compact", "--lake", str(tmp_path), "--table", "db.log",
                     "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out == [{"table": "db.log", "files_before": 4, "files_after": 1, "rows": 33,
                    "snapshot_id": t.state().snapshot_id, "compacted": True}]
    assert cli_main(["tier", "expire", "--lake", str(tmp_path), "--older-than", "0s",
                     "--retain-last", "1", "--json"]) == 0
    exp = {r["table"]: r for r in json.loads(capsys.readouterr().out)}
    assert exp["db.log"]["snapshots"] == 1 and exp["db.log"]["expired_snapshots"] >= 4
    assert t.read().num_rows == 33 and t.state().commit.batch_id == 5
    assert cli_main(["tier", "expire", "--lake", str(tmp_path), "--retain-last", "0"]) == 1
    assert "--retain-last" in capsys.readouterr().err
