"""A coordinator process started on a ZooKeeper tree of an older release (layout v1 snapshot
znodes) answers at once, serves every snapshot while it moves them, and a kill -9 mid-move
resumes and ends with exactly the same snapshots."""

import time

from fluss_spark.local.ports import wait_until
from fluss_spark.metadata import layout
from fluss_spark.metadata.layout import SnapshotRecord, TabletRecord
from fluss_spark.metadata.store import MetadataStore
from fluss_spark.protocol.api import ApiKey
from fluss_spark.server.snapshot_store import snapshot_location
from fluss_spark.testing.coordinator import CoordinatorProcess, call_until_leader
from fluss_spark.testing.legacy_snapshots import create_pk_tables, write_v1_snapshots

TABLES, BUCKETS = 4, 200        # 1,600 snapshots, 8 steps of at most 128 buckets


def to_migrate(conn) -> int:
    metrics = conn.call_raw(ApiKey.GET_METRICS, {})["metrics"]
    return metrics["snapshot_buckets_to_migrate"]


def listed(conn, table_id) -> list[tuple[int, int, int]]:
    snaps = conn.call_raw(ApiKey.LIST_KV_SNAPSHOTS, {"table_id": table_id})["snapshots"]
    return [(s["bucket"], s["snapshot_id"], s["log_offset"]) for s in snaps]


def test_first_start_on_an_old_layout_serves_during_the_move_and_a_kill_resumes_it(
        zk_address, tmp_path):
    meta = MetadataStore(zk_address).start()
    proc = CoordinatorProcess(zk_address, tmp_path / "coord",
                              options=["kv.snapshot.migration.pause=300ms"])
    try:
        meta.register_tablet(TabletRecord(id=1, host="127.0.0.1", port=9001))
        create_pk_tables(meta, TABLES, BUCKETS)
        remote = str(proc.remote_data_dir)
        records = [SnapshotRecord(t, b, s, snapshot_location(remote, t, b, s), s * 10, s)
                   for t in range(1, TABLES + 1) for b in range(BUCKETS) for s in (1, 2)]
        write_v1_snapshots(meta.zk, records)
        expected = {t: [(r.bucket, r.snapshot_id, r.log_offset) for r in records
                        if r.table_id == t] for t in range(1, TABLES + 1)}

        started = time.monotonic()
        proc.start()
        conn = proc.connection()
        left = call_until_leader(conn, ApiKey.GET_METRICS, {})["metrics"][
            "snapshot_buckets_to_migrate"]
        answered_s = time.monotonic() - started
        assert 0 < left <= TABLES * BUCKETS, left       # answering before the move finished
        assert answered_s < 3, answered_s       # from spawning the process; 0.4 s measured
        # While the move runs: the last table listed in full (it moves first), a lease on
        # old-layout snapshots of a table not yet moved, renewed and partly released.
        assert listed(conn, TABLES) == expected[TABLES]
        pins = {b: 2 for b in range(BUCKETS)}
        assert conn.call_raw(ApiKey.ACQUIRE_KV_SNAPSHOT_LEASE, {
            "lease_id": "job", "duration_ms": 3_600_000, "tables": {3: pins}}
            )["unavailable"] == {}
        conn.call_raw(ApiKey.RENEW_KV_SNAPSHOT_LEASE, {"lease_id": "job",
                                                        "duration_ms": 3_600_000})
        conn.call_raw(ApiKey.RELEASE_KV_SNAPSHOT_LEASE, {"lease_id": "job",
                                                          "tables": {3: [0]}})
        assert listed(conn, 1) == expected[1]
        # kill -9 in the middle of the move.
        wait_until(lambda: 0 < to_migrate(conn) < left, 30, "the move to make progress")
        proc.kill()
        assert meta.zk.get_children(layout.SNAPSHOTS), "the move finished before the kill"
        proc.options = []
        proc.start()
        conn = proc.connection()
        wait_until(lambda: call_until_leader(conn, ApiKey.GET_METRICS, {})["metrics"][
            "snapshot_buckets_to_migrate"] == 0, 60, "the resumed move to finish")
        assert meta.zk.get_children(layout.SNAPSHOTS) == []
        key = lambda r: (r.table_id, r.bucket, r.snapshot_id)  # noqa: E731
        assert sorted(meta.all_snapshots(), key=key) == sorted(records, key=key)
        for t in range(1, TABLES + 1):
            assert listed(conn, t) == expected[t]
        info = conn.call_raw(ApiKey.DESCRIBE_KV_SNAPSHOT_LEASE, {"lease_id": "job"})
        assert info["tables"] == {3: {b: 2 for b in range(1, BUCKETS)}}
    finally:
        proc.stop()
        print(proc.log())
        meta.close()
