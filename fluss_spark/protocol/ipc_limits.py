"""Bounded Arrow IPC decoding: rows and decoded bytes are checked from message headers first.

Every Arrow IPC payload that crosses the wire (a PRODUCE request on a tablet server, a
FETCH_LOG or SCAN_KV response on either client) is decoded here, under ``IpcLimits``: a
maximum decoded (uncompressed) size per record batch, and a maximum decoded size and row count
per payload (one request or one response). A compressed buffer announces its uncompressed
length in its first 8 bytes, and a record batch message announces its row count and its
buffers in its flatbuffer header, so a payload over a limit is refused (``RecordTooLarge``)
before a single buffer is decompressed: a 5 KB zstd stream announcing 20 million int64 zeros
costs what it weighs, not 160 MB.

The header is read with a few lines of flatbuffer parsing below because pyarrow exposes a
message's metadata only as raw bytes (``Message.metadata``): it offers no way to learn a record
batch's length or buffer sizes short of ``read_record_batch``, which decompresses everything.
pyarrow has verified the flatbuffer by the time it hands a message out; the parser still
bounds-checks every read.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any, Iterator, Mapping

import pyarrow as pa

from fluss_spark import config
from fluss_spark.errors import CorruptMessage, RecordTooLarge

_U8, _U16, _I32, _U32, _I64 = (struct.Struct(f) for f in ("<B", "<H", "<i", "<I", "<q"))

#: An encapsulated IPC message starts with this marker, then its metadata length.
_CONTINUATION = -1
# Message.fbs / Schema.fbs field ids (their order of declaration in the Arrow format; a union
# takes two: its type, then its value) and MessageHeader union types.
_MESSAGE_HEADER_TYPE, _MESSAGE_HEADER, _MESSAGE_BODY_LENGTH = 1, 2, 3
_DICTIONARY_BATCH, _RECORD_BATCH = 2, 3
_BATCH_LENGTH, _BATCH_NODES, _BATCH_BUFFERS, _BATCH_COMPRESSION = 0, 1, 2, 3
_DICTIONARY_DATA = 1
#: A compressed buffer's body starts with its uncompressed length; -1: stored uncompressed.
_UNCOMPRESSED = -1


@dataclass(frozen=True)
class IpcLimits:
    """What one Arrow IPC payload may make its reader allocate.

    ``max_batch_bytes``: decoded bytes of one record batch; ``max_total_bytes`` and
    ``max_rows``: decoded bytes and rows of one payload (a request or a response). The
    ``*_setting`` texts say how to raise each limit; refusals quote them.
    """

    max_batch_bytes: int = config.RPC_ARROW_MAX_BATCH_BYTES.default
    max_total_bytes: int = config.RPC_ARROW_MAX_REQUEST_BYTES.default
    max_rows: int = config.RPC_ARROW_MAX_REQUEST_ROWS.default
    batch_bytes_setting: str = "client limit IpcLimits.max_batch_bytes"
    total_bytes_setting: str = "client limit IpcLimits.max_total_bytes"
    rows_setting: str = "client limit IpcLimits.max_rows"

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> "IpcLimits":
        """A server's limits, from its parsed options (defaults for the ones not given)."""
        def get(opt: config.Option) -> Any:
            return options.get(opt.key, opt.default)
        return cls(get(config.RPC_ARROW_MAX_BATCH_BYTES), get(config.RPC_ARROW_MAX_REQUEST_BYTES),
                   get(config.RPC_ARROW_MAX_REQUEST_ROWS),
                   f"server option {config.RPC_ARROW_MAX_BATCH_BYTES.key}",
                   f"server option {config.RPC_ARROW_MAX_REQUEST_BYTES.key}",
                   f"server option {config.RPC_ARROW_MAX_REQUEST_ROWS.key}")


#: The clients' limits against what a server sends (the servers' defaults).
CLIENT_IPC_LIMITS = IpcLimits()


@dataclass(frozen=True)
class BatchBounds:
    """What decoding one record batch (or dictionary batch) message costs, from its header."""

    rows: int
    decoded_bytes: int
    longest_node: int     # the longest column or nested child, in values


class IpcBudget:
    """The rows and decoded bytes one payload has spent so far, refused past ``limits``.

    ``what`` names the payload in refusals (e.g. "PRODUCE to table db.t bucket 0").
    """

    def __init__(self, limits: IpcLimits, what: str = ""):
        self.limits, self.what = limits, what or "Arrow IPC payload"
        self.rows = self.decoded_bytes = self.batches = 0

    def admit_message(self, message: pa.ipc.Message) -> None:
        """Count one record batch or dictionary batch message from its header (RecordTooLarge
        past a limit, CorruptMessage for a header that does not parse)."""
        try:
            bounds = batch_bounds(message)
        except CorruptMessage as e:
            raise CorruptMessage(f"{self.what}: {e}") from None
        self.admit(bounds)

    def admit(self, bounds: BatchBounds) -> None:
        """Count one batch, or raise RecordTooLarge naming the limit it would break."""
        lim, index = self.limits, self.batches
        if bounds.decoded_bytes > lim.max_batch_bytes:
            self._refuse(f"record batch {index} decodes to {bounds.decoded_bytes:,} bytes, over "
                         f"the limit of {lim.max_batch_bytes:,} bytes per batch",
                         lim.batch_bytes_setting)
        if self.decoded_bytes + bounds.decoded_bytes > lim.max_total_bytes:
            self._refuse(f"record batches 0..{index} decode to "
                         f"{self.decoded_bytes + bounds.decoded_bytes:,} bytes, over the limit "
                         f"of {lim.max_total_bytes:,} bytes per payload", lim.total_bytes_setting)
        if self.rows + bounds.rows > lim.max_rows or bounds.longest_node > lim.max_rows:
            what = (f"record batches 0..{index} hold {self.rows + bounds.rows:,} rows"
                    if self.rows + bounds.rows > lim.max_rows else
                    f"record batch {index} has a column of {bounds.longest_node:,} values")
            self._refuse(f"{what}, over the limit of {lim.max_rows:,} rows per payload",
                         lim.rows_setting)
        self.rows += bounds.rows
        self.decoded_bytes += bounds.decoded_bytes
        self.batches += 1

    def _refuse(self, why: str, setting: str) -> None:
        raise RecordTooLarge(f"{self.what}: {why} ({setting} raises it)")


_ALIGNED = pa.ipc.IpcReadOptions(ensure_alignment=pa.ipc.Alignment.DataTypeSpecific)


def read_stream(data: bytes | bytearray | memoryview | pa.Buffer, limits: IpcLimits, *,
                what: str = "", validate: bool = False) -> pa.Table:
    """Decode an Arrow IPC stream within ``limits`` (RecordTooLarge past them, CorruptMessage
    for garbage).

    Every message header is checked before pyarrow decodes the stream; a payload within the
    limits decodes exactly as ``pa.ipc.open_stream(data).read_all()``. ``validate`` (servers
    reading what a client sent) checks every buffer too: the IPC reader checks the message
    layout only, and a string column whose offsets point outside its data would crash the
    process at its first use, not raise.
    """
    buf = data if isinstance(data, pa.Buffer) else pa.py_buffer(data)
    budget = IpcBudget(limits, what)
    try:
        for bounds in _stream_bounds(memoryview(buf)):
            budget.admit(bounds)
    except CorruptMessage as e:
        raise CorruptMessage(f"{budget.what}: {e}") from None
    try:
        # A payload read in place from a response frame may start at any byte: buffers that are
        # not aligned for their type are copied (compute kernels such as group_by warn about,
        # and may crash on, misaligned buffers); aligned ones are not.
        table = pa.ipc.open_stream(buf, options=_ALIGNED).read_all()
        if validate:
            table.validate(full=True)
        return table
    except (pa.ArrowInvalid, OSError, ValueError) as e:
        raise CorruptMessage(f"{what + ': ' if what else ''}undecodable Arrow IPC payload: "
                             f"{e}") from None


def read_batch_message(data: bytes | bytearray | memoryview, schema: pa.Schema,
                       budget: IpcBudget) -> pa.RecordBatch:
    """Decode one record batch message (no schema message before it) with ``schema``, after
    ``budget`` admitted it. pyarrow errors propagate (the caller names the batch)."""
    message = pa.ipc.read_message(pa.py_buffer(data))
    if message.type != "record batch":
        raise CorruptMessage(f"{budget.what}: expected an Arrow record batch message, got a "
                             f"{message.type} message")
    budget.admit_message(message)
    return pa.ipc.read_record_batch(message, schema)


def batch_bounds(message: pa.ipc.Message) -> BatchBounds:
    """Rows, decoded bytes and longest column of a record batch or dictionary batch message,
    read from its header and the 8-byte length prefixes of its compressed buffers."""
    body = memoryview(message.body) if message.body is not None else memoryview(b"")
    kind = _DICTIONARY_BATCH if message.type == "dictionary" else _RECORD_BATCH
    return _bounds(memoryview(message.metadata), kind, body)


def _stream_bounds(view: memoryview) -> Iterator[BatchBounds]:
    """The bounds of every record batch and dictionary batch of an IPC stream, read by walking
    its framing as pyarrow's stream reader does (continuation marker, metadata length, the
    flatbuffer ``Message``, ``bodyLength`` bytes of body), without decoding a buffer.

    Parsing the raw bytes instead of iterating pyarrow's ``MessageReader`` halves the cost of
    the check: it runs on every page a scan reads. The walk stops where pyarrow's reader stops
    (end-of-stream marker, end of data) and refuses what it cannot frame, so every message
    pyarrow decodes afterwards has been admitted.
    """
    pos, end = 0, len(view)
    try:
        while pos + 4 <= end:
            (size,) = _I32.unpack_from(view, pos)
            pos += 4
            if size == _CONTINUATION:
                (size,) = _I32.unpack_from(view, pos)
                pos += 4
            if size == 0:
                return
            if size < 0 or pos + size > end:
                raise CorruptMessage(f"Arrow IPC message of {size} metadata bytes at byte "
                                     f"{pos} overruns the {end}-byte payload")
            meta = view[pos:pos + size]
            pos += size
            root = _Table(meta, _U32.unpack_from(meta, 0)[0])
            kind = root.scalar(_MESSAGE_HEADER_TYPE, _U8, 0)
            body_length = root.scalar(_MESSAGE_BODY_LENGTH, _I64, 0)
            if body_length < 0 or pos + body_length > end:
                raise CorruptMessage(f"Arrow IPC message body of {body_length} bytes at byte "
                                     f"{pos} overruns the {end}-byte payload")
            body = view[pos:pos + body_length]
            pos += body_length
            if kind in (_RECORD_BATCH, _DICTIONARY_BATCH):
                yield _bounds(meta, kind, body, root)
    except (struct.error, IndexError) as e:
        raise CorruptMessage(f"Arrow IPC message header does not parse: {e}") from None


def _bounds(meta: memoryview, kind: int, body: memoryview,
            root: "_Table | None" = None) -> BatchBounds:
    """``batch_bounds`` of one message from its metadata flatbuffer and its body."""
    name = "dictionary" if kind == _DICTIONARY_BATCH else "record batch"
    try:
        if root is None:
            root = _Table(meta, _U32.unpack_from(meta, 0)[0])
        header = root.table(_MESSAGE_HEADER)
        if header is not None and kind == _DICTIONARY_BATCH:
            header = header.table(_DICTIONARY_DATA)
        if header is None:
            raise CorruptMessage(f"Arrow {name} message without its header")
        rows = header.scalar(_BATCH_LENGTH, _I64, 0)
        longest = max(header.pairs(_BATCH_NODES)[0::2], default=0)    # FieldNode: length, nulls
        compressed = header.table(_BATCH_COMPRESSION) is not None
        # Uncompressed buffers are slices of the body: decoding makes no more than the body.
        decoded = _compressed_decoded_size(header, body, name) if compressed else len(body)
    except (struct.error, IndexError) as e:
        raise CorruptMessage(f"Arrow {name} message header does not parse: {e}") from None
    if rows < 0 or longest < 0:
        raise CorruptMessage(f"Arrow {name} message announces a negative length")
    return BatchBounds(rows, decoded, max(rows, longest))


def _compressed_decoded_size(header: "_Table", body: memoryview, name: str) -> int:
    """Decoded bytes of a compressed batch's buffers, from their 8-byte length prefixes."""
    buffers = header.pairs(_BATCH_BUFFERS)
    decoded = 0
    for offset, length in zip(buffers[0::2], buffers[1::2]):
        if offset < 0 or length < 0 or offset + length > len(body):
            raise CorruptMessage(f"an Arrow buffer [{offset}, {offset}+{length}) of a {name} "
                                 f"message lies outside its body of {len(body)} bytes")
        if length == 0:
            continue
        if length < _I64.size:
            raise CorruptMessage(f"compressed Arrow buffer of {length} bytes is shorter than "
                                 "its length prefix")
        (size,) = _I64.unpack_from(body, offset)
        if size == _UNCOMPRESSED:
            decoded += length - _I64.size
        elif size < 0:
            raise CorruptMessage(f"compressed Arrow buffer announces {size} bytes")
        else:
            decoded += size
    return decoded


class _Table:
    """One flatbuffer table: fields by id through its vtable (absent fields: defaults).

    Positions only grow from a table's start, so a read past the end raises ``struct.error``;
    the one subtraction (the vtable's offset is signed) is checked, because ``unpack_from``
    would count a negative position from the end.
    """

    __slots__ = ("buf", "pos", "vtable", "vtable_size")

    def __init__(self, buf: memoryview, pos: int):
        vtable = pos - _I32.unpack_from(buf, pos)[0]
        if vtable < 0:
            raise IndexError(f"vtable at {vtable} is outside {len(buf)} bytes")
        self.buf, self.pos, self.vtable = buf, pos, vtable
        self.vtable_size = _U16.unpack_from(buf, vtable)[0]

    def _field(self, field_id: int) -> int | None:
        slot = 4 + 2 * field_id
        if slot + 2 > self.vtable_size:
            return None
        (offset,) = _U16.unpack_from(self.buf, self.vtable + slot)
        return self.pos + offset if offset else None

    def scalar(self, field_id: int, fmt: struct.Struct, default: int) -> int:
        pos = self._field(field_id)
        return default if pos is None else fmt.unpack_from(self.buf, pos)[0]

    def table(self, field_id: int) -> "_Table | None":
        pos = self._field(field_id)
        return None if pos is None else _Table(self.buf, pos + _U32.unpack_from(self.buf, pos)[0])

    def pairs(self, field_id: int) -> tuple[int, ...]:
        """A vector of 16-byte structs of two int64 (FieldNode, Buffer), flattened."""
        pos = self._field(field_id)
        if pos is None:
            return ()
        start = pos + _U32.unpack_from(self.buf, pos)[0]
        (count,) = _U32.unpack_from(self.buf, start)
        if start + 4 + count * 16 > len(self.buf):
            raise IndexError(f"vector of {count} entries overruns the header")
        return struct.unpack_from(f"<{2 * count}q", self.buf, start + 4)


__all__ = ["BatchBounds", "CLIENT_IPC_LIMITS", "IpcBudget", "IpcLimits", "batch_bounds",
           "read_batch_message", "read_stream"]
