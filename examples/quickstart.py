"""Quickstart: a local cluster, a primary-key table, and a lease-protected Spark streaming read.

It starts ZooKeeper, a coordinator and two tablet servers as processes, creates the PK table
``demo.orders``, writes rows and a KV snapshot, then streams the table with
``spark.readStream.format("fluss")``: the snapshot first (under one KV snapshot lease), then the
changelog, while more upserts and deletes arrive. At the end it folds the streamed rows by key and
checks that they equal the table's state, and that no lease is left behind.

Run::

    ./dev.sh demo                                   # installs everything first
    python examples/quickstart.py --rows 20000      # in an installed environment
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa


def fold_changelog(rows: list[dict], key: str) -> dict:
    """Apply +I/+U/-D rows in log order to an empty map: the table state they describe."""
    state: dict = {}
    for row in sorted(rows, key=lambda r: r["_log_offset"]):
        if row["_change_type"] in ("+I", "+U", "+A"):
            state[row[key]] = {k: v for k, v in row.items() if not k.startswith("_")}
        elif row["_change_type"] == "-D":
            state.pop(row[key], None)
    return state


def table_state(conn, table: str, key: str) -> dict:
    """The table's current rows, read through live scan sessions of every bucket."""
    info = conn.admin().get_table(table)
    scanner = conn.kv_scanner(table)
    state = {}
    for bucket in range(info.num_buckets):
        for batch in scanner.scan(bucket, live=True):
            for row in batch.to_pylist():
                state[row[key]] = row
    return state


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=20_000, help="rows in the initial snapshot")
    parser.add_argument("--dir", default=None, help="cluster directory (default: a temp dir)")
    args = parser.parse_args(argv)

    from pyspark.sql import SparkSession

    from fluss_spark.client import FlussConnection
    from fluss_spark.connector import register
    from fluss_spark.local.embedded import EmbeddedProcesses

    base = Path(args.dir or tempfile.mkdtemp(prefix="fluss-quickstart-"))
    print(f"[1/6] starting a local cluster in {base}")
    cluster = EmbeddedProcesses(base, tablets=2)
    cluster.start()
    spark = None
    try:
        conn = FlussConnection(cluster.bootstrap_servers)
        admin = conn.admin()
        admin.create_table("demo.orders", "id BIGINT, item STRING, amount DOUBLE",
                           primary_key=["id"], num_buckets=4, ignore_if_exists=True)
        writer = conn.writer("demo.orders")
        print(f"[2/6] writing {args.rows} rows and taking a KV snapshot")
        for start in range(0, args.rows, 10_000):
            ids = list(range(start, min(start + 10_000, args.rows)))
            writer.upsert(pa.table({"id": pa.array(ids, pa.int64()),
                                    "item": [f"item-{i % 97}" for i in ids],
                                    "amount": [float(i % 1000) for i in ids]}))
        admin.trigger_kv_snapshot("demo.orders")

        print("[3/6] starting the Spark streaming query (snapshot phase, then changelog)")
        spark = (SparkSession.builder.master("local[2]").appName("fluss-quickstart")
                 .config("spark.ui.enabled", "false")
                 .config("spark.ui.showConsoleProgress", "false")
                 .config("spark.sql.shuffle.partitions", "2").getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        register(spark)
        stream = (spark.readStream.format("fluss")
                  .option("bootstrap.servers", cluster.bootstrap_servers)
                  .option("table", "demo.orders")
                  .option("maxOffsetsPerTrigger", str(max(args.rows // 4, 1000)))
                  .load())
        query = (stream.writeStream.format("memory").queryName("orders_changes")
                 .option("checkpointLocation", str(base / "checkpoint"))
                 .trigger(processingTime="1 second").start())

        leases_seen = set()
        deadline = time.monotonic() + 120
        while not query.recentProgress and time.monotonic() < deadline:
            leases_seen.update(lease.lease_id for lease in admin.list_kv_snapshot_leases())
            time.sleep(0.2)
        leases_seen.update(lease.lease_id for lease in admin.list_kv_snapshot_leases())
        print(f"      lease(s) protecting the snapshot phase: {sorted(leases_seen) or 'none'}")

        print("[4/6] updating and deleting rows while the query runs")
        writer.upsert(pa.table({"id": pa.array(range(0, 500), pa.int64()),
                                "item": ["updated"] * 500, "amount": [-1.0] * 500}))
        writer.delete(pa.table({"id": pa.array(range(500, 600), pa.int64())}))
        writer.upsert(pa.table({"id": pa.array([args.rows + 1], pa.int64()),
                                "item": ["new"], "amount": [1.0]}))

        print("[5/6] waiting until the stream has caught up with the table")
        expected = table_state(conn, "demo.orders", "id")
        folded: dict = {}
        while time.monotonic() < deadline:
            query.processAllAvailable()
            rows = [r.asDict() for r in spark.sql("SELECT * FROM orders_changes").collect()]
            folded = fold_changelog(rows, "id")
            if folded == expected:
                break
            time.sleep(1)
        counts = spark.sql("SELECT _change_type, count(*) AS n FROM orders_changes "
                           "GROUP BY _change_type ORDER BY _change_type").collect()
        print("      rows streamed by change type: "
              + ", ".join(f"{r['_change_type']}={r['n']}" for r in counts))
        # commit() lags one batch: let one more (empty) batch run so the snapshot phase commits.
        time.sleep(2.5)
        leases_left = [lease.lease_id for lease in admin.list_kv_snapshot_leases()]
        query.stop()

        print("[6/6] results")
        ok = folded == expected
        print(f"      table rows: {len(expected)}; folded stream equals the table: {ok}")
        print(f"      leases left after the snapshot phase: {leases_left or 'none'}")
        return 0 if ok else 1
    finally:
        if spark is not None:
            spark.stop()
        cluster.stop()
        if args.dir is None:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
