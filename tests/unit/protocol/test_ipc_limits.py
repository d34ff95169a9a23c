"""Bounded Arrow IPC decoding: compression bombs are refused from their headers, by rows and by
decoded bytes, before anything is decompressed; normal payloads decode unchanged.

Memory is measured on Arrow's own allocator (``total_bytes_allocated`` counts every byte it
ever handed out, so its growth bounds the peak of a call); tracemalloc does not see it."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from fluss_spark.config import parse_server_options
from fluss_spark.errors import CorruptMessage, RecordTooLarge
from fluss_spark.protocol.arrow_ipc import bytes_to_table, table_to_bytes
from fluss_spark.protocol.ipc_limits import IpcBudget, IpcLimits, read_batch_message, read_stream

MB = 1 << 20


def ipc(table: pa.Table | pa.RecordBatch, compression: str | None = "zstd") -> bytes:
    sink = pa.BufferOutputStream()
    options = pa.ipc.IpcWriteOptions(compression=compression)
    batches = [table] if isinstance(table, pa.RecordBatch) else table.to_batches()
    with pa.ipc.new_stream(sink, table.schema, options=options) as writer:
        for batch in batches:
            writer.write_batch(batch)
    return sink.getvalue().to_pybytes()


def zeros(rows: int, dtype=np.int64, name: str = "x") -> pa.Table:
    return pa.table({name: pa.array(np.zeros(rows, dtype=dtype))})


@pytest.fixture(scope="module")
def bomb() -> bytes:
    """20 million int64 zeros, zstd: 160 MB decoded from a few KB."""
    data = ipc(zeros(20_000_000))
    assert len(data) < 64 * 1024
    return data


def arrow_allocated_during(fn) -> int:
    """Bytes Arrow's default pool handed out while ``fn`` ran (it raised or returned)."""
    pool = pa.default_memory_pool()
    before = pool.total_bytes_allocated()
    try:
        fn()
    except Exception:  # noqa: BLE001 - raised or returned, both count
        pass
    return pool.total_bytes_allocated() - before


def test_a_zstd_bomb_is_refused_by_decoded_bytes_without_decompressing(bomb):
    with pytest.raises(RecordTooLarge) as e:
        bytes_to_table(bomb)
    msg = str(e.value)
    assert "record batch 0 decodes to 160,000,000 bytes" in msg
    assert "67,108,864 bytes per batch" in msg and "IpcLimits.max_batch_bytes" in msg
    grown = arrow_allocated_during(lambda: bytes_to_table(bomb))
    assert grown < 4 * MB, f"decoding a refused bomb allocated {grown / MB:.0f} MB"


def test_an_lz4_bomb_is_refused_too():
    data = ipc(zeros(12_000_000), "lz4")
    assert len(data) < 1 * MB
    grown = arrow_allocated_during(lambda: bytes_to_table(data))
    with pytest.raises(RecordTooLarge, match="96,000,000 bytes"):
        bytes_to_table(data)
    assert grown < 4 * MB


def test_a_bomb_of_rows_is_refused_by_its_row_count():
    # 20 million booleans decode to 2.5 MB: only the row count refuses them.
    data = ipc(zeros(20_000_000, dtype=np.bool_))
    grown = arrow_allocated_during(lambda: bytes_to_table(data))
    with pytest.raises(RecordTooLarge, match=r"hold 20,000,000 rows, over the limit of "
                                             r"8,000,000 rows.*IpcLimits\.max_rows"):
        bytes_to_table(data)
    assert grown < 1 * MB


def test_many_small_batches_are_refused_by_the_payload_total():
    table = pa.concat_tables([zeros(4_000_000)] * 9)          # 9 batches of 32 MB: 288 MB
    data = ipc(table)
    limits = IpcLimits(max_rows=10**9)
    with pytest.raises(RecordTooLarge, match=r"record batches 0\.\.8 decode to 288,000,000 "
                                             r"bytes.*268,435,456 bytes per payload"):
        read_stream(data, limits)
    assert arrow_allocated_during(lambda: read_stream(data, limits)) < 4 * MB


def test_a_nested_column_longer_than_the_row_limit_is_refused():
    # One row whose list holds 9 million values: one row, few bytes, a 9-million-value child.
    values = pa.array(np.zeros(9_000_000, dtype=np.int8))
    column = pa.ListArray.from_arrays(pa.array([0, len(values)], pa.int32()), values)
    data = ipc(pa.table({"l": column}))
    with pytest.raises(RecordTooLarge, match="a column of 9,000,000 values"):
        bytes_to_table(data)


@pytest.mark.parametrize("compression", [None, "zstd", "lz4"])
def test_normal_payloads_decode_unchanged(compression):
    table = pa.table({
        "id": pa.array(np.arange(10_000, dtype=np.int64)),
        "name": pa.array([f"n{i}" for i in range(10_000)]),
        "tags": pa.array([[i, i + 1] for i in range(10_000)], pa.list_(pa.int32())),
        "kind": pa.array(["a", "b"] * 5_000).dictionary_encode(),
        "gone": pa.nulls(10_000),
    })
    data = ipc(table, compression)
    assert bytes_to_table(data).equals(table)
    assert read_stream(data, IpcLimits(), validate=True).equals(table)
    # At the limits exactly (rows, and the decoded size the headers announce), it still passes.
    assert read_stream(data, IpcLimits(max_rows=10_000 * 2)).num_rows == 10_000


def test_a_payload_just_over_a_configured_limit_is_refused_naming_the_server_option():
    table = zeros(1_000)                      # 8,000 bytes decoded
    limits = IpcLimits.from_options(parse_server_options([
        "rpc.arrow.max-decoded-batch-size=7999", "rpc.arrow.max-request-rows=1000"]))
    with pytest.raises(RecordTooLarge, match=r"PRODUCE to t: record batch 0 decodes to 8,000 "
                                             r"bytes.*server option rpc\.arrow\."
                                             r"max-decoded-batch-size raises it"):
        read_stream(ipc(table), limits, what="PRODUCE to t")
    ok = IpcLimits.from_options(parse_server_options(["rpc.arrow.max-decoded-batch-size=8000"]))
    assert read_stream(ipc(table), ok).equals(table)
    assert read_stream(table_to_bytes(table), ok).equals(table)


def test_server_defaults():
    limits = IpcLimits.from_options(parse_server_options([]))
    assert (limits.max_batch_bytes, limits.max_total_bytes, limits.max_rows) == (
        64 * MB, 256 * MB, 8_000_000)
    assert limits.rows_setting == "server option rpc.arrow.max-request-rows"


def test_one_message_at_a_time_shares_the_budget_of_its_response():
    batch = zeros(1_000).to_batches()[0]
    reader = pa.ipc.MessageReader.open_stream(ipc(batch))
    reader.read_next_message()
    message = reader.read_next_message().serialize().to_pybytes()
    budget = IpcBudget(IpcLimits(max_total_bytes=20_000), "FETCH_LOG response")
    assert read_batch_message(message, batch.schema, budget).equals(batch)
    assert read_batch_message(message, batch.schema, budget).equals(batch)
    with pytest.raises(RecordTooLarge, match=r"FETCH_LOG response: record batches 0\.\.2 "
                                             r"decode to 24,000 bytes"):
        read_batch_message(message, batch.schema, budget)


def test_garbage_and_lying_buffers_are_corrupt_not_crashes():
    with pytest.raises(CorruptMessage, match="Arrow IPC message of 1651663207 metadata bytes "
                                             "at byte 8 overruns the 74-byte payload"):
        bytes_to_table(b"\xff\xff\xff\xff" + b"garbage" * 10)
    with pytest.raises(CorruptMessage, match="Arrow IPC message body of 32 bytes at byte 296 "
                                             "overruns the 306-byte payload"):
        bytes_to_table(ipc(zeros(10))[:-30])
    reader = pa.ipc.MessageReader.open_stream(ipc(zeros(10)))
    reader.read_next_message()
    batch_alone = reader.read_next_message().serialize().to_pybytes()    # framed, no schema
    with pytest.raises(CorruptMessage, match="undecodable Arrow IPC payload"):
        bytes_to_table(batch_alone)
    data = bytearray(ipc(zeros(1_000)))
    # The first compressed buffer's 8-byte length prefix: make it announce -5 bytes.
    reader = pa.ipc.MessageReader.open_stream(bytes(data))
    schema_len = len(reader.read_next_message().serialize().to_pybytes())
    message = reader.read_next_message()
    body_start = schema_len + len(message.serialize().to_pybytes()) - message.body.size
    # The validity buffer is empty: the values buffer starts the body.
    data[body_start:body_start + 8] = (-5).to_bytes(8, "little", signed=True)
    with pytest.raises(CorruptMessage, match="compressed Arrow buffer announces -5 bytes"):
        bytes_to_table(bytes(data))


def test_a_payload_at_an_odd_address_decodes_to_aligned_buffers():
    # A segmented response's Arrow pages are read in place from the frame, at any byte; a
    # compute kernel (the PK fold's group_by) warns about misaligned buffers and may crash.
    table = pa.table({"k": pa.array(range(1000), pa.int64()), "v": pa.array([1.5] * 1000)})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    frame = bytearray(b"\x00" + sink.getvalue().to_pybytes())
    decoded = read_stream(memoryview(frame)[1:], IpcLimits())
    assert decoded.equals(table)
    for column in decoded.columns:
        for buf in column.chunks[0].buffers():
            assert buf is None or buf.address % 8 == 0
