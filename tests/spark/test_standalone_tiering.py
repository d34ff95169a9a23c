"""The tiering job on a Spark standalone cluster (``standalone``: executors in processes of their
own, on two workers with their own Python) with its Iceberg warehouse in an S3 object store (the
``embedded_s3`` cluster's): a PK table (updates and deletes after its snapshot round) and a log
table tiered by ``spark-submit examples/tier_tables.py --once`` on the master; the catalog's
secrets reach the driver as ``PYICEBERG_CATALOG__FLUSS_LAKE__*`` variables and the executors
through ``spark.executorEnv.*``. The lake is read back by pyiceberg and by Spark (Iceberg's
``S3FileIO``), its data files listed in the store; then compacted and expired on the store.

Marked ``standalone`` (``-m "not standalone"`` skips it in a quick local run).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid
from pathlib import Path

import pyarrow as pa
import pytest

from fluss_spark.client.remote_storage import RemoteStorage
from fluss_spark.tiering.lake import LakeTable
from fluss_spark.tiering.lake_catalog import env_variable
from fluss_spark.tiering.spark_reader import read_lake_table
from fluss_spark.tiering.submit import spark_submit_command
from fluss_spark.testing.streams import create_pk, table_state

pytestmark = [pytest.mark.spark, pytest.mark.standalone]

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "tier_tables.py"
PK_ROWS, LOG_ROWS = 2_000, 500


def lake_files(storage: RemoteStorage, prefix: str) -> set[str]:
    """``s3://`` URIs of the Parquet files under ``prefix`` (``bucket/path``) in the store."""
    from pyarrow.fs import FileSelector, FileType
    infos = storage.s3().get_file_info(FileSelector(prefix, recursive=True, allow_not_found=True))
    return {f"s3://{i.path}" for i in infos
            if i.type == FileType.File and i.path.endswith(".parquet")}


def data_files(lake: LakeTable) -> set[str]:
    """The data files of the lake table's current snapshot."""
    tbl = lake.iceberg()
    return {t.file.file_path for t in tbl.scan().plan_files()}


def test_tiering_on_a_standalone_cluster_into_an_s3_warehouse(spark, embedded_s3, standalone,
                                                             tmp_path, monkeypatch):
    spark_cluster, zip_path = standalone
    store = embedded_s3.object_store
    key, secret = store.credentials
    options = store.fluss_options()
    db = f"st_{uuid.uuid4().hex[:10]}"
    pk, log = f"{db}.pk", f"{db}.log"
    with embedded_s3.connection(request_timeout_s=30.0) as conn:
        writer, _ = create_pk(conn, pk, PK_ROWS, buckets=2)
        # After the snapshot: changelog records, applied over the snapshot round's files.
        writer.upsert([{"id": i, "v": f"new{i}"} for i in range(0, 100, 3)])
        writer.delete([{"id": i} for i in range(1, 100, 3)])
        conn.admin().create_table(log, "id BIGINT NOT NULL, v STRING", num_buckets=2)
        conn.writer(log).append(pa.table({"id": pa.array(range(LOG_ROWS), pa.int64()),
                                          "v": [f"m{i}" for i in range(LOG_ROWS)]}))
        want_pk = table_state(conn, pk)

    lake = tmp_path / "lake"
    secrets = {env_variable("s3.access-key-id"): key, env_variable("s3.secret-access-key"): secret}
    driver = spark_cluster.driver_env(zip_path)
    conf = {k: v for k, v in json.loads(driver.pop("DRIVER_CONF")).items()
            if k != "spark.submit.pyFiles"}
    conf.update({f"spark.executorEnv.{k}": v for k, v in secrets.items()})
    cmd = spark_submit_command(EXAMPLE, [
        "--bootstrap-servers", embedded_s3.bootstrap_servers, "--lake", lake,
        "--pattern", f"{db}\\..*", "--once",
        "--catalog", "type=sql", "--catalog", f"uri=sqlite:///{lake}/_tiering/catalog.db",
        "--catalog", f"warehouse={store.uri('lake')}",
        "--catalog", f"s3.endpoint={options['s3.endpoint']}",
        "--catalog", f"s3.region={options['s3.region']}"],
        master=spark_cluster.url, py_files=[zip_path], conf=conf)
    apps = set(spark_cluster.applications())
    t0 = time.monotonic()
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=240,
                          env={**os.environ, **driver, **secrets, "SPARK_LOCAL_IP": "127.0.0.1"})
    assert done.returncode == 0, done.stderr[-6000:]
    print(f"tiered on the standalone cluster in {time.monotonic() - t0:.1f}s")
    # The secret stayed out of the lake's files and the driver's output.
    assert secret not in (lake / "_tiering" / "lake.json").read_text()
    assert secret not in done.stdout + done.stderr
    # Executors on both workers ran the rounds' Python tasks (reads and data file writes).
    assert spark_cluster.python_executors(apps) >= 2

    for k, v in secrets.items():
        monkeypatch.setenv(k, v)
    pk_lake, log_lake = LakeTable.open(lake, pk), LakeTable.open(lake, log)
    want_log = {i: f"m{i}" for i in range(LOG_ROWS)}

    def assert_lake_exact(with_log_through_spark: bool = True) -> None:
        """Both copies through pyiceberg, and through Spark (the log table's optionally)."""
        got = pk_lake.read()
        assert dict(zip(got["id"].to_pylist(), got["v"].to_pylist())) == want_pk
        got = log_lake.read()
        assert sorted(got["id"].to_pylist()) == list(range(LOG_ROWS))
        assert dict(zip(got["id"].to_pylist(), got["v"].to_pylist())) == want_log
        through_spark = {r["id"]: r["v"] for r in read_lake_table(spark, lake, pk).collect()}
        assert through_spark == want_pk
        if with_log_through_spark:
            rows = read_lake_table(spark, lake, log).collect()
            assert len(rows) == LOG_ROWS and {r["id"]: r["v"] for r in rows} == want_log

    assert_lake_exact()
    rounds = pk_lake.rounds()
    assert len(rounds) >= 2 and rounds[-1].state.snapshot_complete
    # The snapshot round held the old values; a later round applied the updates and deletes.
    first = pk_lake.read(rounds[0].snapshot_id)
    assert {"v0", "v1"} <= set(first["v"].to_pylist())
    assert 0 < len(want_pk) < PK_ROWS and want_pk[0] == "new0" and 1 not in want_pk

    # Every data file is an object of the store, under the warehouse.
    storage = RemoteStorage(options["s3.endpoint"], options["s3.region"], key, secret)
    stored = lake_files(storage, f"fluss/lake/{db}")
    for t in (pk_lake, log_lake):
        assert t.iceberg().location().startswith(store.uri("lake") + "/")
        assert data_files(t) and data_files(t) <= stored

    # Compaction and expiry on the store: old files deleted from it, the copies unchanged.
    before = data_files(pk_lake)
    assert pk_lake.compact(force=True) is not None
    result = pk_lake.expire(int(time.time() * 1000) + 1, retain_last=1, orphan_grace_ms=0)
    assert result["expired_snapshots"] and result["removed_files"] > 0
    left = lake_files(storage, f"fluss/lake/{db}/pk")
    assert left == data_files(pk_lake) and not (before - data_files(pk_lake)) & left
    assert_lake_exact(with_log_through_spark=False)     # the log table was not maintained
