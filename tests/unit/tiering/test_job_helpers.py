"""The tiering job's checkpoint readers, job record, lock and packaging (no Spark)."""

from __future__ import annotations

import json
import zipfile

import pytest

from fluss_spark.cli import main as cli_main
from fluss_spark.errors import ConfigError
from fluss_spark.connector.offsets import decode
from fluss_spark.tiering.config import JobRecord, TieringConfig, TieringError
from fluss_spark.tiering.job import TieringJob
from fluss_spark.tiering.restarts import error_summary
from fluss_spark.tiering.table_query import batch_end_offset, checkpoint_query_id, lake_offsets
from fluss_spark.tiering.submit import build_pyfiles_zip, python_env, spark_submit_command

OFFSET = {"version": 1, "lease_id": "tier-x", "tables": {
    "3": {"name": "db.pk", "snapshot": {"0": [7, 100, 40, 100], "1": [8, 50, 50, 60]},
          "log": {"0": 100, "1": 61}},
    "4": {"name": "db.log", "snapshot": {}, "log": {"0": 9}}}}


def write_checkpoint(d, batch_id=3):
    (d / "offsets").mkdir(parents=True)
    (d / "metadata").write_text(json.dumps({"id": "query-1"}) + "\n")
    (d / "offsets" / str(batch_id)).write_text(
        "v1\n" + json.dumps({"batchWatermarkMs": 0, "batchTimestampMs": 1}) + "\n" +
        json.dumps(OFFSET))


def test_checkpoint_readers_take_the_query_id_and_the_batch_end_offset(tmp_path):
    write_checkpoint(tmp_path)
    assert checkpoint_query_id(tmp_path) == "query-1"
    assert batch_end_offset(tmp_path, 3) == decode(OFFSET)
    with pytest.raises(TieringError, match="batch 4"):
        batch_end_offset(tmp_path, 4)
    with pytest.raises(TieringError, match="query id"):
        checkpoint_query_id(tmp_path / "none")


def test_lake_offsets_keep_a_tables_positions_and_tell_if_its_snapshot_is_done():
    offsets, done = lake_offsets(decode(OFFSET), "db.pk")
    assert offsets == {"log": {"0": 100, "1": 61},
                       "snapshot": {"0": [7, 100, 40], "1": [8, 50, 50]}}
    assert not done
    assert lake_offsets(decode(OFFSET), "db.log") == ({"log": {"0": 9}, "snapshot": {}}, True)
    with pytest.raises(TieringError, match="db.other"):
        lake_offsets(decode(OFFSET), "db.other")


def test_job_record_is_created_once_and_reused(tmp_path):
    cfg = TieringConfig(lake=tmp_path, bootstrap_servers="h:1", table_pattern="db\\..*")
    a = JobRecord.load_or_create(tmp_path, cfg)
    b = JobRecord.load_or_create(tmp_path, cfg)
    assert a == b and a.lease_id == f"tier-{a.job_id}"
    with pytest.raises(ConfigError, match="not a valid regex"):
        TieringConfig(lake=tmp_path, bootstrap_servers="h:1", table_pattern="(")
    with pytest.raises(ConfigError, match="copy_on_write is 'executor'; use one of auto, tasks"):
        TieringConfig(lake=tmp_path, bootstrap_servers="h:1", table_pattern=".*",
                      copy_on_write="executor")


def test_one_job_per_lake(tmp_path):
    cfg = TieringConfig(lake=tmp_path, bootstrap_servers="h:1", table_pattern=".*")
    first = TieringJob(None, cfg)
    first._lock()
    try:
        with pytest.raises(TieringError, match="another tiering job"):
            TieringJob(None, cfg)._lock()
    finally:
        first._lock_fh.close()
    TieringJob(None, cfg)._lock()  # free again once the holder is gone


def test_py_files_zip_holds_the_client_side_package_and_is_reproducible(tmp_path, capsys):
    a = build_pyfiles_zip(tmp_path / "a.zip")
    b = build_pyfiles_zip(tmp_path / "b.zip")
    assert a.read_bytes() == b.read_bytes()
    names = zipfile.ZipFile(a).namelist()
    assert "fluss_spark/connector/source.py" in names and "fluss_spark/tiering/job.py" in names
    assert not any(n.startswith(("fluss_spark/server/", "fluss_spark/metadata/")) for n in names)
    assert cli_main(["package", "--out", str(tmp_path / "c.zip"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["files"] == len(names)


def test_spark_submit_command_and_env():
    cmd = spark_submit_command("job.py", ["--x", 1], py_files=["a.zip"])
    assert cmd[0].endswith("spark-submit") and cmd[-3:] == ["job.py", "--x", "1"]
    assert cmd[cmd.index("--py-files") + 1] == "a.zip"
    env = python_env("/usr/bin/python9", base={})
    assert env == {"PYSPARK_PYTHON": "/usr/bin/python9",
                   "PYSPARK_DRIVER_PYTHON": "/usr/bin/python9"}


def test_error_summary_names_the_fluss_error_inside_a_spark_failure():
    wrapped = Exception("[PYTHON_STREAMING_DATA_SOURCE_RUNTIME_ERROR] failed\nTraceback:\n"
                        "  File \"x.py\"\nfluss_spark.errors.TableNotExist: table db.t does not "
                        "exist\n\tat org.apache.spark...")
    assert error_summary(wrapped) == "fluss_spark.errors.TableNotExist: table db.t does not exist"
    assert error_summary(Exception("plain\nmore")) == "plain"


def test_error_summary_names_the_task_error_of_a_failed_spark_job():
    wrapped = Exception(
        "An exception was raised by the Python Proxy. Return Message: Traceback (most recent "
        "call last):\n  File \"job.py\", line 3, in __call__\npy4j.protocol.Py4JJavaError: An "
        "error occurred while calling o99.collect.\n: org.apache.spark.SparkException: Job aborted "
        "due to stage failure: Task 0 in stage 3.0 failed 1 times, most recent failure: Lost task "
        "0.0 in stage 3.0 (TID 5) (192.0.2.2 executor driver): java.io.IOException: disk gone\n"
        "\tat org.apache.spark.scheduler.ResultTask.runTask(ResultTask.scala:86)")
    assert error_summary(wrapped) == "java.io.IOException: disk gone"
    frames_only = Exception("header\njava.lang.IllegalStateException: bad\n\tat a.b(C.java:1)")
    assert error_summary(frames_only) == "java.lang.IllegalStateException: bad"


def _log_lake(tmp_path, rounds=3):
    import pyarrow as pa
    from fluss_spark.tiering.lake import LakeTable
    t = LakeTable.open(tmp_path, "db.log")
    t.create(table="db.log", table_id=4, schema=pa.schema([("k", pa.int64())]))
    for b in range(rounds):
        t.commit_round(pa.table({"k": pa.array([b], pa.int64()), "_change_type": ["+A"],
                                 "_log_offset": pa.array([b], pa.int64())}),
                       query_id="query-1", batch_id=b, fluss_offsets={"log": {"0": b + 1}})
    return t


def test_a_batch_that_does_not_follow_the_lakes_last_round_is_refused(tmp_path):
    from fluss_spark.tiering.table_query import TableSink
    lake = _log_lake(tmp_path)
    sink = TableSink("db.log", lake, tmp_path / "ckpt")
    sink._check_start("query-1", 3)        # the next batch
    sink._check_start("query-1", 0)        # a first batch is not checked here
    sink._check_start("other-query", 7)    # refused by the commit itself (another query)
    with pytest.raises(TieringError, match="diverged"):
        sink._check_start("query-1", 5)    # batches 3 and 4 never reached the lake


def test_the_sink_compacts_a_table_of_many_files_and_expires_old_snapshots(tmp_path):
    from fluss_spark.tiering.table_query import TableSink
    lake = _log_lake(tmp_path, rounds=4)
    sink = TableSink("db.log", lake, tmp_path / "ckpt", retain_versions=1,
                     compact_max_files=2, snapshot_retention_s=0.0)
    sink._maintain()
    st = lake.state()
    assert st.data_files == 1 and st.commit.batch_id == 3 and st.rows == 4
    assert len(lake.iceberg().metadata.snapshots) == 1


def test_the_catalog_option_and_a_lake_of_another_catalog_are_checked(tmp_path):
    from fluss_spark.tiering.run import _catalog
    assert _catalog(["type=rest", "uri=http://h:1"]) == {"type": "rest", "uri": "http://h:1"}
    assert _catalog(None) is None
    with pytest.raises(ConfigError, match=r"key=value \(e.g. --catalog type=rest\)"):
        _catalog(["type"])
    cfg = TieringConfig(lake=tmp_path, bootstrap_servers="h:1", table_pattern=".*",
                        catalog={"type": "rest", "uri": "http://h:1"})
    TieringJob(None, cfg)._check_lake()
    assert json.loads((tmp_path / "_tiering" / "lake.json").read_text())["catalog"]["uri"] == \
        "http://h:1"
    other = TieringConfig(lake=tmp_path, bootstrap_servers="h:1", table_pattern=".*",
                          catalog={"type": "rest", "uri": "http://elsewhere:1"})
    with pytest.raises(TieringError, match="uses catalog"):
        TieringJob(None, other)._check_lake()


def test_the_copy_on_write_option_reaches_the_config_and_bad_values_are_refused(tmp_path, capsys):
    from fluss_spark.tiering.run import build_arg_parser, config_from_args
    p = build_arg_parser()
    base = ["--lake", str(tmp_path), "--pattern", ".*", "--bootstrap-servers", "h:1"]
    assert config_from_args(p.parse_args(base)).copy_on_write == "auto"
    assert config_from_args(p.parse_args(base + ["--copy-on-write", "tasks"])).copy_on_write \
        == "tasks"
    with pytest.raises(SystemExit):
        p.parse_args(base + ["--copy-on-write", "executors"])
    assert "invalid choice: 'executors'" in capsys.readouterr().err


def test_the_status_of_a_poll_has_each_tables_batch_rows_and_lag(tmp_path):
    from types import SimpleNamespace
    from fluss_spark.errors import NetworkError
    _log_lake(tmp_path, rounds=3)
    ends = {"db.log": {0: 5}}

    class Cluster:
        def get_table(self, name):
            return SimpleNamespace(partitioned=False)

        def list_offsets(self, name, spec):
            if name not in ends:
                raise NetworkError("cluster down")
            return ends[name]

    job = TieringJob(None, TieringConfig(lake=tmp_path, bootstrap_servers="x:1",
                                         table_pattern="db\\..*"), connect=Cluster)
    job.queries["db.log"] = SimpleNamespace(isActive=True, lastProgress=None)
    # Rounds 0-2 each tiered a record and ended at offset b + 1; the table ends at 5.
    assert job.status()["tables"]["db.log"] == {"active": True, "lag": 2, "error": None,
                                                "restarts": 0, "rows_tiered": 3, "batch_id": 2}
    ends.clear()     # unreachable: the lake's position is still known, the lag is not
    assert job.status()["tables"]["db.log"] == {"active": True, "lag": None, "error": None,
                                                "restarts": 0, "rows_tiered": 3, "batch_id": 2}
