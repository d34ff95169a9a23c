"""SchemaWatch: one WARN per table whose columns grew while a query reads, checked at most
every interval."""

from __future__ import annotations

import logging
from dataclasses import replace

from fluss_spark.connector.schema_watch import SchemaWatch
from fluss_spark.protocol.types import parse_schema
from fluss_spark.testing.clock import FakeClock
from fluss_spark.testing.fake_cluster import FakeCluster


def test_one_warning_per_table_whose_columns_were_appended(caplog):
    clock = FakeClock()
    cluster = FakeCluster(clock)
    for name in ("db.a", "db.b"):
        cluster.add_table(name)
    watch = SchemaWatch(lambda: cluster, clock, interval_ms=1000)
    watch.started([cluster.get_table("db.a"), cluster.get_table("db.b")])
    watch.started([])                                   # the run's first look is what counts
    assert watch.columns == {n: (("id", "int64"), ("v", "string")) for n in ("db.a", "db.b")}
    t = cluster.tables["db.a"]
    t.info = replace(t.info, schema=parse_schema("id BIGINT, v STRING, note STRING"),
                     schema_id=2)
    caplog.set_level(logging.WARNING, "fluss_spark.connector.schema_watch")
    looks = len(cluster.calls_of("get_table"))
    for _ in range(7):                                  # at 0, 400, ..., 2400 ms
        watch.check(["db.a", "db.b"])
        clock.advance(400)
    # Checked at 1200 and 2400 ms (the tables were read at the start): the second look asks only
    # about db.b (db.a was reported).
    assert len(cluster.calls_of("get_table")) - looks == 3
    warnings = [r.getMessage() for r in caplog.records]
    assert warnings == ["table db.a has column(s) note added after this query started (schema "
                        "id 2): the query keeps its columns and reads newer rows without them; "
                        "restart it on its checkpoint to read them"]
