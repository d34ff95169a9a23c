"""Apache Fluss log record batches built by hand (header, CRC-32C, Arrow IPC) and decoded."""

from __future__ import annotations

import datetime as dt
import struct

import pyarrow as pa
import pytest

from fluss_spark.errors import CorruptMessage
from fluss_spark.protocol.changelog import CHANGELOG_FIELDS
from fluss_spark.protocol.apache_fluss.log_batch import (_crc32c_table, crc32c, iter_batches,
                                                  parse_batch)
from fluss_spark.protocol.apache_fluss.table_json import (arrow_type, parse_table_json, table_json)
from tests.unit.fresh_process import fresh_output

WIRE = pa.schema([("id", pa.int64()), ("name", pa.string()), ("ts", pa.timestamp("ms"))])
SHOWN = pa.schema([pa.field("id", pa.int64(), nullable=False), ("name", pa.string()),
                   ("ts", pa.timestamp("ms", tz="UTC"))])


def arrow_message(batch: pa.RecordBatch, compression: str | None = "zstd") -> bytes:
    """The IPC record-batch message of ``batch`` (no schema message), as Fluss writes it."""
    sink = pa.BufferOutputStream()
    options = pa.ipc.IpcWriteOptions(compression=compression)
    with pa.ipc.new_stream(sink, batch.schema, options=options) as writer:
        writer.write_batch(batch)
    reader = pa.ipc.MessageReader.open_stream(sink.getvalue())
    reader.read_next_message()                  # the schema
    return reader.read_next_message().serialize().to_pybytes()


def make_batch(base_offset: int, rows: pa.RecordBatch, change_types: bytes | None, *,
               commit_ts: int = 1_700_000_000_123, magic: int = 1, schema_id: int = 1,
               compression: str | None = "zstd") -> bytes:
    """A record batch laid out as Fluss 0.9.1 does (little-endian header, CRC-32C)."""
    n = rows.num_rows
    payload = (change_types or b"") + arrow_message(rows, compression)
    attrs = 1 if change_types is None else 0
    tail = struct.pack("<hbiqii", schema_id, attrs, n - 1, -1, -1, n) + payload
    crc = crc32c(tail)
    if magic == 1:
        head = struct.pack("<bqiI", 1, commit_ts, 0, crc)
    else:
        head = struct.pack("<bqI", 0, commit_ts, crc)
    body = head + tail
    return struct.pack("<qi", base_offset, len(body)) + body


ROWS = pa.record_batch([pa.array([1, 2, 3], pa.int64()), pa.array(["a", None, "c"]),
                        pa.array([0, 1000, 2000], pa.timestamp("ms"))], schema=WIRE)


def test_crc32c_known_value_and_table_fallback_agree():
    assert crc32c(b"123456789") == 0xE3069283
    assert _crc32c_table(b"123456789") == 0xE3069283
    assert crc32c(b"") == 0


def test_header_fields_of_a_hand_made_batch():
    data = make_batch(100, ROWS, b"\x01\x03\x04")
    assert len(data) == 52 + 3 + len(arrow_message(ROWS))
    (batch,) = iter_batches(data)
    assert (batch.base_offset, batch.magic, batch.commit_timestamp, batch.schema_id,
            batch.record_count, batch.next_offset, batch.append_only) == \
        (100, 1, 1_700_000_000_123, 1, 3, 103, False)


def test_primary_key_batch_decodes_to_changelog_columns():
    (batch,) = iter_batches(make_batch(100, ROWS, b"\x01\x02\x04"))
    output = pa.schema(list(SHOWN) + list(CHANGELOG_FIELDS))
    out = batch.to_changelog(WIRE, output)
    assert out.schema == output
    utc = dt.timezone.utc
    commit = dt.datetime(2023, 11, 14, 22, 13, 20, 123000, tzinfo=utc)
    assert [tuple(r.values()) for r in out.to_pylist()] == [
        (1, "a", dt.datetime(1970, 1, 1, tzinfo=utc), "+I", 100, commit),
        (2, None, dt.datetime(1970, 1, 1, 0, 0, 1, tzinfo=utc), "-U", 101, commit),
        (3, "c", dt.datetime(1970, 1, 1, 0, 0, 2, tzinfo=utc), "-D", 102, commit),
    ]


def test_append_only_batch_uncompressed_magic_0_and_projection_by_name():
    data = make_batch(7, ROWS, None, magic=0, compression=None)
    (batch,) = iter_batches(data)
    assert (batch.magic, batch.append_only, batch.leader_epoch) == (0, True, -1)
    output = pa.schema([SHOWN.field("name"), SHOWN.field("id")] + list(CHANGELOG_FIELDS))
    out = batch.to_changelog(WIRE, output)
    assert out.column("name").to_pylist() == ["a", None, "c"]
    assert out.column("id").to_pylist() == [1, 2, 3]
    assert out.column("_change_type").to_pylist() == ["+A"] * 3
    assert out.column("_log_offset").to_pylist() == [7, 8, 9]


def test_several_batches_and_a_truncated_tail():
    first = make_batch(0, ROWS, b"\x01\x01\x01")
    second = make_batch(3, ROWS.slice(0, 2), b"\x03\x03")
    batches = list(iter_batches(first + second + second[:30]))
    assert [(b.base_offset, b.record_count) for b in batches] == [(0, 3), (3, 2)]


def test_crc_mismatch_is_refused_with_a_clear_error():
    data = bytearray(make_batch(0, ROWS, b"\x01\x01\x01"))
    data[-1] ^= 0xFF
    with pytest.raises(CorruptMessage, match=r"record batch at offset 0 is corrupt: stored "
                                             r"CRC-32C 0x[0-9a-f]{8}, computed 0x[0-9a-f]{8}"):
        list(iter_batches(bytes(data)))
    # Unchecked (as for projected batches, whose CRC Fluss does not recompute) it parses.
    assert [b.record_count for b in iter_batches(bytes(data), check_crc=False)] == [3]


def test_unknown_change_type_and_bad_magic_are_refused():
    (batch,) = iter_batches(make_batch(0, ROWS, b"\x01\x09\x01"))
    with pytest.raises(CorruptMessage, match=r"unknown change type byte\(s\) \[9\]"):
        batch.to_changelog(WIRE, pa.schema(list(SHOWN) + list(CHANGELOG_FIELDS)))
    data = bytearray(make_batch(0, ROWS, None))
    data[12] = 7
    with pytest.raises(CorruptMessage, match="magic 7"):
        list(iter_batches(bytes(data)))
    with pytest.raises(CorruptMessage, match="shorter than its header"):
        parse_batch(memoryview(bytes(data[:10])))


def test_wrong_schema_for_the_payload_is_refused():
    (batch,) = iter_batches(make_batch(0, ROWS, None))
    with pytest.raises(CorruptMessage, match="Arrow payload does not decode"):
        batch.arrow(pa.schema(list(WIRE) + [("extra", pa.int64())]))


def test_table_json_round_trip_and_types():
    schema = pa.schema([pa.field("id", pa.int64()), ("v", pa.string()),
                        ("amount", pa.decimal128(10, 2)), ("at", pa.timestamp("us", tz="UTC")),
                        ("local", pa.timestamp("ms")), ("d", pa.date32()),
                        ("tags", pa.list_(pa.int32()))])
    desc = parse_table_json(table_json(schema, primary_key=["id"], buckets=3,
                                       properties={"table.log.ttl": "1d"}))
    assert desc.primary_key == ("id",) and desc.bucket_key == ("id",)
    assert desc.bucket_count == 3 and desc.properties == {"table.log.ttl": "1d"}
    assert desc.schema.field("id") == pa.field("id", pa.int64(), nullable=False)
    assert [f.type for f in desc.schema][1:] == [f.type for f in schema][1:]
    assert desc.wire_schema.field("at").type == pa.timestamp("us")
    assert arrow_type({"type": "TIMESTAMP_WITH_LOCAL_TIME_ZONE", "precision": 3}) == \
        pa.timestamp("ms", tz="UTC")
    assert arrow_type({"type": "BINARY", "length": 4}) == pa.binary(4)
    assert arrow_type({"type": "TIME_WITHOUT_TIME_ZONE", "precision": 6}) == pa.time64("us")


def test_importing_the_client_and_decoding_a_batch_leave_pandas_unimported(tmp_path):
    """pyarrow imports pandas on its first ``pa.array`` (0.35 s in a fresh process): the Apache
    Fluss client's import and a log batch's decoding build their arrays from buffers instead."""
    (tmp_path / "batch").write_bytes(make_batch(100, ROWS, b"\x01\x02\x04"))
    (tmp_path / "schema").write_bytes(WIRE.serialize().to_pybytes())
    code = f"""
import sys, pyarrow as pa
import fluss_spark.client.apache_fluss
from fluss_spark.protocol.apache_fluss.log_batch import iter_batches
from fluss_spark.protocol.changelog import CHANGELOG_FIELDS
wire = pa.ipc.read_schema(pa.py_buffer(open({str(tmp_path / "schema")!r}, "rb").read()))
(batch,) = iter_batches(open({str(tmp_path / "batch")!r}, "rb").read())
out = batch.to_changelog(wire, pa.schema(list(wire) + list(CHANGELOG_FIELDS)))
assert out.num_rows == 3 and out.column("_log_offset").to_pylist() == [100, 101, 102]
print("pandas" in sys.modules)
"""
    assert fresh_output(code).strip() == "False"


def test_every_fluss_type_node_has_the_arrow_type_fluss_writes_in_log_batches():
    ltz9 = {"type": "TIMESTAMP_WITH_LOCAL_TIME_ZONE", "precision": 9}
    node = {"type": "ROW", "fields": [
        {"name": "c", "field_type": {"type": "CHAR", "length": 3}},
        {"name": "m", "field_type": {"type": "MAP", "key_type": {"type": "STRING",
                                                                  "nullable": False},
                                     "value_type": {"type": "ARRAY", "element_type": ltz9}}}]}
    shown, wire = arrow_type(node), arrow_type(node, wire=True)
    assert shown == pa.struct([("c", pa.string()), ("m", pa.map_(
        pa.field("key", pa.string(), nullable=False),
        pa.list_(pa.field("element", pa.timestamp("ns", tz="UTC")))))])
    assert wire.field("m").type.item_type == pa.list_(pa.timestamp("ns"))
    for precision, t in [(0, pa.time32("s")), (3, pa.time32("ms")), (4, pa.time64("us")),
                         (9, pa.time64("ns"))]:
        assert arrow_type({"type": "TIME_WITHOUT_TIME_ZONE", "precision": precision}) == t
    for precision, unit in [(0, "s"), (1, "ms"), (3, "ms"), (5, "us"), (6, "us"), (7, "ns")]:
        assert arrow_type({"type": "TIMESTAMP_WITHOUT_TIME_ZONE",
                           "precision": precision}) == pa.timestamp(unit)
    assert arrow_type({"type": "DECIMAL", "precision": 38, "scale": 38}) == \
        pa.decimal128(38, 38)


def test_nested_columns_of_a_log_batch_decode_and_take_the_shown_time_zone():
    inner = pa.struct([("at", pa.timestamp("ns")), ("tags", pa.map_(pa.string(), pa.int32()))])
    wire = pa.schema([("id", pa.int64()), ("rows", pa.list_(inner)), ("b", pa.binary(2)),
                      ("t", pa.time32("ms"))])
    shown_inner = pa.struct([("at", pa.timestamp("ns", "UTC")),
                             ("tags", pa.map_(pa.string(), pa.int32()))])
    shown = pa.schema([("id", pa.int64()), ("rows", pa.list_(shown_inner)),
                       ("b", pa.binary(2)), ("t", pa.time32("ms"))])
    values = [[{"at": -1, "tags": [("k", 1)]}, None], [], None]
    rows = pa.record_batch([pa.array([1, 2, 3], pa.int64()), pa.array(values, pa.list_(inner)),
                            pa.array([b"ab", None, b"\x00\x00"], pa.binary(2)),
                            pa.array([0, 86_399_999, None], pa.time32("ms"))], schema=wire)
    (batch,) = iter_batches(make_batch(0, rows, None))
    out = batch.to_changelog(wire, pa.schema(list(shown) + list(CHANGELOG_FIELDS)))
    assert out.column("rows").type == shown.field("rows").type
    assert out.column("rows").cast(pa.list_(pa.struct([
        ("at", pa.int64()), ("tags", pa.map_(pa.string(), pa.int32()))]))).to_pylist() == values
    assert out.column("b").to_pylist() == [b"ab", None, b"\x00\x00"]
    assert out.column("t").cast(pa.int32()).to_pylist() == [0, 86_399_999, None]
