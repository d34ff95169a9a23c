"""Creating a table on the Apache Fluss client without a cluster: a table the coordinator never
gives leaders is dropped and created again, and an existing one is left alone."""

from __future__ import annotations

from types import SimpleNamespace

import pyarrow as pa
import pytest

from fluss_spark.client.apache_fluss import ApacheFlussWireCluster
from fluss_spark.client.apache_fluss import cluster as cluster_module
from fluss_spark.errors import LeaderNotAvailable, TableAlreadyExist
from fluss_spark.protocol.apache_fluss.messages import EmptyResponse

SCHEMA = pa.schema([("id", pa.int64())])


class Conn:
    """Coordinator calls are recorded; the table created in attempt ``led_from`` (counting
    from 0) and later ones get leaders, earlier ones never do."""

    def __init__(self, led_from: int = 0, exists: bool = False):
        self.sent: list[str] = []
        self.led_from, self.exists = led_from, exists

    def call_coordinator(self, request):
        kind = type(request).__name__
        if kind == "CreateTableRequest" and self.exists:
            raise TableAlreadyExist("table db.t already exists")
        self.sent.append(kind)
        return EmptyResponse()

    def refresh_table(self, name):
        created = self.sent.count("CreateTableRequest") - 1
        return SimpleNamespace(leaders={0: 1 if created >= self.led_from else None})

    def invalidate(self, name=None):
        pass


@pytest.fixture(autouse=True)
def quick(monkeypatch):
    monkeypatch.setattr(cluster_module, "NEW_TABLE_LEADERS_S", 0.2)


def test_a_table_that_gets_leaders_is_created_once():
    conn = Conn()
    ApacheFlussWireCluster(conn).create_table("db.t", SCHEMA)  # type: ignore[arg-type]
    assert conn.sent == ["CreateTableRequest"]


def test_a_table_the_coordinator_lost_is_dropped_and_created_again():
    conn = Conn(led_from=1)
    ApacheFlussWireCluster(conn).create_table("db.t", SCHEMA)  # type: ignore[arg-type]
    assert conn.sent == ["CreateTableRequest", "DropTableRequest", "CreateTableRequest"]


def test_a_table_lost_every_time_fails_naming_it_and_the_coordinator():
    conn = Conn(led_from=99)
    with pytest.raises(LeaderNotAvailable, match=r"table db\.t was created 3 times.*coordinator"):
        ApacheFlussWireCluster(conn).create_table("db.t", SCHEMA)  # type: ignore[arg-type]
    assert conn.sent.count("DropTableRequest") == 3


def test_an_existing_table_is_left_alone_only_if_asked():
    conn = Conn(exists=True)
    ApacheFlussWireCluster(conn).create_table(  # type: ignore[arg-type]
        "db.t", SCHEMA, ignore_if_exists=True)
    assert conn.sent == []
    with pytest.raises(TableAlreadyExist):
        ApacheFlussWireCluster(conn).create_table("db.t", SCHEMA)  # type: ignore[arg-type]
