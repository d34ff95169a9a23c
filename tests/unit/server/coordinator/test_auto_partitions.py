"""AutoPartitioner on an in-process coordinator: precreate, retention, several keys, pausing,
stepped with a fake clock across unit boundaries."""

import datetime

import pytest

from fluss_spark.config import parse_server_options
from fluss_spark.metadata.layout import TabletRecord
from fluss_spark.metadata.store import MetadataStore
from fluss_spark.protocol.arrow_ipc import serialize_schema
from fluss_spark.protocol.messages import CreateTableRequest
from fluss_spark.protocol.types import parse_schema
from fluss_spark.server.coordinator.server import CoordinatorServer
from fluss_spark.server.settings import ServerSettings
from fluss_spark.testing.clock import FakeClock

HOUR = 3_600_000
DAY = 24 * HOUR
#: 2026-11-25 23:30 UTC: half an hour before a day boundary.
NOW = int(datetime.datetime(2026, 11, 25, 23, 30, tzinfo=datetime.timezone.utc).timestamp()
          * 1000)
SCHEMA = serialize_schema(parse_schema("id BIGINT NOT NULL, dt STRING NOT NULL, "
                                       "region STRING NOT NULL, v DOUBLE"))


@pytest.fixture
def coordinator(zk_address, tmp_path):
    """A leading in-process coordinator on a fake clock, its background pass stopped: the tests
    run the passes."""
    meta = MetadataStore(zk_address).start()
    meta.register_tablet(TabletRecord(id=1, host="127.0.0.1", port=1))
    settings = ServerSettings(role="coordinator", server_id=0, zookeeper=zk_address,
                              host="127.0.0.1", port=0, data_dir=tmp_path / "data",
                              remote_data_dir=str(tmp_path / "remote"),
                              options=parse_server_options([]))
    clock = FakeClock(NOW)
    server = CoordinatorServer(settings, clock=clock).start()
    assert server.is_leader
    server.auto_partitions.stop()
    server.clock, server.meta = clock, meta
    yield server
    server.stop()
    meta.close()


def create(server, name, keys=("dt",), **auto):
    props = {f"table.auto-partition.{k.replace('_', '-')}": str(v) for k, v in auto.items()}
    server.tables.create(CreateTableRequest.decode({
        "name": name, "schema": SCHEMA, "primary_key": ["id", *keys], "bucket_key": [],
        "num_buckets": 1, "properties": props, "partition_keys": list(keys)}))


def stored(server, name):
    """The partition names in ZooKeeper, as another coordinator would load them."""
    return sorted(p.name for p in server.meta.partitions(name))


def test_day_precreate_then_retention_across_midnights(coordinator):
    create(coordinator, "db.d", enabled="true", time_unit="DAY", num_precreate=2,
           num_retention=1)
    coordinator.partitions.create("db.d", {"dt": "made-by-hand"})
    # Created mid-day: today's partition at once, not at the next boundary.
    done = coordinator.auto_partitions.run_once()
    assert done.created == [("db.d", "20261125"), ("db.d", "20261126")] and not done.dropped
    assert coordinator.auto_partitions.run_once().created == []     # idempotent
    coordinator.clock.advance(HOUR)                                  # 2026-11-26 00:30
    assert coordinator.auto_partitions.run_once().created == [("db.d", "20261127")]
    assert stored(coordinator, "db.d") == ["20261125", "20261126", "20261127", "made-by-hand"]
    coordinator.clock.advance(DAY)                                   # 2026-11-27 00:30
    done = coordinator.auto_partitions.run_once()
    assert done.dropped == [("db.d", "20261125")] and done.created == [("db.d", "20261128")]
    assert stored(coordinator, "db.d") == ["20261126", "20261127", "20261128", "made-by-hand"]
    assert [p.name for p in coordinator.partitions.of("db.d")] == stored(coordinator, "db.d")


def test_hour_partitions_roll_every_hour(coordinator):
    create(coordinator, "db.h", enabled="true", time_unit="HOUR", num_precreate=3,
           num_retention=0)
    coordinator.auto_partitions.run_once()
    assert stored(coordinator, "db.h") == ["2026112523", "2026112600", "2026112601"]
    coordinator.clock.advance(2 * HOUR + 1)                          # 2026-11-26 01:30
    done = coordinator.auto_partitions.run_once()
    assert done.dropped == [("db.h", "2026112523"), ("db.h", "2026112600")]
    assert stored(coordinator, "db.h") == ["2026112601", "2026112602", "2026112603"]


def test_several_keys_drop_by_the_time_key_and_create_nothing(coordinator):
    create(coordinator, "db.m", keys=("region", "dt"), enabled="true", key="dt",
           num_precreate=0, num_retention=2)
    for region, dt in (("eu", "20261122"), ("us", "20261122"), ("eu", "20261123"),
                       ("us", "20261125")):
        coordinator.partitions.create("db.m", {"region": region, "dt": dt})
    done = coordinator.auto_partitions.run_once()
    assert sorted(done.dropped) == [("db.m", "eu$20261122"), ("db.m", "us$20261122")]
    assert done.created == []
    assert stored(coordinator, "db.m") == ["eu$20261123", "us$20261125"]


def test_tables_without_auto_partitioning_are_untouched(coordinator):
    create(coordinator, "db.off", num_retention=0)      # partitioned, not enabled
    coordinator.partitions.create("db.off", {"dt": "20200101"})
    coordinator.tables.create(CreateTableRequest.decode({
        "name": "db.plain", "schema": SCHEMA, "primary_key": ["id"], "bucket_key": [],
        "num_buckets": 1, "properties": {}}))
    done = coordinator.auto_partitions.run_once()
    assert (done.created, done.dropped) == ([], [])
    assert stored(coordinator, "db.off") == ["20200101"]


def test_a_pass_waits_while_the_coordinator_may_not_act(coordinator):
    create(coordinator, "db.p", enabled="true", num_precreate=1)
    may_act = False
    assert coordinator.auto_partitions.tick(lambda: may_act) is None
    assert stored(coordinator, "db.p") == []
    may_act = True
    assert coordinator.auto_partitions.tick(lambda: may_act).created == [("db.p", "20261125")]
