"""Source wiring without Spark: table resolution, inferred schema, batch planning, pickling."""

import pickle

import pytest

from fluss_spark.connector.enumerator import Enumerator
from fluss_spark.connector.options import parse_options
from fluss_spark.connector.source import (FlussStreamReader, check_read_columns, infer_schema,
                                          plan_batch, resolve_table_names, table_names)
from fluss_spark.connector.splits import LogSplit, MergedBucketSplit
from fluss_spark.errors import ConfigError, TableNotExist, UnsupportedVersion
from fluss_spark.testing.fake_cluster import FakeCluster


def opts(**kw):
    return parse_options({"bootstrap.servers": "h:1", **kw})


def test_pattern_resolves_sorted_full_matches(cluster):
    for name in ("shop.orders", "shop.items", "shop.orders_archive", "crm.users"):
        cluster.add_table(name)
    o = opts(**{"table.pattern": r"shop\.(orders|items)"})
    assert resolve_table_names(cluster, o) == ["shop.items", "shop.orders"]
    schema = infer_schema(cluster, o)
    assert schema.fieldNames()[:3] == ["_table", "shop.items", "shop.orders"]
    with pytest.raises(ConfigError, match="matches no table"):
        resolve_table_names(cluster, opts(**{"table.pattern": "nope"}))


def test_missing_table_is_named(cluster):
    with pytest.raises(TableNotExist, match="'db.missing'"):
        infer_schema(cluster, opts(table="db.missing"))


def test_stream_reader_pickles_without_its_enumerator(cluster):
    cluster.add_table("db.t")
    o = opts(table="db.t")
    reader = FlussStreamReader(o, infer_schema(cluster, o))
    reader._enumerator = object()  # stands for sockets and threads
    copy = pickle.loads(pickle.dumps(reader))
    assert copy._enumerator is None and copy.options == o
    assert table_names(o, reader.layout) == ["db.t"]


def test_batch_plan_one_split_per_bucket(cluster):
    cluster.add_table("db.pk", buckets=2)
    cluster.add_snapshot("db.pk", 0, 4, [{"id": 1, "v": "a"}], 1)
    cluster.append_log("db.pk", 0, [("+I", {"id": 1, "v": "a"}), ("+I", {"id": 2, "v": "b"})])
    cluster.add_table("db.log", pk=(), buckets=2)
    cluster.append_log("db.log", 1, [("+A", {"id": 1, "v": "a"})] * 3)
    tid_pk = cluster.tables["db.pk"].info.table_id
    tid_log = cluster.tables["db.log"].info.table_id
    splits = plan_batch(cluster, opts(tables="db.pk,db.log"), ["db.pk", "db.log"])
    assert splits == [MergedBucketSplit(tid_pk, "db.pk", 0, 4, 1, 2, ("id",)),
                      MergedBucketSplit(tid_pk, "db.pk", 1, None, 0, 0, ("id",)),
                      LogSplit(tid_log, "db.log", 1, 0, 3)]
    assert cluster.calls_of("acquire") == []


def test_register_adds_the_fluss_source():
    from fluss_spark.connector import register
    from fluss_spark.connector.source import FlussDataSource

    registered = []

    class Spark:
        class dataSource:
            register = staticmethod(registered.append)
    register(Spark())
    assert registered == [FlussDataSource] and FlussDataSource.name() == "fluss"


def test_columns_option_narrows_the_schema_and_names_unknown_columns(cluster):
    cluster.add_table("db.t")
    schema = infer_schema(cluster, opts(table="db.t", columns="v, id"))
    assert schema.fieldNames() == ["v", "id", "_change_type", "_log_offset", "_commit_timestamp"]
    with pytest.raises(ConfigError, match=r"option 'columns': table 'db.t' has no column\(s\) "
                                          r"amount; its columns are id, v"):
        infer_schema(cluster, opts(table="db.t", columns="id,amount"))


def test_a_query_schema_naming_a_missing_column_fails_at_start(cluster):
    from pyspark.sql.types import LongType, StringType, StructField, StructType
    cluster.add_table("db.t")
    schema = StructType([StructField("id", LongType()), StructField("colour", StringType()),
                         StructField("_change_type", StringType()),
                         StructField("_log_offset", LongType())])
    reader = FlussStreamReader(opts(table="db.t"), schema)
    e = Enumerator(reader.options, ["db.t"], lambda: cluster,
                   check_table=lambda i: check_read_columns(i, reader.layout),
                   renew_in_thread=False)
    with pytest.raises(ConfigError, match="the query's schema: table 'db.t' has no column.*colour"):
        e.initial_offset()
    with pytest.raises(ConfigError, match="colour"):
        plan_batch(cluster, reader.options, ["db.t"], reader.layout)


def test_columns_option_and_a_different_user_schema_are_refused(cluster):
    cluster.add_table("db.t")
    schema = infer_schema(cluster, opts(table="db.t", columns="v"))
    assert FlussStreamReader(opts(table="db.t", columns="v"), schema).layout
    with pytest.raises(ConfigError, match=r"option 'columns' \(id\) and the given schema \(v\)"):
        FlussStreamReader(opts(table="db.t", columns="id"), schema)


def test_a_partitioned_table_is_refused_where_partitions_cannot_be_listed(clock):
    cluster = FakeCluster(clock, partition_admin=False)
    cluster.add_table("db.p", schema="id BIGINT, dt STRING, v STRING", pk=("id", "dt"),
                      partition_keys=("dt",))
    o = opts(table="db.p")
    refused = (r"table db.p is partitioned \(by dt\); the cluster at h:1 does not list "
               r"partitions to this client yet, so the Spark source cannot read it")
    with pytest.raises(UnsupportedVersion, match=refused):
        infer_schema(cluster, o)
    with pytest.raises(UnsupportedVersion, match=refused):
        Enumerator(o, ["db.p"], lambda: cluster, renew_in_thread=False).initial_offset()
    with pytest.raises(UnsupportedVersion, match=refused):
        plan_batch(cluster, o, ["db.p"])
    assert cluster.calls_of("acquire") == []
    # Live KV scans address tables only: asked for by option, a partitioned table is refused.
    cluster.partition_admin = True
    live = opts(table="db.p", **{"scan.kv.read": "live"})
    with pytest.raises(ConfigError, match="scan.kv.read=live: table db.p is partitioned"):
        Enumerator(live, ["db.p"], lambda: cluster, renew_in_thread=False).initial_offset()
