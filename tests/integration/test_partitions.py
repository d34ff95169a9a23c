"""Partitioned tables on the real servers: create, list, drop partitions over the wire and the
CLI, as ZooKeeper stores them; bad input is refused in one line and changes nothing."""

from __future__ import annotations

import json

import pytest

from fluss_spark.errors import (InvalidPartitionSpec, PartitionAlreadyExist,
                                PartitionNotExist, TableNotPartitioned)
from fluss_spark.metadata.store import MetadataStore

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
        (("produce", table_name, "--rows", "3"), "does not write partitioned tables yet"),
    ]:
        code, out, err = cli(*argv)
        assert code != 0 and out == "" and err.count("\n") == 1 and words in err, (argv, err)
    assert [p.name for p in store.partitions(table_name)] == list(DAYS[:2])
    assert store.table(table_name + "_b") is None and store.table(table_name + "_c") is None
    code, out, err = cli("table", "create", table_name + "_d", "--schema", SCHEMA)
    assert code == 0, err
    code, out, err = cli("partition", "list", table_name + "_d")
    assert code != 0 and "is not partitioned" in err
