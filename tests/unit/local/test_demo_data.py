"""DemoData: deterministic rows for every column type, unique keys."""

from __future__ import annotations

import pyarrow as pa

from fluss_spark.protocol.types import parse_schema
from fluss_spark.local.demo_data import DemoData

SCHEMA = parse_schema("id BIGINT NOT NULL, k STRING, name STRING, amount DOUBLE, d DATE, "
                      "ts TIMESTAMP, tz TIMESTAMP_LTZ, dec DECIMAL(10, 2), ok BOOLEAN, raw BYTES, "
                      "small TINYINT, f FLOAT, i INT")


def test_rows_match_the_schema_and_keys_derive_from_row_numbers():
    t = DemoData(SCHEMA, ["id", "k"], seed=1).rows(5, 25)
    assert t.schema == SCHEMA and t.num_rows == 20
    assert t.column("id").to_pylist() == list(range(5, 25))
    assert t.column("k").to_pylist() == [f"key-{i}" for i in range(5, 25)]
    assert t.column("name").null_count == 0 and t.column("dec").null_count == 0


def test_same_seed_same_data_other_seed_other_data():
    a = DemoData(SCHEMA, ["id"], seed=3)
    b = DemoData(SCHEMA, ["id"], seed=3)
    assert a.rows(0, 50).equals(b.rows(0, 50))
    assert a.updates(10, 50).equals(b.updates(10, 50))
    assert not DemoData(SCHEMA, ["id"], seed=4).rows(0, 50).equals(
        DemoData(SCHEMA, ["id"], seed=3).rows(0, 50))


def test_updates_hit_existing_keys_and_deletes_are_distinct():
    g = DemoData(SCHEMA, ["id"], seed=0)
    ups = g.updates(100, 20)
    assert set(ups.column("id").to_pylist()) <= set(range(20))
    dels = g.deletes(15, 20)
    ids = dels.column("id").to_pylist()
    assert dels.schema.names == ["id"] and len(set(ids)) == 15 and set(ids) <= set(range(20))
    assert g.deletes(50, 20).num_rows == 20


def test_integer_values_stay_in_range():
    t = DemoData(pa.schema([("small", pa.int8())]), seed=0).rows(0, 500)
    assert all(0 <= v <= 127 for v in t.column("small").to_pylist())
