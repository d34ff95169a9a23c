"""Whole-cluster guarantees: snapshot content, retention, and writes across a coordinator kill."""

from __future__ import annotations

import os
import random
import threading

import pyarrow as pa

from fluss_spark.metadata.store import MetadataStore
from fluss_spark.local.embedded import EmbeddedProcesses
from fluss_spark.local.ports import wait_until


def _fold(changelog: pa.Table) -> dict:
    """Apply a bucket's changelog in offset order: the state it describes, key -> row."""
    state = {}
    for row in changelog.to_pylist():
        if row["_change_type"] in ("+I", "+U"):
            state[row["id"]] = row["v"]
        elif row["_change_type"] == "-D":
            del state[row["id"]]
    return state


def test_snapshot_equals_the_table_state_at_its_log_offset(conn, table_name):
    """Snapshots taken while writes keep arriving hold exactly the fold of the log below them."""
    admin = conn.admin()
    admin.create_table(table_name, "id BIGINT, v STRING", primary_key=["id"], num_buckets=2,
                       properties={"kv.snapshot.num-retained": "3"})
    writer = conn.writer(table_name)
    stop = threading.Event()

    def churn():
        rng = random.Random(7)
        while not stop.is_set():
            ids = [rng.randrange(500) for _ in range(50)]
            writer.upsert(pa.table({"id": pa.array(ids, pa.int64()),
                                    "v": [f"v{rng.random()}" for _ in ids]}))
            writer.delete(pa.table({"id": pa.array(ids[:5], pa.int64())}))

    writer.upsert(pa.table({"id": pa.array(range(500), pa.int64()), "v": ["init"] * 500}))
    t = threading.Thread(target=churn)
    t.start()
    try:
        snapshots = [admin.trigger_kv_snapshot(table_name) for _ in range(3)]
    finally:
        stop.set()
        t.join()
    log = conn.log_scanner(table_name)
    kv = conn.kv_scanner(table_name)
    for taken in snapshots:
        for bucket, snap in taken.items():
            changelog = pa.Table.from_batches(list(log.read(bucket, 0, snap.log_offset)))
            expected = _fold(changelog)
            rows = pa.Table.from_batches(list(kv.scan(bucket, snapshot_id=snap.snapshot_id)))
            got = dict(zip(rows["id"].to_pylist(), rows["v"].to_pylist()))
            assert got == expected and snap.row_count == len(expected)
            keys = rows["id"].to_pylist()
            assert len(keys) == len(set(keys))


def test_retention_deletes_the_oldest_snapshot_file_and_znode(cluster, conn, table_name):
    admin = conn.admin()
    info = admin.create_table(table_name, "id BIGINT, v STRING", primary_key=["id"],
                              properties={"kv.snapshot.num-retained": "2"})
    writer = conn.writer(table_name)
    taken = []
    for i in range(3):
        writer.upsert([{"id": i, "v": str(i)}])
        taken.append(admin.trigger_kv_snapshot(table_name)[0])
    wait_until(lambda: [s.snapshot_id for s in admin.list_kv_snapshots(table_name)] ==
               [taken[1].snapshot_id, taken[2].snapshot_id], 10, "retention of two snapshots")
    assert not os.path.exists(taken[0].path)
    assert os.path.exists(taken[1].path) and os.path.exists(taken[2].path)
    store = MetadataStore(cluster.zookeeper_address).start()
    try:
        assert store.snapshot_ids(info.table_id, 0) == [taken[1].snapshot_id,
                                                        taken[2].snapshot_id]
    finally:
        store.close()


def test_kill_9_of_the_coordinator_mid_write_loses_no_acknowledged_write(zookeeper, tmp_path):
    chroot = f"{zookeeper.address}/fluss-tests-coordkill"
    with EmbeddedProcesses(tmp_path / "c", tablets=1, zookeeper=chroot) as cluster:
        conn = cluster.connection(request_timeout_s=60)
        conn.admin().create_table("db.w", "id BIGINT, v STRING", primary_key=["id"])
        writer = conn.writer("db.w")
        acked, stop, errors = [], threading.Event(), []

        def write():
            i = 0
            while not stop.is_set() or i < 40:
                try:
                    writer.upsert([{"id": i, "v": f"r{i}"}])
                    acked.append(i)
                except Exception as e:  # noqa: BLE001 - recorded and asserted below
                    errors.append(e)
                i += 1

        t = threading.Thread(target=write)
        t.start()
        wait_until(lambda: len(acked) >= 20, 30, "the first writes")
        cluster.kill("coordinator", 0)
        wait_until(lambda: len(acked) >= 40, 30, "writes while the coordinator is down")
        cluster.restart("coordinator", 0)
        stop.set()
        t.join(60)
        assert errors == [] and len(acked) >= 40
        rows = conn.kv_scanner("db.w").scan(0, live=True).read_all()
        assert dict(zip(rows["id"].to_pylist(), rows["v"].to_pylist())) == \
            {i: f"r{i}" for i in acked}
        snap = conn.admin().trigger_kv_snapshot("db.w")[0]
        assert snap.row_count == len(acked)
        conn.close()


#: A process that rewrites one lease for ever, in parts of 64 buckets, each in a child znode,
#: with multis of ~600 bytes: every write takes several ZooKeeper requests. Odd rounds change
#: every pin (the write in steps), even rounds one bucket (the one-multi incremental path).
#: It prints each round once that round's save returned.
_LEASE_WRITER = '''
import random, sys
from fluss_spark.metadata import lease_codec
from fluss_spark.metadata.layout import LeaseRecord

lease_codec.LEASE_PART_BUCKETS = 64
lease_codec.LEASE_INLINE_PART_BYTES = 0
lease_codec.LEASE_MULTI_BYTES = 600


def version(i):
    rng = random.Random(i if i % 2 else i - 1)   # an even round changes the odd one before
    pins = {b: rng.randrange(10 ** 9) for b in range(2000)}
    if i % 2 == 0:
        pins[i % 2000] = i
    return LeaseRecord("big", 1, 10 ** 12 + i, {1: pins})


if __name__ == "__main__":
    from fluss_spark.metadata.store import MetadataStore
    store = MetadataStore(sys.argv[1]).start()
    i = int(sys.argv[2])
    while True:
        i += 1
        store.save_lease(version(i), changed={1: {i % 2000}} if i % 2 == 0 else None)
        print(i, flush=True)
'''


def test_kill_9_in_the_middle_of_a_chunked_lease_write_leaves_the_old_or_the_new(zk_address,
                                                                                  tmp_path,
                                                                                  monkeypatch):
    import subprocess
    import sys

    from fluss_spark.metadata import layout, lease_codec
    script = tmp_path / "lease_writer.py"
    script.write_text(_LEASE_WRITER)
    # The script sets small part sizes on the module; restore them for the tests that follow.
    for name in ("LEASE_PART_BUCKETS", "LEASE_INLINE_PART_BYTES", "LEASE_MULTI_BYTES"):
        monkeypatch.setattr(lease_codec, name, getattr(lease_codec, name))
    writer = {}
    exec(compile(_LEASE_WRITER, str(script), "exec"), writer)
    last = 0
    for kill_after in (1, 2, 5, 8, 13):
        out = tmp_path / f"out-{kill_after}"
        with open(out, "w") as f, open(tmp_path / f"log-{kill_after}", "w") as log:
            proc = subprocess.Popen([sys.executable, str(script), zk_address, str(last)],
                                    stdout=f, stderr=log)
        try:
            wait_until(lambda: len(out.read_text().split()) >= kill_after, 60,
                       f"{kill_after} lease writes")
        finally:
            proc.kill()     # SIGKILL, most likely in the middle of the next write
            proc.wait()
        acked = int(out.read_text().split()[-1])
        store = MetadataStore(zk_address).start()
        try:
            rec = store.load_lease("big")
            # The last acknowledged version, or the one being written when the process died.
            assert rec is not None
            round_ = rec.expires_at_ms - 10 ** 12
            assert round_ in (acked, acked + 1)
            assert rec == writer["version"](round_)
            last = round_
        finally:
            store.close()
    # The next writer finds orphans of the killed one, writes over them and removes them.
    store = MetadataStore(zk_address).start()
    try:
        final = writer["version"](last + 1)
        store.save_lease(final)
        assert store.load_lease("big") == final
        header = layout.LeaseRecord.decode_header(store.zk.get(layout.lease_path("big"))[0])
        named = {lease_codec.lease_part_name(t, k, g) for t, k, g, _, _ in header["refs"]}
        assert set(store.zk.get_children(layout.lease_path("big"))) == named
    finally:
        store.close()
