"""One hosted bucket: its changelog, its KV state (PK tables), writes, log reads and views."""

from __future__ import annotations

import logging
import threading
import time
import zlib
from pathlib import Path
from typing import Iterator

import msgpack
import numpy as np
import pyarrow as pa

from fluss_spark.clock import Clock, wall_ms
from fluss_spark.config import KV_SNAPSHOT_INTERVAL, TABLE_LOG_TTL
from fluss_spark.errors import (InvalidColumnProjection, InvalidRequest, LogOffsetOutOfRange,
                                LogStorageError, NonPrimaryKeyTable, NotLeaderOrFollower)
from fluss_spark.metadata.layout import PartitionRecord, TableRecord
from fluss_spark.protocol.arrow_ipc import deserialize_schema, table_to_bytes
from fluss_spark.protocol.schema_change import conform
from fluss_spark.protocol.changelog import (CHANGE_TYPE, COMMIT_TIMESTAMP, DELETE, INSERT,
                                            UPDATE_AFTER, UPDATE_BEFORE)
from fluss_spark.protocol.messages import FetchLogResponse
from fluss_spark.protocol.messages.log import MAX_FETCH_WAIT_MS
from fluss_spark.protocol.rows import key_bytes, physical_columns
from fluss_spark.protocol.types import cast_columns
from fluss_spark.server.tablet.changelog import Changelog
from fluss_spark.server.tablet.kv import KvStore, KvView, decode_values, rows_to_batch

log = logging.getLogger(__name__)

OPS = ("append", "upsert", "delete")
#: Change types of an upsert, by the codes ``_upsert_plan`` assigns.
_UPSERT_TYPES = pa.array([INSERT, UPDATE_BEFORE, UPDATE_AFTER])


def _upsert_plan(exists: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Row order of an upsert's changelog when no key repeats.

    Row i of the batch becomes ``+I`` (code 0), or ``-U`` old row then ``+U`` new row (codes 1,
    2) when its key exists. Returns indices into ``concat(new rows, old rows)`` and the codes.
    """
    n = len(exists)
    ends = np.cumsum(1 + exists.astype(np.int64)) - 1        # output position of each new row
    take = np.empty(int(ends[-1]) + 1 if n else 0, dtype=np.int64)
    codes = np.zeros(len(take), dtype=np.int8)
    take[ends] = np.arange(n)
    codes[ends[exists]] = 2
    old_positions = ends[exists] - 1
    take[old_positions] = n + np.arange(len(old_positions))
    codes[old_positions] = 1
    return take, codes


def _arrow(values: np.ndarray, type_: pa.DataType) -> pa.Array:
    """A numpy array as an Arrow array; not pa.array(ndarray), which imports pandas (~1 s)."""
    return pa.Array.from_buffers(type_, len(values), [None, pa.py_buffer(values.tobytes())])


def constant_strings(value: str, n: int) -> pa.Array:
    """``n`` copies of ``value`` as a string array, built without a Python loop."""
    data = value.encode()
    offsets = np.arange(0, (n + 1) * len(data), len(data), dtype=np.int32)[: n + 1]
    return pa.StringArray.from_buffers(n, pa.py_buffer(offsets.tobytes()),
                                       pa.py_buffer(data * n))


def with_change_columns(data: pa.Table, change_type: str | pa.Array, ts: int) -> pa.Table:
    n = data.num_rows
    types = constant_strings(change_type, n) if isinstance(change_type, str) else change_type
    stamps = _arrow(np.full(n, ts, dtype=np.int64), pa.int64())
    return data.append_column(CHANGE_TYPE, types).append_column(COMMIT_TIMESTAMP, stamps)


class LiveView:
    """A point-in-time, key-ordered view of a PK bucket's current state (for live scans)."""

    def __init__(self, view: KvView, schema: pa.Schema, log_offset: int):
        self._view = view
        self.schema = schema
        self.log_offset = log_offset

    def iter_batches(self, columns: list[str] | None, max_rows: int) -> Iterator[pa.RecordBatch]:
        return self._view.iter_batches(self.schema, columns, max(1, max_rows))

    def row_count(self) -> int:
        return self._view.row_count()

    def close(self) -> None:
        self._view.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class Bucket:
    """The state of one bucket hosted by this tablet server.

    Writes are serialised by ``lock``; a write is acknowledged after its changelog entry is
    fsynced and (PK tables) its KV rows are written together with the applied offset.
    """

    def __init__(self, table: TableRecord, bucket: int, directory: Path, *,
                 segment_bytes: int = 64 * 1024 * 1024, clock: Clock = wall_ms,
                 partition: PartitionRecord | None = None):
        self.table = table
        self.bucket_id = bucket
        #: The partition this bucket belongs to (None: an unpartitioned table's bucket).
        self.partition_id = None if partition is None else partition.partition_id
        self.dir = Path(directory)
        self.schema: pa.Schema = deserialize_schema(table.schema)
        self.primary_key = list(table.primary_key)
        self.is_primary_key = bool(self.primary_key)
        where = "" if partition is None else \
            f" partition {partition.name} (id {partition.partition_id})"
        self.label = f"table {table.name} (id {table.table_id}){where} bucket {bucket}"
        self._clock = clock
        self.lock = threading.RLock()
        self.snapshot_lock = threading.Lock()
        self._appended = threading.Condition()
        self.closed = False
        self.changelog = Changelog(self.dir / "log", segment_bytes=segment_bytes, label=self.label)
        self.kv: KvStore | None = None
        if self.is_primary_key:
            self.kv = KvStore(self.dir / "kv", label=self.label)
            self._replay()
        # Snapshot bookkeeping (set from ZooKeeper by the server when the bucket opens).
        self.last_snapshot_offset: int | None = None
        self.last_snapshot_ms = clock()

    def update_table(self, table: TableRecord) -> None:
        """Take a newer definition of the table (its schema changed: columns were added)."""
        with self.lock:
            if table.schema_id > self.table.schema_id:
                self.table = table
                self.schema = deserialize_schema(table.schema)
                log.info("%s: schema %d (%s)", self.label, table.schema_id,
                         self._columns_text())

    # -- properties ------------------------------------------------------------------------------
    @property
    def table_id(self) -> int:
        return self.table.table_id

    @property
    def high_watermark(self) -> int:
        return self.changelog.end_offset

    @property
    def log_start_offset(self) -> int:
        return self.changelog.log_start_offset

    def log_ttl_ms(self) -> int:
        return TABLE_LOG_TTL.get(self.table.properties)

    def snapshot_interval_ms(self) -> int:
        return KV_SNAPSHOT_INTERVAL.get(self.table.properties)

    def kv_store(self) -> KvStore:
        """The KV state, which only primary-key tables have."""
        if self.kv is None:
            raise NonPrimaryKeyTable(f"{self.label} is a log table; it has no KV state")
        return self.kv

    # -- writes ----------------------------------------------------------------------------------
    def write(self, op: str, data: pa.Table) -> tuple[int, int]:
        """Apply one PRODUCE batch; returns the changelog offsets written, [base, end)."""
        if op not in OPS:
            raise InvalidRequest(f"unknown op {op!r}; expected one of {', '.join(OPS)}")
        if op == "append" and self.is_primary_key:
            raise InvalidRequest(f"{self.label} has a primary key: write with upsert or delete, "
                                 "not append")
        if op != "append" and not self.is_primary_key:
            raise NonPrimaryKeyTable(f"{op} needs a primary-key table; {self.label} is a log "
                                     "table (use append)")
        data = self._conform(data, op)
        with self.lock:
            self._check_open()
            now = self._clock()
            if data.num_rows == 0:
                end = self.changelog.end_offset
                return end, end
            if op == "append":
                result = self.changelog.append(with_change_columns(data, "+A", now), now)
            else:
                result = self._write_kv(op, data, now)
        with self._appended:
            self._appended.notify_all()
        return result

    def _conform(self, data: pa.Table, op: str) -> pa.Table:
        """Check a payload against the table schema and cast it (losslessly) to it."""
        names = data.column_names
        if len(set(names)) != len(names):
            raise InvalidRequest(f"{self.label}: the batch repeats a column ({', '.join(names)})")
        wanted = self.primary_key if op == "delete" else self.schema.names
        if op != "delete" and self.table.schema_history:
            # A writer that started before columns were added sends none of them: null.
            first = len(deserialize_schema(self.table.schema_history[0][1]))
            for f in list(self.schema)[first:]:
                if f.name not in names:
                    data = data.append_column(f, pa.nulls(data.num_rows, f.type))
            names = data.column_names
        missing = [n for n in wanted if n not in names]
        if missing:
            what = "primary key column" if op == "delete" else "column"
            raise InvalidRequest(f"{self.label}: the batch lacks {what}(s) "
                                 f"{', '.join(missing)}; the table has {self._columns_text()}")
        extra = [n for n in names if n not in self.schema.names]
        if extra:
            raise InvalidRequest(f"{self.label}: the batch has unknown column(s) "
                                 f"{', '.join(extra)}; the table has {self._columns_text()}")
        fields = [self.schema.field(n) for n in wanted]
        arrays = cast_columns(data, fields, lambda f, given, reason: InvalidRequest(
            f"{self.label}: column {f.name!r} has type {given}, which does not convert "
            f"losslessly to {f.type}: {reason}"))
        for f, col in zip(fields, arrays):
            if col.null_count and (not f.nullable or f.name in self.primary_key):
                what = "primary key column" if f.name in self.primary_key else "NOT NULL column"
                raise InvalidRequest(f"{self.label}: {what} {f.name!r} has {col.null_count} "
                                     "null value(s)")
        return pa.Table.from_arrays(arrays, schema=pa.schema(fields)).combine_chunks()

    def _columns_text(self) -> str:
        return ", ".join(f"{f.name} {f.type}" for f in self.schema)

    def _write_kv(self, op: str, data: pa.Table, now: int) -> tuple[int, int]:
        keys = key_bytes(data, self.primary_key)
        self._check_routing(data, keys)
        kv = self.kv_store()
        olds = kv.get_many(keys)
        pending: dict[bytes, bytes | None] = {}
        old_values: list[bytes] = []
        if op == "upsert":
            pack = msgpack.Packer(use_bin_type=True).pack
            new_values = [pack(row) for row in zip(*physical_columns(data))]
            n = data.num_rows
            if len(set(keys)) == n:
                # No key repeats in the batch (the usual case): plan the changelog with numpy.
                exists = np.fromiter((o is not None for o in olds), dtype=bool, count=n)
                old_values = [o for o in olds if o is not None]
                pending = dict(zip(keys, new_values))
                take, codes = _upsert_plan(exists)
            else:
                take_list: list[int] = []
                code_list: list[int] = []
                for i, key in enumerate(keys):
                    old = pending[key] if key in pending else olds[i]
                    if old is None:
                        code_list.append(0)
                        take_list.append(i)
                    else:
                        old_values.append(old)
                        code_list += (1, 2)
                        take_list += (n + len(old_values) - 1, i)
                    pending[key] = new_values[i]
                take, codes = np.array(take_list, dtype=np.int64), np.array(code_list, np.int8)
            if not old_values:
                changes = with_change_columns(data, INSERT, now)
            else:
                olds_table = pa.Table.from_batches([self._decode_rows(old_values)])
                rows = pa.concat_tables([data, olds_table]).take(_arrow(take, pa.int64()))
                types = pa.DictionaryArray.from_arrays(_arrow(codes, pa.int8()), _UPSERT_TYPES)
                changes = with_change_columns(rows, types.cast(pa.string()), now)
        else:
            for i, key in enumerate(keys):
                old = pending[key] if key in pending else olds[i]
                if old is None:
                    continue        # deleting a missing key writes nothing
                old_values.append(old)
                pending[key] = None
            if not old_values:
                end = self.changelog.end_offset
                return end, end
            changes = with_change_columns(
                pa.Table.from_batches([self._decode_rows(old_values)]), DELETE, now)
        base, end = self.changelog.append(changes, now)
        kv.write(pending, end)
        return base, end

    def _check_routing(self, data: pa.Table, keys: list[bytes]) -> None:
        """A key must live in exactly one bucket, or lookups in its real bucket would miss it."""
        n = self.table.num_buckets
        if n <= 1:
            return
        bucket_key = list(self.table.bucket_key or self.primary_key)
        if bucket_key != self.primary_key:
            keys = key_bytes(data, bucket_key)
        crc32 = zlib.crc32
        for i, key in enumerate(keys):
            if crc32(key) % n != self.bucket_id:
                raise InvalidRequest(
                    f"{self.label}: row {i} belongs to bucket {crc32(key) % n}, not "
                    f"{self.bucket_id}; route rows by the bucket key ({', '.join(bucket_key)})")

    def _decode_rows(self, values: list[bytes]) -> pa.RecordBatch:
        return rows_to_batch(decode_values(values), self.schema)

    def _replay(self) -> None:
        """Bring the KV state up to the changelog end after a crash (applied offset -> end)."""
        kv = self.kv_store()
        applied, end = kv.applied_offset(), self.changelog.end_offset
        if applied == end:
            return
        if applied > end:
            log.error("%s: KV state is applied up to %d but the changelog ends at %d; the "
                      "changelog lost acknowledged records", self.label, applied, end)
            return
        start = self.changelog.log_start_offset
        if applied < start:
            log.error("%s: KV state is applied up to %d but the changelog starts at %d; "
                      "replaying what is left", self.label, applied, start)
            applied = start
        log.info("%s: replaying changelog %d..%d into the KV state", self.label, applied, end)
        pack = msgpack.Packer(use_bin_type=True).pack
        offset = applied
        while offset < end:
            table, nxt = self.changelog.read(offset, end, 8 * 1024 * 1024)
            if table is None:
                raise LogStorageError(f"{self.label}: the changelog has no records at offset "
                                      f"{offset}, below its end {end}")
            puts: dict[bytes, bytes | None] = {}
            rows = conform(table, self.schema)
            keys = key_bytes(rows, self.primary_key)
            types = table.column(CHANGE_TYPE).to_pylist()
            values = list(zip(*physical_columns(rows)))
            for key, kind, value in zip(keys, types, values):
                if kind in (INSERT, UPDATE_AFTER):
                    puts[key] = pack(list(value))
                elif kind == DELETE:
                    puts[key] = None
            kv.write(puts, nxt)
            offset = nxt

    # -- reads -----------------------------------------------------------------------------------
    def fetch(self, offset: int, end_offset: int | None, max_bytes: int, max_wait_ms: int,
              projection: list[str] | None) -> FetchLogResponse:
        """The FETCH_LOG answer for [offset, end_offset)."""
        if projection is not None:
            unknown = [c for c in projection if c not in self.schema.names]
            if unknown:
                raise InvalidColumnProjection(f"{self.label}: unknown column(s) "
                                              f"{', '.join(map(str, unknown))}; the table has "
                                              f"{', '.join(self.schema.names)}")
        self._check_offset(offset)
        if max_wait_ms > 0 and offset >= self.high_watermark and (end_offset is None
                                                                     or end_offset > offset):
            deadline = time.monotonic() + min(max_wait_ms, MAX_FETCH_WAIT_MS) / 1000
            with self._appended:
                while offset >= self.high_watermark and not self.closed:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    self._appended.wait(left)
        try:
            table, next_offset = self.changelog.read(offset, end_offset, max(1, max_bytes))
        except LogStorageError:
            self._check_offset(offset)      # retention raced us: report the data loss
            raise
        if table is not None:
            # Records of an older schema lack the columns added since: those read as null.
            table = conform(table, self.schema if projection is None else pa.schema(
                [self.schema.field(c) for c in projection]), (CHANGE_TYPE, COMMIT_TIMESTAMP))
        return FetchLogResponse(records=table_to_bytes(table) if table is not None else None,
                                base_offset=offset, next_offset=next_offset,
                                high_watermark=self.high_watermark,
                                log_start_offset=self.log_start_offset)

    def _check_offset(self, offset: int) -> None:
        start, hw = self.log_start_offset, self.high_watermark
        if offset < start:
            raise LogOffsetOutOfRange(
                f"{self.label}: offset {offset} is below the earliest retained offset {start} "
                "(older records were deleted by retention, table.log.ttl); records were lost")
        if offset > hw:
            raise LogOffsetOutOfRange(f"{self.label}: offset {offset} is past the end of the "
                                      f"log (high watermark {hw})")

    def offset_for(self, spec: str, timestamp_ms: int | None = None) -> int:
        if spec == "earliest":
            return self.log_start_offset
        if spec == "latest":
            return self.high_watermark
        if spec == "timestamp":
            if timestamp_ms is None:
                raise InvalidRequest("LIST_OFFSETS with spec 'timestamp' needs timestamp_ms")
            return max(self.changelog.offset_for_timestamp(timestamp_ms), self.log_start_offset)
        raise InvalidRequest(f"unknown offset spec {spec!r}; "
                             "expected earliest, latest or timestamp")

    # -- views -----------------------------------------------------------------------------------
    def checkpoint(self) -> tuple[KvView, int]:
        """A point-in-time copy of the KV state and the changelog offset it covers."""
        kv = self.kv_store()
        with self.lock:
            self._check_open()
            return kv.checkpoint(), self.changelog.end_offset

    def open_live_view(self) -> LiveView:
        view, offset = self.checkpoint()
        return LiveView(view, self.schema, offset)

    # -- lifecycle -------------------------------------------------------------------------------
    def apply_retention(self, now_ms: int) -> int:
        ttl = self.log_ttl_ms()
        if ttl <= 0:
            return 0
        return self.changelog.delete_segments_before(now_ms - ttl)

    def _check_open(self) -> None:
        if self.closed:
            raise NotLeaderOrFollower(f"{self.label} is no longer hosted by this server")

    def close(self) -> None:
        with self.lock:
            if self.closed:
                return
            self.closed = True
            self.changelog.close()
            if self.kv is not None:
                self.kv.close()
        with self._appended:
            self._appended.notify_all()
