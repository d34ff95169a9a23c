"""CPU cost of scan-session reads: rows per CPU-second of the reader and the tablet together.

Starts a local cluster of the code on ``PYTHONPATH`` (ZooKeeper, a coordinator, one tablet),
writes ``--rows`` rows into a one-bucket PK table, takes a KV snapshot, then reads it whole
``--scans`` times per page size in this process, checking the row count and id sum of every scan.
Printed per page size: rows/s of wall time and rows per CPU-second, the CPU being this process's
plus the tablet's (``/proc/<pid>/stat``, user + system). CPU time stays meaningful on a machine
that is busy with other work, where wall time does not: ``bench_versions.py --bench scan_cpu``
runs this script against two checkouts.

Only APIs older than the segmented scan responses are used, so one copy of this script measures
any checkout that has them.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

try:
    from fluss_spark.local.embedded import EmbeddedProcesses as Local
except ImportError:          # checkouts before the local cluster's rename
    from fluss_spark.local.cluster import LocalCluster as Local  # type: ignore[no-redef]

SCHEMA = "id BIGINT, name STRING, amount DOUBLE, category STRING, ts BIGINT"
PAGES = {"1MB": 1 << 20, "4MB": 4 << 20}


def make_rows(start: int, n: int) -> pa.Table:
    ids = np.arange(start, start + n, dtype=np.int64)
    return pa.table({"id": ids, "name": pa.array([f"customer-{i:09d}" for i in ids]),
                     "amount": ids * 0.25, "category": pa.array(["abcdefgh"[i % 8] * 6
                                                                 for i in range(n)]),
                     "ts": ids + 1_700_000_000_000})


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def tablet_pid(root: str) -> int:
    """The tablet server process of the cluster under ``root`` (by its command line)."""
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if root in cmd and "tablet" in cmd and "fluss_spark" in cmd:
                return int(proc.name)
    raise SystemExit(f"no tablet server process under {root}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_500_000)
    ap.add_argument("--scans", type=int, default=10)
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-scan-cpu-") as d:
        cluster = Local(d, tablets=1)
        cluster.start()
        try:
            conn = cluster.connection(request_timeout_s=120)
            info = conn.admin().create_table("bench.scan", SCHEMA, primary_key=["id"],
                                             num_buckets=1)
            writer = conn.writer(info)
            for start in range(0, a.rows, 100_000):
                writer.upsert(make_rows(start, min(100_000, a.rows - start)))
            conn.admin().trigger_kv_snapshot(info)
            scanner = conn.kv_scanner("bench.scan")
            tablet = tablet_pid(d)
            expected = (a.rows, a.rows * (a.rows - 1) // 2)

            def scan(page: int) -> None:
                rows = id_sum = 0
                for batch in scanner.scan(0, batch_size_bytes=page):
                    rows += batch.num_rows
                    id_sum += int(pc.sum(batch.column("id")).as_py() or 0)
                assert (rows, id_sum) == expected, (rows, id_sum)

            for page in PAGES.values():          # warm-up: page cache, the server's file map
                scan(page)
            for label, page in PAGES.items():
                cpu0, t0 = cpu_seconds(os.getpid()) + cpu_seconds(tablet), time.perf_counter()
                for _ in range(a.scans):
                    scan(page)
                wall = time.perf_counter() - t0
                cpu = cpu_seconds(os.getpid()) + cpu_seconds(tablet) - cpu0
                total = a.rows * a.scans
                print(f"scan {label}  wall {total / wall:14,.0f} rows/s  "
                      f"cpu {total / cpu:14,.0f} rows/cpu-s", flush=True)
            conn.close()
        finally:
            cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
