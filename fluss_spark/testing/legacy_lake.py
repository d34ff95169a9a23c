"""Writer of lakes in the deprecated Parquet-manifest format, for the tests of ``tier migrate``.

It writes exactly what earlier versions of the tiering job wrote (see
``fluss_spark.tiering.legacy`` for the layout and the manifest versions), so the conversion can
be tested against real old-format lakes.
"""

from __future__ import annotations

import json
import os
import re
import time
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Callable, Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from fluss_spark.protocol.changelog import CHANGE_TYPE, LOG_OFFSET
from fluss_spark.protocol.rows import split_by_bucket
from fluss_spark.protocol.types import format_schema
from fluss_spark.tiering.apply import append_rows, apply_pk, conform
from fluss_spark.tiering.legacy import (DATA_DIR, FORMAT, KIND_LOG, KIND_PK, MANIFEST_DIR,
                                        VERSION, LegacyCommit, LegacyFile, LegacyLakeError,
                                        LegacyManifest, LegacyTable, nullable)


class CommitConflict(LegacyLakeError):
    """Another writer committed the same lake table version first."""


def manifest_json(m: LegacyManifest) -> dict:
    """The manifest document of ``m`` (manifest version 1)."""
    commit = m.commit
    return {"format": FORMAT, "version": VERSION, "table": m.table,
            "table_id": m.table_id, "kind": m.kind,
            "primary_key": list(m.primary_key), "bucket_key": list(m.bucket_key),
            "num_buckets": m.num_buckets, "schema": format_schema(m.schema),
            "table_version": m.table_version,
            "files": [{"path": f.path, "rows": f.rows, "bytes": f.bytes, "bucket": f.bucket}
                      for f in m.files],
            "rows": m.rows, "rows_tiered": m.rows_tiered,
            "commit": None if commit is None else {
                "query_id": commit.query_id, "batch_id": commit.batch_id,
                "committed_ms": commit.committed_ms, "rows_in": commit.rows_in},
            "fluss_offsets": m.fluss_offsets, "snapshot_complete": m.snapshot_complete}


def table_dir(lake_root: str | Path, table: str) -> Path:
    """Where the lake copy of Fluss table ``db.name`` lives: ``<lake>/<db>/<name>``."""
    parts = table.split(".")
    if not all(re.fullmatch(r"[A-Za-z0-9_\-]+", p) for p in parts):
        raise LegacyLakeError(f"table name {table!r} cannot be a lake path")
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


class LegacyLakeWriter(LegacyTable):
    """An old-format lake table that can be written as the old tiering job did.

    One writer at a time. ``clock`` returns epoch seconds (injectable for tests).
    """

    def __init__(self, path: str | Path, clock: Callable[[], float] = time.time):
        super().__init__(path)
        self.clock = clock

    def create(self, *, table: str, table_id: int, schema: pa.Schema,
               primary_key: Sequence[str] = (), bucket_key: Sequence[str] = (),
               num_buckets: int = 1) -> LegacyManifest:
        """Create version 0 (empty), or check that an existing lake table is the same table."""
        if self.exists():
            m = self.manifest()
            if m.table_id != table_id or m.table != table:
                raise LegacyLakeError(
                    f"lake table {self.path} holds table {m.table!r} (id {m.table_id}), not "
                    f"{table!r} (id {table_id}): the Fluss table was dropped and recreated; move "
                    f"{self.path} away to tier the new table")
            return m
        kind = KIND_PK if primary_key else KIND_LOG
        m = LegacyManifest(table=table, table_id=table_id, kind=kind, schema=schema,
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
                     ) -> LegacyManifest | None:
        """Apply one micro-batch (table columns + ``_change_type`` + ``_log_offset``) and commit.

        Idempotent by ``(query_id, batch_id)``: a round already committed returns None and
        changes nothing. A different ``query_id`` on a table another query already wrote is
        refused (its checkpoint was lost).
        """
        base = self.manifest()
        if base.commit is not None:
            if base.commit.query_id == query_id and batch_id <= base.commit.batch_id:
                return None
            if base.commit.query_id != query_id:
                raise LegacyLakeError(
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
                    commit=LegacyCommit(query_id, int(batch_id), int(self.clock() * 1000),
                                        changes.num_rows),
                    fluss_offsets=dict(fluss_offsets or base.fluss_offsets),
                    snapshot_complete=bool(snapshot_complete))
        self._commit(m)
        return m

    def _apply_pk(self, base: LegacyManifest, rows: pa.Table, version: int) -> list[LegacyFile]:
        by_bucket: dict[int | None, list[LegacyFile]] = {}
        for f in base.files:
            by_bucket.setdefault(f.bucket, []).append(f)
        parts = split_by_bucket(rows, list(base.bucket_key), base.num_buckets)
        schema = nullable(base.schema)
        for bucket, part in sorted(parts.items()):
            old = by_bucket.get(bucket, [])
            existing = (pa.concat_tables([pq.read_table(self.path / f.path, schema=schema)
                                          for f in old]) if old else None)
            state = apply_pk(existing, part, base.primary_key)
            by_bucket[bucket] = ([self._write(state, version, bucket)] if state.num_rows else [])
        return [f for b in sorted(by_bucket, key=lambda b: -1 if b is None else b)
                for f in by_bucket[b]]

    def _apply_log(self, base: LegacyManifest, rows: pa.Table, version: int) -> list[LegacyFile]:
        new = append_rows(rows)
        files = list(base.files)
        if new.num_rows:
            files.append(self._write(new, version, None))
        return files

    def _write(self, rows: pa.Table, version: int, bucket: int | None) -> LegacyFile:
        sub = f"{DATA_DIR}/b{bucket}" if bucket is not None else DATA_DIR
        rel = f"{sub}/part-{version:08d}-{uuid.uuid4().hex[:12]}.parquet"
        target = self.path / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(rows, target)
        with open(target, "rb") as fh:
            os.fsync(fh.fileno())
        return LegacyFile(rel, rows.num_rows, target.stat().st_size, bucket)

    def _commit(self, m: LegacyManifest) -> None:
        self.manifest_dir.mkdir(parents=True, exist_ok=True)
        _fsync_dir(self.path / DATA_DIR)
        tmp = self.manifest_dir / f".tmp-{uuid.uuid4().hex}"
        with open(tmp, "w") as fh:
            json.dump(manifest_json(m), fh, indent=1, sort_keys=True)
            fh.flush()
            os.fsync(fh.fileno())
        target = self.manifest_path(m.table_version)
        try:
            os.link(tmp, target)
        except FileExistsError:
            raise CommitConflict(f"version {m.table_version} of lake table {self.path} was "
                                 "committed by another writer; only one tiering job may write a "
                                 "lake") from None
        finally:
            tmp.unlink(missing_ok=True)
        _fsync_dir(self.manifest_dir)

    def compact(self, max_files: int = 32) -> LegacyManifest | None:
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
                p = self.manifest_path(v)
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


def list_lake_tables(lake_root: str | Path) -> list[LegacyTable]:
    """Every old-format lake table under ``lake_root`` (directories holding a ``_manifest``)."""
    root = Path(lake_root)
    if not root.is_dir():
        return []
    out = []
    for mdir in sorted(root.rglob(MANIFEST_DIR)):
        if mdir.is_dir() and not any(part.startswith("_") for part in
                                     mdir.parent.relative_to(root).parts):
            t = LegacyTable(mdir.parent)
            if t.exists():
                out.append(t)
    return out
