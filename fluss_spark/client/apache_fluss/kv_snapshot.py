"""Reading an Apache Fluss KV snapshot from its files: the RocksDB checkpoint in remote storage.

Fluss 0.9.1 serves no snapshot rows over the wire. A snapshot is an (incremental) RocksDB
checkpoint in ``remote.data.dir``: GET_KV_SNAPSHOT_METADATA names its files (the remote path and
the file's name inside the checkpoint) and the log offset it covers; the snapshot's directory
also holds ``_METADATA``, a JSON document with the row count. A reader reads the files through
a pyarrow filesystem (local, S3, HDFS, GCS ... by the path's scheme) and decodes the values (a
schema id, then a compacted row) in batches, to Arrow, with no Python object per row:

- with the compiled decode, its SST files are mapped from local disk (copied there first from
  remote storage) and streamed a page at a time (``StreamedSnapshot``): memory stays a block
  per file and a batch, whatever the bucket's size;
- without it, they are decoded whole in memory (``protocol/apache_fluss/rocksdb_sst.py``), up
  to ``MAX_IN_MEMORY_SST_BYTES``;
- a snapshot in a layout neither takes, or larger, is copied into a local directory and read
  through RocksDB.

Either way rows come in key order, so rows ``[start, start + n)`` are the same rows every time:
a retried split reads exactly what the first attempt read.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from itertools import islice
from typing import Any, Callable, Generator, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs

from fluss_spark.client.apache_fluss.checkpoint_cache import CheckpointCache
from fluss_spark.client.apache_fluss.snapshot_files import (KvSnapshotFiles, download,
                                                            snapshot_gone)
from fluss_spark.client.remote_storage import filesystem
from fluss_spark.errors import CorruptMessage, UnsupportedVersion
from fluss_spark.protocol.apache_fluss import compiled
from fluss_spark.protocol.apache_fluss.compacted_row import (NUMPY_DECODE_ROWS, SCHEMA_ID_SIZE,
                                                             KvPlan, decode_kv_ranges,
                                                             first_schema_id, kv_batch, kv_plan,
                                                             decode_kv_values)
from fluss_spark.protocol.apache_fluss.rocksdb_sst import read_live_values, stream_opener

log = logging.getLogger(__name__)

#: What a value costs beyond its bytes when a batch's size is estimated (Arrow offsets, nulls).
_ROW_OVERHEAD_BYTES = 16
#: Rows of a read's first batch, before the size of a value is known; and the most of any batch.
_FIRST_CHUNK_ROWS = 128
_MAX_CHUNK_ROWS = 1 << 20
#: Values taken from RocksDB and decoded at a time, a batch's pieces joined after (see
#: compacted_row.NUMPY_DECODE_ROWS).
_DECODE_ROWS = NUMPY_DECODE_ROWS
#: Without the compiled decode, a snapshot whose SST files hold more bytes than this is read
#: through RocksDB from a local copy: decoded in memory, its blocks stay in memory
#: (decompressed, with their keys) while it is read, about ten times the files' bytes at the
#: peak (bench/bench_scale.py: a 2.5M-row bucket of ~60 MB of SST files took a Spark Python
#: worker to 1 GB), so a worker stays bounded whatever the bucket's size.
MAX_IN_MEMORY_SST_BYTES = 16 << 20
#: The files of a checkpoint besides its SST files that hold no rows.
_ROWLESS_FILES = ("CURRENT", "MANIFEST-", "OPTIONS-")


class _OnePassCheckpoint:
    """A checkpoint open read-only whose iterators leave RocksDB's block cache alone.

    Every read is one pass in key order: cached blocks would never be read again, and filling
    the cache made a Spark worker's memory grow with the bucket it reads (bench/bench_scale.py).
    """

    def __init__(self, db: Any, read_options: Any):
        self._db, self._read = db, read_options

    def values(self) -> Iterator[bytes]:
        return self._db.values(read_opt=self._read)

    def values_from(self, row: int) -> Iterator[bytes]:
        """The values from row ``row`` on (the first ``row`` stepped over)."""
        return islice(self.values(), row, None)

    def keys(self) -> Iterator[bytes]:
        return self._db.keys(read_opt=self._read)

    def close(self) -> None:
        self._db.close()


def _open_checkpoint(directory: str, what: str) -> _OnePassCheckpoint:
    from rocksdict import AccessType, Options, Rdict, ReadOptions
    try:
        db = Rdict(directory, options=Options(raw_mode=True),
                   access_type=AccessType.read_only())
    except Exception as e:  # noqa: BLE001 - rocksdict raises a bare Exception with RocksDB's text
        raise CorruptMessage(f"{what}: RocksDB cannot open the checkpoint copied to "
                             f"{directory}: {e}") from None
    read = ReadOptions()
    # rocksdict's stub declares fill_cache without its flag; the binding takes one.
    read.fill_cache(False)  # type: ignore[call-arg]
    return _OnePassCheckpoint(db, read)


@dataclass(frozen=True)
class SnapshotValues:
    """A snapshot's live values in key order, decoded from its SST files: value ``i`` is
    ``buffer[begin[i]:end[i]]``."""

    buffer: np.ndarray
    begin: np.ndarray
    end: np.ndarray

    def __len__(self) -> int:
        return len(self.begin)

    def close(self) -> None:
        """Nothing to release but memory (the cache closes what it holds)."""


def _only_sst_rows(files: KvSnapshotFiles) -> bool:
    """Whether the checkpoint's rows are all in SST files (no write-ahead log ...)."""
    return all(local.endswith(".sst") or local.startswith(_ROWLESS_FILES)
               for _, local in files.files)


def read_values(files: KvSnapshotFiles, max_bytes: int = MAX_IN_MEMORY_SST_BYTES
                ) -> SnapshotValues | None:
    """The snapshot's values decoded from its SST files in memory; None when the checkpoint
    holds other row files (a write-ahead log ...), is larger than ``max_bytes``, or is in a
    layout only RocksDB reads."""
    if not _only_sst_rows(files):
        return None
    ssts = [(remote, *filesystem(remote, files.storage))
            for remote, local in files.files if local.endswith(".sst")]
    # Sized before any is read: a snapshot over the limit costs no read of its first files.
    total = 0
    for remote, fs, path in ssts:
        info = fs.get_file_info(path)
        if info.type == pafs.FileType.NotFound:
            raise snapshot_gone(files, remote)
        total += info.size or 0
    if total > max_bytes:
        return None
    tables = []
    for remote, fs, path in ssts:
        try:
            tables.append(np.frombuffer(_file_bytes(fs, path), dtype=np.uint8))
        except FileNotFoundError:
            raise snapshot_gone(files, remote) from None
    try:
        return SnapshotValues(*read_live_values(tables))
    except (UnsupportedVersion, CorruptMessage) as e:
        log.debug("%s is read through RocksDB: %s", files.describe(), e)
        return None


def _file_bytes(fs: pafs.FileSystem, path: str) -> pa.Buffer:
    """A whole file's bytes: mapped where it is on a local disk (a read copies every byte, a
    tenth of the decode's time), read otherwise. Checkpoint files are never rewritten, and the
    lease keeps Fluss from deleting them while they are read (a deleted file stays mapped)."""
    if isinstance(fs, pafs.LocalFileSystem):
        with pa.memory_map(path) as f:
            return f.read_buffer()
    with fs.open_input_file(path) as f:
        return f.read_buffer()


class StreamedSnapshot:
    """A snapshot's SST files mapped from local disk, their live values read a page at a time
    by the compiled stream (``rocksdb_sst.stream_opener``): a reader's memory is a block per
    file and a page, whatever the bucket's size."""

    def __init__(self, files: KvSnapshotFiles, open_stream: Callable[[], Any]):
        self.files, self._open_stream = files, open_stream

    @classmethod
    def open(cls, files: KvSnapshotFiles, directory: str) -> "StreamedSnapshot | None":
        """The snapshot's SST files mapped (from remote storage, copied into ``directory``
        first); None when the checkpoint holds other row files or the compiled stream refuses
        them (numpy or RocksDB reads them then)."""
        if compiled.native() is None or not _only_sst_rows(files):
            return None
        ssts = [(remote, local) for remote, local in files.files if local.endswith(".sst")]
        located = [filesystem(remote, files.storage) for remote, _ in ssts]
        if all(isinstance(fs, pafs.LocalFileSystem) for fs, _ in located):
            paths = [path for _, path in located]
        else:
            download(files, directory)      # mapped from a local copy
            paths = [os.path.join(directory, local) for _, local in ssts]
        tables = []
        for (remote, _), path in zip(ssts, paths):
            try:
                with pa.memory_map(path) as f:
                    tables.append(np.frombuffer(f.read_buffer(), dtype=np.uint8))
            except FileNotFoundError:
                raise snapshot_gone(files, remote) from None
        try:
            opener = stream_opener(tables, [True] * len(tables))
        except (UnsupportedVersion, CorruptMessage) as e:
            log.debug("%s is read through RocksDB: %s", files.describe(), e)
            return None
        return None if opener is None else cls(files, opener)

    def values_from(self, row: int) -> Any:
        """A stream of the values from row ``row`` on."""
        stream = self._open_stream()
        self._call(stream.skip, row)
        return stream

    def _call(self, call: Callable[..., Any], *args: Any) -> Any:
        try:
            return call(*args)
        except ValueError as e:
            raise CorruptMessage(f"{self.files.describe()}: {e}") from None

    @staticmethod
    def parallel(stream: Any, workers: int, page_bytes: int) -> None:
        """Walk the rest of ``stream`` on ``workers`` threads, a range of its keys each at a
        time (its pages still in key order, of ``page_bytes``); nothing with fewer than two."""
        stream.parallel(workers, page_bytes, _ROW_OVERHEAD_BYTES)

    @staticmethod
    def decode_as(stream: Any, plan: KvPlan) -> None:
        """Have ``stream`` decode the rows of its pages by ``plan`` from now on, each once it
        is filled (on its threads, after ``parallel``)."""
        stream.decode_as(SCHEMA_ID_SIZE, plan.schema_id, len(plan.schema), plan.layouts,
                         plan.want)

    def page(self, stream: Any, max_rows: int, max_bytes: int
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray, Any]:
        """The stream's next values (none at the end): up to ``max_rows`` (the rows the read
        still wants), fewer past ``max_bytes`` with their Arrow overhead; and their rows as the
        stream decoded them (``decode_as``), or None."""
        data, begin, end, decoded = self._call(stream.page, max_rows, max_bytes,
                                               _ROW_OVERHEAD_BYTES)
        return (np.frombuffer(data, dtype=np.uint8), np.frombuffer(begin, dtype=np.int64),
                np.frombuffer(end, dtype=np.int64), decoded)

    def count(self) -> int:
        return int(self._call(self._open_stream().skip, 1 << 62))

    def close(self) -> None:
        """Nothing to close: the mappings go with the last stream that reads them."""


def _copy_and_open(files: KvSnapshotFiles) -> Callable[[str], Any]:
    def open_into(directory: str) -> Any:
        streamed = StreamedSnapshot.open(files, directory)
        if streamed is not None:
            return streamed
        values = read_values(files)
        if values is not None:
            return values
        download(files, directory)
        return _open_checkpoint(directory, files.describe())
    return open_into


#: This process's local copies of checkpoints (see ``checkpoint_cache``).
CHECKPOINTS = CheckpointCache()


def _joined(pieces: list[pa.RecordBatch]) -> pa.RecordBatch:
    """One batch of ``pieces`` (one copy of their rows, none for a single piece)."""
    return pieces[0] if len(pieces) == 1 else pa.concat_batches(pieces)


def count_rows(files: KvSnapshotFiles, cache: CheckpointCache = CHECKPOINTS) -> int:
    """Count the snapshot's rows by reading its checkpoint (for snapshots without a row count)."""
    entry = cache.acquire(files.directory, _copy_and_open(files))
    try:
        if isinstance(entry.db, SnapshotValues):
            return len(entry.db)
        if isinstance(entry.db, StreamedSnapshot):
            return entry.db.count()
        return sum(1 for _ in entry.db.keys())
    finally:
        cache.release(entry)


class CheckpointScan:
    """Rows ``[start_row, start_row + limit)`` of a KV snapshot as Arrow batches of ``output``.

    Nothing is fetched until the first batch is asked for, so a missing snapshot surfaces as
    ``KvSnapshotNotExist`` while iterating, as the ``Cluster`` interface promises.
    ``schema_id``: the table's, which most values have (their pages are decoded by it from the
    first one on).
    """

    def __init__(self, files: Callable[[], KvSnapshotFiles],
                 schema_of: Callable[[int], pa.Schema], output: pa.Schema, *, start_row: int,
                 limit: int | None, batch_size_bytes: int, cache: CheckpointCache = CHECKPOINTS,
                 schema_id: int | None = None):
        self._files = files
        self._schema_id = schema_id
        self._cache = cache
        self._schema_of = schema_of
        self._output = output
        self._start = max(0, int(start_row))
        self._limit = limit
        self._batch_bytes = max(1, int(batch_size_bytes))
        self._batches: Generator[pa.RecordBatch, None, None] | None = None

    def __iter__(self) -> "CheckpointScan":
        return self

    def __next__(self) -> pa.RecordBatch:
        if self._batches is None:
            self._batches = self._read()
        return next(self._batches)

    def _read(self) -> Generator[pa.RecordBatch, None, None]:
        files = self._files()
        entry = self._cache.acquire(files.directory, _copy_and_open(files))
        stop = None if self._limit is None else self._start + max(0, int(self._limit))
        if isinstance(entry.db, SnapshotValues):
            yield from self._read_decoded(entry, entry.db, stop)
            return
        if isinstance(entry.db, StreamedSnapshot):
            yield from self._read_streamed(entry, entry.db, stop)
            return
        row = self._start
        cursor = None
        finished = False
        try:
            rows = entry.values_from(row) if stop is None or row < stop else iter(())
            # Values are taken in chunks sized to the batch target from the last chunk's mean
            # value size: a per-row Python loop would cost as much as decoding them.
            chunk = _FIRST_CHUNK_ROWS
            while True:
                want = chunk if stop is None else min(chunk, stop - row)
                pieces, got, size = [], 0, 0
                while got < want:
                    values = list(islice(rows, min(_DECODE_ROWS, want - got)))
                    if not values:
                        break
                    got += len(values)
                    size += sum(map(len, values))
                    pieces.append(decode_kv_values(values, self._schema_of, self._output))
                row += got
                if got < want:
                    finished = True
                elif row == stop:
                    # Saved before the last yield: a reader stops asking once it has its rows.
                    cursor = (row, rows)    # the next split of this snapshot starts here
                if got:
                    chunk = self._chunk_rows(size / got)
                    yield _joined(pieces)
                if finished or row == stop:
                    return
        finally:
            self._cache.release(entry, cursor, finished=finished)

    def _read_streamed(self, entry: Any, snapshot: StreamedSnapshot, stop: int | None
                       ) -> Iterator[pa.RecordBatch]:
        """Rows ``[start, stop)`` a page at a time, each page a batch of about
        ``batch_size_bytes``; the stream is left in the cache where the rows end."""
        row, cursor, finished = self._start, None, False
        try:
            stream = entry.values_from(row)
            # The rows the read still wants (batches are bounded by their bytes): a stream
            # never hands over more, and keeps what it walked past them for the next split.
            last = self._start + (1 << 62) if stop is None else stop
            # Each page's rows are decoded by the thread that walks it: by the table's schema,
            # then by that of the first value of a page that did not all decode by it (which
            # is decoded here). With two threads or more, ranges of the keys are walked on
            # threads of their own (BENCHMARKS.md, "Key ranges walked on threads of their
            # own", "Pages decoded where they are walked").
            plans: dict[int, KvPlan | None] = {}
            plan = self._plan(plans, self._schema_id)
            if plan is not None:
                snapshot.decode_as(stream, plan)
            threads = compiled.threads
            snapshot.parallel(stream, threads, self._batch_bytes)
            while row < last:
                buffer, begin, end, decoded = snapshot.page(stream, last - row,
                                                            self._batch_bytes)
                if not len(begin):
                    finished = True
                    return
                row += len(begin)
                finished = stream.done
                if row == stop and not finished:
                    # Saved before the last yield: a reader stops asking once it has its rows.
                    cursor = (row, stream)
                batch = self._decoded(plans, decoded, len(begin))
                if batch is None:
                    batch = decode_kv_ranges(buffer, begin, end, self._schema_of, self._output,
                                             max(1, threads - 1))
                    plan = self._plan(plans, first_schema_id(buffer, begin, end))
                    if plan is not None:
                        snapshot.decode_as(stream, plan)
                yield batch
                if finished:
                    return
        finally:
            self._cache.release(entry, cursor, finished=finished)

    def _plan(self, plans: dict[int, KvPlan | None], schema_id: int | None) -> KvPlan | None:
        """The compiled decode's plan for values of ``schema_id`` (kept in ``plans``)."""
        if schema_id is None:
            return None
        if schema_id not in plans:
            plans[schema_id] = kv_plan(schema_id, self._schema_of, self._output)
        return plans[schema_id]

    def _decoded(self, plans: dict[int, KvPlan | None], decoded: Any, rows: int
                 ) -> pa.RecordBatch | None:
        """The batch of a page's rows as the stream's threads decoded them, when they did so by
        this read's plan (a stream kept for the next split may hold another read's)."""
        if decoded is None:
            return None
        schema_id, layouts, want, columns = decoded
        plan = self._plan(plans, schema_id)
        if plan is None or plan.layouts != layouts or plan.want != want:
            return None
        return kv_batch(plan, columns, rows, self._output)

    def _read_decoded(self, entry: Any, values: SnapshotValues, stop: int | None
                      ) -> Iterator[pa.RecordBatch]:
        """Rows ``[start, stop)`` of values decoded in memory: taken by index, no cursor."""
        finished = False
        try:
            row, end = self._start, len(values) if stop is None else min(stop, len(values))
            if row < end:
                sizes = values.end[row:end] - values.begin[row:end]
                chunk = self._chunk_rows(float(np.mean(sizes)))
                for lo in range(row, end, chunk):
                    hi = min(end, lo + chunk)
                    yield decode_kv_ranges(values.buffer, values.begin[lo:hi],
                                           values.end[lo:hi], self._schema_of, self._output)
            finished = end == len(values)
        finally:
            self._cache.release(entry, finished=finished)

    def _chunk_rows(self, mean_value_bytes: float) -> int:
        """Rows of a batch of about ``batch_size_bytes`` of values of this mean size."""
        mean = mean_value_bytes + _ROW_OVERHEAD_BYTES
        return max(1, min(_MAX_CHUNK_ROWS, int(self._batch_bytes // mean)))

    def close(self) -> None:
        if self._batches is not None:
            self._batches.close()   # runs the generator's cleanup when it stopped mid-way


__all__ = ["CHECKPOINTS", "CheckpointScan", "MAX_IN_MEMORY_SST_BYTES", "SnapshotValues",
           "StreamedSnapshot", "count_rows", "filesystem", "read_values"]
