"""Coordinator recovery: restart with 100,000 registered KV snapshots and 100 leases.

Run from the repository root::

    .venv/bin/python bench/bench_recovery.py [--tables 100] [--buckets 500] [--per-bucket 2]
                                             [--leases 100] [--runs 3]

It starts its own ZooKeeper in a temporary directory and prints one JSON document. Each run
builds the same registry twice, in chroots of their own: once in the snapshot index (layout
v2, what the coordinator writes) and once as one znode per snapshot (layout v1, the previous
release), plus the tables and the leases (each pins every bucket of one table). Measured per
run, paired:

- ``restart_s``: a coordinator process on the v2 tree is killed with SIGKILL and started
  again on the same port; the time from spawning the new process until it answers a
  leader-only request (GET_METRICS), i.e. has recovered (Python start-up and imports
  included). Every snapshot and lease is then checked to be
  served (GET_METRICS counts, LIST_KV_SNAPSHOTS of every table, DESCRIBE of every lease).
- ``read_v2_s`` / ``read_v1_s``: reading every snapshot record of each tree in-process
  (``MetadataStore.all_snapshots``, which for v1 is the previous release's recovery read).
- ``first_answer_v1_s``: the first coordinator start on the v1 tree (the upgrade): from
  spawning the process until it answers a leader-only request (GET_METRICS). It moves the v1
  znodes into the index in the background after that.
- ``migrated_v1_s``: from spawning that process until GET_METRICS reports no bucket left to
  move (``snapshot_buckets_to_migrate`` 0); then everything is checked to be served as above.
- ``during_v1_max_ms`` / ``during_v1_calls``: while the move runs, a client loops over
  LIST_KV_SNAPSHOTS of a table not yet listed (a table not yet moved is moved first),
  ACQUIRE of a lease on the latest snapshot of every bucket of that table, RENEW and RELEASE
  of it, and GET_METRICS; the slowest answer and the number of calls.
- ``commit_ms``: once the coordinator is stopped, a SnapshotRegistry on the v2 tree (loaded
  as the coordinator loads it) registers 200 new snapshots, each pushing its bucket's oldest
  out of retention (a page write for the new record and one for the deletion); median and max
  per run, and every bucket is checked to hold exactly its two newest snapshots afterwards.
"""

from __future__ import annotations

import json
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
from fluss_spark.metadata.layout import (LeaseRecord, SnapshotIndexPage,  # noqa: E402
                                         SnapshotRecord, TabletRecord)
from fluss_spark.metadata.store import MetadataStore  # noqa: E402
from fluss_spark.protocol.api import ApiKey  # noqa: E402
from fluss_spark.server.snapshot_store import snapshot_location  # noqa: E402
from fluss_spark.testing.coordinator import CoordinatorProcess, call_until_leader  # noqa: E402
from fluss_spark.testing.legacy_snapshots import (create_nodes, create_pk_tables,  # noqa: E402
                                                  write_v1_snapshots)

YEAR_MS = 365 * 24 * 3_600_000


def registry(tables: int, buckets: int, per_bucket: int, remote: str, seed: int):
    """Snapshot records of every table and bucket; ids of a bucket are consecutive and start
    anywhere in 1000..21000 (buckets of a table snapshot at different rates)."""
    rng = random.Random(seed)
    out = []
    for t in range(1, tables + 1):
        for b in range(buckets):
            first = 1000 + rng.randrange(20_000)
            for s in range(first, first + per_bucket):
                out.append(SnapshotRecord(t, b, s, snapshot_location(remote, t, b, s),
                                          log_offset=s * 100, row_count=s * 10,
                                          size_bytes=4096, created_ms=1_700_000_000_000 + s))
    return out


def build(store: MetadataStore, records: list[SnapshotRecord], tables: int, buckets: int,
          leases: int, v1: bool) -> dict:
    """Tables, snapshot records (v1 znodes or v2 pages) and leases; returns the leases' pins."""
    store.register_tablet(TabletRecord(id=1, host="127.0.0.1", port=1))
    create_pk_tables(store, tables, buckets)
    if v1:
        write_v1_snapshots(store.zk, records)
    else:
        ops = []
        pages: dict[tuple[int, int], list[SnapshotRecord]] = {}
        for r in records:
            pages.setdefault((r.table_id, layout.snapshot_page_of(r.bucket)), []).append(r)
        for t in range(1, tables + 1):
            ops.append((layout.snapshot_index_path(t), b""))
        for (t, page), recs in sorted(pages.items()):
            ops.append((layout.snapshot_index_path(t, page),
                        SnapshotIndexPage(t, page, tuple(recs)).encode()))
        create_nodes(store.zk, ops)
    latest = {}
    for r in records:
        latest[(r.table_id, r.bucket)] = max(latest.get((r.table_id, r.bucket), 0), r.snapshot_id)
    pins = {}
    for i in range(leases):
        t = i % tables + 1
        pins[f"job-{i}"] = {t: {b: latest[(t, b)] for b in range(buckets)}}
        store.save_lease(LeaseRecord(f"job-{i}", 1, int(time.time() * 1000) + YEAR_MS,
                                     pins[f"job-{i}"]))
    return pins


def check_served(conn, tables: int, n_snapshots: int, pins: dict) -> None:
    """Every snapshot and every lease is served by the recovered coordinator."""
    metrics = call_until_leader(conn, ApiKey.GET_METRICS, {}, timeout_s=120)["metrics"]
    assert metrics["snapshot_count"] == n_snapshots, metrics
    assert metrics["lease_count"] == len(pins), metrics
    listed = sum(len(conn.call_raw(ApiKey.LIST_KV_SNAPSHOTS, {"table_id": t})["snapshots"])
                 for t in range(1, tables + 1))
    assert listed == n_snapshots, (listed, n_snapshots)
    for lease_id, tables_pins in pins.items():
        info = conn.call_raw(ApiKey.DESCRIBE_KV_SNAPSHOT_LEASE, {"lease_id": lease_id})
        assert info["tables"] == tables_pins, lease_id


def to_migrate(conn) -> int:
    return conn.call_raw(ApiKey.GET_METRICS, {})["metrics"]["snapshot_buckets_to_migrate"]


def during_migration(conn, tables: int, buckets: int) -> tuple[float, int]:
    """(slowest answer in seconds, calls) of a client that lists, leases, renews and releases
    one table after another while the coordinator moves the v1 tree; stops when it is moved."""
    slowest, calls, table = 0.0, 0, tables      # the background move goes from table 1 up
    while table >= 1:
        t0 = time.perf_counter()
        snaps = conn.call_raw(ApiKey.LIST_KV_SNAPSHOTS, {"table_id": table,
                                                         "latest_only": True})["snapshots"]
        pins = {s["bucket"]: s["snapshot_id"] for s in snaps}
        assert len(pins) == buckets, (table, len(pins))
        steps = [(ApiKey.ACQUIRE_KV_SNAPSHOT_LEASE, {"lease_id": "probe",
                                                     "duration_ms": 600_000,
                                                     "tables": {table: pins}}),
                 (ApiKey.RENEW_KV_SNAPSHOT_LEASE, {"lease_id": "probe", "duration_ms": 600_000}),
                 (ApiKey.RELEASE_KV_SNAPSHOT_LEASE, {"lease_id": "probe",
                                                     "tables": {table: list(pins)}})]
        slowest, calls = max(slowest, time.perf_counter() - t0), calls + 1
        for api, body in steps:
            t0 = time.perf_counter()
            out = conn.call_raw(api, body)
            slowest, calls = max(slowest, time.perf_counter() - t0), calls + 1
            if api == ApiKey.ACQUIRE_KV_SNAPSHOT_LEASE:
                assert out["unavailable"] == {}, out
        t0 = time.perf_counter()
        left = to_migrate(conn)
        slowest, calls = max(slowest, time.perf_counter() - t0), calls + 1
        if not left:
            break
        table -= 1
    return slowest, calls


def timed_start(proc: CoordinatorProcess) -> float:
    """Seconds from spawning the process until it answers a leader-only request: after a
    kill -9 the dead leader's ``active`` znode lingers, so the ready file alone comes before
    the recovery."""
    from fluss_spark.errors import ApiError
    t0 = time.perf_counter()
    proc.start(timeout_s=300)
    conn = proc.connection()
    while True:
        try:
            conn.call_raw(ApiKey.GET_METRICS, {})
            return time.perf_counter() - t0
        except ApiError as e:
            if not e.retriable or time.perf_counter() - t0 > 300:
                raise
            time.sleep(0.01)


def commit_times(chroot: str, remote: str, records: list[SnapshotRecord]) -> list[float]:
    """Seconds of each of 200 registry commits (with retention) on a loaded registry."""
    from fluss_spark.server.coordinator.snapshots import SnapshotRegistry
    store = MetadataStore(chroot).start()
    try:
        registry = SnapshotRegistry(store, num_retained=lambda t: 2, store_root=remote,
                                    delete_files=lambda path: None)
        registry.load()
        latest = {}
        for r in records:
            latest[(r.table_id, r.bucket)] = max(latest.get((r.table_id, r.bucket), 0),
                                                 r.snapshot_id)
        keys = sorted(latest)[::max(1, len(latest) // 200)][:200]
        times = []
        for t, b in keys:
            s = latest[(t, b)] + 1
            rec = SnapshotRecord(t, b, s, snapshot_location(remote, t, b, s), s * 100, s * 10,
                                 4096, 1)
            t0 = time.perf_counter()
            registry.commit(rec)
            times.append(time.perf_counter() - t0)
        for t, b in keys:
            assert store.snapshot_ids(t, b) == [latest[(t, b)], latest[(t, b)] + 1], (t, b)
        return times
    finally:
        store.close()


def one_run(zk_address: str, base: Path, args, run: int) -> dict:
    remote = str(base / f"remote-{run}")
    records = registry(args.tables, args.buckets, args.per_bucket, remote, seed=run)
    out = {}
    for label, v1 in (("v2", False), ("v1", True)):
        chroot = f"{zk_address}/bench-{label}-{run}-{time.time_ns()}"
        store = MetadataStore(chroot).start()
        try:
            t0 = time.perf_counter()
            pins = build(store, records, args.tables, args.buckets, args.leases, v1)
            out[f"build_{label}_s"] = round(time.perf_counter() - t0, 2)
            t0 = time.perf_counter()
            read = store.all_snapshots()
            out[f"read_{label}_s"] = round(time.perf_counter() - t0, 3)
            assert len(read) == len(records), (len(read), len(records))
        finally:
            store.close()
        proc = CoordinatorProcess(chroot, base / f"coord-{label}-{run}", remote_data_dir=remote)
        try:
            if v1:
                t0 = time.perf_counter()
                out["first_answer_v1_s"] = round(timed_start(proc), 2)
                conn = proc.connection()
                slowest, calls = during_migration(conn, args.tables, args.buckets)
                out["during_v1_max_ms"] = round(slowest * 1000, 1)
                out["during_v1_calls"] = calls
                while to_migrate(conn):
                    time.sleep(0.05)
                out["migrated_v1_s"] = round(time.perf_counter() - t0, 2)
                check_served(conn, args.tables, len(records), pins)
            else:
                proc.start(timeout_s=300)      # the first start; then kill -9 and restart
                check_served(proc.connection(), args.tables, len(records), pins)
                proc.kill()
                out["restart_s"] = round(timed_start(proc), 2)
                check_served(proc.connection(), args.tables, len(records), pins)
                proc.stop()
                times = commit_times(chroot, remote, records)
                out["commit_median_ms"] = round(statistics.median(times) * 1000, 2)
                out["commit_max_ms"] = round(max(times) * 1000, 2)
        finally:
            proc.stop()
    out["read_v1_over_v2"] = round(out["read_v1_s"] / out["read_v2_s"], 1)
    return out


def summary(runs: list[dict], key: str) -> dict:
    values = [r[key] for r in runs]
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


def main() -> None:
    p = parser(__doc__, tables=100, buckets=500, per_bucket=2, leases=100, runs=3)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as d:
        zk = ZooKeeperProcess(Path(d) / "zk").start()
        try:
            runs = [one_run(zk.address, Path(d), args, i) for i in range(args.runs)]
        finally:
            zk.stop()
    keys = ["restart_s", "read_v2_s", "read_v1_s", "read_v1_over_v2", "first_answer_v1_s",
            "migrated_v1_s", "during_v1_max_ms", "during_v1_calls", "commit_median_ms",
            "commit_max_ms"]
    print(json.dumps({"snapshots": args.tables * args.buckets * args.per_bucket,
                      "tables": args.tables, "buckets_per_table": args.buckets,
                      "leases": args.leases, "runs": runs,
                      "summary": {k: summary(runs, k) for k in keys}}, indent=2))


if __name__ == "__main__":
    main()
