"""KV snapshot files, write side (the format and its reader: ``protocol/snapshot_file.py``).

Layout in the snapshot store (a pyarrow filesystem URI or a plain local path)::

    <remote_data_dir>/<table_id>/<bucket>/snapshot-<snapshot_id>.arrow

A file is written under a temporary name and moved into place, so a reader never sees a
partial snapshot.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.fs as pafs

from fluss_spark.errors import StorageError
from fluss_spark.protocol.snapshot_file import (BATCH_ROWS, FORMAT_VERSION, VERSION_KEY,
                                                OlderSchemaSnapshot, SnapshotFile, resolve)
from fluss_spark.server.tablet import disk_full
from fluss_spark.server.tablet.files import fsync_path



@dataclass(frozen=True)
class WrittenSnapshot:
    """What a finished snapshot write produced."""

    path: str
    row_count: int
    size_bytes: int


def write_snapshot(batches, schema: pa.Schema, row_count: int, location: str, *, table_id: int,
                   bucket: int, snapshot_id: int, log_offset: int) -> WrittenSnapshot:
    """Write ``batches`` (key-ordered, ``row_count`` rows in all) to ``location`` atomically."""
    fs, path = resolve(location)
    parent = path.rsplit("/", 1)[0]
    tmp = f"{parent}/.{path.rsplit('/', 1)[1]}.tmp-{uuid.uuid4().hex[:8]}"
    meta = {VERSION_KEY: str(FORMAT_VERSION).encode(), b"table_id": str(table_id).encode(),
            b"bucket": str(bucket).encode(), b"snapshot_id": str(snapshot_id).encode(),
            b"log_offset": str(log_offset).encode(), b"row_count": str(row_count).encode(),
            b"batch_rows": str(BATCH_ROWS).encode()}
    file_schema = schema.with_metadata(meta)
    written = 0
    try:
        fs.create_dir(parent, recursive=True)
        with fs.open_output_stream(tmp) as out:
            with pa.ipc.new_file(out, file_schema) as writer:
                for batch in batches:
                    if batch.num_rows:
                        writer.write_batch(batch.replace_schema_metadata(meta))
                        written += batch.num_rows
        if written != row_count:
            raise StorageError(f"snapshot {snapshot_id} of table {table_id} bucket {bucket}: "
                               f"wrote {written} rows, expected {row_count}")
        if isinstance(fs, pafs.LocalFileSystem):
            fsync_path(tmp)
        fs.move(tmp, path)
        if isinstance(fs, pafs.LocalFileSystem):
            fsync_path(parent)
        size = fs.get_file_info(path).size
    except BaseException as e:
        try:
            fs.delete_file(tmp)
        except (OSError, pa.ArrowException):
            pass
        if isinstance(e, (OSError, pa.ArrowException)):
            disk_full.report(f"table {table_id} bucket {bucket}", location,
                             f"writing KV snapshot {snapshot_id} to", e)
            raise StorageError(f"writing snapshot {location} failed: {e}") from None
        raise
    return WrittenSnapshot(location, written, size or 0)


def delete_snapshot_file(location: str) -> None:
    """Remove a snapshot file (missing is fine)."""
    fs, path = resolve(location)
    try:
        fs.delete_file(path)
    except FileNotFoundError:
        pass


__all__ = ["BATCH_ROWS", "FORMAT_VERSION", "OlderSchemaSnapshot", "SnapshotFile", "VERSION_KEY",
           "WrittenSnapshot", "delete_snapshot_file", "write_snapshot"]
