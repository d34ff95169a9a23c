"""Reader of the DEPRECATED lake format (Parquet files + JSON manifests), for ``tier migrate``.

The tiering job writes Apache Iceberg tables (``fluss_spark.tiering.lake``). Lakes written by
earlier versions in this format are converted by ``fluss-spark tier migrate --lake DIR``
(``fluss_spark.tiering.migrate``), which reads them through this module; nothing writes this
format any more (the tests make old-format lakes with ``fluss_spark.testing.legacy_lake``).

Layout of one lake table directory::

    _manifest/00000000000000000007.json   one file per table version; the highest is current
    data/b<bucket>/part-<version>-<uuid>.parquet   primary-key tables: one file per Fluss bucket
    data/part-<version>-<uuid>.parquet             log tables: one or more files per round

A version was committed by creating its manifest with an exclusive hard link; data files were
written before the manifest that names them, and a file no manifest names is an orphan of an
interrupted round that is never read. Readers go through the manifest (``files()``,
``read()``).

Manifest versions (every one listed keeps decoding):

- **1** ``{format: "fluss-lake", version: 1, table, table_id, kind: "primary_key"|"log",
  primary_key, bucket_key, num_buckets, schema (Fluss type string), table_version,
  files: [{path, rows, bytes, bucket}], rows_tiered, commit: {query_id, batch_id, committed_ms,
  rows_in} | null, fluss_offsets: {log: {bucket: next_offset}, snapshot: {bucket:
  [snapshot_id, row_count, next_row]}}, snapshot_complete}``
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from fluss_spark.errors import FlussError
from fluss_spark.protocol.types import parse_schema

FORMAT = "fluss-lake"
VERSION = 1
SUPPORTED_VERSIONS = (1,)
MANIFEST_DIR = "_manifest"
DATA_DIR = "data"
KIND_PK, KIND_LOG = "primary_key", "log"
_MANIFEST_NAME = re.compile(r"^(\d{20})\.json$")


class LegacyLakeError(FlussError):
    """An old-format lake table is missing, foreign or corrupt."""


@dataclass(frozen=True)
class LegacyFile:
    """One Parquet file of a table version (path relative to the table directory)."""

    path: str
    rows: int
    bytes: int
    bucket: int | None = None

    @classmethod
    def from_json(cls, d: dict) -> "LegacyFile":
        return cls(str(d["path"]), int(d["rows"]), int(d.get("bytes") or 0),
                   None if d.get("bucket") is None else int(d["bucket"]))


@dataclass(frozen=True)
class LegacyCommit:
    """Which streaming round produced a version: the query (checkpoint) id and its batch id."""

    query_id: str
    batch_id: int
    committed_ms: int
    rows_in: int

    @classmethod
    def from_json(cls, d: dict | None) -> "LegacyCommit | None":
        if not d:
            return None
        return cls(str(d["query_id"]), int(d["batch_id"]), int(d["committed_ms"]),
                   int(d.get("rows_in") or 0))


@dataclass(frozen=True)
class LegacyManifest:
    """One version of an old-format lake table: its files and the Fluss position they hold."""

    table: str
    table_id: int
    kind: str
    schema: pa.Schema
    primary_key: tuple[str, ...] = ()
    bucket_key: tuple[str, ...] = ()
    num_buckets: int = 1
    table_version: int = 0
    files: tuple[LegacyFile, ...] = ()
    rows_tiered: int = 0
    commit: LegacyCommit | None = None
    fluss_offsets: dict = field(default_factory=dict, hash=False, compare=False)
    snapshot_complete: bool = True

    @property
    def rows(self) -> int:
        return sum(f.rows for f in self.files)

    @property
    def is_pk(self) -> bool:
        return self.kind == KIND_PK

    @classmethod
    def from_json(cls, d: Any, where: str = "manifest") -> "LegacyManifest":
        if not isinstance(d, dict) or d.get("format") != FORMAT:
            raise LegacyLakeError(f"{where} is not a {FORMAT} manifest")
        if d.get("version") not in SUPPORTED_VERSIONS:
            raise LegacyLakeError(
                f"{where} has manifest version {d.get('version')!r}; this fluss_spark reads "
                f"versions {list(SUPPORTED_VERSIONS)}: upgrade fluss_spark")
        try:
            return cls(table=str(d["table"]), table_id=int(d["table_id"]), kind=str(d["kind"]),
                       schema=parse_schema(d["schema"]),
                       primary_key=tuple(d.get("primary_key") or ()),
                       bucket_key=tuple(d.get("bucket_key") or ()),
                       num_buckets=int(d.get("num_buckets") or 1),
                       table_version=int(d["table_version"]),
                       files=tuple(LegacyFile.from_json(f) for f in d.get("files") or ()),
                       rows_tiered=int(d.get("rows_tiered") or 0),
                       commit=LegacyCommit.from_json(d.get("commit")),
                       fluss_offsets=dict(d.get("fluss_offsets") or {}),
                       snapshot_complete=bool(d.get("snapshot_complete", True)))
        except (KeyError, TypeError, ValueError) as e:
            raise LegacyLakeError(f"{where} is corrupt ({type(e).__name__}: {e})") from None


class LegacyTable:
    """An old-format lake copy of one Fluss table, rooted at ``path`` (read only)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)

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

    def manifest(self, version: int | None = None) -> LegacyManifest:
        """The current manifest (or ``version``); LegacyLakeError when there is none."""
        if version is None:
            versions = self.versions()
            if not versions:
                raise LegacyLakeError(f"no lake table at {self.path} (no {MANIFEST_DIR}/); run "
                                      "the tiering job first")
            version = versions[-1]
        p = self.manifest_path(version)
        try:
            doc = json.loads(p.read_text())
        except FileNotFoundError:
            raise LegacyLakeError(f"lake table {self.path} has no version {version}") from None
        except ValueError as e:
            raise LegacyLakeError(f"{p} is not JSON ({e})") from None
        return LegacyManifest.from_json(doc, str(p))

    def files(self, version: int | None = None) -> list[Path]:
        return [self.path / f.path for f in self.manifest(version).files]

    def read(self, version: int | None = None) -> pa.Table:
        """The table's rows at ``version`` (default: current), in the Fluss table's types."""
        m = self.manifest(version)
        schema = nullable(m.schema)
        parts = [pq.read_table(self.path / f.path, schema=schema) for f in m.files]
        return pa.concat_tables(parts) if parts else schema.empty_table()

    def manifest_path(self, version: int) -> Path:
        return self.manifest_dir / f"{version:020d}.json"


def nullable(schema: pa.Schema) -> pa.Schema:
    """``schema`` with every field nullable (how the Parquet files are read)."""
    return pa.schema([pa.field(f.name, f.type, True) for f in schema])


__all__ = ["LegacyTable", "LegacyManifest", "LegacyFile", "LegacyCommit", "LegacyLakeError",
           "MANIFEST_DIR", "DATA_DIR", "KIND_PK", "KIND_LOG"]
