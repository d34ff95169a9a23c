"""Partitions on the Apache Fluss client without a cluster: which partition a read names, the
requests that create tables and partitions, and the errors a bad name or spec gets."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from fluss_spark.client.apache_fluss import ApacheFlussWireCluster
from fluss_spark.client.apache_fluss.connection import PartitionMetadata
from fluss_spark.client.apache_fluss import cluster as af_cluster
from fluss_spark.errors import (AuthorizationFailed, ConfigError, InvalidPartitionSpec,
                                LeaderNotAvailable, NonPrimaryKeyTable, PartitionAlreadyExist,
                                PartitionNotExist, TableNotPartitioned, UnknownTableOrBucket,
                                UnsupportedVersion)
from fluss_spark.protocol.apache_fluss.messages import (CreateTableRequest, DropTableRequest,
                                                        EmptyResponse, GetTableInfoRequest,
                                                        GetTableInfoResponse,
                                                        ReleaseKvSnapshotLeaseRequest)
from fluss_spark.protocol.apache_fluss.partition_messages import (CreatePartitionRequest,
                                                                  DropPartitionRequest,
                                                                  ListPartitionInfosResponse,
                                                                  PbKeyValue, PbPartitionInfo,
                                                                  PbPartitionSpec)

SCHEMA = pa.schema([("id", pa.int64()), ("day", pa.string())])
TABLE_INFO = GetTableInfoResponse(table_id=9, schema_id=1, table_json=b"{}", created_time=0,
                                  modified_time=0)


class Conn:
    """What the partition paths ask of a ``FlussWireConnection``: ``db.t`` is partitioned by
    ``day`` (partitions ``20261125`` id 3 and ``20261126`` id 4), ``db.u`` is not; coordinator
    calls are recorded and answered by ``answers`` (an exception is raised)."""

    def __init__(self, **answers):
        self.sent: list = []
        self.answers = answers
        self.parts = {"20261125": 3, "20261126": 4}

    def table(self, name):
        from types import SimpleNamespace
        keys = ("day",) if name == "db.t" else ()
        return SimpleNamespace(name=name, table_id=7, leaders={0: 1}, descriptor=SimpleNamespace(
            partition_key=keys, primary_key=("id", "day"), properties={}, schema=SCHEMA))

    def partition(self, name, partition):
        return self.refresh_partitions(name, names=[partition])[0]

    def refresh_partitions(self, name, *, names=(), ids=()):
        found = [PartitionMetadata(table=name, name=n, partition_id=i, leaders={0: 1, 1: None})
                 for n, i in self.parts.items() if n in names or i in ids]
        if name != "db.t" or len(found) != len(set(names)) + len(set(ids)):
            raise PartitionNotExist(f"partition of {name} does not exist")
        return found

    def call_coordinator(self, request):
        self.sent.append(request)
        answer = self.answers.get(type(request).__name__, EmptyResponse())
        if isinstance(answer, Exception):
            raise answer
        return answer

    def coordinator(self):
        from types import SimpleNamespace
        return SimpleNamespace(call=self.call_coordinator)

    def invalidate(self, name=None):
        pass

    def with_retries(self, op, *, table=None):
        return op()


READS = [lambda c, t, p: c.list_offsets(t, partition=p),
         lambda c, t, p: c.latest_kv_snapshots(t, partition=p),
         lambda c, t, p: c.read_log(t, 0, 0, 10, partition=p),
         lambda c, t, p: c.read_snapshot(t, 0, 1, partition=p),
         lambda c, t, p: c.kv_snapshot_files(t, 0, 1, partition=p)]


@pytest.mark.parametrize("read", READS)
def test_a_read_of_a_partitioned_table_names_a_known_partition(read):
    cluster = ApacheFlussWireCluster(Conn())       # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"db.t is partitioned \(by day\): name a partition, "
                                          "e.g. day=VALUE"):
        read(cluster, "db.t", None)
    with pytest.raises(PartitionNotExist, match="partition day=20261127 of table db.t does not "
                                                "exist; create it with `fluss-spark partition "
                                                "create db.t day=20261127`"):
        read(cluster, "db.t", "day=20261127")
    with pytest.raises(PartitionNotExist, match="day=20261127"):
        read(cluster, "db.t", "20261127")           # by name
    with pytest.raises(ConfigError, match="does not match the partition keys of db.t .day."):
        read(cluster, "db.t", "dt=20261125")
    with pytest.raises(ConfigError, match="invalid"):
        read(cluster, "db.t", "a/b")


@pytest.mark.parametrize("read", READS)
def test_a_partition_of_an_unpartitioned_table_is_refused(read):
    cluster = ApacheFlussWireCluster(Conn())       # type: ignore[arg-type]
    with pytest.raises(TableNotPartitioned, match="db.u is not partitioned; drop the partition "
                                                  "'day=1'"):
        read(cluster, "db.u", "day=1")


def test_a_partition_resolves_by_name_or_spec_to_its_id_and_leaders():
    cluster = ApacheFlussWireCluster(Conn())       # type: ignore[arg-type]
    for given in ("20261126", "day=20261126"):
        part = cluster.partitions.resolve("db.t", given)
        assert part is not None and (part.name, part.partition_id) == ("20261126", 4)
    assert cluster.partitions.resolve("db.u", None) is None


def test_create_table_sends_partition_keys_bucket_key_and_auto_partition_properties():
    conn = Conn(GetTableInfoRequest=TABLE_INFO)
    cluster = ApacheFlussWireCluster(conn)         # type: ignore[arg-type]
    auto = {"table.auto-partition.enabled": "true", "table.auto-partition.time-unit": "DAY",
            "table.auto-partition.num-retention": "2"}
    cluster.create_table("db.p", SCHEMA, primary_key=["id", "day"], partition_keys=["day"],
                         buckets=3, properties=auto)
    cluster.create_table("db.l", SCHEMA, partition_keys=["day"])
    pk, log = [json.loads(r.table_json) for r in conn.sent if isinstance(r, CreateTableRequest)]
    assert (pk["partition_key"], pk["bucket_key"], pk["bucket_count"]) == (["day"], ["id"], 3)
    assert pk["schema"]["primary_key"] == ["id", "day"] and pk["properties"] == auto
    assert (log["partition_key"], log["bucket_key"]) == (["day"], [])
    # Each is confirmed known to the coordinator, by a release of a lease that is nobody's.
    probes = [r for r in conn.sent if isinstance(r, ReleaseKvSnapshotLeaseRequest)]
    assert [[b.table_id for b in r.buckets_to_release] for r in probes] == [[9], [9]]
    assert all(r.lease_id.startswith("fluss-spark-probe-") for r in probes)
    sent = len(conn.sent)
    with pytest.raises(ConfigError, match="partition key.s. day must be part of the primary key"):
        cluster.create_table("db.x", SCHEMA, primary_key=["id"], partition_keys=["day"])
    assert len(conn.sent) == sent                  # the refused one sent nothing


def test_a_partitioned_table_the_coordinator_missed_is_created_again(monkeypatch):
    """Fluss 0.9.1's coordinator can miss a new table; a partition of it would break the
    coordinator, so the table is dropped and created again before anyone makes one."""
    monkeypatch.setattr(af_cluster, "NEW_TABLE_LEADERS_S", 0.3)
    conn = Conn(GetTableInfoRequest=TABLE_INFO,
                ReleaseKvSnapshotLeaseRequest=UnknownTableOrBucket("does not know table 9"))
    cluster = ApacheFlussWireCluster(conn)         # type: ignore[arg-type]
    with pytest.raises(LeaderNotAvailable, match="created 3 times and the coordinator missed"):
        cluster.create_table("db.p", SCHEMA, partition_keys=["day"])
    kinds = [type(r).__name__ for r in conn.sent if not isinstance(
        r, (ReleaseKvSnapshotLeaseRequest, GetTableInfoRequest))]
    assert kinds == ["CreateTableRequest", "DropTableRequest"] * 3
    # Known: kept. The coordinator finds the table before it checks a right or the key.
    for known in (NonPrimaryKeyTable("a log table"), AuthorizationFailed("no READ on db.p")):
        conn.answers["ReleaseKvSnapshotLeaseRequest"] = known
        sent = len(conn.sent)
        cluster.create_table("db.p", SCHEMA, partition_keys=["day"])
        assert not any(isinstance(r, DropTableRequest) for r in conn.sent[sent:])


def test_partition_admin_requests_and_errors():
    listed = ListPartitionInfosResponse(partitions_info=[
        PbPartitionInfo(partition_id=i, partition_spec=PbPartitionSpec(partition_key_values=[
            PbKeyValue(key="day", value=n)])) for n, i in (("20261126", 4), ("20261125", 3))])
    conn = Conn(ListPartitionInfosRequest=listed)
    cluster = ApacheFlussWireCluster(conn)         # type: ignore[arg-type]
    parts = cluster.list_partitions("db.t")
    assert [(p.name, p.partition_id, p.assignment) for p in parts] == [
        ("20261125", 3, {0: 1}), ("20261126", 4, {0: 1})]
    made = cluster.create_partition("db.t", {"day": "20261125"}, ignore_if_exists=True)
    assert (made.name, made.partition_id) == ("20261125", 3)
    cluster.drop_partition("db.t", {"day": "20261126"})
    create, drop = conn.sent[1:]
    assert isinstance(create, CreatePartitionRequest) and create.ignore_if_exists
    assert [(kv.key, kv.value) for kv in create.partition_spec.partition_key_values] == [
        ("day", "20261125")]
    assert isinstance(drop, DropPartitionRequest) and not drop.ignore_if_not_exists
    assert create.table_path.table_name == drop.table_path.table_name == "t"

    with pytest.raises(TableNotPartitioned, match="db.u is not partitioned; it has no "
                                                  "partitions to create, drop or list"):
        cluster.list_partitions("db.u")
    with pytest.raises(InvalidPartitionSpec, match="does not match the partition keys"):
        cluster.drop_partition("db.t", {"dt": "1"})
    with pytest.raises(InvalidPartitionSpec, match="invalid"):
        cluster.create_partition("db.t", {"day": "__x"})
    assert len(conn.sent) == 3                     # refused before sending
    fluss_says = ApacheFlussWireCluster(Conn(      # type: ignore[arg-type]
        CreatePartitionRequest=PartitionAlreadyExist("PARTITION_ALREADY_EXISTS (42): ..."),
        DropPartitionRequest=PartitionNotExist("PARTITION_NOT_EXISTS (36): ...")))
    with pytest.raises(PartitionAlreadyExist, match="^partition day=1 of table db.t already "
                                                    "exists$"):
        fluss_says.create_partition("db.t", {"day": "1"})
    with pytest.raises(PartitionNotExist, match="^partition day=1 of table db.t does not exist; "
                                                "list them with `fluss-spark partition list "
                                                "db.t`$"):
        fluss_says.drop_partition("db.t", {"day": "1"})


def test_live_scans_of_a_partitioned_table_are_refused_by_name():
    cluster = ApacheFlussWireCluster(Conn())       # type: ignore[arg-type]
    with pytest.raises(UnsupportedVersion, match="db.t is partitioned .by day.; live KV scans"):
        cluster.read_live_scan("db.t", 0, None)    # type: ignore[arg-type]
