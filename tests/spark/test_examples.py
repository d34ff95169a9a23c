"""Every example runs under spark-submit against the local cluster with the arguments its
docstring gives (the documented table and paths replaced by the test's), the address from
``$FLUSS_BOOTSTRAP_SERVERS`` as documented; its output is checked."""

from __future__ import annotations

import json
import site
import stat
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from fluss_spark.testing.doc_commands import example_command, script_args
from fluss_spark.tiering.restarts import strip_jvm_frames
from fluss_spark.tiering.submit import build_pyfiles_zip, python_env, spark_submit_command

pytestmark = pytest.mark.spark

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def submit(script: str, args, cwd, servers: str, env=None, py_files=(), timeout=240) -> str:
    """Run ``script`` under spark-submit with ``FLUSS_BOOTSTRAP_SERVERS=servers``."""
    cmd = spark_submit_command(EXAMPLES / script, args, py_files=py_files)
    env = {**(env or python_env()), "FLUSS_BOOTSTRAP_SERVERS": servers}
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)
    assert proc.returncode == 0, \
        f"{script} failed:\n" + strip_jvm_frames(proc.stdout + proc.stderr)[-8000:]
    return proc.stdout


def pk_state(conn, table: str) -> dict:
    info = conn.admin().get_table(table)
    return {r["id"]: r for b in info.buckets for batch in conn.kv_scanner(table).scan(b, live=True)
            for r in batch.to_pylist()}


def test_stream_pk_table_example_writes_snapshot_then_changelog(cluster, conn, table_name,
                                                                 tmp_path):
    admin = conn.admin()
    admin.create_table(table_name, "id BIGINT NOT NULL, paid BOOLEAN, amount DOUBLE",
                       primary_key=["id"], num_buckets=2)
    w = conn.writer(table_name)
    w.upsert([{"id": i, "paid": True, "amount": float(i)} for i in range(400)])
    admin.trigger_kv_snapshot(table_name)
    w.upsert([{"id": i, "paid": False, "amount": -1.0} for i in range(10)])       # -U/+U
    w.delete([{"id": i} for i in range(390, 400)])                                 # -D
    w.upsert([{"id": 1000 + i, "paid": True, "amount": 5.0} for i in range(5)])   # +I

    args = script_args(example_command("stream_pk_table.py"),
                       {"demo.orders": table_name, "/tmp/": f"{tmp_path}/"})
    assert "--bootstrap-servers" not in args and "--available-now" in args
    out = submit("stream_pk_table.py", args, tmp_path, cluster.bootstrap_servers)
    assert "Batch: 0" in out and "|+I" in out          # the console sink printed batches
    summary = json.loads(next(ln for ln in out.splitlines() if ln.startswith("parquet "))[8:])
    assert summary["by_change_type"] == {"+I": 405, "-U": 10, "+U": 10, "-D": 10}
    # Folding the Parquet output by key gives the table.
    rows = pq.read_table(tmp_path / "orders-parquet").to_pylist()
    state = {}
    for r in sorted(rows, key=lambda r: r["_log_offset"]):
        if r["_change_type"] in ("+I", "+U"):
            state[r["id"]] = r["amount"]
        else:
            state.pop(r["id"], None)
    assert state == {k: v["amount"] for k, v in pk_state(conn, table_name).items()}
    table_id = admin.get_table(table_name).table_id
    assert [x.lease_id for x in admin.list_kv_snapshot_leases() if table_id in x.tables] == []


def _python_without_fluss_spark(tmp_path: Path) -> str:
    """An interpreter with the venv's dependencies but WITHOUT the installed fluss_spark: site
    processing (and so the editable install's .pth hook) is off, site-packages is on PYTHONPATH."""
    packages = [p for p in site.getsitepackages() if p.endswith("site-packages")]
    wrapper = tmp_path / "python-no-fluss"
    wrapper.write_text("#!/bin/sh\n"
                       f'PYTHONPATH="${{PYTHONPATH:+$PYTHONPATH:}}{":".join(packages)}"\n'
                       "export PYTHONPATH\n"
                       f'exec "{sys.executable}" -S "$@"\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    probe = subprocess.run([str(wrapper), "-c", "import pyarrow, msgpack, fluss_spark"],
                           cwd=tmp_path, capture_output=True, text=True)
    assert "No module named 'fluss_spark'" in probe.stderr, probe.stderr
    return str(wrapper)


def test_batch_aggregate_example_with_the_package_shipped_as_py_files(cluster, conn, table_name,
                                                                      tmp_path):
    admin = conn.admin()
    admin.create_table(table_name, "id BIGINT NOT NULL, paid BOOLEAN, amount DOUBLE",
                       primary_key=["id"], num_buckets=3)
    w = conn.writer(table_name)
    w.upsert([{"id": i, "paid": i % 3 == 0, "amount": 1.0} for i in range(300)])
    admin.trigger_kv_snapshot(table_name)
    w.upsert([{"id": i, "paid": False, "amount": 2.0} for i in range(0, 30, 3)])  # 10 paid -> not
    w.delete([{"id": i} for i in range(2, 32, 3)])                                # 10 not paid

    zip_path = build_pyfiles_zip(tmp_path / "dist" / "fluss_spark.zip")
    python = _python_without_fluss_spark(tmp_path)
    args = script_args(example_command("batch_aggregate.py", "--py-files"),
                       {"demo.orders": table_name})
    assert args == ["--table", table_name, "--group-by", "paid", "--sum", "amount"]
    out = submit("batch_aggregate.py", args, tmp_path, cluster.bootstrap_servers,
                 env=python_env(python), py_files=[zip_path])
    aggs = {d["paid"]: (d["rows"], d["sum_amount"]) for d in
            (json.loads(ln[4:]) for ln in out.splitlines() if ln.startswith("agg "))}
    assert aggs == {True: (90, 90.0), False: (200, 210.0)}
    assert admin.list_kv_snapshot_leases() == [] or all(
        admin.get_table(table_name).table_id not in x.tables
        for x in admin.list_kv_snapshot_leases())


def test_monitor_example_prints_lag_down_to_zero(cluster, conn, table_name, tmp_path):
    admin = conn.admin()
    pk, lg = table_name + "_pk", table_name + "_log"
    admin.create_table(pk, "id BIGINT NOT NULL, v STRING", primary_key=["id"], num_buckets=2)
    conn.writer(pk).upsert([{"id": i, "v": "x"} for i in range(1_700)])
    admin.trigger_kv_snapshot(pk)
    admin.create_table(lg, "k INT", num_buckets=1)
    conn.writer(lg).append(pa.table({"k": pa.array(range(500), pa.int32())}))

    args = script_args(example_command("monitor_lag.py"),
                       {"demo.orders": pk, "demo.events": lg})
    assert args[:2] == ["--tables", f"{pk},{lg}"] and "--until-caught-up" in args
    out = submit("monitor_lag.py", args + ["--seconds", "150"], tmp_path,
                 cluster.bootstrap_servers)
    lines = [json.loads(ln[4:]) for ln in out.splitlines() if ln.startswith("lag ")]
    assert len(lines) >= 3, out
    assert all(0 < x["rows"] <= 500 for x in lines if x["rows"])
    assert lines[-1]["lag"] == {pk: 0, lg: 0}
    first = lines[0]["lag"]
    assert first[pk] + first[lg] == 2_200 - lines[0]["rows"]
    totals = [sum(x["lag"].values()) for x in lines]
    assert totals == sorted(totals, reverse=True)
