"""The old Parquet-manifest lake that `tier migrate` reads, made by its test writer: commits,
idempotency, vacuum, and the reader's errors."""

from __future__ import annotations

import json
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from fluss_spark.protocol.rows import split_by_bucket
from fluss_spark.testing.legacy_lake import (CommitConflict, LegacyLakeWriter, list_lake_tables,
                                             table_dir)
from fluss_spark.tiering.legacy import LegacyLakeError, LegacyManifest, LegacyTable

SCHEMA = pa.schema([pa.field("id", pa.int64(), False), ("v", pa.string())])


def rows(items, ct="+I", start=0):
    return pa.table({"id": pa.array([i for i, _ in items], pa.int64()),
                     "v": [v for _, v in items], "_change_type": [ct] * len(items),
                     "_log_offset": pa.array(range(start, start + len(items)), pa.int64())})


def pk_table(tmp_path, buckets=3):
    t = LegacyLakeWriter(table_dir(tmp_path, "db.pk"), clock=lambda: 1700.0)
    t.create(table="db.pk", table_id=7, schema=SCHEMA, primary_key=["id"], num_buckets=buckets)
    return t


def test_create_is_version_zero_and_empty_and_checks_the_table_id(tmp_path):
    t = pk_table(tmp_path)
    assert t.versions() == [0]
    assert not t.manifest().snapshot_complete  # a PK table has its snapshot phase ahead
    assert t.read().num_rows == 0 and t.read().schema.names == ["id", "v"]
    assert t.create(table="db.pk", table_id=7, schema=SCHEMA, primary_key=["id"]).table_version == 0
    with pytest.raises(LegacyLakeError, match="dropped and recreated"):
        t.create(table="db.pk", table_id=8, schema=SCHEMA, primary_key=["id"])
    assert [x.path for x in list_lake_tables(tmp_path)] == [t.path]


def test_pk_rounds_keep_one_file_per_bucket_and_record_the_commit(tmp_path):
    t = pk_table(tmp_path)
    m = t.commit_round(rows([(i, f"v{i}") for i in range(100)], start=-1), query_id="q1",
                       batch_id=0, fluss_offsets={"log": {"0": 5}}, snapshot_complete=False)
    assert m.table_version == 1 and m.rows == 100 and m.rows_tiered == 100
    assert {f.bucket for f in m.files} == {0, 1, 2} and len(m.files) == 3
    # Every file holds exactly the keys Fluss puts in that bucket.
    for f in m.files:
        part = pq.read_table(t.path / f.path)
        assert part.num_rows == f.rows
        assert set(split_by_bucket(part, ["id"], 3)) == {f.bucket}
    upd = pa.concat_tables([rows([(5, "v5")], "-U", 10), rows([(5, "five")], "+U", 11),
                            rows([(6, "v6")], "-D", 12)])
    m2 = t.commit_round(upd, query_id="q1", batch_id=1, snapshot_complete=True)
    state = {r["id"]: r["v"] for r in t.read().to_pylist()}
    assert len(state) == 99 and state[5] == "five" and 6 not in state
    assert m2.commit.batch_id == 1 and m2.commit.committed_ms == 1_700_000
    assert m2.fluss_offsets == {"log": {"0": 5}}  # kept when a round does not give new ones
    # The old version is still readable (time travel) until vacuumed.
    assert t.read(1).num_rows == 100


def test_a_replayed_batch_is_not_applied_twice(tmp_path):
    t = LegacyLakeWriter(tmp_path / "log")
    t.create(table="db.log", table_id=1, schema=SCHEMA)
    batch = rows([(1, "a"), (2, "b")], "+A")
    assert t.commit_round(batch, query_id="q", batch_id=3) is not None
    assert t.already_applied("q", 3) and t.already_applied("q", 2)
    assert t.commit_round(batch, query_id="q", batch_id=3) is None
    assert t.read().num_rows == 2 and t.manifest().table_version == 1
    t.commit_round(batch, query_id="q", batch_id=4)
    assert t.read().num_rows == 4


def test_another_query_id_on_a_written_table_is_refused(tmp_path):
    t = pk_table(tmp_path)
    t.commit_round(rows([(1, "a")]), query_id="q1", batch_id=0)
    with pytest.raises(LegacyLakeError, match="checkpoint was replaced"):
        t.commit_round(rows([(1, "a")]), query_id="q2", batch_id=0)


def test_commit_is_exclusive_and_an_interrupted_round_leaves_only_orphans(tmp_path):
    t = pk_table(tmp_path)
    t.commit_round(rows([(1, "a")]), query_id="q", batch_id=0)
    # A concurrent writer that already took version 2.
    other = json.loads((t.manifest_dir / f"{1:020d}.json").read_text())
    other["table_version"] = 2
    (t.manifest_dir / f"{2:020d}.json").write_text(json.dumps(other))
    with pytest.raises(CommitConflict):
        t._commit(LegacyManifest.from_json(other))
    assert not list(t.manifest_dir.glob(".tmp-*"))
    # Data written by a round that never committed is invisible and vacuumed.
    orphan = t.path / "data" / "b0" / "part-00000099-dead.parquet"
    pq.write_table(pa.table({"id": [9], "v": ["x"]}), orphan)
    assert orphan not in t.files()
    removed = t.vacuum(retain_versions=1)
    assert orphan in removed and not orphan.exists()
    assert all(p.exists() for p in t.files())
    assert t.versions() == [2]


def test_vacuum_keeps_the_files_of_retained_versions(tmp_path):
    t = pk_table(tmp_path, buckets=1)
    for i in range(5):
        t.commit_round(rows([(1, f"v{i}")], "+U", i), query_id="q", batch_id=i)
    t.vacuum(retain_versions=2)
    assert t.versions() == [4, 5]
    assert t.read(4).to_pylist() == [{"id": 1, "v": "v3"}]
    assert t.read().to_pylist() == [{"id": 1, "v": "v4"}]
    assert len(list((t.path / "data").rglob("*.parquet"))) == 2


def test_compaction_merges_log_files_in_order(tmp_path):
    t = LegacyLakeWriter(tmp_path / "log")
    t.create(table="db.log", table_id=1, schema=SCHEMA)
    for i in range(5):
        t.commit_round(rows([(i, str(i))], "+A", i), query_id="q", batch_id=i)
    assert len(t.manifest().files) == 5
    assert t.compact(max_files=10) is None
    m = t.compact(max_files=3)
    assert len(m.files) == 1 and m.commit.batch_id == 4
    assert t.read().column("id").to_pylist() == [0, 1, 2, 3, 4]


def test_corrupt_foreign_and_newer_manifests_are_reported(tmp_path):
    t = pk_table(tmp_path)
    p = t.manifest_dir / f"{1:020d}.json"
    p.write_text("{nope")
    with pytest.raises(LegacyLakeError, match="not JSON"):
        t.manifest()
    p.write_text(json.dumps({"format": "other"}))
    with pytest.raises(LegacyLakeError, match="not a fluss-lake manifest"):
        t.manifest()
    p.write_text(json.dumps({"format": "fluss-lake", "version": 99}))
    with pytest.raises(LegacyLakeError, match="upgrade fluss_spark"):
        t.manifest()
    os.unlink(p)
    with pytest.raises(LegacyLakeError, match="no lake table"):
        LegacyTable(tmp_path / "missing").manifest()


def test_table_names_map_to_paths_and_bad_names_are_refused(tmp_path):
    assert table_dir(tmp_path, "db.t_1") == tmp_path / "db" / "t_1"
    with pytest.raises(LegacyLakeError):
        table_dir(tmp_path, "../etc")
