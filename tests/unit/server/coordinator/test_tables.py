"""TableManager: validation messages, id allocation, round-robin assignment, drop."""

import pytest

from fluss_spark.errors import (InvalidConfig, InvalidRequest, InvalidTable, LeaderNotAvailable,
                                TableAlreadyExist, TableNotExist)
from fluss_spark.metadata.layout import TabletRecord
from fluss_spark.metadata.store import MetadataStore
from fluss_spark.protocol.messages import CreateTableRequest
from fluss_spark.protocol.arrow_ipc import serialize_schema
from fluss_spark.protocol.types import parse_schema
from fluss_spark.server.coordinator.tables import TableManager, assign_buckets

SCHEMA = serialize_schema(parse_schema("id BIGINT NOT NULL, name STRING, amount DOUBLE"))


@pytest.fixture
def store(zk_address):
    s = MetadataStore(zk_address).start()
    yield s
    s.close()


@pytest.fixture
def tables(store):
    for i in (3, 1, 2):
        store.register_tablet(TabletRecord(id=i, host="127.0.0.1", port=1000 + i))
    return TableManager(store, clock=lambda: 42)


def body(**kw):
    """A CREATE_TABLE request as the coordinator receives it (decoded from its wire map)."""
    b = {"name": "db.t", "schema": SCHEMA, "primary_key": ["id"], "bucket_key": [],
         "num_buckets": 4, "properties": {}}
    b.update(kw)
    return CreateTableRequest.decode(b)


def test_assignment_is_round_robin_from_table_id_modulo():
    assert assign_buckets(4, 5, [3, 1, 2]).buckets == [2, 3, 1, 2, 3]
    assert assign_buckets(3, 2, [7]).buckets == [7, 7]
    with pytest.raises(LeaderNotAvailable, match="no tablet server is registered; start one"):
        assign_buckets(1, 2, [])


def test_create_writes_the_table_and_its_assignment(tables, store):
    table_id = tables.create(body())
    rec = store.table("db.t")
    assert (rec.table_id, rec.primary_key, rec.bucket_key, rec.num_buckets, rec.created_ms) == (
        table_id, ["id"], ["id"], 4, 42)
    assert store.assignment("db.t").buckets == assign_buckets(table_id, 4, [1, 2, 3]).buckets
    log_id = tables.create(body(name="db.log", primary_key=[], num_buckets=1))
    assert log_id == table_id + 1
    assert store.table("db.log").bucket_key == []


def test_create_existing_table(tables):
    table_id = tables.create(body())
    with pytest.raises(TableAlreadyExist, match="db.t already exists"):
        tables.create(body())
    assert tables.create(body(ignore_if_exists=True)) == table_id


@pytest.mark.parametrize("kw, error, message", [
    ({"name": "nodot"}, InvalidTable, "invalid table name"),
    ({"schema": b"garbage"}, InvalidTable, "undecodable Arrow schema"),
    ({"schema": "text"}, InvalidRequest, "field 'schema' must be bytes"),
    ({"primary_key": ["nope"]}, InvalidTable, "primary key column 'nope'"),
    ({"primary_key": ["id", "id"]}, InvalidTable, "names a column twice"),
    ({"bucket_key": ["name"]}, InvalidTable, "subset of the primary key"),
    ({"num_buckets": 0}, InvalidTable, "between 1 and 1024"),
    ({"num_buckets": 5000}, InvalidTable, "between 1 and 1024"),
    ({"num_buckets": "4"}, InvalidRequest, "field 'num_buckets' must be an integer"),
    ({"properties": {"kv.snapshot.num-retained": "0"}}, InvalidConfig, "at least 1"),
    ({"properties": {"no.such": "1"}}, InvalidConfig, "unknown table property"),
])
def test_invalid_definitions_are_refused_with_a_message_naming_the_problem(tables, store, kw,
                                                                          error, message):
    with pytest.raises(error, match=message):   # a wire type error is refused by decoding
        tables.create(body(**kw))
    assert store.table_names() == []


def test_reserved_column_names_are_refused(tables):
    schema = serialize_schema(parse_schema("id BIGINT, _change_type STRING"))
    with pytest.raises(InvalidTable, match="reserved"):
        tables.create(body(schema=schema))


def test_create_without_tablets_is_leader_not_available(store):
    with pytest.raises(LeaderNotAvailable, match="start one"):
        TableManager(store).create(body())


def test_drop_and_num_retained(tables, store):
    table_id = tables.create(body(properties={"kv.snapshot.num-retained": "5"}))
    assert tables.num_retained(table_id) == 5
    rec = tables.drop("db.t")
    assert rec.table_id == table_id
    assert store.table("db.t") is None and store.assignment("db.t") is None
    assert tables.num_retained(table_id) is None
    with pytest.raises(TableNotExist):
        tables.drop("db.t")
    assert tables.drop("db.t", ignore_if_not_exists=True) is None


PARTITIONED = serialize_schema(parse_schema("id BIGINT NOT NULL, dt STRING NOT NULL, v DOUBLE"))


def test_a_partitioned_pk_table_buckets_by_the_key_without_its_partition_keys(tables, store):
    tables.create(body(name="db.p", schema=PARTITIONED, primary_key=["id", "dt"],
                       partition_keys=["dt"],
                       properties={"table.auto-partition.enabled": "true"}))
    rec = store.table("db.p")
    assert (rec.partition_keys, rec.bucket_key) == (["dt"], ["id"])
    assert store.partitions("db.p") == []


@pytest.mark.parametrize("kw, error, message", [
    ({"partition_keys": ["dt"]}, InvalidTable, r"partition key\(s\) dt must be part of the "
                                               r"primary key \(id\)"),
    ({"partition_keys": ["nope"]}, InvalidTable, "'nope' is not a column"),
    ({"partition_keys": ["dt"], "primary_key": ["id", "dt"],
      "properties": {"table.auto-partition.time-unit": "WEEK"}}, InvalidConfig,
     "not one of YEAR"),
    ({"properties": {"table.auto-partition.enabled": "true"}}, InvalidConfig,
     "needs partition keys"),
])
def test_bad_partitioned_definitions_are_refused_and_nothing_is_written(tables, store, kw,
                                                                         error, message):
    with pytest.raises(error, match=message):
        tables.create(body(name="db.p", schema=PARTITIONED, **kw))
    assert store.table("db.p") is None


def test_partition_records_are_read_again_only_when_partitions_come_or_go(tables, store):
    # A tablet's sync pass lists every partitioned table's partitions every 0.5 s: one read per
    # table while nothing changed, not one per partition.
    from fluss_spark.server.coordinator.partitions import PartitionManager
    tables.create(body(name="db.p", schema=PARTITIONED, primary_key=["id", "dt"],
                       partition_keys=["dt"]))
    parts = PartitionManager(store, tables)
    first = [parts.create("db.p", {"dt": d}) for d in ("2026-11-24", "2026-11-25")]
    reads = []
    get = store._session.get
    store._session.get = lambda path, cls: (reads.append(path), get(path, cls))[1]
    assert store.partitions("db.p") == first and len(reads) == 2
    assert store.partitions("db.p") == first and len(reads) == 2     # cached
    parts.drop("db.p", {"dt": "2026-11-24"})
    again = parts.create("db.p", {"dt": "2026-11-24"})       # same name, another partition
    assert again.partition_id != first[0].partition_id
    assert store.partitions("db.p") == [again, first[1]]


def test_alter_appends_nullable_columns_under_a_new_schema_id(tables, store):
    from fluss_spark.protocol.arrow_ipc import deserialize_schema
    from fluss_spark.protocol.messages import AlterTableRequest
    tables.create(body())

    def alter(cols):
        return tables.alter(AlterTableRequest("db.t", serialize_schema(parse_schema(cols))))

    assert alter("note STRING").schema_id == 2
    rec = store.table("db.t")
    assert deserialize_schema(rec.schema).names == ["id", "name", "amount", "note"]
    assert rec.schemas()[1] == SCHEMA and rec.schema_id == 2
    for cols, error in [("x INT NOT NULL", "must be nullable.*drop NOT NULL from 'x'"),
                        ("note INT", "already has a column 'note'"),
                        ("id INT", "already has a primary key column 'id'")]:
        with pytest.raises(InvalidTable, match=error):
            alter(cols)
    with pytest.raises(TableNotExist, match="db.nope does not exist"):
        tables.alter(AlterTableRequest("db.nope", serialize_schema(parse_schema("x INT"))))
    assert store.table("db.t").schema_id == 2
