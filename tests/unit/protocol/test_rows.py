"""Physical row values round-trip for every type; bucketing is stable and order-preserving."""

import datetime
import decimal

import pyarrow as pa
from hypothesis import given, strategies as st

from fluss_spark.protocol.rows import (bucket_of, encode_key, from_physical, key_bytes,
                                       physical_columns, split_by_bucket)
from fluss_spark.protocol.types import parse_schema


def test_physical_round_trip_all_types():
    schema = parse_schema("a TINYINT, d BIGINT, g DECIMAL(10, 2), h STRING, i BINARY, j BOOLEAN, "
                          "k DATE, l TIMESTAMP, m TIMESTAMP_LTZ, f DOUBLE")
    row = [1, 2**40, decimal.Decimal("12.34"), "x", b"\x00\x01", True, datetime.date(2024, 2, 29),
           datetime.datetime(2024, 1, 1, 12, 0, 0, 123456),
           datetime.datetime(2024, 1, 1, tzinfo=datetime.timezone.utc), 1.5]
    table = pa.Table.from_pylist([dict(zip(schema.names, row)),
                                  {n: None for n in schema.names}], schema=schema)
    batch = from_physical(physical_columns(table), schema)
    assert pa.Table.from_batches([batch]).equals(table)


@given(st.lists(st.integers(-2**63, 2**63 - 1), min_size=1, max_size=50), st.integers(1, 16))
def test_split_by_bucket_keeps_rows_and_order(ids, n):
    table = pa.table({"id": pa.array(ids, pa.int64()), "pos": list(range(len(ids)))})
    parts = split_by_bucket(table, ["id"], n)
    assert sum(p.num_rows for p in parts.values()) == len(ids)
    for b, part in parts.items():
        assert part["pos"].to_pylist() == sorted(part["pos"].to_pylist())
        for k in key_bytes(part, ["id"]):
            assert bucket_of(k, n) == b


def test_key_bytes_match_encode_key():
    table = pa.table({"a": [1], "b": ["x"]})
    assert key_bytes(table, ["a", "b"]) == [encode_key((1, "x"))]
