"""Tablet server write (PRODUCE) and log fetch (FETCH_LOG) throughput over loopback TCP.

Starts a local cluster (embedded ZooKeeper, one coordinator, one tablet server) in a temporary
directory and drives the tablet with raw RPCs (one connection per writer thread):

- write: ``--rows`` rows in Arrow batches of ``--batch-rows``, to a log table (append) and a
  primary-key table (upsert of new keys, then upsert of the same keys again: -U/+U pairs),
  with 1 bucket (one writer) and 4 buckets (four writers in parallel, one per bucket; log
  batches go round-robin, PK batches are split by key hash as the client does).
  Every acknowledged write is fsynced.
- fetch: the whole changelog of the 1-bucket log table read back with FETCH_LOG at
  ``--fetch-bytes`` per request; MB/s counts the Arrow IPC bytes received.

Run from the repository root::

    .venv/bin/python bench/bench_write_fetch.py --rows 1000000 --batch-rows 20000 \
        --fetch-bytes 4mb
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time

import numpy as np
import pyarrow as pa

from fluss_spark.transport.client import RpcConnection, parse_address
from fluss_spark.config import parse_size_bytes
from fluss_spark.protocol.api import ApiKey
from fluss_spark.protocol.arrow_ipc import serialize_schema, table_to_bytes
from fluss_spark.protocol.rows import split_by_bucket
from fluss_spark.protocol.types import parse_schema
from fluss_spark.local.cluster import LocalCluster

SCHEMA = parse_schema("id BIGINT, name STRING, amount DOUBLE, category STRING, ts BIGINT")


def make_rows(start: int, n: int) -> pa.Table:
    ids = np.arange(start, start + n, dtype=np.int64)
    return pa.table({"id": ids, "name": pa.array([f"customer-{i:09d}" for i in ids]),
                     "amount": ids * 0.25,
                     "category": pa.array(["abcdefgh"[i % 8] * 6 for i in range(n)]),
                     "ts": ids + 1_700_000_000_000}, schema=SCHEMA)


def create(coord: RpcConnection, name: str, pk: bool, buckets: int) -> int:
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


def write(address: str, table_id: int, buckets: int, op: str,
          payloads: list[tuple[int, bytes]]) -> float:
    """Send every (bucket, payload), one thread and connection per bucket; returns seconds."""
    host, port = parse_address(address)
    conns = [RpcConnection(host, port) for _ in range(buckets)]
    for c in conns:
        c.call_raw(ApiKey.API_VERSIONS)

    def run(b: int):
        for bucket, payload in payloads:
            if bucket == b:
                conns[b].call_raw(ApiKey.PRODUCE, {"table_id": table_id, "bucket": b, "op": op,
                                               "records": payload})

    threads = [threading.Thread(target=run, args=(b,)) for b in range(buckets)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    for c in conns:
        c.close()
    return elapsed


def fetch_all(address: str, table_id: int, max_bytes: int) -> tuple[int, int, float]:
    host, port = parse_address(address)
    conn = RpcConnection(host, port)
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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--batch-rows", type=int, default=20_000)
    p.add_argument("--fetch-bytes", default="4mb")
    a = p.parse_args(argv)
    batches = [make_rows(s, min(a.batch_rows, a.rows - s)) for s in range(0, a.rows, a.batch_rows)]
    mb = sum(len(table_to_bytes(b)) for b in batches) / 1e6
    print(f"{a.rows} rows in {len(batches)} batches of {a.batch_rows} ({mb:.1f} MB Arrow IPC)")
    with tempfile.TemporaryDirectory(prefix="fluss-bench-") as tmp:
        cluster = LocalCluster(tmp, tablets=1).start()
        try:
            tablet = cluster.address("tablet", 0)
            host, port = parse_address(cluster.address("coordinator", 0))
            coord = RpcConnection(host, port)
            results = {}
            for kind in ("log", "pk"):
                for buckets in (1, 4):
                    tid = create(coord, f"bench.{kind}_{buckets}", kind == "pk", buckets)
                    op = "upsert" if kind == "pk" else "append"
                    payloads = route(batches, buckets, kind == "pk")
                    secs = write(tablet, tid, buckets, op, payloads)
                    label = f"write {kind:3s} {op:6s} {buckets} bucket(s)"
                    print(f"{label:38s} {a.rows / secs:12,.0f} rows/s  {mb / secs:8.1f} MB/s")
                    if kind == "pk":
                        secs = write(tablet, tid, buckets, op, payloads)
                        label = f"write pk  upsert existing keys {buckets} bkt"
                        print(f"{label:38s} {a.rows / secs:12,.0f} rows/s  {mb / secs:8.1f} MB/s"
                              "  (2 changelog records per row)")
                    results[(kind, buckets)] = tid
            rows, nbytes, secs = fetch_all(tablet, results[("log", 1)],
                                           parse_size_bytes(a.fetch_bytes))
            print(f"{'fetch log 1 bucket (' + a.fetch_bytes + '/request)':38s} "
                  f"{rows / secs:12,.0f} rows/s  {nbytes / 1e6 / secs:8.1f} MB/s")
            rows, nbytes, secs = fetch_all(tablet, results[("pk", 1)],
                                           parse_size_bytes(a.fetch_bytes))
            print(f"{'fetch pk changelog 1 bucket':38s} "
                  f"{rows / secs:12,.0f} rows/s  {nbytes / 1e6 / secs:8.1f} MB/s")
            coord.close()
        finally:
            cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
