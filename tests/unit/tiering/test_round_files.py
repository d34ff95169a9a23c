"""A round written task by task (as the executors write it) and committed once on the driver."""

from __future__ import annotations

import pickle

import pyarrow as pa
import pytest

from fluss_spark.tiering import lake as lake_mod
from fluss_spark.tiering.apply import apply_pk
from fluss_spark.tiering.lake import LakeTable
from fluss_spark.tiering.round_files import RoundFiles, RoundWriter, SplitOverlap
from fluss_spark.tiering.round_files import _RESULT as RESULT

SCHEMA = pa.schema([pa.field("id", pa.int64(), False), ("v", pa.string())])


def rows(items, ct="+I", start=0):
    return pa.table({"id": pa.array([i for i, _ in items], pa.int64()),
                     "v": [v for _, v in items], "_change_type": [ct] * len(items),
                     "_log_offset": pa.array(range(start, start + len(items)), pa.int64())})


def table(root, pk=True):
    t = LakeTable.open(root, "db.pk" if pk else "db.log")
    t.create(table=t.name, table_id=5, schema=SCHEMA, primary_key=["id"] if pk else [])
    return t


def run_tasks(writer: RoundWriter, parts: list[pa.Table]) -> pa.Table:
    """What the round source collects: each task's result rows, the writer passed as an option
    and shipped by pickle."""
    shipped = pickle.loads(pickle.dumps(RoundWriter.from_json(writer.to_json())))
    out = [b for part in parts for b in shipped(iter(part.to_batches()))]
    return pa.Table.from_batches(out, schema=RESULT)


def test_a_pk_round_written_by_several_tasks_equals_the_round_applied_at_once(tmp_path):
    t = table(tmp_path)
    t.commit_round(rows([(i, f"v{i}") for i in range(10)], start=-1), query_id="q", batch_id=0)
    # Two tasks, key-disjoint (two buckets): upserts, a delete, a key touched twice in one task.
    a = pa.concat_tables([rows([(1, "a1"), (3, "a3")], "+U", 10), rows([(1, "a1b")], "+U", 12),
                          rows([(11, "new")], "+I", 13)])
    b = pa.concat_tables([rows([(2, "x")], "-D", 20), rows([(4, "b4")], "+U", 21)])
    writer = t.writer()
    written = RoundFiles.merge(run_tasks(writer, [a, b, a.slice(0, 0)]), writer.primary_key)
    assert written.rows_in == a.num_rows + b.num_rows
    assert sorted(written.touched.column("id").to_pylist()) == [1, 2, 3, 4, 11]
    st = t.commit_files(written, query_id="q", batch_id=1, fluss_offsets={"log": {"0": 22}})
    expected = apply_pk(None, pa.concat_tables(
        [rows([(i, f"v{i}") for i in range(10)], start=-1), a, b]), ["id"])
    assert t.read().sort_by("id").to_pylist() == expected.to_pylist()
    assert st.rows == 10 and st.commit.batch_id == 1 and st.fluss_offsets == {"log": {"0": 22}}
    assert int(t.iceberg().current_snapshot().summary["fluss.rows-in"]) == a.num_rows + b.num_rows


def test_a_log_round_of_several_tasks_is_appended_once(tmp_path):
    t = table(tmp_path, pk=False)
    writer = t.writer()
    parts = [rows([(i, str(i)) for i in range(k * 5, k * 5 + 5)], "+A", k * 5) for k in range(3)]
    written = RoundFiles.merge(run_tasks(writer, parts), ())
    assert written.touched is None and len(written.files) == 3 and written.rows_in == 15
    assert t.commit_files(written, query_id="q", batch_id=0).rows == 15
    assert t.commit_files(written, query_id="q", batch_id=0) is None     # replayed: skipped
    assert sorted(t.read().column("id").to_pylist()) == list(range(15))


def test_a_key_touched_by_two_tasks_is_refused(tmp_path):
    t = table(tmp_path)
    writer = t.writer()
    results = run_tasks(writer, [rows([(1, "a")], "+I", 0), rows([(1, "b")], "+U", 1)])
    with pytest.raises(SplitOverlap, match="1 key"):
        RoundFiles.merge(results, writer.primary_key)


def test_an_empty_round_still_commits_its_position(tmp_path):
    t = table(tmp_path)
    written = RoundFiles.merge(run_tasks(t.writer(), []), ("id",))
    assert written.files == () and written.rows_in == 0
    st = t.commit_files(written, query_id="q", batch_id=0, fluss_offsets={"log": {"0": 3}})
    assert st.commit.batch_id == 0 and st.rows == 0 and st.fluss_offsets == {"log": {"0": 3}}


def test_the_copy_on_write_of_a_pk_round_runs_as_one_shipped_task_per_data_file(tmp_path):
    t = table(tmp_path)
    for b in range(3):     # three data files, keys b*10 .. b*10+9
        t.commit_round(rows([(b * 10 + i, "old") for i in range(10)], start=-1), query_id="q",
                       batch_id=b)
    calls = []

    def shipped(fn, items):
        """Like Spark: the function and each item travel pickled, results come back pickled."""
        calls.append(len(items))
        fn = pickle.loads(pickle.dumps(fn))
        return [pickle.loads(pickle.dumps(fn(pickle.loads(pickle.dumps(x))))) for x in items]

    # Touch keys of the first two files only: the third is checked but not rewritten.
    change = pa.concat_tables([rows([(3, "new")], "+U", 0), rows([(12, "x")], "-D", 1)])
    st = t.commit_files(t.writer().write(change), query_id="q", batch_id=3, run=shipped)
    assert calls == [3] and st.rows == 29
    got = dict(zip(t.read().column("id").to_pylist(), t.read().column("v").to_pylist()))
    assert got[3] == "new" and 12 not in got and sorted(got) == sorted(set(range(30)) - {12})
    files = {task.file.file_path for task in t.iceberg().scan().plan_files()}
    assert len(files) == 4      # the untouched file, two copies, the round's new row


def test_the_copy_on_write_on_threads_equals_it_in_process(tmp_path):
    results = {}
    for run in (lake_mod.in_process, lake_mod.on_threads):
        t = table(tmp_path / run.__name__)
        for b in range(4):
            t.commit_round(rows([(b * 100 + i, "old") for i in range(100)], start=-1),
                           query_id="q", batch_id=b)
        change = rows([(k, "new") for k in range(0, 400, 7)], "+U", 0)
        t.commit_files(t.writer().write(change), query_id="q", batch_id=4, run=run)
        results[run.__name__] = t.read().sort_by("id").to_pylist()
    assert results["in_process"] == results["on_threads"]
    assert sum(r["v"] == "new" for r in results["on_threads"]) == len(range(0, 400, 7))


def test_catalog_secrets_come_from_each_process_environment_never_with_the_task(tmp_path,
                                                                               monkeypatch):
    from fluss_spark.tiering.lake_catalog import LakeError
    variable = "PYICEBERG_CATALOG__FLUSS_LAKE__S3__SECRET_ACCESS_KEY"
    monkeypatch.setenv(variable, "shh-42")
    t = table(tmp_path)
    assert t.iceberg().io.properties["s3.secret-access-key"] == "shh-42"   # the driver's catalog
    writer = t.writer()
    assert writer.secrets == ("s3.secret-access-key",)
    assert b"shh-42" not in pickle.dumps(writer)
    monkeypatch.delenv(variable)            # an executor started without it
    with pytest.raises(LakeError, match=f"no {variable} in its environment.*"
                                        f"spark.executorEnv.{variable}="):
        run_tasks(writer, [rows([(1, "a")])])
    monkeypatch.setenv(variable, "shh-42")  # given to the executors
    written = RoundFiles.merge(run_tasks(writer, [rows([(1, "a")])]), writer.primary_key)
    assert len(written.files) == 1
