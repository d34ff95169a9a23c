"""Reading the log segments of an Apache Fluss bucket that were moved to remote storage.

Fluss keeps only the newest ``table.log.tiered.local-segments`` segments of a bucket on its
tablet server; older ones are copied to ``remote.data.dir`` and deleted locally. A FETCH_LOG at
such an offset answers with no records and a remote log fetch info instead: the bucket's remote
log directory, the remote segments from the one that holds the offset on (each with its id and
its start and end offsets, the end exclusive) and the byte position, in the first listed
segment, of the batch that holds the offset. A segment is one file, the local segment file as
it was: record batches back to back, the same bytes a FETCH_LOG ``records`` field holds::

    <remote log tablet dir>/<segment id>/<start offset, 20 digits>.log

A segment is read in chunks (memory: a chunk plus the largest batch), from its start position,
and each batch's CRC-32C is checked, as for a fetched batch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import pyarrow.fs as pafs

from fluss_spark.client.remote_storage import RemoteStorage, filesystem
from fluss_spark.errors import CorruptMessage, LogOffsetOutOfRange
from fluss_spark.protocol.apache_fluss.log_batch import LogRecordBatch, iter_batches
from fluss_spark.protocol.apache_fluss.messages import PbRemoteLogFetchInfo

#: Bytes read from a segment file at a time.
CHUNK_BYTES = 4 << 20


@dataclass(frozen=True)
class RemoteSegment:
    """One remote segment to read: offsets ``[start_offset, end_offset)``, from byte
    ``position`` of its file on."""

    segment_id: str
    start_offset: int
    end_offset: int
    position: int = 0

    def path(self, tablet_dir: str) -> str:
        """The segment's file under the bucket's remote log directory."""
        return f"{tablet_dir.rstrip('/')}/{self.segment_id}/{self.start_offset:020d}.log"


def segments_to_read(info: PbRemoteLogFetchInfo, offset: int) -> list[RemoteSegment]:
    """The listed segments that hold ``offset`` and what follows it, in offset order, up to the
    first gap (what is after a gap is fetched again later).

    The start position Fluss sent belongs to the first segment of its list; every other segment
    is read from its beginning. Raises LogOffsetOutOfRange when no listed segment holds
    ``offset``: those records are gone from remote storage too."""
    listed = info.remote_log_segments
    first_id = listed[0].remote_log_segment_id if listed else None
    ordered = sorted(listed, key=lambda s: s.remote_log_start_offset)
    plan: list[RemoteSegment] = []
    at = offset
    for s in ordered:
        if s.remote_log_end_offset <= at:
            continue
        if s.remote_log_start_offset > at:
            break
        position = (info.first_start_pos or 0) if s.remote_log_segment_id == first_id else 0
        plan.append(RemoteSegment(s.remote_log_segment_id, s.remote_log_start_offset,
                                  s.remote_log_end_offset, max(0, position)))
        at = s.remote_log_end_offset
    if not plan:
        spans = ", ".join(f"[{s.remote_log_start_offset}, {s.remote_log_end_offset})"
                          for s in ordered) or "none"
        raise LogOffsetOutOfRange(f"offset {offset} is in no remote log segment of "
                                  f"{info.remote_log_tablet_dir} (segments: {spans})")
    return plan


def read_segment(fs: pafs.FileSystem, path: str, position: int = 0, *,
                 chunk_bytes: int = CHUNK_BYTES) -> Iterator[LogRecordBatch]:
    """The record batches of one segment file from byte ``position`` on, CRC-checked, read
    ``chunk_bytes`` at a time. A batch cut short by the end of the file is refused."""
    with fs.open_input_file(path) as f:
        f.seek(position)
        pending = b""
        at = position
        while True:
            chunk = f.read(chunk_bytes)
            if not chunk:
                break
            # A new bytes object per chunk: batches yielded before stay valid.
            buf = pending + chunk if pending else chunk
            used = 0
            for batch in iter_batches(buf, check_crc=True):
                used += batch.size
                yield batch
            at += used
            pending = buf[used:]
        if pending:
            raise CorruptMessage(f"remote log segment {path} ends with an incomplete record "
                                 f"batch at byte {at} ({len(pending)} bytes)")


def remote_batches(info: PbRemoteLogFetchInfo, offset: int, where: str, *,
                   chunk_bytes: int = CHUNK_BYTES,
                   storage: RemoteStorage = RemoteStorage()) -> Iterator[LogRecordBatch]:
    """The batches of the remote segments of ``info``, from the one holding ``offset`` on and
    each only up to its end offset (``where`` names the bucket in errors), read with
    ``storage``'s settings."""
    for segment in segments_to_read(info, offset):
        fs, path = filesystem(segment.path(info.remote_log_tablet_dir), storage)
        try:
            for batch in read_segment(fs, path, segment.position, chunk_bytes=chunk_bytes):
                yield batch
                if batch.next_offset >= segment.end_offset:
                    break
        except FileNotFoundError:
            # Retention removed it after the fetch listed it: those records are gone.
            raise LogOffsetOutOfRange(f"remote log segment {path} of {where} (offsets "
                                      f"[{segment.start_offset}, {segment.end_offset})) is gone "
                                      "from remote storage") from None


__all__ = ["CHUNK_BYTES", "RemoteSegment", "read_segment", "remote_batches", "segments_to_read"]
