"""Apache Fluss ARRAY, MAP and ROW values inside compacted rows (binary arrays and maps) decoded:
round trips through an independent reference encoder, extreme values and corrupt bytes."""

from __future__ import annotations

import random
import struct
from decimal import Context, Decimal
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from fluss_spark.errors import CorruptMessage, UnsupportedVersion
from fluss_spark.protocol.apache_fluss.compacted_row import decode_compacted_rows, decode_kv_values
from tests.unit.protocol.test_apache_fluss_compacted_row import (
    assert_column, encode_array, encode_map, encode_row, expected, kv_value, length_prefixed,
    random_rows, varint)

POINT = pa.struct([("x", pa.int32()), ("label", pa.string())])
NESTED = pa.schema([
    pa.field("key", pa.int64(), nullable=False),
    ("ints", pa.list_(pa.int32())), ("texts", pa.list_(pa.string())),
    ("bools", pa.list_(pa.bool_())), ("shorts", pa.list_(pa.int16())),
    ("tiny", pa.list_(pa.int8())), ("floats", pa.list_(pa.float32())),
    ("doubles", pa.list_(pa.float64())), ("longs", pa.list_(pa.int64())),
    ("dates", pa.list_(pa.date32())), ("times", pa.list_(pa.time32("ms"))),
    ("times_ns", pa.list_(pa.time64("ns"))),
    ("ts_s", pa.list_(pa.timestamp("s"))), ("ts_ms", pa.list_(pa.timestamp("ms"))),
    ("ts_us", pa.list_(pa.timestamp("us"))), ("ltz_ns", pa.list_(pa.timestamp("ns", "UTC"))),
    ("dec_small", pa.list_(pa.decimal128(18, 4))), ("dec_big", pa.list_(pa.decimal128(38, 6))),
    ("blobs", pa.list_(pa.binary())), ("fixed", pa.list_(pa.binary(3))),
    ("matrix", pa.list_(pa.list_(pa.int64()))),
    ("by_name", pa.map_(pa.string(), pa.list_(pa.decimal128(38, 0)))),
    ("by_id", pa.map_(pa.int32(), POINT)),
    ("points", pa.list_(POINT)),
    ("deep", pa.struct([("when", pa.timestamp("ns")), ("tags", pa.map_(pa.string(), pa.string())),
                        ("inner", pa.struct([("p", POINT), ("xs", pa.list_(pa.int32()))]))])),
])


def _check(schema: pa.Schema, rows: list[list[Any]]) -> pa.RecordBatch:
    values = [kv_value(1, schema, row) for row in rows]
    batch = decode_kv_values(values, lambda _: schema, schema)
    assert batch.schema == schema
    for c, f in enumerate(schema):
        assert_column(batch.column(c), expected(schema, rows, c), f.name)
    return batch


@pytest.mark.parametrize("seed", range(3))
def test_round_trip_of_random_nested_rows(seed):
    rng = random.Random(seed)
    batch = _check(NESTED, random_rows(rng, NESTED, 120))
    for name in ("ints", "by_name", "deep"):
        assert batch.column(name).null_count >= 1


def test_extreme_and_empty_values_inside_arrays_maps_and_rows():
    top, low = Decimal(10**38 - 1), Decimal(-(10**38 - 1))
    wide = Context(prec=80)
    row: list[Any] = [None] * len(NESTED)
    row[0] = 1
    values = {
        "ints": [], "texts": ["", "1234567", "12345678", "中文😀", None, "x" * 300],
        "bools": [True, None, False], "tiny": [-128, 127], "shorts": [-32768, 32767],
        "floats": [float("inf"), -0.0], "doubles": [5e-324, None],
        "longs": [-(2**63), 2**63 - 1, 0],
        "dates": [-719162, 2932896], "times": [0, 86_399_999], "times_ns": [86_399_999_000_000],
        "ts_s": [-62135596800, 253402300799], "ts_ms": [-1, 0, 253402300799999],
        # Before 1970 the millis floor and the nanos stay positive; year 9999 and year 1.
        "ts_us": [-1, None, 253402300799999999, -62135596800000000],
        "ltz_ns": [-999, 2**62],
        "dec_small": [Decimal("99999999999999.9999"), Decimal("-0.0001"), None],
        "dec_big": [top.scaleb(-6, wide), low.scaleb(-6, wide), Decimal(0), Decimal("-1E-6"), None],
        "blobs": [b"", b"\x00" * 7, b"\xff" * 8, None], "fixed": [b"abc", None, b"\x00\x00\x00"],
        "matrix": [[], None, [1, None, -(2**63)]],
        "by_name": [("", [top, low, Decimal(0)]), ("ünï", []), ("none", None)],
        "by_id": [(-(2**31), {"x": None, "label": "é"}), (0, None)],
        "points": [None, {"x": 1, "label": None}],
        "deep": {"when": -1, "tags": [], "inner": {"p": None, "xs": []}},
    }
    for name, value in values.items():
        row[NESTED.get_field_index(name)] = value
    empty = [2] + [[] if pa.types.is_list(f.type) or pa.types.is_map(f.type) else None
                   for f in list(NESTED)[1:]]
    batch = _check(NESTED, [row, empty, [3] + [None] * (len(NESTED) - 1)])
    assert batch.column("texts")[0].as_py()[2] == "12345678"
    assert batch.column("dec_big")[0].as_py()[0] == top.scaleb(-6, wide)
    assert batch.column("by_name")[1].as_py() == []


def test_projection_walks_past_nested_columns():
    rng = random.Random(5)
    rows = random_rows(rng, NESTED, 30)
    buffer = np.frombuffer(b"".join(encode_row(NESTED, r) for r in rows), dtype=np.uint8)
    sizes = [len(encode_row(NESTED, r)) for r in rows]
    starts = np.cumsum([0] + sizes[:-1])
    last = len(NESTED) - 1
    deep, key = decode_compacted_rows(buffer, starts, NESTED, columns=[last, 0])
    assert_column(deep, expected(NESTED, rows, last), "deep")
    assert_column(key, expected(NESTED, rows, 0), "key")


def test_every_truncation_of_a_nested_row_is_corrupt():
    schema = pa.schema([("m", NESTED.field("by_id").type), ("d", NESTED.field("deep").type)])
    row = [[(1, {"x": 2, "label": "hello world"})],
           {"when": 5, "tags": [("k", "v" * 9)], "inner": {"p": {"x": 1, "label": "y"},
                                                          "xs": [1, 2]}}]
    full = kv_value(1, schema, row)
    for cut in range(2, len(full)):
        with pytest.raises(CorruptMessage, match="row 0"):
            decode_kv_values([full[:cut]], lambda _: schema, schema)


def _array_field(data: bytes) -> bytes:
    """A one-field compacted row (no nulls) holding ``data`` as its nested value."""
    return b"\x00" + length_prefixed(data)


LIST_OF_TEXT = pa.schema([("xs", pa.list_(pa.string()))])
LIST_OF_INT = pa.schema([("xs", pa.list_(pa.int32()))])
MAP = pa.schema([("m", pa.map_(pa.string(), pa.int32()))])
GOOD_TEXT = encode_array(pa.string(), ["a long string"])


def _slot_pointing(offset: int, size: int) -> bytes:
    return struct.pack("<i", 1) + bytes(4) + struct.pack("<q", offset << 32 | size)


@pytest.mark.parametrize("schema, body, what", [
    (LIST_OF_INT, b"\x01\x02\x03", "an array of 3 bytes is shorter than its size"),
    (LIST_OF_INT, struct.pack("<i", -1) + bytes(4), "array size -1"),
    # A huge count in a few bytes is refused before anything is sized by it.
    (LIST_OF_INT, struct.pack("<i", 2**31 - 1) + bytes(12), "does not fit in 16 bytes"),
    (LIST_OF_TEXT, _slot_pointing(16, 100), "truncated"),
    (LIST_OF_TEXT, _slot_pointing(16, 2**32 - 1), "truncated"),
    (LIST_OF_TEXT, struct.pack("<i", 1) + bytes(4) + b"abcdefg\x89", "9 bytes kept"),
    (LIST_OF_TEXT, struct.pack("<i", 1) + bytes(4) + b"\xc3\x28\x00\x00\x00\x00\x00\x82",
     "UTF-8"),
    (pa.schema([("xs", pa.list_(pa.timestamp("ns")))]),
     _slot_pointing(16, 10**6) + bytes(8), "nanos of millisecond"),
    (pa.schema([("xs", pa.list_(pa.decimal128(38, 0)))]),
     _slot_pointing(16, 17) + bytes(24), "decimal of 17 bytes"),
    (pa.schema([("xs", pa.list_(pa.binary(4)))]),
     struct.pack("<i", 1) + bytes(4) + b"abc\x00\x00\x00\x00\x83", "3 bytes, not 4"),
    (MAP, b"\x00\x00", "shorter than its key array"),
    (MAP, struct.pack("<i", 99) + encode_array(pa.string(), []), "key array of 99 bytes"),
    (MAP, struct.pack("<i", 8) + encode_array(pa.string(), []) + encode_array(pa.int32(), [1]),
     "0 keys but 1 values"),
    (MAP, encode_map(MAP.field("m").type, [(None, 1)]), "null map key"),
    (pa.schema([("p", POINT)]), b"\x00\xff\xff\xff\xff\xff", "longer than 5"),
])
def test_corrupt_nested_values_name_the_row_and_the_column(schema, body, what):
    good = kv_value(1, schema, [None])
    with pytest.raises(CorruptMessage, match=what) as info:
        decode_kv_values([good, b"\x01\x00" + _array_field(body)], lambda _: schema, schema)
    assert f"row 1, column '{schema.field(0).name}'" in str(info.value)


def test_a_list_of_a_type_without_a_layout_is_unsupported():
    schema = pa.schema([("xs", pa.list_(pa.uint32())), ("y", pa.int32())])
    body = np.frombuffer(_array_field(encode_array(pa.int32(), [])) + varint(7, 32), np.uint8)
    [y] = decode_compacted_rows(body, np.array([0]), schema, columns=[1])
    assert y.to_pylist() == [7]
    with pytest.raises(UnsupportedVersion, match=r"'xs'.*uint32"):
        decode_compacted_rows(body, np.array([0]), schema, columns=[0])


def test_reference_array_encoder_matches_the_documented_layout():
    # Two ints and a null: size 3, null bit 2, 4-byte slots, padded to 8 bytes.
    assert encode_array(pa.int32(), [1, -1, None]) == bytes.fromhex(
        "03000000" "04000000" "01000000" "ffffffff" "00000000" "00000000")
    # A short string in its slot, a long one in the variable part at offset 16.
    assert encode_array(pa.string(), ["ab", "abcdefgh"]) == bytes.fromhex(
        "02000000" "00000000" "6162000000000082" "0800000018000000") + b"abcdefgh"
