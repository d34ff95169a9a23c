"""The sink under kill -9, with real processes (``fluss_spark/connector/sink.py``,
examples/pipeline_pk_to_pk.py): an executor's Python worker killed mid-write, the example
pipeline's driver killed under concurrent source writes. Extended: minutes of spark-submit runs;
the CI run covers the sink with tests/spark/test_sink.py and tests/spark/test_sink_apache_fluss.py.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
import uuid
from pathlib import Path

import pyarrow as pa
import pytest

from fluss_spark.local.ports import wait_until
from fluss_spark.testing import sink_job
from fluss_spark.testing.apache_fluss import PyFluss
from fluss_spark.tiering.restarts import strip_jvm_frames
from fluss_spark.tiering.submit import python_env, spark_submit_command

pytestmark = [pytest.mark.spark, pytest.mark.extended]

PIPELINE = Path(__file__).resolve().parents[2] / "examples" / "pipeline_pk_to_pk.py"


def _state(conn, table: str) -> dict[int, dict]:
    info = conn.admin().get_table(table)
    return {r["id"]: r for b in range(info.num_buckets)
            for batch in conn.kv_scanner(table).scan(b, live=True) for r in batch.to_pylist()}


def _python_workers(session: int) -> list[int]:
    """Pids of the Python workers of the Spark job in process session ``session``: the
    children of its ``pyspark.daemon`` (Spark forks each task's worker from it)."""
    procs = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        procs[int(d.name)] = (int(fields[1]), int(fields[3]), cmd)   # ppid, session, cmdline
    daemons = {pid for pid, (_, sid, cmd) in procs.items()
               if sid == session and "pyspark.daemon" in cmd}
    return [pid for pid, (ppid, _, _) in procs.items() if ppid in daemons]


@pytest.mark.extended   # an executor's Python worker killed while the sink writes
@pytest.mark.parametrize("pk", [False, True], ids=["log", "pk"])
def test_a_python_worker_killed_mid_write_gives_what_the_docs_promise(cluster, conn, table_name,
                                                                     tmp_path, pk):
    rows = 2_000_000
    admin = conn.admin()
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("v", pa.string())])
    admin.create_table(table_name, schema, primary_key=["id"] if pk else [], num_buckets=2)
    log = open(tmp_path / "job.log", "w")
    job = subprocess.Popen(spark_submit_command(sink_job.SCRIPT, [cluster.bootstrap_servers,
                                                                  table_name, rows]),
                           cwd=tmp_path, env=python_env(), stdout=log, stderr=subprocess.STDOUT,
                           start_new_session=True)
    killed = []
    try:
        # Some rows are in, not all: the tasks are sending. Kill their Python workers.
        wait_until(lambda: 0 < sum(admin.list_offsets(table_name).values()) < rows
                   or job.poll() is not None, 240, "the sink's first rows", interval_s=0.02)
        for pid in _python_workers(os.getsid(job.pid)):
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
        assert job.wait(300) == 0, (tmp_path / "job.log").read_text()[-4000:]
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
        log.close()
    assert killed, "the job ended before a worker could be killed"
    # Spark retried the failed tasks (local[2,4]); docs/spark_sink.md: a PK table ends the same,
    # a log table has every row at least once (the retried task's rows twice if they had landed).
    if pk:
        state = {k: r["v"] for k, r in _state(conn, table_name).items()}
        assert state == {i: f"v{i}" for i in range(rows)}
    else:
        end = admin.list_offsets(table_name)
        ids = [r["id"] for b in range(2) for batch in
               conn.log_scanner(table_name).read(b, 0, end.get(b, 0)) for r in batch.to_pylist()]
        assert set(ids) == set(range(rows)) and len(ids) >= rows
        print(f"log table: {len(ids) - rows} duplicate rows after the retry")


def _expected(source: dict[int, dict]) -> dict[int, dict]:
    """examples/pipeline_pk_to_pk.py's transform of the source's rows, by key."""
    return {k: {"id": k, "cents": round(r["amount"] * 100),
                "size": "large" if r["amount"] >= 500 else "small"} for k, r in source.items()}


def _churn(upsert, delete, stop: threading.Event, rounds: int = 300) -> None:
    """Upserts, updates and deletes of the source while the pipeline runs."""
    i = 0
    while not stop.is_set() and i < rounds:
        upsert([{"id": k, "amount": 600.0 + i} for k in range(i * 5, i * 5 + 5)])
        delete([{"id": 1999 - i}])
        upsert([{"id": 5000 + i, "amount": 1.5}])
        i += 1
        time.sleep(0.02)


def _kill_and_restart(servers: str, src: str, dst: str, churn, tmp_path: Path,
                      kill_after: int = 2) -> None:
    """The pipeline runs under ``churn(stop)``, is killed with kill -9 (driver JVM, Python
    driver and workers at once) after ``kill_after`` committed micro-batches, and runs again
    with AvailableNow from its checkpoint; its own check (target == transformed source) must
    hold."""
    ckpt = tmp_path / "ckpt"
    args = ["--bootstrap-servers", servers, "--source", src, "--target", dst,
            "--checkpoint", ckpt]
    stop = threading.Event()
    log1 = open(tmp_path / "run1.log", "w")
    first = subprocess.Popen(spark_submit_command(PIPELINE, [*args, "--seconds", "300"]),
                             cwd=tmp_path, env=python_env(), stdout=log1,
                             stderr=subprocess.STDOUT, start_new_session=True)
    churner = threading.Thread(target=churn, args=(stop,))
    churner.start()
    try:
        wait_until(lambda: (ckpt / "commits" / str(kill_after - 1)).exists()
                   or first.poll() is not None, 240, f"{kill_after} committed micro-batch(es)")
        assert first.poll() is None, (tmp_path / "run1.log").read_text()[-4000:]
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(30)
    finally:
        stop.set()
        churner.join(60)
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
        log1.close()
    proc = subprocess.run(spark_submit_command(PIPELINE, [*args, "--available-now"]),
                          cwd=tmp_path, env=python_env(), capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, strip_jvm_frames(proc.stdout + proc.stderr)[-8000:]
    summary = json.loads(next(ln for ln in proc.stdout.splitlines()
                              if ln.startswith("pipeline "))[9:])
    assert summary["equal"] and summary["target_rows"] == summary["source_rows"], summary


@pytest.mark.extended   # the example pipeline, a driver kill -9 under concurrent source writes
def test_pipeline_keeps_the_target_equal_to_the_transformed_source_across_a_driver_kill(
        cluster, conn, table_name, tmp_path):
    admin = conn.admin()
    src, dst = f"{table_name}_src", f"{table_name}_dst"
    admin.create_table(src, pa.schema([pa.field("id", pa.int64(), nullable=False),
                                       ("amount", pa.float64())]),
                       primary_key=["id"], num_buckets=2)
    admin.create_table(dst, pa.schema([pa.field("id", pa.int64(), nullable=False),
                                       ("cents", pa.int64()), ("size", pa.string())]),
                       primary_key=["id"], num_buckets=2)
    writer = conn.writer(src)
    writer.upsert([{"id": i, "amount": float(i)} for i in range(2000)])
    admin.trigger_kv_snapshot(src)
    _kill_and_restart(cluster.bootstrap_servers, src, dst,
                      lambda stop: _churn(writer.upsert, writer.delete, stop), tmp_path)
    # Row for row, read with the client's own scanner: the target is the transformed source.
    source = _state(conn, src)
    assert _state(conn, dst) == _expected(source) and len(source) > 1500


@pytest.mark.extended   # the same on Apache Fluss, source written and both tables read by pyfluss
def test_pipeline_on_apache_fluss_across_a_driver_kill(apache_fluss, tmp_path):
    servers = apache_fluss.bootstrap_servers
    db = f"pipe_{uuid.uuid4().hex[:8]}"
    src, dst = f"{db}.src", f"{db}.dst"
    with PyFluss(servers) as fluss:
        fluss.create_table(src, "id BIGINT NOT NULL, amount DOUBLE", primary_key=["id"],
                           buckets=2)
        fluss.create_table(dst, "id BIGINT NOT NULL, cents BIGINT, size STRING",
                           primary_key=["id"], buckets=2)
        fluss.upsert(src, [(i, float(i)) for i in range(2000)])

    def churn(stop: threading.Event) -> None:
        with PyFluss(servers) as writer:     # its own event loop, in this thread
            _churn(lambda rows: writer.upsert(src, [(r["id"], r["amount"]) for r in rows]),
                   lambda keys: writer.delete(src, [(k["id"],) for k in keys]), stop,
                   rounds=390)
    # Batch 0 (the snapshot) takes tens of seconds here: killed once it is committed, while
    # the source is still being written.
    _kill_and_restart(servers, src, dst, churn, tmp_path, kill_after=1)
    with PyFluss(servers) as fluss:
        source = {r["id"]: r for r in fluss.rows(src, timeout_s=120)}
        target = {r["id"]: r for r in fluss.rows(dst, timeout_s=120)}
    assert target == _expected(source) and len(source) > 1500
