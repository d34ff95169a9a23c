"""KV snapshot lease scale: acquire of 100,000 buckets; 1,000,000-bucket leases: size, store,
reload, and the cost of changing one bucket.

Run from the repository root::

    .venv/bin/python bench/bench_leases.py [--acquire-buckets 100000] [--lease-buckets 1000000]
                                           [--runs 3] [--changes 20]

It starts its own ZooKeeper (``fluss_spark.local.zookeeper``) in a temporary directory and
prints one JSON document. Measured:

- ``acquire``: LeaseManager.acquire of N buckets whose snapshots are registered in ZooKeeper
  (existence checked against the registry, lease written to ZooKeeper before returning), then
  a renew and a release of everything.
- ``sizes``: a lease of M buckets in one table for several shapes of snapshot ids (none of them
  sits on an encoding width): bytes in ZooKeeper (header plus part znodes) per bucket, next to
  the previous release's encoding (v3: the smaller of a msgpack int array and fixed-width
  packed bytes) and, for uniformly random ids in a window of W, the entropy bound log2(W)/8
  that no encoding can beat. Each lease is read back by a second store and compared in full.
- ``change``: LeaseManager.acquire moving one bucket's pin in a lease of M pins (one table of
  M buckets; M/1000 tables of 1000 buckets), ZooKeeper write included; min/median/max over
  ``--changes`` changes in each of ``--runs`` runs; afterwards a second store reloads the lease
  and it must equal the manager's.
"""

from __future__ import annotations

import json
import math
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from common import parser  # noqa: E402 - bench/common.py
from fluss_spark.local.zookeeper import ZooKeeperProcess  # noqa: E402
from fluss_spark.metadata import layout  # noqa: E402
from fluss_spark.metadata.layout import LeaseRecord, SnapshotIndexPage, SnapshotRecord  # noqa: E402
from fluss_spark.metadata.store import MetadataStore  # noqa: E402
from fluss_spark.server.coordinator.leases import LeaseManager  # noqa: E402
from fluss_spark.server.coordinator.snapshots import SnapshotRegistry  # noqa: E402
from fluss_spark.testing.clock import FakeClock  # noqa: E402

HOUR = 3_600_000


def stats(values: list[float], digits: int = 4) -> dict:
    return {"min": round(min(values), digits), "median": round(statistics.median(values), digits),
            "max": round(max(values), digits)}


def register_snapshots(store: MetadataStore, table_id: int, buckets: int,
                       snapshot_id: int) -> float:
    """Write the index pages of one snapshot per bucket; returns seconds."""
    t0 = time.perf_counter()
    store.zk.ensure_path(layout.snapshot_index_path(table_id))
    per = layout.SNAPSHOT_PAGE_BUCKETS
    for p0 in range(0, (buckets + per - 1) // per, 100):
        tx = store.zk.transaction()
        for page in range(p0, min(p0 + 100, (buckets + per - 1) // per)):
            recs = tuple(SnapshotRecord(table_id, b, snapshot_id, f"/remote/{table_id}/{b}", 10, 1)
                         for b in range(page * per, min((page + 1) * per, buckets)))
            tx.create(layout.snapshot_index_path(table_id, page),
                      SnapshotIndexPage(table_id, page, recs).encode())
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
    return {"buckets": buckets, "register_snapshots_s": round(reg_s, 2),
            "registry_load_s": round(load_s, 2), "acquire_s": round(acquire_s, 3),
            "renew_s": round(renew_s, 3), "release_all_s": round(release_s, 3)}


def shapes(n: int) -> dict:
    """Snapshot ids of n buckets; ``bound`` is the entropy of uniformly random ids, if so."""
    rng = random.Random(42)
    return {
        "window 300 (uniform)": ({b: 5000 + rng.randrange(300) for b in range(n)}, 300),
        "window 3,000 (uniform)": ({b: 5000 + rng.randrange(3000) for b in range(n)}, 3000),
        "window 100,000 (uniform)": ({b: 5000 + rng.randrange(100_000) for b in range(n)},
                                     100_000),
        "(b * 7919) % 500": ({b: 1000 + (b * 7919) % 500 for b in range(n)}, None),
        "(b * 7919) % 100,000": ({b: 1000 + (b * 7919) % 100_000 for b in range(n)}, None),
        "97% in 200, 3% over 3,000,000": (
            {b: 5000 + rng.randrange(200) if rng.random() < 0.97 else rng.randrange(3_000_000)
             for b in range(n)}, None),
        "trend over 1,000,000 plus 0..29": ({b: b + rng.randrange(30) for b in range(n)}, None),
        "two clusters 70,001 apart (1/3 above)": (
            {b: 1000 + rng.randrange(50) + 70_001 * (rng.random() < 1 / 3) for b in range(n)},
            None),
    }


def v3_bytes(pins: dict) -> int:
    """Bytes of the previous release's encoding of a dense table: the smaller of a msgpack int
    array and packed fixed-width offsets (1, 2, 4 or 8 bytes)."""
    def msgpack_int(v: int) -> int:
        return 1 if v <= 127 else 2 if v <= 255 else 3 if v <= 65535 else 5 if v < 2 ** 32 else 9
    values = list(pins.values())
    dense = sum(msgpack_int(v) for v in values) + (max(pins) + 1 - len(pins))
    top = max(values) - min(values) + 1
    width = next(w for w in (1, 2, 4, 8) if top < 256 ** w)
    return min(dense, (max(pins) + 1) * width + 16)


def bench_sizes(address: str, n: int) -> dict:
    out = {}
    writer = MetadataStore(address).start()
    reader = MetadataStore(address).start()
    try:
        for name, (pins, window) in shapes(n).items():
            rec = LeaseRecord("size", 1, 2 ** 62, {1: pins})
            t0 = time.perf_counter()
            stored = writer.save_lease(rec)
            save_s = time.perf_counter() - t0
            t0 = time.perf_counter()
            back = reader.load_lease("size")
            load_s = time.perf_counter() - t0
            assert back == rec, name
            assert stored == writer.lease_stored_bytes("size")
            out[name] = {"bytes_per_bucket": round(stored / n, 3),
                         "v3_bytes_per_bucket": round(v3_bytes(pins) / n, 3),
                         "entropy_bound": round(math.log2(window) / 8, 3) if window else None,
                         "save_s": round(save_s, 2), "load_s": round(load_s, 2),
                         "znodes": 1 + len(writer.zk.get_children(layout.lease_path("size")))}
            writer.delete_lease("size")
    finally:
        writer.close()
        reader.close()
    return out


def bench_change(address: str, n: int, runs: int, changes: int) -> dict:
    out = {}
    for shape, tables in (("1 table x %d buckets" % n, {1: n}),
                          ("%d tables x 1000 buckets" % (n // 1000),
                           {t: 1000 for t in range(1, n // 1000 + 1)})):
        times, full = [], []
        for run in range(runs):
            rng = random.Random(run)
            store = MetadataStore(address).start()
            leases = LeaseManager(store, snapshot_exists=lambda t, b, s: True, clock=FakeClock())
            lease_id = f"change-{len(out)}-{run}"
            request = {t: {b: 5000 + rng.randrange(3000) for b in range(nb)}
                       for t, nb in tables.items()}
            t0 = time.perf_counter()
            leases.acquire(lease_id, HOUR, request)
            full.append(time.perf_counter() - t0)
            for i in range(changes):
                t = rng.choice(list(tables))
                move = {t: {rng.randrange(tables[t]): 10_000 + i}}
                t0 = time.perf_counter()
                leases.acquire(lease_id, HOUR, move)
                times.append(time.perf_counter() - t0)
            other = MetadataStore(address).start()
            try:
                assert other.load_lease(lease_id) == leases.describe(lease_id)
            finally:
                other.close()
            store.delete_lease(lease_id)
            store.close()
        out[shape] = {"one_bucket_change_s": stats(times), "first_acquire_s": stats(full, 2),
                      "changes": len(times)}
    return out


def main() -> None:
    p = parser(__doc__, acquire_buckets=100_000, lease_buckets=1_000_000, runs=3, changes=20)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as d:
        zk = ZooKeeperProcess(d).start()
        try:
            address = f"{zk.address}/bench-{time.time_ns()}"
            store = MetadataStore(address).start()
            out = {"acquire": bench_acquire(store, args.acquire_buckets)}
            store.close()
            out["sizes"] = bench_sizes(address, args.lease_buckets)
            out["change"] = bench_change(address, args.lease_buckets, args.runs, args.changes)
        finally:
            zk.stop()
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
