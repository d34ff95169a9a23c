"""Arrow IPC payloads: record batches and schemas as bytes inside msgpack frames."""

from __future__ import annotations

from typing import Iterable

import pyarrow as pa

from fluss_spark.errors import CorruptMessage
from fluss_spark.protocol.ipc_limits import CLIENT_IPC_LIMITS, IpcLimits, read_stream


def serialize_schema(schema: pa.Schema) -> bytes:
    return schema.serialize().to_pybytes()


def deserialize_schema(data: bytes) -> pa.Schema:
    try:
        return pa.ipc.read_schema(pa.py_buffer(data))
    except (pa.ArrowInvalid, OSError) as e:
        raise CorruptMessage(f"undecodable Arrow schema: {e}") from None


def batches_to_bytes(schema: pa.Schema, batches: Iterable[pa.RecordBatch]) -> bytes:
    """Write batches as one Arrow IPC stream."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, schema) as writer:
        for batch in batches:
            writer.write_batch(batch)
    return sink.getvalue().to_pybytes()


def table_to_buffer(table: pa.Table | pa.RecordBatch) -> pa.Buffer:
    """One Arrow IPC stream in a pyarrow buffer (sent as is: no copy into ``bytes``)."""
    batches = [table] if isinstance(table, pa.RecordBatch) else table.to_batches()
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        for batch in batches:
            writer.write_batch(batch)
    return sink.getvalue()


def table_to_bytes(table: pa.Table | pa.RecordBatch) -> bytes:
    if isinstance(table, pa.RecordBatch):
        return batches_to_bytes(table.schema, [table])
    return batches_to_bytes(table.schema, table.to_batches())


def bytes_to_table(data: bytes | bytearray | memoryview, *, limits: IpcLimits = CLIENT_IPC_LIMITS,
                   what: str = "", validate: bool = False) -> pa.Table:
    """Read an Arrow IPC stream within ``limits`` (checked from the message headers before
    anything is decompressed: ``protocol.ipc_limits``); garbage raises CorruptMessage, a
    payload over a limit RecordTooLarge. ``what`` names the payload in errors.

    ``validate`` (servers reading what a client sent) checks every buffer too: the IPC reader
    checks the message layout only, and a string column whose offsets point outside its data
    would crash the process at its first use, not raise.
    """
    return read_stream(data, limits, what=what, validate=validate)
