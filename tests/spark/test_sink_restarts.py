"""The sink under kill -9, with real processes (``fluss_spark/connector/sink.py``,
examples/pipeline_pk_to_pk.py). Extended: minutes of spark-submit runs; the CI run covers the
sink with tests/spark/test_sink.py and tests/spark/test_sink_apache_fluss.py.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pyarrow as pa
import pytest

from fluss_spark.local.ports import wait_until
from fluss_spark.tiering.restarts import strip_jvm_frames
from fluss_spark.tiering.submit import python_env, spark_submit_command

pytestmark = [pytest.mark.spark, pytest.mark.extended]

PIPELINE = Path(__file__).resolve().parents[2] / "examples" / "pipeline_pk_to_pk.py"


def _state(conn, table: str) -> dict[int, dict]:
    info = conn.admin().get_table(table)
    return {r["id"]: r for b in range(info.num_buckets)
            for batch in conn.kv_scanner(table).scan(b, live=True) for r in batch.to_pylist()}


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
    ckpt = tmp_path / "ckpt"
    args = ["--bootstrap-servers", cluster.bootstrap_servers, "--source", src, "--target", dst,
            "--checkpoint", ckpt]
    stop = threading.Event()

    def churn():          # upserts, updates and deletes of the source while the pipeline runs
        i = 0
        while not stop.is_set() and i < 300:
            writer.upsert([{"id": k, "amount": 600.0 + i} for k in range(i * 5, i * 5 + 5)])
            writer.delete([{"id": 1999 - i}])
            writer.upsert([{"id": 5000 + i, "amount": 1.5}])
            i += 1
            time.sleep(0.02)

    log1 = open(tmp_path / "run1.log", "w")
    first = subprocess.Popen(spark_submit_command(PIPELINE, [*args, "--seconds", "300"]),
                             cwd=tmp_path, env=python_env(), stdout=log1,
                             stderr=subprocess.STDOUT, start_new_session=True)
    churner = threading.Thread(target=churn)
    churner.start()
    try:
        # Killed once a micro-batch has committed and others run (the sink mid-write or not).
        wait_until(lambda: (ckpt / "commits" / "1").exists() or first.poll() is not None, 240,
                   "two committed micro-batches")
        assert first.poll() is None, (tmp_path / "run1.log").read_text()[-4000:]
        os.killpg(first.pid, signal.SIGKILL)   # driver JVM, Python driver and workers at once
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
    # Row for row, read with the client's own scanner: the target is the transformed source.
    source = _state(conn, src)
    expected = {k: {"id": k, "cents": round(r["amount"] * 100),
                    "size": "large" if r["amount"] >= 500 else "small"}
                for k, r in source.items()}
    assert _state(conn, dst) == expected
    assert len(source) > 1500
