"""KV snapshot lease scale: acquire of 100,000 buckets; a 1,000,000-bucket lease stored and reloaded.

Run from the repository root::

    .venv/bin/python bench/bench_leases.py [--acquire-buckets 100000] [--lease-buckets 1000000]

It starts its own ZooKeeper (``fluss_spark.local.zookeeper``) in a temporary directory and
prints one JSON document. Measured:

- ``acquire``: LeaseManager.acquire of N buckets whose snapshots are registered in ZooKeeper
  (existence checked against the registry, lease written to ZooKeeper before returning), then
  a renew and a release of everything.
- ``lease_1m``: a LeaseRecord of M pinned buckets written with MetadataStore.save_lease
  (chunked), read back with load_lease, and recovered by LeaseManager.load; bytes stored in
  ZooKeeper (header plus chunks) and bytes per pinned bucket, next to the same lease in Apache
  Fluss's JSON layout ``{"version":1,"table_id":…,"bucket_snapshots":[…]}`` (one snapshot id per
  bucket, the most compact reading of that format).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time

from fluss_spark.metadata import layout
from fluss_spark.metadata.layout import LeaseRecord, SnapshotRecord
from fluss_spark.metadata.store import MetadataStore
from fluss_spark.server.coordinator.leases import LeaseManager
from fluss_spark.server.coordinator.snapshots import SnapshotRegistry
from fluss_spark.testing.coordinator import FakeClock
from fluss_spark.local.zookeeper import ZooKeeperProcess

HOUR = 3_600_000


def register_snapshots(store: MetadataStore, table_id: int, buckets: int, snapshot_id: int) -> float:
    """Write one snapshot znode per bucket, 500 creates per ZooKeeper multi; returns seconds."""
    t0 = time.perf_counter()
    store.zk.ensure_path(layout.snapshots_path(table_id))
    for b0 in range(0, buckets, 250):
        tx = store.zk.transaction()
        for b in range(b0, min(b0 + 250, buckets)):
            tx.create(layout.snapshots_path(table_id, b))
            tx.create(layout.snapshot_path(table_id, b, snapshot_id),
                      SnapshotRecord(table_id, b, snapshot_id, f"/remote/{table_id}/{b}", 10,
                                     1).encode())
        tx.commit()
    return time.perf_counter() - t0


def bench_acquire(store: MetadataStore, buckets: int) -> dict:
    table_id, snapshot_id = 1, 7
    reg_s = register_snapshots(store, table_id, buckets, snapshot_id)
    registry = SnapshotRegistry(store, num_retained=lambda t: 2)
    t0 = time.perf_counter()
    registry.load()
    load_s = time.perf_counter() - t0
    leases = LeaseManager(store, snapshot_exists=registry.exists, on_unpinned=registry.collect,
                          clock=FakeClock(), lock=registry.lock)
    registry.is_pinned = leases.is_pinned
    request = {table_id: {b: snapshot_id for b in range(buckets)}}
    t0 = time.perf_counter()
    unavailable, _ = leases.acquire("bench-acquire", HOUR, request)
    acquire_s = time.perf_counter() - t0
    assert unavailable == {}
    t0 = time.perf_counter()
    leases.renew("bench-acquire", HOUR)
    renew_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    assert leases.release("bench-acquire", {table_id: list(range(buckets))}) == 0
    release_s = time.perf_counter() - t0
    return {"buckets": buckets, "register_snapshot_znodes_s": round(reg_s, 2),
            "registry_load_s": round(load_s, 2), "acquire_s": round(acquire_s, 3),
            "renew_s": round(renew_s, 3), "release_all_s": round(release_s, 3)}


def bench_million(store: MetadataStore, buckets: int) -> dict:
    table_id = 1
    # Snapshot ids as a bucket accumulates them (one every 10 min for about a week).
    pins = {b: 1000 + (b * 7919) % 500 for b in range(buckets)}
    rec = LeaseRecord("bench-million", 1, 2 ** 62, {table_id: pins})
    t0 = time.perf_counter()
    store.save_lease(rec)
    save_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    loaded = store.load_lease("bench-million")
    load_s = time.perf_counter() - t0
    assert loaded == rec
    leases = LeaseManager(store, snapshot_exists=lambda t, b, s: True)
    t0 = time.perf_counter()
    leases.load()
    manager_load_s = time.perf_counter() - t0
    assert leases.describe("bench-million").pin_count() == buckets
    stored = store.lease_stored_bytes("bench-million")
    chunks = len(store.zk.get_children(layout.lease_path("bench-million")))
    dense = [pins.get(b, -1) for b in range(buckets)]
    fluss_json = json.dumps({"version": 1, "table_id": table_id, "bucket_snapshots": dense},
                            separators=(",", ":")).encode()
    return {"buckets": buckets, "save_s": round(save_s, 2), "load_s": round(load_s, 2),
            "lease_manager_load_s": round(manager_load_s, 2), "zookeeper_bytes": stored,
            "chunk_znodes": chunks, "bytes_per_pinned_bucket": round(stored / buckets, 3),
            "fluss_json_bytes": len(fluss_json),
            "fluss_json_bytes_per_bucket": round(len(fluss_json) / buckets, 3),
            "fluss_json_to_ours_ratio": round(len(fluss_json) / stored, 2)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--acquire-buckets", type=int, default=100_000)
    p.add_argument("--lease-buckets", type=int, default=1_000_000)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as d:
        zk = ZooKeeperProcess(d).start()
        try:
            store = MetadataStore(f"{zk.address}/bench-{time.time_ns()}").start()
            out = {"acquire": bench_acquire(store, args.acquire_buckets),
                   "lease_1m": bench_million(store, args.lease_buckets)}
            store.close()
        finally:
            zk.stop()
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
