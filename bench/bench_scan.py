"""Scan-session throughput against reading the same KV snapshot's Arrow file directly.

Starts a local cluster (ZooKeeper, one coordinator, one tablet server) in a temporary directory,
writes ``--rows`` rows into a one-bucket primary-key table, takes a KV snapshot, then for each
batch size, ``--repeat`` times, measures back to back (so each ratio pairs runs made under the
same conditions):

- ``direct``: pyarrow reads the snapshot file into memory (``pa.ipc.open_file`` over a plain
  file, warm page cache): the data is copied once, as a reader of the file would;
- ``1 session``: one process scans the bucket through scan sessions over the tablet's local
  socket (``transport/local_socket.py``), as a client on the tablet's host does by default; it
  is given the snapshot's id, as a Spark task's split is (and as the direct read is given the
  file), so it asks the coordinator for nothing;
- ``1 session, TCP``: the same over loopback TCP, as without a local socket;
- ``N sessions``: N processes, each scanning 1/N of the rows (``start_row`` / ``limit``), as N
  Spark tasks would read one bucket;
- ``N short-circuit``: the same scans with short-circuit reads (``scan.kv.short-circuit``): the
  server checks the open and names the snapshot file, which the reader maps itself.

Every scan checks that each of its rows arrived (row count and the sum of the ids). Two physical
bounds are measured in the same run: ``memcpy`` of the file's bytes (numpy) and the loopback
socket (one process sending the same bytes to another in 4 MB writes, read with ``recv_into``),
over TCP and over a Unix socket.
Printed: rows/s as min / median / max over the repeats, and each ratio to ``direct`` likewise
(computed per repeat). Run from the repository root::

    .venv/bin/python bench/bench_scan.py --rows 1000000 --parallel 2 --batch-sizes 1mb,4mb
"""

from __future__ import annotations

import multiprocessing as mp
import os
import socket
import statistics
import sys
import tempfile
import time

import numpy as np
import pyarrow as pa

from common import parser  # bench/common.py
from fluss_spark.config import parse_size_bytes
from fluss_spark.local.embedded import EmbeddedProcesses
from fluss_spark.transport.local_socket import SEND_BUFFER_BYTES

SCHEMA = "id BIGINT, name STRING, amount DOUBLE, category STRING, ts BIGINT"


def make_rows(start: int, n: int) -> pa.Table:
    ids = np.arange(start, start + n, dtype=np.int64)
    names = pa.array([f"customer-{i:09d}" for i in ids])
    cats = pa.array(["abcdefgh"[i % 8] * 6 for i in range(n)])
    return pa.table({"id": ids, "name": names, "amount": ids * 0.25, "category": cats,
                     "ts": ids + 1_700_000_000_000})


def read_direct(path: str) -> tuple[int, int]:
    with pa.OSFile(path, "rb") as f:
        table = pa.ipc.open_file(f).read_all()
    return table.num_rows, int(pa.compute.sum(table.column("id")).as_py())


def _scan(servers: str, snapshot_id: int, lo: int, hi: int, batch_size: int,
          short_circuit: bool, local: bool, ready, go, out) -> None:
    """One reader process: connect, wait for the start, scan rows [lo, hi), report."""
    from fluss_spark.client import FlussConnection
    conn = FlussConnection(servers, request_timeout_s=120, short_circuit_reads=short_circuit,
                           local_sockets=local)
    scanner = conn.kv_scanner("bench.scan")
    ready.wait()
    go.wait()
    rows = id_sum = 0
    for batch in scanner.scan(0, snapshot_id, start_row=lo, limit=hi - lo,
                              batch_size_bytes=batch_size):
        rows += batch.num_rows
        id_sum += int(pa.compute.sum(batch.column("id")).as_py() or 0)
    out.put((rows, id_sum, time.perf_counter()))
    conn.close()


def read_sessions(servers: str, snapshot_id: int, total_rows: int, parallel: int,
                  batch_size: int, short_circuit: bool = False, local: bool = True) -> float:
    """Seconds for ``parallel`` processes to scan the bucket; checks every row arrived."""
    ctx = mp.get_context("fork")
    ready, go, out = ctx.Barrier(parallel + 1), ctx.Barrier(parallel + 1), ctx.Queue()
    procs = [ctx.Process(target=_scan, args=(servers, snapshot_id, total_rows * i // parallel,
                                             total_rows * (i + 1) // parallel, batch_size,
                                             short_circuit, local, ready, go, out))
             for i in range(parallel)]
    for proc in procs:
        proc.start()
    ready.wait()                     # every reader connected: time the scans alone
    t0 = time.perf_counter()
    go.wait()
    results = [out.get(timeout=600) for _ in procs]
    for proc in procs:
        proc.join()
    rows, id_sum = sum(r[0] for r in results), sum(r[1] for r in results)
    assert (rows, id_sum) == (total_rows, total_rows * (total_rows - 1) // 2), (rows, id_sum)
    return max(r[2] for r in results) - t0


def memcpy_s(nbytes: int) -> float:
    src = np.ones(nbytes, dtype=np.uint8)
    dst = np.empty_like(src)
    np.copyto(dst, src)              # touch both once
    t0 = time.perf_counter()
    np.copyto(dst, src)
    return time.perf_counter() - t0


def _send(address, nbytes: int, unix: bool) -> None:
    chunk = memoryview(b"x" * (4 << 20))
    with socket.socket(socket.AF_UNIX if unix else socket.AF_INET, socket.SOCK_STREAM) as s:
        if unix:    # a Unix socket queues against its sender's buffer, as a server's does
            s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER_BYTES)
        s.connect(address)
        s.recv(1)                    # the receiver's start signal
        left = nbytes
        while left > 0:
            s.sendall(chunk[:min(left, len(chunk))])
            left -= len(chunk)


def loopback_s(nbytes: int, unix: bool = False) -> float:
    """Seconds to move ``nbytes`` from one process to another over a loopback TCP socket (or a
    Unix socket with the send buffer a server's local socket asks for)."""
    if unix:
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.bind(f"\0bench-scan-{os.getpid()}")
        server.listen(1)
    else:
        server = socket.create_server(("127.0.0.1", 0))
    with server:
        sender = mp.get_context("fork").Process(target=_send,
                                                args=(server.getsockname(), nbytes, unix))
        sender.start()
        conn, _ = server.accept()
        buf = memoryview(bytearray(nbytes))
        got = 0
        with conn:
            t0 = time.perf_counter()
            conn.sendall(b"g")
            while got < nbytes:
                got += conn.recv_into(buf[got:], min(nbytes - got, 16 << 20))
            elapsed = time.perf_counter() - t0
        sender.join()
    return elapsed


def spread(values: list[float]) -> str:
    return (f"{min(values):>12,.3f} {statistics.median(values):>10,.3f} "
            f"{max(values):>10,.3f}")


def main(argv=None) -> int:
    p = parser(__doc__, rows=1_000_000, parallel=2, batch_sizes="1mb,4mb")
    p.add_argument("--repeat", type=int, default=3, help="paired repeats of every measurement")
    a = p.parse_args(argv)
    sizes = [parse_size_bytes(s.strip()) for s in a.batch_sizes.split(",")]
    with tempfile.TemporaryDirectory(prefix="bench-scan-") as d:
        cluster = EmbeddedProcesses(d, tablets=1)
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
            conn.close()
            size = snap.size_bytes
            print(f"wrote {a.rows:,} rows and snapshot {snap.snapshot_id} ({size / 1e6:.1f} MB "
                  f"file) in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
            # Warm-up (page cache, imports, the server's first map of the file): not timed.
            read_direct(snap.path)
            read_sessions(cluster.bootstrap_servers, snap.snapshot_id, a.rows, 1, sizes[0])
            rows = {}       # label -> rows/s per repeat
            ratio = {}      # label -> ratio to the direct read of the same repeat
            for _ in range(a.repeat):
                t = time.perf_counter()
                n, id_sum = read_direct(snap.path)
                direct = time.perf_counter() - t
                assert (n, id_sum) == (a.rows, a.rows * (a.rows - 1) // 2)
                runs = {"direct file": direct, "memcpy (bound)": memcpy_s(size),
                        "loopback (bound)": loopback_s(size),
                        "unix socket (bound)": loopback_s(size, unix=True)}
                for batch in sizes:
                    for k in sorted({1, a.parallel}):
                        label = f"{k} session{'s' if k > 1 else ''} {_size(batch)}"
                        runs[label] = read_sessions(cluster.bootstrap_servers, snap.snapshot_id,
                                                    a.rows, k, batch)
                    runs[f"1 session {_size(batch)}, TCP"] = read_sessions(
                        cluster.bootstrap_servers, snap.snapshot_id, a.rows, 1, batch,
                        local=False)
                for k in sorted({1, a.parallel}):
                    runs[f"{k} short-circuit"] = read_sessions(
                        cluster.bootstrap_servers, snap.snapshot_id, a.rows, k, sizes[0],
                        short_circuit=True)
                for label, secs in runs.items():
                    rows.setdefault(label, []).append(a.rows / secs / 1e6)
                    ratio.setdefault(label, []).append(direct / secs)
            print(f"{'reader':<22}{'M rows/s min':>14}{'median':>11}{'max':>11}   "
                  f"{'vs direct min':>13}{'median':>11}{'max':>11}")
            for label in rows:
                print(f"{label:<22}{spread(rows[label])}   {spread(ratio[label])}")
        finally:
            cluster.stop()
    return 0


def _size(n: int) -> str:
    return f"{n >> 20}MB" if n >= 1 << 20 else f"{n >> 10}KB"


if __name__ == "__main__":
    sys.exit(main())
