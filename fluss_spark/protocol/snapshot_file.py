"""KV snapshot files of this project's tablet servers, read side: an immutable, key-ordered Arrow
IPC file per (table, bucket, snapshot id), opened by the servers' scan sessions and, on the
tablet's own host, by the client itself (a short-circuit read, ``client/embedded/kv_scanner.py``).

The file holds the table columns only, in primary-key order, in batches of ``BATCH_ROWS`` rows.
Its schema metadata describes it (file format versions: 1, the first)::

    fluss.snapshot.version  "1"
    table_id, bucket, snapshot_id, log_offset, row_count, batch_rows   (decimal strings)

``server/tablet/snapshot.py`` writes them.
"""

from __future__ import annotations

import bisect
import os

import pyarrow as pa
import pyarrow.fs as pafs

from fluss_spark.errors import KvSnapshotNotExist, StorageError
from fluss_spark.protocol.schema_change import conform

FORMAT_VERSION = 1
BATCH_ROWS = 16384
VERSION_KEY = b"fluss.snapshot.version"


def resolve(path_or_uri: str) -> tuple[pafs.FileSystem, str]:
    """The filesystem and in-filesystem path of a URI (``s3://...``) or local path."""
    if "://" in path_or_uri:
        try:
            return pafs.FileSystem.from_uri(path_or_uri)
        except (pa.ArrowInvalid, OSError, ValueError) as e:
            raise StorageError(f"cannot open snapshot store {path_or_uri!r}: {e}") from None
    return pafs.LocalFileSystem(), os.path.abspath(path_or_uri)


#: Ends an Arrow IPC stream: continuation marker, then a zero metadata length.
_END_OF_STREAM = pa.py_buffer(b"\xff\xff\xff\xff\x00\x00\x00\x00")
#: An Arrow IPC file starts with this magic, padded to 8 bytes, before its stream of messages.
_FILE_PREAMBLE = 8


def _message_blocks(source: pa.MemoryMappedFile,
                    batches: int) -> tuple[pa.Buffer, list[tuple[int, int]]] | None:
    """The whole mapped file and the byte range of each record batch message in it (read from
    the messages' own headers: bodies are not touched), or None if the file holds anything but
    one schema and ``batches`` record batches (a batch served raw must be self-contained)."""
    source.seek(0)
    whole = source.read_buffer()
    reader = pa.BufferReader(whole)
    reader.seek(_FILE_PREAMBLE)
    messages = pa.ipc.MessageReader.open_stream(reader)
    blocks: list[tuple[int, int]] = []
    at = _FILE_PREAMBLE
    try:
        while len(blocks) < batches:
            message = messages.read_next_message()
            end = reader.tell()
            if message.type == "record batch":
                blocks.append((at, end))
            elif message.type != "schema":
                return None
            at = end
    except (StopIteration, pa.ArrowInvalid, OSError):
        return None
    return whole, blocks


class SnapshotFile:
    """Random access by row into a snapshot file (memory-mapped when local)."""

    def __init__(self, location: str, reader: pa.ipc.RecordBatchFileReader, source, size: int):
        self.location = location
        self._reader = reader
        self._source = source
        self.size_bytes = size
        meta = reader.schema.metadata or {}
        if VERSION_KEY not in meta:
            raise StorageError(f"{location} is not a KV snapshot file (no {VERSION_KEY.decode()})")
        version = int(meta[VERSION_KEY])
        if version > FORMAT_VERSION:
            raise StorageError(f"snapshot {location} has format version {version}, newer than "
                               f"this software understands ({FORMAT_VERSION}); upgrade fluss_spark")
        self.table_id = int(meta[b"table_id"])
        self.bucket = int(meta[b"bucket"])
        self.snapshot_id = int(meta[b"snapshot_id"])
        self.log_offset = int(meta[b"log_offset"])
        self.num_rows = int(meta[b"row_count"])
        self.schema: pa.Schema = reader.schema.remove_metadata()
        n = reader.num_record_batches
        starts, row = [], 0
        for i in range(n):
            starts.append(row)
            # Reading a batch of a memory-mapped file only touches its metadata.
            row += reader.get_batch(i).num_rows
        self._starts = starts
        if row != self.num_rows:
            raise StorageError(f"snapshot {location} holds {row} rows but says {self.num_rows}")
        self._pages = _message_blocks(source, n) if isinstance(source, pa.MemoryMappedFile) \
            else None
        self._schema_message = self.schema.serialize()

    @property
    def batch_starts(self) -> list[int]:
        """The first row of each record batch of the file."""
        return self._starts

    def raw_pages(self, first: int, last: int) -> list[pa.Buffer] | None:
        """Record batches ``[first, last)`` as one Arrow IPC stream, in pieces: the schema, the
        batches' messages as they lie in the memory-mapped file (no copy, no re-encoding),
        end of stream. None when the file is not memory-mapped."""
        if self._pages is None:
            return None
        whole, blocks = self._pages
        lo, hi = blocks[first][0], blocks[last - 1][1]
        return [self._schema_message, whole.slice(lo, hi - lo), _END_OF_STREAM]

    def raw_size(self, first: int, last: int) -> int | None:
        """Bytes of ``raw_pages(first, last)`` without the schema and end marker."""
        if self._pages is None:
            return None
        blocks = self._pages[1]
        return blocks[last - 1][1] - blocks[first][0]

    @classmethod
    def open_local(cls, path: str) -> "SnapshotFile":
        """A local snapshot file, memory-mapped; OSError when it cannot be opened, StorageError
        when it is not a snapshot file."""
        source = pa.memory_map(path, "r")
        try:
            return cls(path, pa.ipc.open_file(source), source, source.size())
        except pa.ArrowInvalid as e:
            source.close()
            raise StorageError(f"{path} is not a readable KV snapshot file: {e}") from None
        except BaseException:
            source.close()
            raise

    @classmethod
    def open(cls, path_or_uri: str) -> "SnapshotFile":
        fs, path = resolve(path_or_uri)
        try:
            if isinstance(fs, pafs.LocalFileSystem):
                source = pa.memory_map(path, "r")
            else:
                source = fs.open_input_file(path)
            size = source.size()
            reader = pa.ipc.open_file(source)
        except FileNotFoundError:
            raise KvSnapshotNotExist(f"snapshot file {path_or_uri} does not exist") from None
        except (OSError, pa.ArrowInvalid) as e:
            raise StorageError(f"cannot read snapshot file {path_or_uri}: {e}") from None
        return cls(path_or_uri, reader, source, size)

    @property
    def avg_row_bytes(self) -> float:
        return self.size_bytes / self.num_rows if self.num_rows else 0.0

    def read_slice(self, start_row: int, num_rows: int,
                   columns: list[str] | None = None) -> pa.Table:
        """Rows [start_row, start_row + num_rows) (clipped to the file), projected."""
        if start_row < 0 or num_rows < 0:
            raise ValueError(f"bad slice start={start_row} rows={num_rows}")
        end = min(start_row + num_rows, self.num_rows)
        schema = (self.schema if columns is None
                  else pa.schema([self.schema.field(c) for c in columns]))
        if start_row >= end:
            return schema.empty_table()
        parts = []
        i = bisect.bisect_right(self._starts, start_row) - 1
        while i < len(self._starts) and self._starts[i] < end:
            batch = self._reader.get_batch(i)
            lo = max(start_row - self._starts[i], 0)
            hi = min(end - self._starts[i], batch.num_rows)
            part = batch.slice(lo, hi - lo)
            if columns is not None:
                part = part.select(columns)
            parts.append(part.replace_schema_metadata(None))
            i += 1
        return pa.Table.from_batches(parts, schema=schema)

    def close(self) -> None:
        try:
            self._source.close()
        except (OSError, AttributeError):
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class OlderSchemaSnapshot:
    """A snapshot file written under an older schema of its table, read as the table's current
    schema: the columns added since read as null (never served as raw pages)."""

    def __init__(self, snapshot: SnapshotFile, schema: pa.Schema):
        self._file = snapshot
        self.schema = schema
        self.snapshot_id = snapshot.snapshot_id
        self.log_offset = snapshot.log_offset
        self.num_rows = snapshot.num_rows
        self.avg_row_bytes = snapshot.avg_row_bytes

    def read_slice(self, start_row: int, num_rows: int,
                   columns: list[str] | None = None) -> pa.Table:
        wanted = self.schema if columns is None else pa.schema([self.schema.field(c)
                                                               for c in columns])
        have = [c for c in wanted.names if c in self._file.schema.names]
        return conform(self._file.read_slice(start_row, num_rows, have), wanted)

    def close(self) -> None:
        self._file.close()


__all__ = ["BATCH_ROWS", "FORMAT_VERSION", "OlderSchemaSnapshot", "SnapshotFile", "VERSION_KEY",
           "resolve"]
