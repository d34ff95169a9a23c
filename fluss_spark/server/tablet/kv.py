"""KV state of one primary-key bucket: RocksDB (rocksdict) keyed by the encoded primary key.

Keys are ``rows.key_bytes`` (msgpack arrays, whose first byte is never 0x00); values are the
msgpack of the row's physical values in schema order. Bookkeeping lives under keys that start
with 0x00, so they sort before every row and iteration starts past them:

- ``\\x00applied_offset``: the changelog offset up to which the state is applied (exclusive),
  written in the same WriteBatch as the rows it covers, so a crash never separates them;
- ``\\x00next_snapshot_id``: the next KV snapshot id of this bucket, so ids never repeat.

Point-in-time views are RocksDB checkpoints (hard-linked SST files opened read-only): the
``Snapshot`` object of rocksdict 0.3.29 serves point lookups at the snapshot but its iterators
read the live state, so it cannot back a key-ordered scan.
"""

from __future__ import annotations

import itertools
import shutil
import threading
from pathlib import Path
from typing import Iterator, Union, cast

import msgpack
import pyarrow as pa
from rocksdict import AccessType, Checkpoint, Options, Rdict, WriteBatch

from fluss_spark.errors import KvStorageError
from fluss_spark.server.tablet import disk_full
from fluss_spark.protocol.rows import from_physical

APPLIED_OFFSET = b"\x00applied_offset"
NEXT_SNAPSHOT_ID = b"\x00next_snapshot_id"
#: Smallest row key: everything from here on is a row.
FIRST_ROW_KEY = b"\x01"
#: A key as rocksdict's stub spells it; in raw mode every key and value is bytes.
_RdictKey = Union[str, int, float, bytes, bool]


def _options() -> Options:
    opts = Options(raw_mode=True)
    opts.create_if_missing(True)
    return opts


class KvStore:
    """The RocksDB instance of one bucket."""

    def __init__(self, directory: Path, label: str = "kv"):
        self.dir = Path(directory)
        self.label = label
        self.dir.mkdir(parents=True, exist_ok=True)
        try:
            self.db = Rdict(str(self.dir / "db"), _options())
        except Exception as e:  # noqa: BLE001 - rocksdict raises plain exceptions
            raise KvStorageError(
                f"{label}: cannot open RocksDB at {self.dir / 'db'}: {e}") from None
        self._views = itertools.count()
        self._views_dir = self.dir / "views"
        shutil.rmtree(self._views_dir, ignore_errors=True)   # views of a previous process
        self._views_dir.mkdir()
        self._view_lock = threading.Lock()

    # -- bookkeeping ---------------------------------------------------------------------------
    def applied_offset(self) -> int:
        raw = self.db.get(APPLIED_OFFSET)
        return int(raw) if raw is not None else 0

    def next_snapshot_id(self) -> int:
        raw = self.db.get(NEXT_SNAPSHOT_ID)
        return int(raw) if raw is not None else 0

    def set_next_snapshot_id(self, value: int) -> None:
        self.db.put(NEXT_SNAPSHOT_ID, str(value).encode())

    # -- rows ----------------------------------------------------------------------------------
    def get_many(self, keys: list[bytes]) -> list[bytes | None]:
        if not keys:
            return []
        # The stub types neither a list of bytes keys (list is invariant) nor the list of
        # values that such a lookup returns.
        lookup: list[_RdictKey] = list(keys)
        return cast("list[bytes | None]", self.db.get(lookup))

    def write(self, puts: dict[bytes, bytes | None], applied_offset: int) -> None:
        """Apply puts (None = delete) and the new applied offset atomically."""
        wb = WriteBatch(raw_mode=True)
        for key, value in puts.items():
            if value is None:
                wb.delete(key)
            else:
                wb.put(key, value)
        wb.put(APPLIED_OFFSET, str(applied_offset).encode())
        try:
            self.db.write(wb)
        except Exception as e:  # noqa: BLE001 - rocksdict raises plain exceptions
            disk_full.report(self.label, self.dir, "writing the KV state in", e)
            raise KvStorageError(f"{self.label}: RocksDB write failed: {e}") from None

    # -- views ---------------------------------------------------------------------------------
    def checkpoint(self) -> "KvView":
        """A read-only, point-in-time copy of the state (call under the bucket write lock)."""
        with self._view_lock:
            path = self._views_dir / f"view-{next(self._views)}"
        try:
            Checkpoint(self.db).create_checkpoint(str(path))
        except Exception as e:  # noqa: BLE001 - rocksdict raises plain exceptions
            shutil.rmtree(path, ignore_errors=True)
            raise KvStorageError(f"{self.label}: checkpoint failed: {e}") from None
        return KvView(path)

    def close(self) -> None:
        try:
            self.db.close()
        except Exception:  # noqa: BLE001 - closing twice is harmless
            pass
        shutil.rmtree(self._views_dir, ignore_errors=True)


class KvView:
    """A frozen copy of a bucket's state; iterate rows in key order, then ``close()``."""

    def __init__(self, path: Path):
        self.path = path
        self.db = Rdict(str(path), _options(), access_type=AccessType.read_only())
        self._closed = False

    def items(self) -> Iterator[tuple[bytes, bytes]]:
        # Raw mode: the stub's key and value types are wider than what comes back.
        return cast(Iterator[tuple[bytes, bytes]], self.db.items(from_key=FIRST_ROW_KEY))

    def row_count(self) -> int:
        """How many rows the view holds (its keys from ``FIRST_ROW_KEY`` on)."""
        return sum(1 for _ in self.db.keys(from_key=FIRST_ROW_KEY))

    def iter_batches(self, schema: pa.Schema, columns: list[str] | None,
                     max_rows: int) -> Iterator[pa.RecordBatch]:
        """Rows in key order as batches of at most ``max_rows`` (projected to ``columns``)."""
        names = schema.names
        idx = [names.index(c) for c in columns] if columns is not None else None
        out_schema = pa.schema([schema.field(i) for i in idx]) if idx is not None else schema
        chunk: list[bytes] = []
        for value in self.db.values(from_key=FIRST_ROW_KEY):
            chunk.append(value)
            if len(chunk) >= max_rows:
                yield rows_to_batch(decode_values(chunk), out_schema, idx)
                chunk = []
        if chunk:
            yield rows_to_batch(decode_values(chunk), out_schema, idx)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self.db.close()
        except Exception:  # noqa: BLE001
            pass
        shutil.rmtree(self.path, ignore_errors=True)


def decode_values(values: list[bytes]) -> list[list]:
    """Decode many row values in one C call: whole msgpack objects behind an array32 header
    form a valid msgpack array."""
    return msgpack.unpackb(b"\xdd" + len(values).to_bytes(4, "big") + b"".join(values), raw=False)


def rows_to_batch(rows: list[list], schema: pa.Schema,
                  idx: list[int] | None = None) -> pa.RecordBatch:
    """Physical rows (lists in table column order) -> a batch of ``schema``. A row written
    before columns were added to the table is shorter: its missing columns are null."""
    width = len(schema) if idx is None else max(idx, default=-1) + 1
    if rows and min(map(len, rows)) < width:
        rows = [r if len(r) >= width else list(r) + [None] * (width - len(r)) for r in rows]
    if idx is None:
        columns = [list(c) for c in zip(*rows)] if rows else [[] for _ in schema]
    else:
        columns = [[r[i] for r in rows] for i in idx]
    return from_physical(columns, schema)
