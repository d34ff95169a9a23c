"""The changelog of one bucket: segment files of framed Arrow IPC entries with dense offsets.

A segment file is named by the offset of its first record (``00000000000000000000.log``) and
starts with a file header, then entries::

    file header  b"FLCL" magic, uint16 format version
    entry        uint32 length of the payload, uint32 crc32 (of the rest of the entry header
                 and the payload), int64 base_offset, uint32 record count, int64 max commit
                 timestamp (ms), then the payload: one Arrow IPC stream holding the records
                 (the table columns, ``_change_type`` and ``_commit_timestamp``).

Format versions: 1 (the first). Every entry is written and fsynced before the write is
acknowledged; on open the tail of the last segment is validated and a torn or corrupt tail
is cut off. Retention deletes whole segments, never the active one.
"""

from __future__ import annotations

import bisect
import io
import logging
import os
import struct
import threading
import zlib
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from fluss_spark.errors import LogStorageError
from fluss_spark.server.tablet import disk_full
from fluss_spark.server.tablet.files import fsync_path

log = logging.getLogger(__name__)

MAGIC = b"FLCL"
FORMAT_VERSION = 1
FILE_HEADER = struct.Struct(">4sH")
ENTRY_HEADER = struct.Struct(">IIqIq")
_CRC_PART = struct.Struct(">qIq")
SUFFIX = ".log"


@dataclass(frozen=True)
class Entry:
    """Where one appended batch lives: its offsets, newest timestamp and file position."""

    base_offset: int
    count: int
    max_timestamp: int
    position: int          # of the payload, in the segment file
    size: int              # payload bytes

    @property
    def end_offset(self) -> int:
        return self.base_offset + self.count


class Segment:
    """One segment file and the index of its entries (kept in memory)."""

    def __init__(self, path: Path, base_offset: int):
        self.path = path
        self.base_offset = base_offset
        self.entries: list[Entry] = []
        self.bases: list[int] = []          # entries' base offsets, for bisect
        self.size = FILE_HEADER.size

    @property
    def end_offset(self) -> int:
        return self.entries[-1].end_offset if self.entries else self.base_offset

    @property
    def max_timestamp(self) -> int:
        return self.entries[-1].max_timestamp if self.entries else -1

    def add(self, entry: Entry) -> None:
        self.entries.append(entry)
        self.bases.append(entry.base_offset)
        self.size = entry.position + entry.size

    def entry_index(self, offset: int) -> int:
        """Index of the entry holding ``offset`` (which must be in this segment)."""
        return bisect.bisect_right(self.bases, offset) - 1


def segment_name(base_offset: int) -> str:
    return f"{base_offset:020d}{SUFFIX}"


class Changelog:
    """Append-only, fsynced log of one bucket with dense offsets starting at 0.

    Appends are serialised by the caller (the bucket's write lock); reads may run concurrently
    with appends and with retention (the segment list is swapped under ``_lock``).
    """

    def __init__(self, directory: Path, *, segment_bytes: int = 64 * 1024 * 1024,
                 label: str = "changelog"):
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.segment_bytes = segment_bytes
        self.label = label
        self._lock = threading.Lock()
        self._segments: list[Segment] = []
        self._file: io.BufferedRandom | None = None   # the active segment, open for appends
        self._last_timestamp = -1
        self._recover()

    # -- state ---------------------------------------------------------------------------------
    @property
    def log_start_offset(self) -> int:
        with self._lock:
            return self._segments[0].base_offset

    @property
    def end_offset(self) -> int:
        """The high watermark: the offset the next record gets."""
        return self._segments[-1].end_offset

    @property
    def last_timestamp(self) -> int:
        return self._last_timestamp

    def segment_count(self) -> int:
        with self._lock:
            return len(self._segments)

    # -- writing -------------------------------------------------------------------------------
    def append(self, batch: pa.RecordBatch | pa.Table, timestamp_ms: int) -> tuple[int, int]:
        """Write ``batch`` (already carrying its changelog columns) durably; return [base, end)."""
        count = batch.num_rows
        base = self.end_offset
        if count == 0:
            return base, base
        sink = pa.BufferOutputStream()
        batches = batch.to_batches() if isinstance(batch, pa.Table) else [batch]
        with pa.ipc.new_stream(sink, batch.schema) as writer:
            for b in batches:
                writer.write_batch(b)
        payload = sink.getvalue()
        timestamp_ms = max(timestamp_ms, self._last_timestamp)
        active = self._segments[-1]
        if active.entries and active.size >= self.segment_bytes:
            try:
                active = self._roll(base)
            except OSError as e:
                disk_full.report(self.label, self.dir / segment_name(base),
                                 "creating the changelog segment", e)
                raise LogStorageError(f"{self.label}: starting a changelog segment at offset "
                                      f"{base} failed: {e}") from None
        crc = zlib.crc32(_CRC_PART.pack(base, count, timestamp_ms))
        crc = zlib.crc32(payload, crc)
        header = ENTRY_HEADER.pack(payload.size, crc, base, count, timestamp_ms)
        position = active.size
        f = self._active_file()
        try:
            f.seek(position)
            f.write(header)
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        except OSError as e:
            disk_full.report(self.label, active.path, "appending to the changelog segment", e)
            # Leave no half-written entry behind for the next append to build on.
            self._truncate_active(position)
            raise LogStorageError(f"{self.label}: writing offsets {base}..{base + count} failed: "
                                  f"{e}") from None
        active.add(Entry(base, count, timestamp_ms, position + ENTRY_HEADER.size, payload.size))
        self._last_timestamp = timestamp_ms
        return base, base + count

    def _active_file(self) -> io.BufferedRandom:
        if self._file is None:
            raise LogStorageError(f"{self.label}: the changelog is closed")
        return self._file

    def _roll(self, base: int) -> Segment:
        self._active_file().close()
        seg = self._create_segment(base)
        with self._lock:
            self._segments.append(seg)
        return seg

    def _create_segment(self, base: int) -> Segment:
        path = self.dir / segment_name(base)
        f = open(path, "w+b")
        f.write(FILE_HEADER.pack(MAGIC, FORMAT_VERSION))
        f.flush()
        os.fsync(f.fileno())
        fsync_path(self.dir, best_effort=True)
        self._file = f
        return Segment(path, base)

    def _truncate_active(self, position: int) -> None:
        try:
            f = self._active_file()
            f.truncate(position)
            f.flush()
        except OSError:
            log.exception("%s: could not truncate a failed append", self.label)

    # -- reading -------------------------------------------------------------------------------
    def entries_from(self, offset: int, end_offset: int | None = None):
        """Yield (segment, entry) from the entry holding ``offset`` up to ``end_offset``."""
        with self._lock:
            segments = list(self._segments)
        end = self.end_offset if end_offset is None else min(end_offset, self.end_offset)
        i = max(bisect.bisect_right([s.base_offset for s in segments], offset) - 1, 0)
        for seg in segments[i:]:
            if seg.base_offset >= end:
                return
            entries = seg.entries
            j = max(seg.entry_index(offset), 0) if seg.base_offset <= offset else 0
            for entry in entries[j:]:
                if entry.base_offset >= end:
                    return
                yield seg, entry

    def read_entry(self, seg: Segment, entry: Entry) -> pa.Table:
        """Decode one entry's records (offsets entry.base_offset ..)."""
        try:
            with open(seg.path, "rb") as f:
                f.seek(entry.position)
                data = f.read(entry.size)
        except FileNotFoundError:
            raise LogStorageError(f"{self.label}: segment {seg.path.name} was deleted by "
                                  "retention while being read; fetch again") from None
        return pa.ipc.open_stream(pa.py_buffer(data)).read_all()

    def read(self, offset: int, end_offset: int | None = None,
             max_bytes: int | None = None) -> tuple[pa.Table | None, int]:
        """Records from ``offset`` (up to ``end_offset`` / about ``max_bytes``).

        Returns (table, next_offset). At least one record is returned when any exists, so a
        reader always makes progress however small ``max_bytes`` is.
        """
        end = self.end_offset if end_offset is None else min(end_offset, self.end_offset)
        if offset >= end:
            return None, offset
        parts: list[pa.Table] = []
        total, pos = 0, offset
        with_files: dict[Path, io.BufferedReader] = {}
        try:
            for seg, entry in self.entries_from(offset, end):
                if max_bytes is not None and parts and total + entry.size > max_bytes:
                    break
                f = with_files.get(seg.path)
                if f is None:
                    try:
                        f = with_files[seg.path] = open(seg.path, "rb")
                    except FileNotFoundError:
                        raise LogStorageError(
                            f"{self.label}: segment {seg.path.name} was deleted by retention "
                            "while being read; fetch again") from None
                f.seek(entry.position)
                table = pa.ipc.open_stream(pa.py_buffer(f.read(entry.size))).read_all()
                lo = pos - entry.base_offset
                hi = min(entry.end_offset, end) - entry.base_offset
                if max_bytes is not None and not parts and entry.size > max_bytes:
                    # One oversized entry: return a proportional slice (at least one row).
                    rows = max(1, int(entry.count * max_bytes / entry.size))
                    hi = min(hi, lo + rows)
                if lo or hi != table.num_rows:
                    table = table.slice(lo, hi - lo)
                parts.append(table)
                total += entry.size
                pos = entry.base_offset + hi
                if pos < entry.end_offset:
                    break
        finally:
            for f in with_files.values():
                f.close()
        if not parts:
            return None, offset
        # Entries of different schemas (columns added in between) unite by name.
        table = parts[0] if len(parts) == 1 else pa.concat_tables(parts, promote_options="default")
        return table, pos

    def offset_for_timestamp(self, timestamp_ms: int) -> int:
        """First offset whose commit timestamp is >= ``timestamp_ms``, else the log end."""
        with self._lock:
            segments = list(self._segments)
        for seg in segments:
            if seg.max_timestamp < timestamp_ms:
                continue
            for entry in seg.entries:
                # A batch shares one commit timestamp, so its base offset is the answer.
                if entry.max_timestamp >= timestamp_ms:
                    return entry.base_offset
        return self.end_offset

    # -- retention -----------------------------------------------------------------------------
    def delete_segments_before(self, timestamp_ms: int) -> int:
        """Delete whole non-active segments whose newest record is older than ``timestamp_ms``."""
        deleted = []
        with self._lock:
            while len(self._segments) > 1 and self._segments[0].max_timestamp < timestamp_ms:
                deleted.append(self._segments.pop(0))
        for seg in deleted:
            try:
                seg.path.unlink()
            except FileNotFoundError:
                pass
        if deleted:
            log.info("%s: retention deleted %d segment(s); log start is now %d", self.label,
                     len(deleted), self.log_start_offset)
        return len(deleted)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    # -- recovery ------------------------------------------------------------------------------
    def _recover(self) -> None:
        paths = sorted(p for p in self.dir.iterdir() if p.name.endswith(SUFFIX))
        segments: list[Segment] = []
        for n, path in enumerate(paths):
            try:
                base = int(path.name[:-len(SUFFIX)])
            except ValueError:
                log.warning("%s: ignoring stray file %s", self.label, path.name)
                continue
            if segments and base != segments[-1].end_offset:
                log.error("%s: segment %s does not continue offset %d; dropping it and later ones",
                          self.label, path.name, segments[-1].end_offset)
                for p in paths[n:]:
                    p.unlink()
                break
            seg, valid_size, clean = _scan_segment(path, base)
            if clean and seg is not None:
                segments.append(seg)
                continue
            log.warning("%s: truncating torn tail of %s at byte %d", self.label, path.name,
                        valid_size)
            with open(path, "r+b") as f:
                f.truncate(valid_size)
                f.flush()
                os.fsync(f.fileno())
            if seg is None:
                # Not even a valid header: rewrite the header on an empty segment.
                path.unlink()
                if not segments:
                    segments.append(self._create_segment(base))
                    self._active_file().close()
                for p in paths[n + 1:]:
                    p.unlink()
                break
            segments.append(seg)
            for p in paths[n + 1:]:
                log.warning("%s: dropping segment %s after a corrupt entry", self.label, p.name)
                p.unlink()
            break
        if not segments:
            segments.append(self._create_segment(0))
        else:
            self._file = open(segments[-1].path, "r+b")
        self._segments = segments
        self._last_timestamp = max((s.max_timestamp for s in segments), default=-1)


def _scan_segment(path: Path, base: int) -> tuple[Segment | None, int, bool]:
    """Read a segment's index; returns (segment, bytes that are valid, whether all were)."""
    seg = Segment(path, base)
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < FILE_HEADER.size:
        return None, 0, False
    magic, version = FILE_HEADER.unpack_from(data, 0)
    if magic != MAGIC:
        raise LogStorageError(f"{path} is not a changelog segment (bad magic {magic!r})")
    if version > FORMAT_VERSION:
        raise LogStorageError(f"{path} has format version {version}, newer than this software "
                              f"understands ({FORMAT_VERSION}); upgrade fluss_spark")
    pos, expected = FILE_HEADER.size, base
    view = memoryview(data)
    while pos < len(data):
        if pos + ENTRY_HEADER.size > len(data):
            return seg, pos, False
        length, crc, b, count, ts = ENTRY_HEADER.unpack_from(data, pos)
        start = pos + ENTRY_HEADER.size
        if start + length > len(data) or b != expected or count == 0:
            return seg, pos, False
        check = zlib.crc32(view[start:start + length], zlib.crc32(_CRC_PART.pack(b, count, ts)))
        if check != crc:
            return seg, pos, False
        seg.add(Entry(b, count, ts, start, length))
        expected = b + count
        pos = start + length
    return seg, pos, True
