"""Apache Fluss KV values (schema id + compacted row) decoded: server bytes and round trips."""

from __future__ import annotations

import datetime as dt
import random
import struct
import time
from decimal import Context, Decimal
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from fluss_spark.errors import ConfigError, CorruptMessage, UnsupportedVersion
from fluss_spark.protocol.apache_fluss.compacted_row import decode_compacted_rows, decode_kv_values

# KV values written by an Apache Fluss 0.9.1 server, schema id 1.
GOLDEN_SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("v", pa.string()),
                           ("i", pa.int32()), ("d", pa.float64()), ("b", pa.bool_()),
                           ("ts", pa.timestamp("us")), ("dt", pa.date32())])
GOLDEN_VALUES = [bytes.fromhex(h) for h in (
    "0100020000000000000000000001fbe8c792cc31c0ea1b8b9a01",
    "010000010476616c31ffffffff0f000000000000f83f00e3f0c792cc31c0ea1b8b9a01",
    "010000020476616c32feffffff0f000000000000084001cbf8c792cc31c0ea1b8b9a01",
)]
GOLDEN_ROWS: list[dict[str, Any]] = [
    {"id": 0, "v": None, "i": 0, "d": 0.0, "b": True,
     "ts": dt.datetime(2024, 1, 1, 0, 0, 0, 123456), "dt": dt.date(2024, 1, 1)},
    {"id": 1, "v": "val1", "i": -1, "d": 1.5, "b": False,
     "ts": dt.datetime(2024, 1, 1, 0, 0, 1, 123456), "dt": dt.date(2024, 1, 1)},
    {"id": 2, "v": "val2", "i": -2, "d": 3.0, "b": True,
     "ts": dt.datetime(2024, 1, 1, 0, 0, 2, 123456), "dt": dt.date(2024, 1, 1)},
]


# ---- an independent reference encoder: plain Python, one row at a time ---------------------

def varint(value: int, bits: int) -> bytes:
    """Unsigned LEB128 of the ``bits``-bit two's complement of ``value``."""
    value &= (1 << bits) - 1
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)

# Every test decodes both ways: compiled (where the install has it) and in numpy.
pytestmark = pytest.mark.usefixtures("both_decodes")


def length_prefixed(data: bytes) -> bytes:
    return varint(len(data), 32) + data


def encode_field(t: pa.DataType, v: Any) -> bytes:
    """One non-null field; temporal values are integers in the Arrow type's unit."""
    if t == pa.bool_():
        return bytes([1 if v else 0])
    if t == pa.int8():
        return struct.pack("<b", v)
    if t == pa.int16():
        return struct.pack("<h", v)
    if t in (pa.int32(), pa.date32()):
        return varint(v, 32)
    if t == pa.int64():
        return varint(v, 64)
    if t == pa.float32():
        return struct.pack("<f", v)
    if t == pa.float64():
        return struct.pack("<d", v)
    if pa.types.is_string(t):
        return length_prefixed(v.encode("utf-8"))
    if pa.types.is_binary(t) or pa.types.is_fixed_size_binary(t):
        return length_prefixed(v)
    if pa.types.is_decimal(t):
        if t.precision <= 18:
            return varint(unscaled_of(t, v), 64)
        return length_prefixed(big_endian(unscaled_of(t, v)))
    if pa.types.is_time(t):
        millis = v * 1000 if t.unit == "s" else v // {"ms": 1, "us": 1000, "ns": 10**6}[t.unit]
        return varint(millis, 32)
    if pa.types.is_timestamp(t):
        per_milli = {"us": 1000, "ns": 10**6}
        if t.unit == "s":
            return varint(v * 1000, 64)
        if t.unit == "ms":
            return varint(v, 64)
        millis, rest = divmod(v, per_milli[t.unit])
        return varint(millis, 64) + varint(rest * (10**6 // per_milli[t.unit]), 32)
    if pa.types.is_list(t):
        return length_prefixed(encode_array(t.value_type, v))
    if pa.types.is_map(t):
        return length_prefixed(encode_map(t, v))
    if pa.types.is_struct(t):
        return length_prefixed(encode_row(pa.schema(list(t)), [v[f.name] for f in t]))
    raise AssertionError(f"no reference encoding for {t}")


def unscaled_of(t: pa.Decimal128Type, v: Decimal) -> int:
    return int(v.scaleb(t.scale, context=Context(prec=80)))


def big_endian(unscaled: int) -> bytes:
    """Minimal big-endian two's complement, as Java's BigInteger.toByteArray."""
    size = (unscaled if unscaled >= 0 else ~unscaled).bit_length() // 8 + 1
    return unscaled.to_bytes(size, "big", signed=True)


def padded(data: bytes) -> bytes:
    return data + bytes(-len(data) % 8)


_SLOT_FORMATS = {pa.bool_(): "<?", pa.int8(): "<b", pa.int16(): "<h", pa.int32(): "<i",
                 pa.date32(): "<i", pa.float32(): "<f", pa.int64(): "<q", pa.float64(): "<d"}


def encode_array(t: pa.DataType, values: list[Any]) -> bytes:
    """A binary array, as Fluss's array writer lays it out (a null decimal or timestamp of the
    long forms still takes its room in the variable part and points at it, as there)."""
    n = len(values)
    header = 4 + (n + 31) // 32 * 4
    width = struct.calcsize(_SLOT_FORMATS[t]) if t in _SLOT_FORMATS else \
        4 if pa.types.is_time(t) else 8
    fixed = bytearray(padded(bytes(header + width * n)))
    struct.pack_into("<i", fixed, 0, n)
    var = b""

    def point(data: bytes, low: int, room: int | None = None) -> int:
        nonlocal var
        offset = len(fixed) + len(var)
        var += data + bytes((room or len(padded(data))) - len(data))
        return offset << 32 | low

    for k, v in enumerate(values):
        slot = header + k * width
        long_ts = pa.types.is_timestamp(t) and t.unit in ("us", "ns")
        big_dec = pa.types.is_decimal(t) and t.precision > 18
        if v is None:
            fixed[4 + k // 8] |= 1 << (k % 8)
            if long_ts or big_dec:
                struct.pack_into("<q", fixed, slot, point(b"", 0, 8 if long_ts else 16))
            continue
        if t in _SLOT_FORMATS:
            struct.pack_into(_SLOT_FORMATS[t], fixed, slot, v)
        elif pa.types.is_time(t):
            millis = v * 1000 if t.unit == "s" else v // {"ms": 1, "us": 1000, "ns": 10**6}[t.unit]
            struct.pack_into("<i", fixed, slot, millis)
        elif long_ts:
            millis, rest = divmod(v, {"us": 1000, "ns": 10**6}[t.unit])
            nanos = rest * (10**6 // {"us": 1000, "ns": 10**6}[t.unit])
            struct.pack_into("<q", fixed, slot, point(struct.pack("<q", millis), nanos))
        elif pa.types.is_timestamp(t):
            struct.pack_into("<q", fixed, slot, v * 1000 if t.unit == "s" else v)
        elif pa.types.is_decimal(t) and not big_dec:
            struct.pack_into("<q", fixed, slot, unscaled_of(t, v))
        elif big_dec:
            data = big_endian(unscaled_of(t, v))
            struct.pack_into("<q", fixed, slot, point(data, len(data), 16))
        else:
            if pa.types.is_string(t):
                data = v.encode("utf-8")
            elif pa.types.is_list(t):
                data = encode_array(t.value_type, v)
            elif pa.types.is_map(t):
                data = encode_map(t, v)
            elif pa.types.is_struct(t):
                data = encode_row(pa.schema(list(t)), [v[f.name] for f in t])
            else:
                data = v
            if len(data) <= 7 and not (pa.types.is_list(t) or pa.types.is_map(t)
                                       or pa.types.is_struct(t)):
                fixed[slot:slot + 8] = data + bytes(7 - len(data)) + bytes([0x80 | len(data)])
            else:
                struct.pack_into("<q", fixed, slot, point(data, len(data)))
    return bytes(fixed) + var


def encode_map(t: pa.MapType, items: list[tuple[Any, Any]]) -> bytes:
    keys = encode_array(t.key_type, [k for k, _ in items])
    return struct.pack("<i", len(keys)) + keys + encode_array(t.item_type, [v for _, v in items])


def encode_row(schema: pa.Schema, row: list[Any]) -> bytes:
    """A compacted row: the null bits (LSB first), then the non-null fields in order."""
    header = bytearray((len(schema) + 7) // 8)
    body = b""
    for i, (f, v) in enumerate(zip(schema, row)):
        if v is None:
            header[i >> 3] |= 1 << (i & 7)
        else:
            body += encode_field(f.type, v)
    return bytes(header) + body


def kv_value(schema_id: int, schema: pa.Schema, row: list[Any]) -> bytes:
    return struct.pack("<h", schema_id) + encode_row(schema, row)


# ---- random rows of every supported type ----------------------------------------------------

I32, I64 = (-(2**31), 2**31 - 1), (-(2**63), 2**63 - 1)
ALL_TYPES = pa.schema([
    pa.field("key", pa.int64(), nullable=False),
    ("bool", pa.bool_()), ("i8", pa.int8()), ("i16", pa.int16()), ("i32", pa.int32()),
    ("i64", pa.int64()), ("f32", pa.float32()), ("f64", pa.float64()),
    ("str", pa.string()), ("bin", pa.binary()), ("fixed", pa.binary(5)),
    ("dec_small", pa.decimal128(10, 2)), ("dec_18", pa.decimal128(18, 0)),
    ("dec_big", pa.decimal128(38, 10)), ("dec_38_0", pa.decimal128(38, 0)),
    ("date", pa.date32()),
    ("time_s", pa.time32("s")), ("time_ms", pa.time32("ms")),
    ("time_us", pa.time64("us")), ("time_ns", pa.time64("ns")),
    ("ts_s", pa.timestamp("s")), ("ts_ms", pa.timestamp("ms")),
    ("ts_us", pa.timestamp("us")), ("ts_ns", pa.timestamp("ns")),
    ("ltz_ms", pa.timestamp("ms", tz="UTC")), ("ltz_ns", pa.timestamp("ns", tz="UTC")),
])
TEXT = "aZ09 é中😀\u0000ß"


def random_int(rng: random.Random, lo: int, hi: int) -> int:
    pick = rng.random()
    if pick < 0.15:
        value = rng.choice((lo, hi, 0, -1, 1, 127, 128, -128, 16383, 16384))
    elif pick < 0.5:
        value = rng.randint(-300, 300)
    else:
        # Every magnitude, so varints of every size turn up.
        value = rng.choice((-1, 1)) * rng.getrandbits(rng.randint(1, hi.bit_length()))
    return max(lo, min(hi, value))


def random_decimal(rng: random.Random, t: pa.Decimal128Type) -> Decimal:
    top = 10**t.precision - 1
    unscaled = rng.choice((top, -top, 0, -1)) if rng.random() < 0.2 else \
        rng.randint(-top, top) // 10**rng.randint(0, t.precision)
    return Decimal(unscaled).scaleb(-t.scale, context=Context(prec=80))


def random_value(rng: random.Random, t: pa.DataType) -> Any:
    if t == pa.bool_():
        return rng.random() < 0.5
    if t == pa.int8():
        return random_int(rng, -128, 127)
    if t == pa.int16():
        return random_int(rng, -(2**15), 2**15 - 1)
    if t == pa.int32():
        return random_int(rng, *I32)
    if t == pa.int64():
        return random_int(rng, *I64)
    if t == pa.float32():
        return struct.unpack("<f", struct.pack("<f", rng.choice(
            (rng.uniform(-1e30, 1e30), float("inf"), -0.0, 1.5))))[0]
    if t == pa.float64():
        return rng.choice((rng.uniform(-1e300, 1e300), float("-inf"), 5e-324, 0.1))
    if pa.types.is_string(t):
        size = rng.choice((0, 1, 3, 10, 100, 300))
        return "".join(rng.choice(TEXT) for _ in range(size))
    if pa.types.is_fixed_size_binary(t):
        return rng.randbytes(t.byte_width)
    if pa.types.is_binary(t):
        return rng.randbytes(rng.choice((0, 1, 127, 128, 1000)))
    if pa.types.is_decimal(t):
        return random_decimal(rng, t)
    if t == pa.date32():
        return random_int(rng, -(10**6), 10**6)
    if pa.types.is_time(t):
        millis = rng.choice((0, 86_399_999, rng.randrange(86_400_000)))
        return millis // 1000 if t.unit == "s" else millis * {"ms": 1, "us": 1000,
                                                                "ns": 10**6}[t.unit]
    if pa.types.is_timestamp(t):
        # Negative epochs too: before 1970 the millis are floored and the nanos stay positive.
        if t.unit == "s":
            return random_int(rng, -(2**63 // 1000), (2**63 - 1) // 1000)
        return random_int(rng, *I64)
    if pa.types.is_list(t):
        return [None if rng.random() < 0.2 else random_value(rng, t.value_type)
                for _ in range(rng.choice((0, 1, 2, 5, 40)))]
    if pa.types.is_map(t):
        keys = {random_value(rng, t.key_type) for _ in range(rng.choice((0, 1, 3, 9)))}
        return [(k, None if rng.random() < 0.2 else random_value(rng, t.item_type))
                for k in keys]
    if pa.types.is_struct(t):
        return {f.name: None if f.nullable and rng.random() < 0.2 else random_value(rng, f.type)
                for f in t}
    raise AssertionError(t)


def random_rows(rng: random.Random, schema: pa.Schema, n: int) -> list[list[Any]]:
    rows = []
    for r in range(n):
        row = []
        for c, f in enumerate(schema):
            # Row c has column c null, so every nullable column has a null; others at random.
            null = f.nullable and (r == c or rng.random() < 0.2)
            row.append(None if null else random_value(rng, f.type))
        rows.append(row)
    return rows


def expected(schema: pa.Schema, rows: list[list[Any]], c: int) -> pa.Array:
    return pa.array([row[c] for row in rows], type=schema.field(c).type)


def plain(array: pa.Array) -> list[Any]:
    """Python values of ``array``; temporal ones as their integers (pandas-free for ns)."""
    t = array.type
    if pa.types.is_temporal(t):
        return array.view(pa.int32() if t.bit_width == 32 else pa.int64()).to_pylist()
    return array.to_pylist()


def assert_column(got: pa.Array, want: pa.Array, name: str) -> None:
    assert got.type == want.type, name
    if pa.types.is_nested(got.type):
        # Python values of nested temporal types may not exist (dates past year 9999).
        assert got.equals(want), (name, got.diff(want))
    assert pa.types.is_nested(got.type) or plain(got) == plain(want), name
    assert got.equals(want), name
    got.validate(full=True)


# ---- golden vectors -------------------------------------------------------------------------

def test_golden_vectors_decode_to_the_written_rows():
    batch = decode_kv_values(GOLDEN_VALUES, lambda schema_id: GOLDEN_SCHEMA, GOLDEN_SCHEMA)
    assert batch.schema == GOLDEN_SCHEMA
    assert batch.to_pylist() == GOLDEN_ROWS


def test_golden_vectors_through_decode_compacted_rows_with_and_without_ends():
    buffer = np.frombuffer(b"".join(GOLDEN_VALUES), dtype=np.uint8)
    sizes = np.array([len(v) for v in GOLDEN_VALUES])
    ends = np.cumsum(sizes)
    starts = ends - sizes + 2
    for bound in (None, ends):
        arrays = decode_compacted_rows(buffer, starts, GOLDEN_SCHEMA, ends=bound)
        table = pa.Table.from_arrays(arrays, schema=GOLDEN_SCHEMA)
        assert table.to_pylist() == GOLDEN_ROWS


def test_reference_encoder_writes_the_golden_bytes():
    # The encoder the round trips rely on reproduces the server's bytes exactly.
    for value, row in zip(GOLDEN_VALUES, GOLDEN_ROWS):
        micros = (row["ts"] - dt.datetime(1970, 1, 1)) // dt.timedelta(microseconds=1)
        days = (row["dt"] - dt.date(1970, 1, 1)).days
        values = [row["id"], row["v"], row["i"], row["d"], row["b"], micros, days]
        assert kv_value(1, GOLDEN_SCHEMA, values) == value


def test_varints_of_negative_and_extreme_ints():
    schema = pa.schema([("i", pa.int32()), ("l", pa.int64())])
    cases = [(-1, -1), (I32[0], I64[0]), (I32[1], I64[1]), (0, 0), (127, 128), (-128, 2**35)]
    values = [kv_value(1, schema, list(c)) for c in cases]
    assert values[0] == bytes.fromhex("0100" "00" "ffffffff0f" "ffffffffffffffffff01")
    batch = decode_kv_values(values, lambda _: schema, schema)
    assert batch.column("i").to_pylist() == [c[0] for c in cases]
    assert batch.column("l").to_pylist() == [c[1] for c in cases]


# ---- round trips ----------------------------------------------------------------------------

@pytest.mark.parametrize("seed", range(4))
def test_round_trip_of_random_rows_of_every_type(seed):
    rng = random.Random(seed)
    rows = random_rows(rng, ALL_TYPES, 300)
    values = [kv_value(3, ALL_TYPES, row) for row in rows]
    batch = decode_kv_values(values, lambda schema_id: {3: ALL_TYPES}[schema_id], ALL_TYPES)
    assert batch.schema == ALL_TYPES
    assert batch.num_rows == len(rows)
    for c, f in enumerate(ALL_TYPES):
        assert_column(batch.column(c), expected(ALL_TYPES, rows, c), f.name)
        if f.nullable:
            assert batch.column(c).null_count >= 1, f.name


def test_round_trip_with_rows_scattered_in_a_larger_buffer():
    rng = random.Random(7)
    rows = random_rows(rng, ALL_TYPES, 100)
    chunks, starts, ends, at = [], [], [], 0
    for row in rows:
        gap = rng.randbytes(rng.randint(0, 5))      # bytes that belong to no row
        encoded = encode_row(ALL_TYPES, row)
        chunks += [gap, encoded]
        starts.append(at + len(gap))
        at += len(gap) + len(encoded)
        ends.append(at)
    order = list(range(len(rows)))
    rng.shuffle(order)                              # rows need not be in buffer order
    buffer = np.frombuffer(b"".join(chunks), dtype=np.uint8)
    arrays = decode_compacted_rows(buffer, np.array(starts)[order], ALL_TYPES,
                                   ends=np.array(ends)[order])
    shuffled = [rows[i] for i in order]
    for c, f in enumerate(ALL_TYPES):
        assert_column(arrays[c], expected(ALL_TYPES, shuffled, c), f.name)


def test_rows_of_nulls_only_and_nine_fields_use_two_header_bytes():
    schema = pa.schema([(f"c{i}", pa.string() if i % 2 else pa.int64()) for i in range(9)])
    rows: list[list[Any]] = [[None] * 9, [1, "a", None, None, 5, None, None, None, 9],
                             [None] * 8 + [-9]]
    values = [kv_value(1, schema, row) for row in rows]
    assert values[0] == b"\x01\x00\xff\x01"
    batch = decode_kv_values(values, lambda _: schema, schema)
    assert [list(r.values()) for r in batch.to_pylist()] == rows


def test_nan_round_trips():
    schema = pa.schema([("f", pa.float32()), ("d", pa.float64())])
    batch = decode_kv_values([kv_value(1, schema, [float("nan"), float("nan")])],
                             lambda _: schema, schema)
    assert np.isnan(batch.column(0).to_pylist()[0]) and np.isnan(batch.column(1).to_pylist()[0])


def test_timestamps_before_1970_in_every_unit():
    schema = pa.schema([("s", pa.timestamp("s")), ("ms", pa.timestamp("ms")),
                        ("us", pa.timestamp("us")), ("ns", pa.timestamp("ns"))])
    # 1969-12-31 23:59:59.999999001 and friends: millis floor to -1, nanos stay positive.
    row = [-1, -1, -1, -999]
    value = kv_value(1, schema, row)
    minus_one = "ff" * 9 + "01"
    assert value == bytes.fromhex("0100" "00" "98f8" + "ff" * 7 + "01" + minus_one + minus_one
                                  + "d8fc3c" + minus_one + "d9fc3c")
    batch = decode_kv_values([value], lambda _: schema, schema)
    assert [plain(batch.column(c))[0] for c in range(4)] == row
    assert batch.column("us").to_pylist() == [dt.datetime(1969, 12, 31, 23, 59, 59, 999999)]


# ---- projection and schema evolution --------------------------------------------------------

def test_projection_returns_the_requested_columns_in_the_requested_order():
    rng = random.Random(11)
    rows = random_rows(rng, ALL_TYPES, 80)
    encoded = [encode_row(ALL_TYPES, row) for row in rows]
    buffer = np.frombuffer(b"".join(encoded), dtype=np.uint8)
    starts = np.cumsum([0] + [len(e) for e in encoded[:-1]])
    columns = [13, 0, 8, 8, 23]
    arrays = decode_compacted_rows(buffer, starts, ALL_TYPES, columns=columns)
    assert len(arrays) == len(columns)
    for array, c in zip(arrays, columns):
        assert_column(array, expected(ALL_TYPES, rows, c), ALL_TYPES.field(c).name)


def test_fields_after_the_last_requested_one_are_not_read():
    schema = pa.schema([("a", pa.int32()), ("b", pa.string())])
    # The row ends inside b's bytes: a is still readable on its own.
    value = encode_row(schema, [300, "hello"])[:-2]
    buffer = np.frombuffer(value, dtype=np.uint8)
    [a] = decode_compacted_rows(buffer, np.array([0]), schema, columns=[0])
    assert a.to_pylist() == [300]
    with pytest.raises(CorruptMessage):
        decode_compacted_rows(buffer, np.array([0]), schema)


def test_no_rows_and_no_columns():
    empty = np.empty(0, dtype=np.uint8)
    arrays = decode_compacted_rows(empty, np.empty(0, np.int64), ALL_TYPES, columns=[4, 8])
    assert [a.type for a in arrays] == [pa.int32(), pa.string()] and len(arrays[0]) == 0
    assert decode_compacted_rows(np.zeros(4, np.uint8), np.array([0]), ALL_TYPES, []) == []
    batch = decode_kv_values([], lambda _: ALL_TYPES, ALL_TYPES)
    assert batch.schema == ALL_TYPES and batch.num_rows == 0


OLD = pa.schema([pa.field("id", pa.int64(), nullable=False), ("name", pa.string())])
NEW = pa.schema([pa.field("id", pa.int64(), nullable=False), ("name", pa.string()),
                 ("score", pa.float64())])


def test_rows_of_two_schema_ids_keep_their_order_and_miss_the_added_column():
    rows: list[tuple[int, list[Any]]] = [
        (1, [0, "a"]), (2, [1, "b", 1.5]), (1, [2, None]), (1, [3, "d"]),
        (2, [4, None, None]), (2, [5, "f", -2.0]), (1, [6, "g"])]
    values = [kv_value(sid, OLD if sid == 1 else NEW, row) for sid, row in rows]
    seen = []

    def schema_of(schema_id: int) -> pa.Schema:
        seen.append(schema_id)
        return {1: OLD, 2: NEW}[schema_id]

    batch = decode_kv_values(values, schema_of, NEW)
    assert sorted(seen) == [1, 2]                   # one look-up per schema id, not per row
    assert batch.schema == NEW
    assert batch.column("id").to_pylist() == [0, 1, 2, 3, 4, 5, 6]
    assert batch.column("name").to_pylist() == ["a", "b", None, "d", None, "f", "g"]
    assert batch.column("score").to_pylist() == [None, 1.5, None, None, None, -2.0, None]


def test_output_columns_are_matched_by_name_and_cast():
    row_schema = pa.schema([("ts", pa.timestamp("us")), ("id", pa.int32()), ("x", pa.string())])
    output = pa.schema([("id", pa.int64()), ("ts", pa.timestamp("us", tz="UTC")),
                        ("absent", pa.string())])
    values = [kv_value(9, row_schema, [1_704_067_200_123_456, 7, "skipped"]),
              kv_value(9, row_schema, [None, -1, None])]
    batch = decode_kv_values(values, lambda _: row_schema, output)
    assert batch.schema == output
    assert batch.column("id").to_pylist() == [7, -1]
    utc = dt.timezone.utc
    assert batch.column("ts").to_pylist() == [dt.datetime(2024, 1, 1, 0, 0, 0, 123456, utc),
                                              None]
    assert batch.column("absent").to_pylist() == [None, None]


def test_a_type_that_does_not_cast_is_unsupported():
    row_schema = pa.schema([("x", pa.binary())])
    output = pa.schema([("x", pa.decimal128(5, 2))])
    with pytest.raises(UnsupportedVersion, match="'x'"):
        decode_kv_values([kv_value(1, row_schema, [b"ab"])], lambda _: row_schema, output)


# ---- malformed bytes and unsupported types --------------------------------------------------

@pytest.mark.parametrize("seed", range(2))
def test_every_truncation_of_a_row_is_corrupt(seed):
    rng = random.Random(100 + seed)
    schema = ALL_TYPES
    [row] = random_rows(rng, schema, 1)
    full = kv_value(1, schema, row)
    after = kv_value(1, schema, random_rows(rng, schema, 1)[0])
    for cut in range(2, len(full)):
        # Alone (the end of the buffer) and followed by a good row (the end of the value).
        with pytest.raises(CorruptMessage, match="row 0"):
            decode_kv_values([full[:cut]], lambda _: schema, schema)
        with pytest.raises(CorruptMessage, match="row 1"):
            decode_kv_values([after, full[:cut], after], lambda _: schema, schema)


def test_truncation_names_the_row_and_the_column():
    schema = pa.schema([("id", pa.int64()), ("name", pa.string())])
    values = [kv_value(1, schema, [1, "abc"]), kv_value(1, schema, [2, "abcdef"])[:-1]]
    with pytest.raises(CorruptMessage, match=r"row 1, column 'name'.*truncated"):
        decode_kv_values(values, lambda _: schema, schema)
    with pytest.raises(CorruptMessage, match="shorter than its schema id"):
        decode_kv_values([values[0], b"\x01"], lambda _: schema, schema)


def test_row_ids_in_errors_are_input_positions_across_schema_ids():
    values = [kv_value(1, OLD, [0, "a"]), kv_value(2, NEW, [1, "b", 1.0]),
              kv_value(2, NEW, [2, "c", 2.0])[:-1]]
    with pytest.raises(CorruptMessage, match=r"row 2, column 'score'"):
        decode_kv_values(values, {1: OLD, 2: NEW}.__getitem__, NEW)


@pytest.mark.parametrize("schema, body, what", [
    (pa.schema([("l", pa.int64())]), b"\x00" + b"\xff" * 10 + b"\x01", "longer than 10"),
    (pa.schema([("i", pa.int32())]), b"\x00" + b"\xff" * 5 + b"\x01", "longer than 5"),
    (pa.schema([("s", pa.string())]), b"\x00" + varint(-1, 32), "negative length"),
    (pa.schema([("s", pa.string())]), b"\x00\x02\xc3\x28", "UTF-8"),
    (pa.schema([("b", pa.binary(4))]), b"\x00\x03abc", "3 bytes, not 4"),
    (pa.schema([("d", pa.decimal128(20, 0))]), b"\x00\x00", "decimal of 0 bytes"),
    (pa.schema([("d", pa.decimal128(38, 0))]), b"\x00\x11" + bytes(17), "decimal of 17"),
    (pa.schema([("t", pa.timestamp("ns"))]), b"\x00\x00" + varint(10**6, 32), "nanos"),
])
def test_malformed_fields_are_corrupt(schema, body, what):
    good = encode_row(schema, [None])
    with pytest.raises(CorruptMessage, match=what) as info:
        decode_kv_values([b"\x01\x00" + good, b"\x01\x00" + body], lambda _: schema, schema)
    assert f"row 1, column '{schema.field(0).name}'" in str(info.value)


@pytest.mark.parametrize("rows_after", [0, 1, 2])
def test_an_overlong_varint_names_its_own_row_when_the_column_has_no_nulls(rows_after):
    schema = pa.schema([("l", pa.int64())])
    good = kv_value(1, schema, [5])
    values = [good, b"\x01\x00\x00" + b"\xff" * 10 + b"\x01"] + [good] * rows_after
    with pytest.raises(CorruptMessage, match=r"row 1, column 'l' \(int64\): varint longer"):
        decode_kv_values(values, lambda _: schema, schema)


def test_nested_values_are_walked_past_unread_and_checked_when_read():
    schema = pa.schema([("id", pa.int32()), ("tags", pa.list_(pa.string())),
                        ("attrs", pa.struct([("k", pa.int32())])), ("name", pa.string())])
    # Their bytes are length-prefixed: a reader skipping them does not look inside.
    body = b"\x00" + varint(5, 32) + length_prefixed(b"\x01\x02\x03") + \
        length_prefixed(b"") + length_prefixed(b"x")
    buffer = np.frombuffer(body, dtype=np.uint8)
    ids, names = decode_compacted_rows(buffer, np.array([0]), schema, columns=[0, 3])
    assert ids.to_pylist() == [5] and names.to_pylist() == ["x"]
    with pytest.raises(CorruptMessage, match="'tags'.*shorter than its size"):
        decode_compacted_rows(buffer, np.array([0]), schema, columns=[1])
    attrs = pa.schema([schema.field("attrs")])
    with pytest.raises(CorruptMessage, match="'attrs'.*truncated"):
        decode_kv_values([b"\x01\x00" + body], lambda _: schema, attrs)


def test_types_without_a_compacted_layout_are_unsupported():
    schema = pa.schema([("u", pa.uint32()), ("x", pa.int32())])
    buffer = np.zeros(8, dtype=np.uint8)
    with pytest.raises(UnsupportedVersion, match=r"'u'.*uint32"):
        decode_compacted_rows(buffer, np.array([0]), schema, columns=[1])


def test_bad_arguments():
    with pytest.raises(ConfigError):
        decode_compacted_rows(np.zeros(4, np.int32), np.array([0]), OLD)
    with pytest.raises(ConfigError):
        decode_compacted_rows(np.zeros(4, np.uint8), np.array([0]), OLD, columns=[2])


# ---- throughput (run this file as a script; not a test) -------------------------------------

def throughput(n: int = 1_000_000) -> None:
    """Print rows/s of decoding n rows of (BIGINT, STRING of ~10 chars, INT, DOUBLE)."""
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("name", pa.string()),
                        ("i", pa.int32()), ("d", pa.float64())])
    rng = random.Random(0)
    values = [kv_value(1, schema, [k, None if k % 10 == 0 else f"name-{k % 100_000:05d}",
                                   rng.randint(-1000, 10**6), k * 0.5]) for k in range(n)]
    sizes = np.array([len(v) for v in values])
    buffer = np.frombuffer(b"".join(values), dtype=np.uint8)
    ends = np.cumsum(sizes)
    starts = ends - sizes + 2
    for label, run in (("decode_compacted_rows", lambda: decode_compacted_rows(
            buffer, starts, schema, ends=ends)),
                       ("decode_kv_values", lambda: decode_kv_values(
                           values, lambda _: schema, schema))):
        best = float("inf")
        for _ in range(3):
            began = time.perf_counter()
            run()
            best = min(best, time.perf_counter() - began)
        print(f"{label}: {n / best / 1e6:.2f} M rows/s ({best * 1000:.0f} ms for {n} rows)")


if __name__ == "__main__":
    throughput()
