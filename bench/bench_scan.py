"""Scan-session throughput against reading the same KV snapshot's Arrow file directly.

Starts a local cluster (embedded ZooKeeper, one coordinator, one tablet server) in a temporary
directory, writes ``--rows`` rows into a one-bucket primary-key table, takes a KV snapshot and
then, for each batch size, reads the whole snapshot:

- ``direct``: pyarrow reads the snapshot file (``pa.ipc.open_file(...).read_all()``), warm
  page cache;
- ``1 session``: one KvScanner scan over TCP scan sessions;
- ``N sessions``: N concurrent scans, each over 1/N of the rows (``start_row`` / ``limit``), as
  N Spark tasks would read one bucket.

Rows/s and MB/s (MB of in-memory Arrow data) are printed per line, with the ratio to the direct
read of the same run. Run from the repository root::

    .venv/bin/python bench/bench_scan.py --rows 1000000 --parallel 4 \
        --batch-sizes 256kb,1mb,4mb,10mb
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time

import pyarrow as pa

from fluss_spark.config import parse_size_bytes
from fluss_spark.local.cluster import LocalCluster

SCHEMA = "id BIGINT, name STRING, amount DOUBLE, category STRING, ts BIGINT"


def make_rows(start: int, n: int) -> pa.Table:
    import numpy as np
    ids = np.arange(start, start + n, dtype=np.int64)
    names = pa.array([f"customer-{i:09d}" for i in ids])
    cats = pa.array(["abcdefgh"[i % 8] * 6 for i in range(n)])
    return pa.table({"id": ids, "name": names, "amount": ids * 0.25, "category": cats,
                     "ts": ids + 1_700_000_000_000})


def read_direct(path: str) -> tuple[int, int]:
    with pa.OSFile(path, "rb") as f:
        table = pa.ipc.open_file(f).read_all()
    return table.num_rows, table.nbytes


def read_sessions(conn, info, total_rows: int, parallel: int, batch_size: int) -> tuple[int, int]:
    counts = [(0, 0)] * parallel
    errors = []

    def work(i: int) -> None:
        lo = total_rows * i // parallel
        hi = total_rows * (i + 1) // parallel
        rows = nbytes = 0
        try:
            for batch in conn.kv_scanner(info).scan(0, start_row=lo, limit=hi - lo,
                                                    batch_size_bytes=batch_size):
                rows += batch.num_rows
                nbytes += batch.nbytes
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)
        counts[i] = (rows, nbytes)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(parallel)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return sum(c[0] for c in counts), sum(c[1] for c in counts)


def timed(fn, repeat: int) -> tuple[float, int, int]:
    """Best wall time of ``repeat`` runs, with the rows and bytes of the last."""
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        rows, nbytes = fn()
        best = min(best, time.perf_counter() - t0)
    return best, rows, nbytes


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--parallel", type=int, default=4)
    p.add_argument("--batch-sizes", default="256kb,1mb,4mb,10mb")
    p.add_argument("--repeat", type=int, default=2, help="runs per measurement (best is kept)")
    a = p.parse_args(argv)
    sizes = [parse_size_bytes(s.strip()) for s in a.batch_sizes.split(",")]
    with tempfile.TemporaryDirectory(prefix="bench-scan-") as d:
        cluster = LocalCluster(d, tablets=1)
        cluster.start()
        try:
            conn = cluster.connection(request_timeout_s=120)
            info = conn.admin().create_table("bench.scan", SCHEMA, primary_key=["id"],
                                             num_buckets=1)
            t0 = time.perf_counter()
            writer = conn.writer(info)
            for start in range(0, a.rows, 100_000):
                writer.upsert(make_rows(start, min(100_000, a.rows - start)))
            snap = conn.admin().trigger_kv_snapshot(info)[0]
            print(f"wrote {a.rows:,} rows and snapshot {snap.snapshot_id} "
                  f"({snap.size_bytes / 1e6:.1f} MB file) in {time.perf_counter() - t0:.1f} s",
                  file=sys.stderr)
            direct_s, rows, nbytes = timed(lambda: read_direct(snap.path), a.repeat)
            assert rows == a.rows, (rows, a.rows)
            print(f"{'reader':<14}{'batch':>8}{'rows/s':>14}{'MB/s':>10}{'vs direct':>11}")
            print(f"{'direct file':<14}{'-':>8}{rows / direct_s:>14,.0f}"
                  f"{nbytes / direct_s / 1e6:>10.1f}{1.0:>10.2f}x")
            for size in sizes:
                for n in (1, a.parallel):
                    secs, got, nbytes = timed(
                        lambda: read_sessions(conn, info, a.rows, n, size), a.repeat)
                    assert got == a.rows, (got, a.rows)
                    label = "1 session" if n == 1 else f"{n} sessions"
                    print(f"{label:<14}{_size(size):>8}{got / secs:>14,.0f}"
                          f"{nbytes / secs / 1e6:>10.1f}{direct_s / secs:>10.3f}x", flush=True)
            conn.close()
        finally:
            cluster.stop()
    return 0


def _size(n: int) -> str:
    return f"{n >> 20}MB" if n >= 1 << 20 else f"{n >> 10}KB"


if __name__ == "__main__":
    sys.exit(main())
