"""The Iceberg lake: schema mapping, one commit per round with its offsets, idempotency,
concurrent committers, time travel, compaction and expiry (pyiceberg, no Spark)."""

from __future__ import annotations

import datetime as dt
import json
import os
import time
from decimal import Decimal

import pyarrow as pa
import pytest

from fluss_spark.tiering import lake as lake_mod
from fluss_spark.tiering.lake import (CommitConflict, LakeError, LakeTable, catalog_properties,
                                      list_lake_tables, table_dir, write_lake_file)

SCHEMA = pa.schema([pa.field("id", pa.int64(), False), ("v", pa.string())])


def rows(items, ct="+I", start=0):
    return pa.table({"id": pa.array([i for i, _ in items], pa.int64()),
                     "v": [v for _, v in items], "_change_type": [ct] * len(items),
                     "_log_offset": pa.array(range(start, start + len(items)), pa.int64())})


def pk_table(root, name="db.pk", table_id=7):
    t = LakeTable.open(root, name, clock=lambda: 1700.0)
    t.create(table=name, table_id=table_id, schema=SCHEMA, primary_key=["id"], num_buckets=3)
    return t


def log_table(root):
    t = LakeTable.open(root, "db.log")
    t.create(table="db.log", table_id=1, schema=SCHEMA)
    return t


def test_create_maps_the_schema_with_the_key_as_identifier_fields_and_checks_the_table_id(
        tmp_path):
    schema = pa.schema([pa.field("k1", pa.int32(), False), pa.field("k2", pa.string(), False),
                        ("b", pa.int8()), ("s", pa.int16()), ("d", pa.decimal128(10, 2)),
                        ("ts", pa.timestamp("ms")), ("tz", pa.timestamp("us", tz="UTC")),
                        ("day", pa.date32()), ("bin", pa.binary()), ("f", pa.float32()),
                        ("ok", pa.bool_())])
    t = LakeTable.open(tmp_path, "db.types")
    st = t.create(table="db.types", table_id=3, schema=schema, primary_key=["k1", "k2"])
    ice = t.iceberg()
    assert [ice.schema().find_field(i).name for i in ice.schema().identifier_field_ids] == \
        ["k1", "k2"]
    assert [str(f.field_type) for f in ice.schema().fields] == [
        "int", "string", "int", "int", "decimal(10, 2)", "timestamp", "timestamptz", "date",
        "binary", "float", "boolean"]
    assert st.snapshot_id is None and not st.snapshot_complete and st.schema == schema
    row = {"k1": 1, "k2": "a", "b": -3, "s": 300, "d": Decimal("1.25"),
           "ts": dt.datetime(2024, 1, 2, 3, 4, 5, 6000),
           "tz": dt.datetime(2024, 1, 2, tzinfo=dt.timezone.utc), "day": dt.date(2024, 1, 2),
           "bin": b"\x00\x01", "f": 1.5, "ok": True}
    changes = pa.Table.from_pylist([row], schema=schema).append_column(
        "_change_type", pa.array(["+I"])).append_column("_log_offset", pa.array([-1], pa.int64()))
    t.commit_round(changes, query_id="q", batch_id=0, fluss_offsets={"log": {"0": 1}})
    back = t.read()
    # Read back in the Fluss table's types (Iceberg stores int8/int16 as int, timestamps in us).
    assert back.schema.types == schema.types and back.to_pylist() == [row]
    # Again the same table: fine. Same name, another Fluss table id: refused.
    t.create(table="db.types", table_id=3, schema=schema, primary_key=["k1", "k2"])
    with pytest.raises(LakeError, match="dropped and recreated"):
        t.create(table="db.types", table_id=4, schema=schema, primary_key=["k1", "k2"])
    assert [x.name for x in list_lake_tables(tmp_path)] == ["db.types"]
    # A table of another writer in the same catalog is not part of the lake.
    t.catalog.create_table(("db", "foreign"), schema=pa.schema([("x", pa.int64())]))
    assert [x.name for x in list_lake_tables(tmp_path)] == ["db.types"]
    # The local warehouse puts the table where table_dir says; the path opens the same table.
    assert (table_dir(tmp_path, "db.types") / "metadata").is_dir()
    assert LakeTable(table_dir(tmp_path, "db.types")).read().num_rows == 1


def test_a_type_iceberg_cannot_hold_is_refused_naming_the_column(tmp_path):
    t = LakeTable.open(tmp_path, "db.bad")
    with pytest.raises(LakeError, match="column 'xs'"):
        t.create(table="db.bad", table_id=1,
                 schema=pa.schema([("id", pa.int64()), ("xs", pa.list_(pa.int32()))]))


def test_each_round_is_one_commit_carrying_its_offsets_lease_and_batch(tmp_path):
    t = pk_table(tmp_path)
    st = t.commit_round(rows([(i, f"v{i}") for i in range(100)], start=-1), query_id="q1",
                        batch_id=0, fluss_offsets={"log": {"0": 5}, "snapshot": {"0": [3, 9, 4]}},
                        snapshot_complete=False, lease_id="tier-x")
    assert st.rows == 100 and st.rows_tiered == 100 and not st.snapshot_complete
    assert st.commit.lease_id == "tier-x" and st.commit.committed_ms == 1_700_000
    upd = pa.concat_tables([rows([(5, "v5")], "-U", 10), rows([(5, "five")], "+U", 11),
                            rows([(6, "v6")], "-D", 12), rows([(500, "new")], "+I", 13)])
    before = len(t.iceberg().metadata.snapshots)
    st2 = t.commit_round(upd, query_id="q1", batch_id=1, fluss_offsets={"log": {"0": 14}},
                         lease_id="tier-x")
    ice = t.iceberg()
    # Copy-on-write of the files holding a touched key + the keys' last rows: one commit, one
    # overwrite snapshot carrying the summary.
    new = ice.metadata.snapshots[before:]
    assert [s.summary.operation.value for s in new] == ["overwrite"]
    assert new[-1].summary["deleted-data-files"] == "1"
    summary = new[-1].summary.additional_properties
    assert json.loads(summary["fluss.offsets"]) == {"log": {"0": 14}}
    assert summary["fluss.batch-id"] == "1" and summary["fluss.lease-id"] == "tier-x"
    assert summary["fluss.query-id"] == "q1" and summary["fluss.snapshot-complete"] == "true"
    state = {r["id"]: r["v"] for r in t.read().to_pylist()}
    assert len(state) == 100 and state[5] == "five" and 6 not in state and state[500] == "new"
    assert st2.rows == 100 and st2.rows_tiered == 104
    # Time travel: every round's snapshot shows the table at that round's offsets.
    r0, r1 = t.rounds()
    assert r0.state.fluss_offsets["log"] == {"0": 5} and t.read(r0.snapshot_id).num_rows == 100
    assert {r["id"]: r["v"] for r in t.read(r0.snapshot_id).to_pylist()}[6] == "v6"
    assert r1.snapshot_id == st2.snapshot_id and r1.state.commit.batch_id == 1
    # Keys no file holds rewrite nothing; a key in one of two files rewrites only that file.
    t.commit_round(rows([(1000, "a")], "+I", 20), query_id="q1", batch_id=2)
    assert "deleted-data-files" not in t.iceberg().current_snapshot().summary.additional_properties
    t.commit_round(rows([(1000, "b")], "+U", 21), query_id="q1", batch_id=3)
    summary = t.iceberg().current_snapshot().summary
    assert summary["deleted-data-files"] == "1" and summary["total-data-files"] == "3"
    assert {r["id"]: r["v"] for r in t.read().to_pylist()}[1000] == "b"


def test_composite_keys_are_upserted_and_deleted_by_the_whole_key(tmp_path):
    schema = pa.schema([pa.field("a", pa.int64(), False), pa.field("b", pa.string(), False),
                        ("v", pa.int64())])
    t = LakeTable.open(tmp_path, "db.ck")
    t.create(table="db.ck", table_id=1, schema=schema, primary_key=["a", "b"])

    def ch(items, ct, start):
        return pa.table({"a": pa.array([a for a, _, _ in items], pa.int64()),
                         "b": [b for _, b, _ in items], "v": pa.array([v for *_, v in items]),
                         "_change_type": [ct] * len(items),
                         "_log_offset": pa.array(range(start, start + len(items)), pa.int64())})
    t.commit_round(ch([(1, "x", 1), (1, "y", 2), (2, "x", 3)], "+I", 0), query_id="q",
                   batch_id=0)
    t.commit_round(pa.concat_tables([ch([(1, "y", 2)], "-D", 3), ch([(2, "x", 30)], "+U", 4)]),
                   query_id="q", batch_id=1)
    assert sorted(map(tuple, (r.values() for r in t.read().to_pylist()))) == \
        [(1, "x", 1), (2, "x", 30)]


def test_a_replayed_batch_is_not_applied_twice(tmp_path):
    t = log_table(tmp_path)
    batch = rows([(1, "a"), (2, "b")], "+A")
    assert t.commit_round(batch, query_id="q", batch_id=3) is not None
    assert t.already_applied("q", 3) and t.already_applied("q", 2)
    n = len(t.iceberg().metadata.snapshots)
    assert t.commit_round(batch, query_id="q", batch_id=3) is None
    assert t.read().num_rows == 2 and len(t.iceberg().metadata.snapshots) == n
    t.commit_round(batch, query_id="q", batch_id=4)
    assert t.read().num_rows == 4


def test_another_query_id_on_a_written_table_is_refused(tmp_path):
    t = pk_table(tmp_path)
    t.commit_round(rows([(1, "a")]), query_id="q1", batch_id=0)
    with pytest.raises(LakeError, match="checkpoint was replaced"):
        t.commit_round(rows([(1, "a")]), query_id="q2", batch_id=0)


def _stale(stale, monkeypatch):
    """Make the next load of a lake table return ``stale`` (what a committer read before
    somebody else committed)."""
    real = LakeTable.iceberg
    calls = {"n": 0}

    def iceberg(self):
        calls["n"] += 1
        return stale if calls["n"] == 1 else real(self)
    monkeypatch.setattr(LakeTable, "iceberg", iceberg)


def test_a_concurrent_committer_is_detected_and_refused(tmp_path, monkeypatch):
    t = log_table(tmp_path)
    t.commit_round(rows([(1, "a")], "+A"), query_id="q", batch_id=0)
    written = t.writer().write(rows([(2, "b")], "+A"))
    stale = t.iceberg()
    # Another writer (another job on the same catalog) commits in between.
    ice = LakeTable.open(tmp_path, "db.log").iceberg()
    _stale(stale, monkeypatch)
    ice.append(pa.table({"id": pa.array([9], pa.int64()), "v": ["other"]}, schema=SCHEMA),
               snapshot_properties={"fluss.query-id": "q-other", "fluss.batch-id": "0",
                                    "fluss.operation": "round"})
    with pytest.raises(CommitConflict, match="only one tiering job"):
        t.commit_files(written, query_id="q", batch_id=1)
    assert sorted(t.read().column("id").to_pylist()) == [1, 9]


def test_a_round_that_loses_to_a_compaction_is_applied_again(tmp_path, monkeypatch):
    t = log_table(tmp_path)
    for i in range(3):
        t.commit_round(rows([(i, str(i))], "+A", i), query_id="q", batch_id=i)
    written = t.writer().write(rows([(3, "3")], "+A", 3))
    stale = t.iceberg()
    assert t.compact(max_files=1).data_files == 1   # commits while the round is "writing"
    _stale(stale, monkeypatch)
    st = t.commit_files(written, query_id="q", batch_id=3)
    assert st.commit.batch_id == 3 and sorted(t.read().column("id").to_pylist()) == [0, 1, 2, 3]


def test_a_round_another_attempt_already_committed_is_not_applied_twice(tmp_path, monkeypatch):
    t = log_table(tmp_path)
    t.commit_round(rows([(0, "0")], "+A"), query_id="q", batch_id=0)
    written = t.writer().write(rows([(1, "1")], "+A"))
    stale = t.iceberg()
    LakeTable.open(tmp_path, "db.log").commit_round(rows([(1, "1")], "+A"), query_id="q",
                                                    batch_id=1)
    _stale(stale, monkeypatch)
    assert t.commit_files(written, query_id="q", batch_id=1) is None
    assert sorted(t.read().column("id").to_pylist()) == [0, 1]


def test_compaction_keeps_rows_and_the_rounds_position(tmp_path):
    t = log_table(tmp_path)
    for i in range(5):
        t.commit_round(rows([(i, str(i))], "+A", i), query_id="q", batch_id=i,
                       fluss_offsets={"log": {"0": i + 1}})
    assert t.state().data_files == 5
    assert t.compact(max_files=10) is None
    st = t.compact(max_files=3)
    assert st.data_files == 1 and st.commit.batch_id == 4 and st.operation == "compact"
    assert st.fluss_offsets == {"log": {"0": 5}} and st.rows == 5
    assert sorted(t.read().column("id").to_pylist()) == [0, 1, 2, 3, 4]


def test_expire_drops_old_snapshots_and_the_files_only_they_used(tmp_path):
    t = pk_table(tmp_path)
    for i in range(4):
        t.commit_round(rows([(1, f"v{i}")], "+U", i), query_id="q", batch_id=i)
    data = table_dir(tmp_path, "db.pk") / "data"
    orphan_old, orphan_new = data / "orphan-old.parquet", data / "orphan-new.parquet"
    for p in (orphan_old, orphan_new):
        p.write_bytes(b"PAR1")
    os.utime(orphan_old, (time.time() - 7200, time.time() - 7200))
    files_before = len(list(data.iterdir()))
    t.clock = time.time
    r = t.expire(int(time.time() * 1000) + 1, retain_last=2)
    assert len(r["expired_snapshots"]) == 2      # 4 rounds, one snapshot each
    assert r["snapshots"] == 2 and not orphan_old.exists() and orphan_new.exists()
    assert len(list(data.iterdir())) < files_before
    assert t.read().to_pylist() == [{"id": 1, "v": "v3"}]
    assert t.state().commit.batch_id == 3


def test_the_lake_file_records_a_catalog_without_secrets(tmp_path):
    assert catalog_properties(tmp_path)["type"] == "sql"
    with pytest.raises(LakeError, match="PYICEBERG_CATALOG__FLUSS_LAKE__"):
        write_lake_file(tmp_path, {"type": "rest", "s3.secret-access-key": "x"})
    write_lake_file(tmp_path, {"type": "rest", "uri": "http://h:8181"})
    assert catalog_properties(tmp_path) == {"type": "rest", "uri": "http://h:8181"}
    (tmp_path / "_tiering" / "lake.json").write_text("{")
    with pytest.raises(LakeError, match="corrupt"):
        catalog_properties(tmp_path)


def test_catalog_properties_from_pyiceberg_variables_are_read_when_the_catalog_opens():
    from fluss_spark.tiering.lake_catalog import env_properties, env_variable
    assert env_variable("s3.secret-access-key") == \
        "PYICEBERG_CATALOG__FLUSS_LAKE__S3__SECRET_ACCESS_KEY"
    assert env_properties({"PYICEBERG_CATALOG__FLUSS_LAKE__S3__SECRET_ACCESS_KEY": "x",
                           "pyiceberg_catalog__fluss_lake__s3__endpoint": "http://h",
                           "PYICEBERG_CATALOG__OTHER__S3__ENDPOINT": "no",
                           "AWS_SECRET_ACCESS_KEY": "no"}) == {
        "s3.secret-access-key": "x", "s3.endpoint": "http://h"}


def test_files_have_one_name_whatever_form_their_location_takes():
    from fluss_spark.tiering.lake_files import file_key
    assert file_key("/w/db/t/data/a.parquet") == file_key("file:///w/db/t/data/a.parquet")
    assert file_key("s3://fluss/lake/db/t/data/a.parquet") == "s3:fluss/lake/db/t/data/a.parquet"


def test_missing_tables_and_bad_names_are_reported(tmp_path):
    (tmp_path / "_tiering").mkdir()
    with pytest.raises(LakeError, match="no lake table db.nope"):
        LakeTable.open(tmp_path, "db.nope").state()
    with pytest.raises(LakeError, match="not db.name"):
        table_dir(tmp_path, "../etc")
    with pytest.raises(LakeError, match="not inside a lake directory"):
        LakeTable(tmp_path.parent / "elsewhere" / "t")
    assert lake_mod.identifier("db.t_1") == ("db", "t_1")
