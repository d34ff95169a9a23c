"""DEPRECATED lake format (Parquet files + JSON manifests): read by ``tier migrate``, nothing else.

The tiering job writes Apache Iceberg tables (``fluss_spark.tiering.lake``). Lakes written by
earlier versions in this format are converted by ``fluss-spark tier migrate --lake DIR``
(``fluss_spark.tiering.migrate``); the writer below is kept for that conversion's tests and as
the reference of ``bench/bench_tiering.py``, and goes with the next release.

Layout of one lake table directory::

    _manifest/00000000000000000007.json   one file per table version; the highest is current
    data/b<bucket>/part-<version>-<uuid>.parquet   primary-key tables: one file per Fluss bucket
    data/part-<version>-<uuid>.parquet             log tables: one or more files per round

A version is committed by creating its manifest with an exclusive hard link (``os.link`` fails if
the name exists), so a commit is all-or-nothing and two writers can never both commit version N.
Data files are written (and fsynced) before the manifest that names them; a file no manifest
names is an orphan of an interrupted round and is never read. Readers must go through the
manifest (``files()``, ``read()``); ``vacuum()`` deletes what no retained version needs.

Manifest versions (every one listed keeps decoding):

- **1** ``{format: "fluss-lake", version: 1, table, table_id, kind: "primary_key"|"log",
  primary_key, bucket_key, num_buckets, schema (Fluss type string), table_version,
  files: [{path, rows, bytes, bucket}], rows_tiered, commit: {query_id, batch_id, committed_ms,
  rows_in} | null, fluss_offsets: {log: {bucket: next_offset}, snapshot: {bucket:
  [snapshot_id, row_count, next_row]}}, snapshot_complete}``
"""

from __future__ import annotations

import json
import os
import re
import time
import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from fluss_spark.errors import FlussError
from fluss_spark.protocol.rows import split_by_bucket
from fluss_spark.protocol.types import format_schema, parse_schema
from fluss_spark.client.cluster import CHANGE_TYPE, LOG_OFFSET
from fluss_spark.tiering.apply import append_rows, apply_pk, conform

FORMAT = "fluss-lake"
VERSION = 1
SUPPORTED_VERSIONS = (1,)
MANIFEST_DIR = "_manifest"
DATA_DIR = "data"
KIND_PK, KIND_LOG = "primary_key", "log"
_MANIFEST_NAME = re.compile(r"^(\d{20})\.json$")


class LakeError(FlussError):
    """A lake table is missing, foreign, corrupt, or belongs to another table or query."""


class CommitConflict(LakeError):
    """Another writer committed the same lake table version first."""


@dataclass(frozen=True)
class DataFile:
    """One Parquet file of a table version (path relative to the table directory)."""

    path: str
    rows: int
    bytes: int
    bucket: int | None = None

    def to_json(self) -> dict:
        return {"path": self.path, "rows": self.rows, "bytes": self.bytes, "bucket": self.bucket}

    @classmethod
    def from_json(cls, d: dict) -> "DataFile":
        return cls(str(d["path"]), int(d["rows"]), int(d.get("bytes") or 0),
                   None if d.get("bucket") is None else int(d["bucket"]))


@dataclass(frozen=True)
class Commit:
    """Which streaming round produced a version: the query (checkpoint) id and its batch id."""

    query_id: str
    batch_id: int
    committed_ms: int
    rows_in: int

    def to_json(self) -> dict:
        return {"query_id": self.query_id, "batch_id": self.batch_id,
                "committed_ms": self.committed_ms, "rows_in": self.rows_in}

    @classmethod
    def from_json(cls, d: dict | None) -> "Commit | None":
        if not d:
            return None
        return cls(str(d["query_id"]), int(d["batch_id"]), int(d["committed_ms"]),
                   int(d.get("rows_in") or 0))


@dataclass(frozen=True)
class Manifest:
    """One version of a lake table: its files and the Fluss position they correspond to."""

    table: str
    table_id: int
    kind: str
    schema: pa.Schema
    primary_key: tuple[str, ...] = ()
    bucket_key: tuple[str, ...] = ()
    num_buckets: int = 1
    table_version: int = 0
    files: tuple[DataFile, ...] = ()
    rows_tiered: int = 0
    commit: Commit | None = None
    fluss_offsets: dict = field(default_factory=dict, hash=False, compare=False)
    snapshot_complete: bool = True

    @property
    def rows(self) -> int:
        return sum(f.rows for f in self.files)

    @property
    def is_pk(self) -> bool:
        return self.kind == KIND_PK

    def to_json(self) -> dict:
        return {"format": FORMAT, "version": VERSION, "table": self.table,
                "table_id": self.table_id, "kind": self.kind,
                "primary_key": list(self.primary_key), "bucket_key": list(self.bucket_key),
                "num_buckets": self.num_buckets, "schema": format_schema(self.schema),
                "table_version": self.table_version,
                "files": [f.to_json() for f in self.files], "rows": self.rows,
                "rows_tiered": self.rows_tiered,
                "commit": self.commit.to_json() if self.commit else None,
                "fluss_offsets": self.fluss_offsets, "snapshot_complete": self.snapshot_complete}

    @classmethod
    def from_json(cls, d: Any, where: str = "manifest") -> "Manifest":
        if not isinstance(d, dict) or d.get("format") != FORMAT:
            raise LakeError(f"{where} is not a {FORMAT} manifest")
        if d.get("version") not in SUPPORTED_VERSIONS:
            raise LakeError(f"{where} has manifest version {d.get('version')!r}; this fluss_spark "
                            f"reads versions {list(SUPPORTED_VERSIONS)}: upgrade fluss_spark")
        try:
            return cls(table=str(d["table"]), table_id=int(d["table_id"]), kind=str(d["kind"]),
                       schema=parse_schema(d["schema"]),
                       primary_key=tuple(d.get("primary_key") or ()),
                       bucket_key=tuple(d.get("bucket_key") or ()),
                       num_buckets=int(d.get("num_buckets") or 1),
                       table_version=int(d["table_version"]),
                       files=tuple(DataFile.from_json(f) for f in d.get("files") or ()),
                       rows_tiered=int(d.get("rows_tiered") or 0),
                       commit=Commit.from_json(d.get("commit")),
                       fluss_offsets=dict(d.get("fluss_offsets") or {}),
                       snapshot_complete=bool(d.get("snapshot_complete", True)))
        except (KeyError, TypeError, ValueError) as e:
            raise LakeError(f"{where} is corrupt ({type(e).__name__}: {e})") from None


def table_dir(lake_root: str | Path, table: str) -> Path:
    """Where the lake copy of Fluss table ``db.name`` lives: ``<lake>/<db>/<name>``."""
    parts = table.split(".")
    if not all(re.fullmatch(r"[A-Za-z0-9_\-]+", p) for p in parts):
        raise LakeError(f"table name {table!r} cannot be a lake path")
    return Path(lake_root).joinpath(*parts)


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class LakeTable:
    """A lake copy of one Fluss table, rooted at ``path`` (see the module docstring).

    One writer at a time: the tiering job holds the lake's job lock. ``clock`` returns epoch
    seconds (injectable for tests).
    """

    def __init__(self, path: str | Path, clock: Callable[[], float] = time.time):
        self.path = Path(path)
        self.clock = clock

    # -- reading --------------------------------------------------------------------------------
    @property
    def manifest_dir(self) -> Path:
        return self.path / MANIFEST_DIR

    def versions(self) -> list[int]:
        if not self.manifest_dir.is_dir():
            return []
        return sorted(int(m.group(1)) for p in self.manifest_dir.iterdir()
                      if (m := _MANIFEST_NAME.fullmatch(p.name)))

    def exists(self) -> bool:
        return bool(self.versions())

    def manifest(self, version: int | None = None) -> Manifest:
        """The current manifest (or ``version``); LakeError when there is none."""
        if version is None:
            versions = self.versions()
            if not versions:
                raise LakeError(f"no lake table at {self.path} (no {MANIFEST_DIR}/); run the "
                                "tiering job first")
            version = versions[-1]
        p = self._manifest_path(version)
        try:
            doc = json.loads(p.read_text())
        except FileNotFoundError:
            raise LakeError(f"lake table {self.path} has no version {version}") from None
        except ValueError as e:
            raise LakeError(f"{p} is not JSON ({e})") from None
        return Manifest.from_json(doc, str(p))

    def files(self, version: int | None = None) -> list[Path]:
        return [self.path / f.path for f in self.manifest(version).files]

    def read(self, version: int | None = None) -> pa.Table:
        """The table's rows at ``version`` (default: current), in the Fluss table's types."""
        m = self.manifest(version)
        schema = _nullable(m.schema)
        parts = [pq.read_table(self.path / f.path, schema=schema) for f in m.files]
        return pa.concat_tables(parts) if parts else schema.empty_table()

    def _manifest_path(self, version: int) -> Path:
        return self.manifest_dir / f"{version:020d}.json"

    # -- writing --------------------------------------------------------------------------------
    def create(self, *, table: str, table_id: int, schema: pa.Schema,
               primary_key: Sequence[str] = (), bucket_key: Sequence[str] = (),
               num_buckets: int = 1) -> Manifest:
        """Create version 0 (empty), or check that an existing lake table is the same table."""
        if self.exists():
            m = self.manifest()
            if m.table_id != table_id or m.table != table:
                raise LakeError(f"lake table {self.path} holds table {m.table!r} (id {m.table_id}),"
                                f" not {table!r} (id {table_id}): the Fluss table was dropped and "
                                f"recreated; move {self.path} away to tier the new table")
            return m
        kind = KIND_PK if primary_key else KIND_LOG
        m = Manifest(table=table, table_id=table_id, kind=kind, schema=schema,
                     primary_key=tuple(primary_key),
                     bucket_key=tuple(bucket_key or primary_key), num_buckets=num_buckets,
                     snapshot_complete=kind == KIND_LOG)
        self._commit(m)
        return m

    def already_applied(self, query_id: str, batch_id: int) -> bool:
        """Whether round ``batch_id`` of query ``query_id`` is in the current version."""
        c = self.manifest().commit
        return c is not None and c.query_id == query_id and batch_id <= c.batch_id

    def commit_round(self, changes: pa.Table, *, query_id: str, batch_id: int,
                     fluss_offsets: dict | None = None, snapshot_complete: bool = True
                     ) -> Manifest | None:
        """Apply one micro-batch (table columns + ``_change_type`` + ``_log_offset``) and commit.

        Idempotent by ``(query_id, batch_id)``: a round already committed (Spark replays the
        last batch after a crash) returns None and changes nothing. A different ``query_id`` on a
        table another query already wrote means the checkpoint was lost: refused, since a fresh
        query re-reads everything and its rounds cannot be told apart from the old ones.
        """
        base = self.manifest()
        if base.commit is not None:
            if base.commit.query_id == query_id and batch_id <= base.commit.batch_id:
                return None
            if base.commit.query_id != query_id:
                raise LakeError(
                    f"lake table {self.path} was written by streaming query {base.commit.query_id}"
                    f" but query {query_id} now writes it (its checkpoint was replaced). Restore "
                    f"the old checkpoint, or delete {self.path} to tier {base.table!r} again from "
                    "scratch")
        version = base.table_version + 1
        rows = conform(changes, base.schema, keep=(CHANGE_TYPE, LOG_OFFSET))
        files = self._apply_pk(base, rows, version) if base.is_pk else \
            self._apply_log(base, rows, version)
        m = replace(base, table_version=version, files=tuple(files),
                    rows_tiered=base.rows_tiered + changes.num_rows,
                    commit=Commit(query_id, int(batch_id), int(self.clock() * 1000),
                                  changes.num_rows),
                    fluss_offsets=dict(fluss_offsets or base.fluss_offsets),
                    snapshot_complete=bool(snapshot_complete))
        self._commit(m)
        return m

    def _apply_pk(self, base: Manifest, rows: pa.Table, version: int) -> list[DataFile]:
        by_bucket: dict[int | None, list[DataFile]] = {}
        for f in base.files:
            by_bucket.setdefault(f.bucket, []).append(f)
        parts = split_by_bucket(rows, list(base.bucket_key), base.num_buckets)
        schema = _nullable(base.schema)
        for bucket, part in sorted(parts.items()):
            old = by_bucket.get(bucket, [])
            existing = (pa.concat_tables([pq.read_table(self.path / f.path, schema=schema)
                                          for f in old]) if old else None)
            state = apply_pk(existing, part, base.primary_key)
            by_bucket[bucket] = ([self._write(state, version, bucket)] if state.num_rows else [])
        return [f for b in sorted(by_bucket, key=lambda b: -1 if b is None else b)
                for f in by_bucket[b]]

    def _apply_log(self, base: Manifest, rows: pa.Table, version: int) -> list[DataFile]:
        new = append_rows(rows)
        files = list(base.files)
        if new.num_rows:
            files.append(self._write(new, version, None))
        return files

    def _write(self, rows: pa.Table, version: int, bucket: int | None) -> DataFile:
        sub = f"{DATA_DIR}/b{bucket}" if bucket is not None else DATA_DIR
        rel = f"{sub}/part-{version:08d}-{uuid.uuid4().hex[:12]}.parquet"
        target = self.path / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(rows, target)
        with open(target, "rb") as fh:
            os.fsync(fh.fileno())
        return DataFile(rel, rows.num_rows, target.stat().st_size, bucket)

    def _commit(self, m: Manifest) -> None:
        self.manifest_dir.mkdir(parents=True, exist_ok=True)
        _fsync_dir(self.path / DATA_DIR)
        tmp = self.manifest_dir / f".tmp-{uuid.uuid4().hex}"
        with open(tmp, "w") as fh:
            json.dump(m.to_json(), fh, indent=1, sort_keys=True)
            fh.flush()
            os.fsync(fh.fileno())
        target = self._manifest_path(m.table_version)
        try:
            os.link(tmp, target)
        except FileExistsError:
            raise CommitConflict(f"version {m.table_version} of lake table {self.path} was "
                                 "committed by another writer; only one tiering job may write a "
                                 "lake") from None
        finally:
            tmp.unlink(missing_ok=True)
        _fsync_dir(self.manifest_dir)

    # -- maintenance ----------------------------------------------------------------------------
    def compact(self, max_files: int = 32) -> Manifest | None:
        """Merge a log table's files into one when it has more than ``max_files`` (PK tables
        already keep one file per bucket). Rows and their order are unchanged."""
        m = self.manifest()
        if m.is_pk or len(m.files) <= max_files:
            return None
        version = m.table_version + 1
        merged = self.read(m.table_version)
        new = replace(m, table_version=version, files=(self._write(merged, version, None),))
        self._commit(new)
        return new

    def vacuum(self, retain_versions: int = 10) -> list[Path]:
        """Delete manifests older than the last ``retain_versions`` and every data file none of
        the retained versions names (orphans of interrupted rounds included). Returns them."""
        versions = self.versions()
        keep = versions[-max(1, retain_versions):]
        needed: set[str] = set()
        for v in keep:
            needed.update(f.path for f in self.manifest(v).files)
        removed = []
        for v in versions:
            if v not in keep:
                p = self._manifest_path(v)
                p.unlink(missing_ok=True)
                removed.append(p)
        for p in self.manifest_dir.glob(".tmp-*"):
            p.unlink(missing_ok=True)
            removed.append(p)
        data = self.path / DATA_DIR
        if data.is_dir():
            for p in data.rglob("*.parquet"):
                if p.relative_to(self.path).as_posix() not in needed:
                    p.unlink(missing_ok=True)
                    removed.append(p)
        return removed


def _nullable(schema: pa.Schema) -> pa.Schema:
    return pa.schema([pa.field(f.name, f.type, True) for f in schema])


def list_lake_tables(lake_root: str | Path) -> list[LakeTable]:
    """Every lake table under ``lake_root`` (directories holding a ``_manifest``)."""
    root = Path(lake_root)
    if not root.is_dir():
        return []
    out = []
    for mdir in sorted(root.rglob(MANIFEST_DIR)):
        if mdir.is_dir() and not any(part.startswith("_") for part in
                                     mdir.parent.relative_to(root).parts):
            t = LakeTable(mdir.parent)
            if t.exists():
                out.append(t)
    return out


__all__ = ["LakeTable", "Manifest", "DataFile", "Commit", "LakeError", "CommitConflict",
           "table_dir", "list_lake_tables", "KIND_PK", "KIND_LOG"]
