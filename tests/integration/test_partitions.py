"""Partitioned tables on the real servers: create, list, drop partitions over the wire and the
CLI, as ZooKeeper stores them; the tablets' changelog, KV state and snapshots per (partition,
bucket); lease pins per partition; bad input is refused in one line and changes nothing."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from fluss_spark.clock import wall_ms
from fluss_spark.errors import (InvalidPartitionSpec, LeaseNotFound, PartitionAlreadyExist,
                                PartitionNotExist, TableNotPartitioned)
from fluss_spark.local.ports import wait_until
from fluss_spark.metadata import layout
from fluss_spark.metadata.layout import LeaseRecord
from fluss_spark.metadata.store import MetadataStore
from fluss_spark.protocol import messages as m
from fluss_spark.protocol.auto_partition import AutoPartition
from fluss_spark.protocol.arrow_ipc import bytes_to_table, table_to_bytes

SCHEMA = "id BIGINT NOT NULL, dt STRING NOT NULL, v DOUBLE"
DAYS = ("2026-11-24", "2026-11-25", "2026-11-26")


@pytest.fixture
def store(cluster):
    s = MetadataStore(cluster.zookeeper_address).start()
    yield s
    s.close()


def test_partitions_of_a_day_partitioned_pk_table(conn, store, table_name):
    admin = conn.admin()
    info = admin.create_table(table_name, SCHEMA, primary_key=["id", "dt"], num_buckets=2,
                              partition_keys=["dt"])
    assert (info.partition_keys, info.bucket_key) == (("dt",), ("id",))
    made = [admin.create_partition(table_name, {"dt": d}) for d in DAYS]
    assert len({p.partition_id for p in made}) == 3
    listed = admin.list_partitions(table_name)
    assert [p.name for p in listed] == list(DAYS)
    assert all(sorted(p.assignment) == [0, 1] for p in listed)
    stored = {p.name: p for p in store.partitions(table_name)}
    assert {n: p.partition_id for n, p in stored.items()} == {p.name: p.partition_id
                                                              for p in made}
    assert stored[DAYS[0]].values == [DAYS[0]] and stored[DAYS[0]].buckets
    with pytest.raises(PartitionAlreadyExist, match="dt=2026-11-25 of table"):
        admin.create_partition(table_name, "dt=2026-11-25")
    assert admin.create_partition(table_name, "dt=2026-11-25", ignore_if_exists=True) \
        .partition_id == made[1].partition_id
    admin.drop_partition(table_name, {"dt": DAYS[0]})
    assert [p.name for p in store.partitions(table_name)] == list(DAYS[1:])
    with pytest.raises(PartitionNotExist, match="dt=2026-11-24 of table .* does not exist"):
        admin.drop_partition(table_name, {"dt": DAYS[0]})
    for spec, error in (({"region": "eu"}, InvalidPartitionSpec),
                        ({"dt": "a/b"}, InvalidPartitionSpec)):
        with pytest.raises(error):
            admin.create_partition(table_name, spec)
    assert [p.name for p in store.partitions(table_name)] == list(DAYS[1:])
    admin.drop_table(table_name)
    assert store.table(table_name) is None and store.partitions(table_name) == []


def test_the_coordinator_creates_the_partitions_of_an_auto_partitioned_table(conn, store,
                                                                             table_name):
    props = {"table.auto-partition.enabled": "true", "table.auto-partition.time-unit": "HOUR",
             "table.auto-partition.num-precreate": "3"}
    conn.admin().create_table(table_name, SCHEMA, primary_key=["id", "dt"],
                              partition_keys=["dt"], properties=props)
    strategy = AutoPartition.of(table_name, props, ["dt"])
    # The wanted hours are computed again each time: an hour may turn while we wait.
    wait_until(lambda: sorted(p.name for p in store.partitions(table_name))
               == strategy.wanted(wall_ms()), 5, "the current and 2 coming hour partitions")


def test_bad_partitioned_tables_and_specs_are_refused(conn, store, table_name):
    admin = conn.admin()
    with pytest.raises(Exception, match=r"partition key\(s\) dt must be part of the primary"):
        admin.create_table(table_name, SCHEMA, primary_key=["id"], partition_keys=["dt"])
    assert store.table(table_name) is None
    admin.create_table(table_name, SCHEMA, primary_key=["id"])
    with pytest.raises(TableNotPartitioned, match="is not partitioned"):
        admin.create_partition(table_name, {"dt": DAYS[0]})
    with pytest.raises(TableNotPartitioned):
        admin.list_partitions(table_name)
    assert not store.zk.exists(f"/fluss/tables/{table_name}/partitions")


def test_cli_round_trip(cli, store, table_name):
    code, out, err = cli("table", "create", table_name, "--schema", SCHEMA, "--primary-key",
                         "id,dt", "--partition-key", "dt", "--buckets", "2", "--json")
    assert code == 0, err
    assert json.loads(out)["partition_keys"] == ["dt"]
    for day in DAYS:
        assert cli("partition", "create", table_name, f"dt={day}")[0] == 0
    code, out, _ = cli("partition", "list", table_name, "--json")
    rows = json.loads(out)
    assert [r["partition"] for r in rows] == [f"dt={d}" for d in DAYS]
    assert all(r["buckets"] == 2 for r in rows)
    code, out, _ = cli("partition", "drop", table_name, f"dt={DAYS[2]}")
    assert code == 0 and f"dropped partition dt={DAYS[2]}" in out
    assert [p.name for p in store.partitions(table_name)] == list(DAYS[:2])
    for argv, words in [
        (("partition", "create", table_name, "dt"), "expected key=value"),
        (("partition", "drop", table_name, f"dt={DAYS[2]}"), "does not exist"),
        (("partition", "create", table_name, "region=eu"), "does not match the partition keys"),
        (("table", "create", table_name + "_b", "--schema", SCHEMA, "--primary-key", "id",
          "--partition-key", "dt"), "must be part of the primary key"),
        (("table", "create", table_name + "_c", "--schema", SCHEMA, "--primary-key", "id,dt",
          "--partition-key", "dt", "--property", "table.auto-partition.time-unit=WEEK"),
         "not one of YEAR"),
        (("produce", table_name, "--rows", "3", "--partition", "dt=2030-01-01"),
         "partition dt=2030-01-01 of table"),
        (("scan", table_name, "--partition", "dt=2030-01-01"), "does not exist"),
    ]:
        code, out, err = cli(*argv)
        assert code != 0 and out == "" and err.count("\n") == 1 and words in err, (argv, err)
    assert [p.name for p in store.partitions(table_name)] == list(DAYS[:2])
    assert store.table(table_name + "_b") is None and store.table(table_name + "_c") is None
    code, out, err = cli("table", "create", table_name + "_d", "--schema", SCHEMA)
    assert code == 0, err
    code, out, err = cli("partition", "list", table_name + "_d")
    assert code != 0 and "is not partitioned" in err
    code, out, err = cli("produce", table_name + "_d", "--rows", "2", "--partition", "dt=x")
    assert code != 0 and out == "" and "is not partitioned" in err and err.count("\n") == 1

    # produce into one partition, then spread over both; scan and snapshot list per partition.
    assert cli("produce", table_name, "--rows", "4", "--partition", f"dt={DAYS[0]}")[0] == 0
    code, out, err = cli("produce", table_name, "--rows", "20", "--updates", "5", "--deletes",
                         "3", "--seed", "7", "--json")
    assert code == 0 and json.loads(out)["rows"] == 28, err
    scanned = {}
    for day in DAYS[:2]:
        code, out, err = cli("scan", table_name, "--partition", f"dt={day}", "--snapshot",
                             "live", "--json")
        assert code == 0, err
        scanned[day] = json.loads(out)
        assert scanned[day] and {r["dt"] for r in scanned[day]} == {day}
    code, out, _ = cli("scan", table_name, "--snapshot", "live", "--json")
    assert sorted(map(str, json.loads(out))) == sorted(map(str, scanned[DAYS[0]]
                                                           + scanned[DAYS[1]]))
    assert cli("snapshot", "trigger", table_name)[0] == 0
    code, out, _ = cli("snapshot", "list", table_name, "--json")
    assert {r["partition"] for r in json.loads(out)} == {f"dt={d}" for d in DAYS[:2]}
    code, out, _ = cli("snapshot", "list", table_name, "--partition", f"dt={DAYS[1]}", "--json")
    assert {r["partition"] for r in json.loads(out)} == {f"dt={DAYS[1]}"}


def _rows(info, ids, day, v):
    return pa.table({"id": pa.array(ids, pa.int64()), "dt": pa.array([day] * len(ids)),
                     "v": pa.array([v] * len(ids), pa.float64())},
                    schema=pa.schema([f for f in info.schema]))


def test_changelog_kv_and_snapshots_per_partition_and_a_dropped_partition_goes(
        conn, store, cluster, table_name):
    admin = conn.admin()
    admin.create_table(table_name, SCHEMA, primary_key=["id", "dt"], num_buckets=1,
                       partition_keys=["dt"])
    for day in DAYS:
        admin.create_partition(table_name, {"dt": day})
    info = conn.refresh_table(table_name)
    parts = {p.name: p for p in info.partitions}       # GET_METADATA carries them
    assert sorted(parts) == list(DAYS)

    def call(day, request):
        return conn.tablet(parts[day].assignment[0]).call(request)

    # Upserts and deletes across partitions: the same key in two partitions is two rows.
    for i, day in enumerate(DAYS):
        pid = parts[day].partition_id
        call(day, m.ProduceRequest(info.table_id, 0, "upsert",
                                   table_to_bytes(_rows(info, [1, 2, 3], day, float(i))), pid))
    first, last = parts[DAYS[0]].partition_id, parts[DAYS[2]].partition_id
    call(DAYS[0], m.ProduceRequest(info.table_id, 0, "upsert",
                                   table_to_bytes(_rows(info, [2], DAYS[0], 9.0)), first))
    call(DAYS[2], m.ProduceRequest(info.table_id, 0, "delete",
                                   table_to_bytes(_rows(info, [3], DAYS[2], 0.0)), last))
    logs = {day: bytes_to_table(call(day, m.FetchLogRequest(
        info.table_id, 0, 0, partition_id=parts[day].partition_id)).records) for day in DAYS}
    assert logs[DAYS[0]].column("_change_type").to_pylist() == ["+I"] * 3 + ["-U", "+U"]
    assert logs[DAYS[1]].column("_change_type").to_pylist() == ["+I"] * 3
    assert logs[DAYS[2]].column("_change_type").to_pylist() == ["+I"] * 3 + ["-D"]
    assert set(logs[DAYS[1]].column("dt").to_pylist()) == {DAYS[1]}

    # One snapshot per partition; a scan of it equals the changelog folded by key.
    for day in DAYS:
        pid = parts[day].partition_id
        snap = call(day, m.TriggerKvSnapshotRequest(info.table_id, (0,), pid)).snapshots[0]
        assert (snap.partition_id, snap.bucket) == (pid, 0)
        listed = conn.call_coordinator(m.ListKvSnapshotsRequest(info.table_id, partition_id=pid))
        assert [s.snapshot_id for s in listed.snapshots] == [snap.snapshot_id]
        scanned = bytes_to_table(call(day, m.OpenScan(
            table_id=info.table_id, bucket=0, batch_size_bytes=1 << 20, call_seq_id=0,
            snapshot_id=snap.snapshot_id, partition_id=pid)).records)
        folded: dict = {}
        for row in logs[day].to_pylist():
            if row["_change_type"] in ("-D", "-U"):
                folded.pop(row["id"], None)
            if row["_change_type"] in ("+I", "+U"):
                folded[row["id"]] = (row["dt"], row["v"])
        assert {r["id"]: (r["dt"], r["v"]) for r in scanned.to_pylist()} == folded
    assert len(conn.call_coordinator(m.ListKvSnapshotsRequest(info.table_id)).snapshots) == 3

    with pytest.raises(PartitionNotExist, match="is partitioned .*name a partition id"):
        call(DAYS[0], m.FetchLogRequest(info.table_id, 0, 0))

    # Dropping a partition removes its snapshots (records and files) and, on its tablet, its
    # changelog and KV state; the other partitions keep theirs.
    index = layout.snapshot_index_path(info.table_id, partition_id=first)
    snapshot_dir = cluster.snapshot_dir / str(info.table_id) / f"p{first}"
    assert store.zk.exists(index) and snapshot_dir.is_dir()
    admin.drop_partition(table_name, {"dt": DAYS[0]})
    assert not store.zk.exists(index) and not snapshot_dir.exists()
    assert store.zk.exists(layout.snapshot_index_path(info.table_id, partition_id=last))
    local = [d for d in cluster.base_dir.glob(f"tablet-*/tables/{info.table_id}/p{first}")]
    wait_until(lambda: not any(d.exists() for d in local), 10, "the dropped partition's data")
    with pytest.raises(PartitionNotExist, match=f"partition id {first} of table"):
        call(DAYS[0], m.FetchLogRequest(info.table_id, 0, 0, partition_id=first))
    assert bytes_to_table(call(DAYS[1], m.FetchLogRequest(
        info.table_id, 0, 0, partition_id=parts[DAYS[1]].partition_id)).records).num_rows == 3
    admin.drop_table(table_name)
    assert not store.zk.exists(layout.snapshot_index_path(info.table_id))


def _fold(log: pa.Table) -> dict:
    """The changelog folded by key: what the KV state must hold."""
    state: dict = {}
    for row in log.to_pylist():
        if row["_change_type"] in ("-D", "-U"):
            state.pop(row["id"], None)
        if row["_change_type"] in ("+I", "+U"):
            state[row["id"]] = (row["dt"], row["v"])
    return state


def test_the_client_writes_and_reads_each_partition(conn, table_name):
    admin = conn.admin()
    admin.create_table(table_name, SCHEMA, primary_key=["id", "dt"], num_buckets=2,
                       partition_keys=["dt"])
    for day in DAYS[:2]:
        admin.create_partition(table_name, {"dt": day})
    writer = conn.writer(table_name)
    with pytest.raises(PartitionNotExist, match=f"partition dt={DAYS[2]} of table {table_name} "
                                                "does not exist; create it with"):
        writer.upsert([(1, DAYS[0], 1.0), (1, DAYS[2], 1.0)])
    assert admin.list_offsets(table_name, partition=f"dt={DAYS[0]}") == {0: 0, 1: 0}
    dynamic = conn.writer(table_name, {"client.writer.dynamic-create-partition.enabled": "true"})
    spans = dynamic.upsert([(i, day, float(i)) for day in DAYS for i in range(6)])
    assert {p for p, _ in spans} == set(DAYS)
    assert [p.name for p in admin.list_partitions(table_name)] == list(DAYS)
    writer.upsert([(1, DAYS[0], 10.0), (2, DAYS[1], 20.0)])
    writer.delete([(3, DAYS[0]), (4, DAYS[2])])
    for day in DAYS:
        spec = f"dt={day}"
        latest = admin.list_offsets(table_name, partition=spec)
        scanner = conn.log_scanner(table_name, partition=spec)
        log = pa.Table.from_batches(
            [b for bucket, end in latest.items() for b in scanner.read(bucket, 0, end)],
            schema=scanner.schema)
        assert set(log.column("dt").to_pylist()) == {day}
        folded = _fold(log)
        assert len(folded) == 6 - (day != DAYS[1])
        snaps = admin.trigger_kv_snapshot(table_name, partition=day)
        assert sorted(snaps) == [0, 1] and admin.latest_kv_snapshots(table_name, partition=day)
        kv = conn.kv_scanner(table_name, partition=day)
        for live in (False, True):
            rows = [r for b in (0, 1) for batch in kv.scan(b, live=live)
                    for r in batch.to_pylist()]
            assert {r["id"]: (r["dt"], r["v"]) for r in rows} == folded, (day, live)
    with pytest.raises(Exception, match=f"table {table_name} is partitioned .*name a partition"):
        conn.log_scanner(table_name)
    with pytest.raises(PartitionNotExist, match="dt=2026-01-01 of table"):
        conn.kv_scanner(table_name, partition="dt=2026-01-01")


def test_a_lease_pins_snapshots_of_two_partitions_until_dropped_or_released(
        conn, cli, store, table_name):
    admin = conn.admin()
    admin.create_table(table_name, SCHEMA, primary_key=["id", "dt"], num_buckets=1,
                       partition_keys=["dt"], properties={"kv.snapshot.num-retained": "1"})
    writer = conn.writer(table_name, {"client.writer.dynamic-create-partition.enabled": "true"})
    writer.upsert([(i, day, float(i)) for day in DAYS[:2] for i in range(3)])
    info = conn.refresh_table(table_name)
    pid = {p.name: p.partition_id for p in info.partitions}
    first = {day: admin.trigger_kv_snapshot(table_name, partition=day)[0].snapshot_id
             for day in DAYS[:2]}
    lease = f"lease-{table_name[-12:]}"
    code, out, err = cli("lease", "acquire", lease, table_name, "--partition", "dt=2030-01-01")
    assert code != 0 and err.count("\n") == 1 and "dt=2030-01-01 of table" in err, err
    assert not store.zk.exists(layout.lease_path(lease))
    code, out, err = cli("lease", "acquire", lease, table_name, "--json")
    assert code == 0, err
    assert json.loads(out)["pinned"] == [{"partition": f"dt={d}", "bucket": 0,
                                          "snapshot_id": first[d]} for d in DAYS[:2]]

    def stored() -> LeaseRecord | None:
        """The lease as ZooKeeper holds it, read with the record codec."""
        path = layout.lease_path(lease)
        if not store.zk.exists(path):
            return None
        parts = {c: store.zk.get(f"{path}/{c}")[0] for c in store.zk.get_children(path)}
        return LeaseRecord.decode(store.zk.get(path)[0], parts=parts)

    rec = stored()
    assert rec is not None and rec.tables == {}
    assert rec.partitions == {info.table_id: {pid[d]: {0: first[d]} for d in DAYS[:2]}}
    code, out, err = cli("lease", "describe", lease, "--json")
    assert code == 0, err
    assert [(p["partition"], p["snapshot_id"]) for p in json.loads(out)["tables"][0]["pins"]] \
        == [(f"dt={d}", first[d]) for d in DAYS[:2]]

    # A newer snapshot takes the pinned one out of retention (1 kept): GC keeps it.
    writer.upsert([(9, DAYS[0], 9.0)])
    newer = admin.trigger_kv_snapshot(table_name, partition=DAYS[0])[0].snapshot_id
    listed = {s.snapshot_id: s.pinned_by
              for s in admin.list_kv_snapshots(table_name, partition=DAYS[0])}
    assert listed == {first[DAYS[0]]: (lease,), newer: ()}

    admin.drop_partition(table_name, {"dt": DAYS[0]})
    assert admin.describe_kv_snapshot_lease(lease).partitions == {
        info.table_id: {pid[DAYS[1]]: {0: first[DAYS[1]]}}}
    assert stored().partitions == {info.table_id: {pid[DAYS[1]]: {0: first[DAYS[1]]}}}
    code, out, err = cli("lease", "release", lease, table_name, "--partition", f"dt={DAYS[1]}")
    assert code == 0 and "0 pin(s) remain" in out, err
    assert stored() is None
    with pytest.raises(LeaseNotFound):
        admin.describe_kv_snapshot_lease(lease)
