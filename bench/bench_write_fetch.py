"""Tablet writes (PRODUCE) and log fetch (FETCH_LOG): the client API against raw RPCs.

Starts a local cluster (embedded ZooKeeper, one coordinator, one tablet server) in a temporary
directory and writes the same ``--rows`` rows (Arrow batches of ``--batch-rows``) two ways, each
timed end to end from the caller's Arrow tables to the last acknowledgement:

- client: what a user writes. One ``FlussConnection``; ``conn.admin().create_table``;
  ``conn.writer(table).append(batch)`` / ``.upsert(batch)``, batch after batch, from one thread.
  The writer splits a PK batch by key hash and writes the buckets of one call in parallel (its
  connection's thread pool); a log table without a bucket key gets each call's rows in one
  bucket, rotating, so a 4-bucket log table is written by 4 threads sharing the writer (and, for
  comparison, by 1 thread).
- raw RPC incl. serialization: one connection and thread per bucket, PRODUCE requests built by
  hand; routing (PK rows split by key hash, log batches round-robin) and Arrow IPC serialization
  happen inside the timed region (before the send threads start; reported separately).

Workloads: a log table (append) and a primary-key table (upsert of new keys, then upsert of the
same keys again: -U/+U pairs), with 1 and 4 buckets. Every acknowledged write is fsynced.
Every table's latest offsets are read back and must add up to the rows written.

Fetch: the whole changelog of the raw path's 1-bucket log and PK tables read back at
``--fetch-bytes`` per request, by a FETCH_LOG loop (Arrow IPC decoded) and by the client's
``conn.log_scanner(table).read(bucket, start, end)`` (end from ``admin().list_offsets``, timed);
the row counts must equal the latest offset. MB/s counts the Arrow IPC bytes of the changelog.

Each of ``--repeat`` repeats uses fresh tables (dropped afterwards); which path runs first
alternates. Before every timed run the script waits until the cluster's processes are idle
(dropped tables, KV snapshots and RocksDB flushes of the previous run finish first). Printed
per workload: rows/s of each path (min/median/max) and client rows/s over raw rows/s in the
same repeat (min/median/max).

Run from the repository root::

    .venv/bin/python bench/bench_write_fetch.py --rows 1000000 --batch-rows 20000 \
        --fetch-bytes 4mb --repeat 3
"""

from __future__ import annotations

import gc
import os
import statistics
import sys
import tempfile
import threading
import time

import numpy as np
import pyarrow as pa

from common import parser  # bench/common.py
from fluss_spark.client.bootstrap import parse_address
from fluss_spark.transport.client import RpcConnection
from fluss_spark.config import parse_size_bytes
from fluss_spark.protocol.api import ApiKey
from fluss_spark.protocol.arrow_ipc import serialize_schema, table_to_bytes
from fluss_spark.protocol.rows import split_by_bucket
from fluss_spark.protocol.types import parse_schema
from fluss_spark.local.embedded import EmbeddedProcesses

SCHEMA = parse_schema("id BIGINT, name STRING, amount DOUBLE, category STRING, ts BIGINT")


def make_rows(start: int, n: int) -> pa.Table:
    ids = np.arange(start, start + n, dtype=np.int64)
    return pa.table({"id": ids, "name": pa.array([f"customer-{i:09d}" for i in ids]),
                     "amount": ids * 0.25,
                     "category": pa.array(["abcdefgh"[i % 8] * 6 for i in range(n)]),
                     "ts": ids + 1_700_000_000_000}, schema=SCHEMA)


# -- raw RPC path --------------------------------------------------------------------------------
def create_raw(coord: RpcConnection, name: str, pk: bool, buckets: int) -> int:
    body = {"name": name, "schema": serialize_schema(SCHEMA), "primary_key": ["id"] if pk else [],
            "bucket_key": ["id"] if pk else [], "num_buckets": buckets, "properties": {},
            "ignore_if_exists": False}
    deadline = time.monotonic() + 30
    while True:
        try:
            return coord.call_raw(ApiKey.CREATE_TABLE, body)["table_id"]
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def route(batches: list[pa.Table], buckets: int, pk: bool) -> list[tuple[int, bytes]]:
    """(bucket, payload) pairs: PK rows split by key hash, log batches round-robin."""
    out = []
    for i, batch in enumerate(batches):
        if pk and buckets > 1:
            out += [(b, table_to_bytes(part))
                    for b, part in split_by_bucket(batch, ["id"], buckets).items()]
        else:
            out.append((i % buckets, table_to_bytes(batch)))
    return out


def write_raw(address: str, table_id: int, buckets: int, op: str,
              batches: list[pa.Table]) -> tuple[float, float]:
    """Route and serialize ``batches``, then send them, one thread and connection per bucket.

    Returns (seconds in all, of which routing and serialization); connections are opened before
    the timing starts.
    """
    host, port = parse_address(address)
    conns = [RpcConnection(host, port) for _ in range(buckets)]
    for c in conns:
        c.call_raw(ApiKey.API_VERSIONS)

    def run(b: int, payloads: list[tuple[int, bytes]]):
        for bucket, payload in payloads:
            if bucket == b:
                conns[b].call_raw(ApiKey.PRODUCE, {"table_id": table_id, "bucket": b, "op": op,
                                                   "records": payload})

    start = time.perf_counter()
    payloads = route(batches, buckets, op == "upsert")
    routed = time.perf_counter() - start
    threads = [threading.Thread(target=run, args=(b, payloads)) for b in range(buckets)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    for c in conns:
        c.close()
    return elapsed, routed


def fetch_raw(address: str, table_id: int, max_bytes: int) -> tuple[int, int, float]:
    """(rows, Arrow IPC bytes, seconds) of reading bucket 0 to its end with FETCH_LOG."""
    host, port = parse_address(address)
    conn = RpcConnection(host, port)
    conn.call_raw(ApiKey.API_VERSIONS)
    rows = nbytes = offset = 0
    start = time.perf_counter()
    while True:
        r = conn.call_raw(ApiKey.FETCH_LOG, {"table_id": table_id, "bucket": 0, "offset": offset,
                                             "max_bytes": max_bytes, "max_wait_ms": 0})
        if r["records"] is None:
            break
        table = pa.ipc.open_stream(pa.py_buffer(r["records"])).read_all()
        rows += table.num_rows
        nbytes += len(r["records"])
        offset = r["next_offset"]
    elapsed = time.perf_counter() - start
    conn.close()
    return rows, nbytes, elapsed


# -- client path ---------------------------------------------------------------------------------
def create_client(conn, name: str, pk: bool, buckets: int) -> None:
    conn.admin().create_table(name, SCHEMA, primary_key=["id"] if pk else [],
                              num_buckets=buckets)


def write_client(conn, name: str, op: str, batches: list[pa.Table], threads: int = 1) -> float:
    """``conn.writer(name).append/upsert(batch)`` for every batch; ``threads`` share the writer
    (batch i from thread i % threads). Returns seconds."""
    start = time.perf_counter()
    writer = conn.writer(name)
    call = writer.append if op == "append" else writer.upsert
    if threads == 1:
        for batch in batches:
            call(batch)
    else:
        errors: list[BaseException] = []

        def run(k: int):
            try:
                for batch in batches[k::threads]:
                    call(batch)
            except BaseException as e:  # noqa: BLE001 - re-raised after the join
                errors.append(e)

        ts = [threading.Thread(target=run, args=(k,)) for k in range(threads)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        if errors:
            raise errors[0]
    return time.perf_counter() - start


def fetch_client(conn, name: str, max_bytes: int) -> tuple[int, float]:
    """(rows, seconds) of ``log_scanner(name).read(0, 0, latest)``, the offset lookup timed."""
    start = time.perf_counter()
    end = conn.admin().list_offsets(name, [0])[0]
    rows = sum(b.num_rows for b in conn.log_scanner(name).read(0, 0, end, max_bytes=max_bytes))
    return rows, time.perf_counter() - start


def check_rows(conn, name: str, expected: int) -> None:
    got = sum(conn.admin().list_offsets(name).values())
    if got != expected:
        raise AssertionError(f"{name}: latest offsets add up to {got}, expected {expected}")


# -- main ----------------------------------------------------------------------------------------
def _cpu_seconds(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])     # utime + stime, in clock ticks
        except (OSError, IndexError, ValueError):
            pass
    return total / os.sysconf("SC_CLK_TCK")


def settle(cluster: EmbeddedProcesses, idle: float = 0.05, window_s: float = 0.5,
           timeout_s: float = 30.0) -> float:
    """Wait until the cluster's processes (ZooKeeper, coordinator, tablet) together use under
    ``idle`` of a core over ``window_s`` (background work of the previous measurement: dropped
    tables, KV snapshots, RocksDB flushes), at most ``timeout_s``; returns the seconds waited."""
    pids = [p["pid"] for p in cluster.processes() if p["pid"]]
    start = time.monotonic()
    before = _cpu_seconds(pids)
    while time.monotonic() - start < timeout_s:
        time.sleep(window_s)
        now = _cpu_seconds(pids)
        if now - before < idle * window_s:
            break
        before = now
    return time.monotonic() - start


#: (label, kind, buckets, client threads); "pk" rows are followed by "pk again" (existing keys).
WRITES = [("log append, 1 bucket", "log", 1, 1),
          ("log append, 4 buckets", "log", 4, 4),
          ("log append, 4 buckets, client 1 thread", "log", 4, 1),
          ("PK upsert new keys, 1 bucket", "pk", 1, 1),
          ("PK upsert new keys, 4 buckets", "pk", 4, 1)]
AGAIN = {"PK upsert new keys, 1 bucket": "PK upsert existing keys, 1 bucket",
         "PK upsert new keys, 4 buckets": "PK upsert existing keys, 4 buckets"}
FETCHES = [("fetch log, 1 bucket", "log"), ("fetch PK changelog, 1 bucket", "pk")]


def _stats(xs: list[float]) -> tuple[float, float, float]:
    return min(xs), statistics.median(xs), max(xs)


def _fmt(xs: list[float], scale: float = 1.0, digits: int = 2) -> str:
    return "/".join(f"{x / scale:.{digits}f}" for x in _stats(xs))


def run_repeat(rep: int, cluster: EmbeddedProcesses, conn, coord: RpcConnection,
               batches: list[pa.Table], rows: int, fetch_bytes: int,
               out: dict[str, dict[str, list[float]]]) -> None:
    tablet = cluster.address("tablet", 0)
    order = ("raw", "client") if rep % 2 == 0 else ("client", "raw")
    created: list[str] = []
    raw_ids: dict[tuple[str, int], int] = {}
    raw_secs: dict[tuple[str, int, int], float] = {}   # (kind, buckets, round) -> seconds

    def record(label: str, path: str, secs: float, n: int, extra: str = "") -> None:
        out.setdefault(label, {}).setdefault(path, []).append(n / secs)
        print(f"  repeat {rep + 1} {label:42s} {path:6s} {n / secs:12,.0f} rows/s{extra}",
              flush=True)

    for label, kind, buckets, threads in WRITES:
        pk = kind == "pk"
        op = "upsert" if pk else "append"
        rounds = [label] + ([AGAIN[label]] if label in AGAIN else [])
        for path in order:
            name = f"bench.r{rep}_{kind}_{buckets}_{threads}_{path}"
            if path == "raw" and (kind, buckets) in raw_ids:
                continue            # one raw table per (kind, buckets): shared by both log rows
            if path == "raw":
                tid = raw_ids[(kind, buckets)] = create_raw(coord, name, pk, buckets)
            else:
                create_client(conn, name, pk, buckets)
            created.append(name)
            for i, lab in enumerate(rounds):
                settle(cluster)
                gc.collect()
                if path == "raw":
                    secs, routed = write_raw(tablet, tid, buckets, op, batches)
                    raw_secs[(kind, buckets, i)] = secs
                    record(lab, path, secs, rows, f"  (routing+serialization {routed:.3f} s)")
                else:
                    secs = write_client(conn, name, op, batches, threads)
                    record(lab, path, secs, rows)
                check_rows(conn, name, rows * (1 + 2 * i))
        if label == "log append, 4 buckets, client 1 thread":
            # Paired with the 4-thread raw run of this repeat (the same raw measurement).
            out[label].setdefault("raw", []).append(rows / raw_secs[("log", 4, 0)])

    for label, kind in FETCHES:
        tid = raw_ids[(kind, 1)]
        name = f"bench.r{rep}_{kind}_1_1_raw"
        expected = rows * (1 if kind == "log" else 3)
        for path in order:
            settle(cluster)
            gc.collect()
            if path == "raw":
                n, nbytes, secs = fetch_raw(tablet, tid, fetch_bytes)
                out.setdefault(label, {}).setdefault("raw MB/s", []).append(nbytes / 1e6 / secs)
                out[label].setdefault("bytes", []).append(nbytes)
            else:
                n, secs = fetch_client(conn, name, fetch_bytes)
            if n != expected:
                raise AssertionError(f"{label} ({path}): {n} rows, expected {expected}")
            record(label, path, secs, n)

    for name in created:
        conn.admin().drop_table(name)


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__, rows=1_000_000, batch_rows=20_000, fetch_bytes="4mb", repeat=3)
    a = p.parse_args(argv)
    batches = [make_rows(s, min(a.batch_rows, a.rows - s)) for s in range(0, a.rows, a.batch_rows)]
    mb = sum(len(table_to_bytes(b)) for b in batches) / 1e6
    fetch_bytes = parse_size_bytes(a.fetch_bytes)
    print(f"{a.rows} rows in {len(batches)} batches of {a.batch_rows} ({mb:.1f} MB Arrow IPC); "
          f"{a.repeat} repeats, fresh tables each", flush=True)
    out: dict[str, dict[str, list[float]]] = {}
    with tempfile.TemporaryDirectory(prefix="fluss-bench-") as tmp:
        cluster = EmbeddedProcesses(tmp, tablets=1).start()
        try:
            host, port = parse_address(cluster.address("coordinator", 0))
            coord = RpcConnection(host, port)
            conn = cluster.connection()
            try:
                for rep in range(a.repeat):
                    run_repeat(rep, cluster, conn, coord, batches, a.rows, fetch_bytes, out)
            finally:
                conn.close()
                coord.close()
        finally:
            cluster.stop()

    print(f"\nrows/s min/median/max over {a.repeat} repeats (M rows/s); client/raw = client rows/s "
          "over raw rows/s in the same repeat, min/median/max")
    print(f"{'workload':44s}{'raw RPC incl. serialization':>30s}{'client':>22s}"
          f"{'client/raw':>18s}{'MB/s (median)':>16s}")
    labels = [lab for w in WRITES for lab in [w[0]] + ([AGAIN[w[0]]] if w[0] in AGAIN else [])]
    kinds = dict(FETCHES)
    for label in labels + list(kinds):
        raw, cli = out[label]["raw"], out[label]["client"]
        ratios = [c / r for c, r in zip(cli, raw)]
        if label in kinds:
            mbs = statistics.median(out[label]["raw MB/s"])
            per_row = statistics.median(out[label]["bytes"]) / 1e6 / (
                a.rows * (1 if kinds[label] == "log" else 3))
            mbs_txt = f"{mbs:.0f} / {statistics.median(cli) * per_row:.0f}"
        else:
            per_row = mb / a.rows
            mbs_txt = (f"{statistics.median(raw) * per_row:.0f} / "
                       f"{statistics.median(cli) * per_row:.0f}")
        print(f"{label:44s}{_fmt(raw, 1e6):>30s}{_fmt(cli, 1e6):>22s}{_fmt(ratios):>18s}"
              f"{mbs_txt:>16s}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
