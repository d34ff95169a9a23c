"""Apache Fluss log record batches (FETCH_LOG ``records``) decoded into changelog Arrow batches.

A batch is a little-endian header, then (unless the batch is append-only) one change-type byte
per record, then one Arrow IPC record-batch message (no schema; its buffers usually ZSTD
compressed, which pyarrow undoes). Header of magic 1 (magic 0 lacks ``leader_epoch``)::

    offset  size  field
     0      8     base_offset          first log offset of the batch
     8      4     length               bytes after this field (batch size - 12)
    12      1     magic                1 (0: the pre-0.7 layout)
    13      8     commit_timestamp     ms, set by the leader on append
    21      4     leader_epoch
    25      4     crc                  CRC-32C of every byte from schema_id to the batch end
    29      2     schema_id
    31      1     attributes           bit 0: append-only (no change-type bytes)
    32      4     last_offset_delta    last offset = base_offset + last_offset_delta
    36      8     writer_id
    44      4     batch_sequence
    48      4     record_count
    52            change types (record_count bytes), then the Arrow message
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Callable, Iterator

import numpy as np
import pyarrow as pa

from fluss_spark.errors import CorruptMessage
from fluss_spark.protocol.arrow_arrays import fixed_width, strings
from fluss_spark.protocol.changelog import (APPEND, CHANGELOG_FIELDS, DELETE, INSERT,
                                            UPDATE_AFTER, UPDATE_BEFORE)
from fluss_spark.protocol.ipc_limits import CLIENT_IPC_LIMITS, IpcBudget, read_batch_message

_crc32c_native: Callable[[bytes], int] | None
try:
    from google_crc32c import value as _crc32c_native
except ImportError:  # pragma: no cover - google-crc32c is a declared dependency
    _crc32c_native = None

#: Change-type byte -> this project's change type (Fluss's ``ChangeType`` byte values).
CHANGE_TYPES = (APPEND, INSERT, UPDATE_BEFORE, UPDATE_AFTER, DELETE)
_CHANGE_TYPE_LABELS = strings(CHANGE_TYPES)

MAGIC_V0, MAGIC_V1 = 0, 1
APPEND_ONLY_FLAG = 0x01
#: Bytes before the length field's end: ``base_offset`` and ``length``.
LOG_OVERHEAD = 12

_PREFIX = struct.Struct("<qib")        # base_offset, length, magic
_V1 = struct.Struct("<qibqiIhbiqii")   # the whole magic-1 header
_V0 = struct.Struct("<qibqIhbiqii")    # the whole magic-0 header
HEADER_SIZE = {MAGIC_V1: _V1.size, MAGIC_V0: _V0.size}
#: Where the CRC and the bytes it covers (from schema_id on) start.
CRC_OFFSET = {MAGIC_V1: 25, MAGIC_V0: 21}
SCHEMA_ID_OFFSET = {MAGIC_V1: 29, MAGIC_V0: 25}

_TS = CHANGELOG_FIELDS[2].type


def crc32c(data: bytes | bytearray | memoryview) -> int:
    """CRC-32C (Castagnoli) of ``data``."""
    if _crc32c_native is not None:
        # google-crc32c takes bytes only (not a memoryview): the copy of a batch costs far less
        # than the table-driven fallback.
        return int(_crc32c_native(data if isinstance(data, bytes) else bytes(data)))
    return _crc32c_table(bytes(data))


def _make_table() -> list[int]:
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _make_table()


def _crc32c_table(data: bytes) -> int:
    """Table-driven CRC-32C: a fallback about 100 times slower than ``google-crc32c``."""
    crc = 0xFFFFFFFF
    table = _TABLE
    for b in data:
        crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


@dataclass(frozen=True)
class LogRecordBatch:
    """One record batch of a FETCH_LOG response: its header fields and its bytes."""

    base_offset: int
    magic: int
    commit_timestamp: int
    leader_epoch: int
    crc: int
    schema_id: int
    attributes: int
    last_offset_delta: int
    writer_id: int
    batch_sequence: int
    record_count: int
    data: memoryview

    @property
    def size(self) -> int:
        return len(self.data)

    @property
    def append_only(self) -> bool:
        return bool(self.attributes & APPEND_ONLY_FLAG)

    @property
    def next_offset(self) -> int:
        """The offset after this batch (batches without records still advance it)."""
        return self.base_offset + self.last_offset_delta + 1

    def computed_crc(self) -> int:
        return crc32c(self.data[SCHEMA_ID_OFFSET[self.magic]:])

    def check_crc(self) -> None:
        computed = self.computed_crc()
        if computed != self.crc:
            raise CorruptMessage(f"record batch at offset {self.base_offset} is corrupt: stored "
                                 f"CRC-32C {self.crc:#010x}, computed {computed:#010x}")

    def change_type_bytes(self) -> np.ndarray:
        """The change-type byte of every record (all 0, append, for an append-only batch)."""
        if self.append_only:
            return np.zeros(self.record_count, dtype=np.int8)
        start = HEADER_SIZE[self.magic]
        return np.frombuffer(self.data[start:start + self.record_count], dtype=np.int8)

    def arrow(self, schema: pa.Schema, budget: IpcBudget | None = None) -> pa.RecordBatch:
        """The batch's records as Arrow, decoded with ``schema``: the table's (projected)
        columns in table order, typed as Fluss writes them (``arrow_wire_schema``).

        ``budget``: the response's limits (by default one of its own with the client's limits);
        a batch over them is refused (RecordTooLarge) from its header, before decompression."""
        start = HEADER_SIZE[self.magic] + (0 if self.append_only else self.record_count)
        if budget is None:
            budget = IpcBudget(CLIENT_IPC_LIMITS, f"record batch at offset {self.base_offset}")
        try:
            batch = read_batch_message(self.data[start:], schema, budget)
        except (pa.ArrowInvalid, OSError) as e:
            raise CorruptMessage(f"record batch at offset {self.base_offset}: Arrow payload "
                                 f"does not decode with schema {schema}: {e}") from None
        if batch.num_rows != self.record_count:
            raise CorruptMessage(f"record batch at offset {self.base_offset} declares "
                                 f"{self.record_count} records but holds {batch.num_rows}")
        return batch

    def to_changelog(self, wire_schema: pa.Schema, output: pa.Schema,
                     budget: IpcBudget | None = None) -> pa.RecordBatch:
        """Records as ``output``: its table columns (taken by name from the payload decoded
        with ``wire_schema`` within ``budget``, cast to the output type; null where the batch's
        schema predates the column), then
        ``_change_type``, ``_log_offset`` and ``_commit_timestamp``."""
        raw = self.arrow(wire_schema, budget)
        n = raw.num_rows
        table_fields = list(output)[:len(output) - len(CHANGELOG_FIELDS)]
        columns = []
        for field in table_fields:
            at = raw.schema.get_field_index(field.name)
            if at < 0:     # the batch's schema is older than the column (ADD COLUMN): null
                columns.append(pa.nulls(n, field.type))
                continue
            column = raw.column(at)
            columns.append(column if column.type == field.type else column.cast(field.type))
        codes = self.change_type_bytes()
        if n and (codes.min() < 0 or codes.max() >= len(CHANGE_TYPES)):
            bad = sorted(set(int(c) for c in codes if not 0 <= c < len(CHANGE_TYPES)))
            raise CorruptMessage(f"record batch at offset {self.base_offset} has unknown change "
                                 f"type byte(s) {bad}")
        columns.append(_CHANGE_TYPE_LABELS.take(fixed_width(codes, pa.int8())))
        columns.append(fixed_width(np.arange(self.base_offset, self.base_offset + n,
                                             dtype=np.int64), pa.int64()))
        columns.append(fixed_width(np.full(n, self.commit_timestamp, dtype=np.int64), _TS))
        return pa.RecordBatch.from_arrays(columns, schema=output)


def parse_batch(view: memoryview) -> LogRecordBatch:
    """The batch that fills ``view`` exactly."""
    if len(view) < _PREFIX.size:
        raise CorruptMessage(f"record batch of {len(view)} bytes is shorter than its header")
    magic = view[12]
    if magic == MAGIC_V1:
        if len(view) < _V1.size:
            raise CorruptMessage(f"record batch of {len(view)} bytes is shorter than its header")
        (base, _, _, ts, epoch, crc, schema_id, attrs, delta, writer, seq,
         count) = _V1.unpack_from(view)
    elif magic == MAGIC_V0:
        if len(view) < _V0.size:
            raise CorruptMessage(f"record batch of {len(view)} bytes is shorter than its header")
        (base, _, _, ts, crc, schema_id, attrs, delta, writer, seq,
         count) = _V0.unpack_from(view)
        epoch = -1
    else:
        raise CorruptMessage(f"record batch magic {magic} is not 0 or 1")
    if count < 0 or (not attrs & APPEND_ONLY_FLAG and HEADER_SIZE[magic] + count > len(view)):
        raise CorruptMessage(f"record batch at offset {base} declares {count} records, more than "
                             "its size holds")
    return LogRecordBatch(base, magic, ts, epoch, crc, schema_id, attrs, delta, writer, seq,
                          count, view)


def iter_batches(records: bytes | bytearray | memoryview, *,
                 check_crc: bool = True) -> Iterator[LogRecordBatch]:
    """The complete batches of a FETCH_LOG ``records`` field, in order; a truncated batch at the
    end (a fetch cut at its byte limit) is not returned. ``check_crc``: refuse a batch whose
    CRC-32C does not match (``CorruptMessage``)."""
    view = memoryview(records)
    pos, end = 0, len(view)
    while end - pos >= _PREFIX.size:
        base, length, magic = _PREFIX.unpack_from(view, pos)
        size = LOG_OVERHEAD + length
        if magic not in HEADER_SIZE or size < HEADER_SIZE[magic]:
            raise CorruptMessage(f"record batch at offset {base}: magic {magic}, size {size}: "
                                 "not a Fluss record batch")
        if pos + size > end:
            return
        batch = parse_batch(view[pos:pos + size])
        if check_crc:
            batch.check_crc()
        yield batch
        pos += size


__all__ = ["APPEND_ONLY_FLAG", "CHANGE_TYPES", "HEADER_SIZE", "LogRecordBatch", "MAGIC_V0",
           "MAGIC_V1", "crc32c", "iter_batches", "parse_batch"]
