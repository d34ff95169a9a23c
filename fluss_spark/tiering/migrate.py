"""Conversion of a lake in the old Parquet-manifest format (``tiering/legacy.py``) into Iceberg.

Per table: its directory is moved to ``<lake>/_tiering/legacy/<db>/<table>`` (one rename), then
its current version is appended to a new Iceberg table in ONE commit whose summary carries the
old manifest's position (query id, batch id, Fluss offsets, snapshot phase, rows tiered). The
table's streaming checkpoint stays where it is, so the next tiering run continues with the next
batch. Interrupted anywhere, the conversion is run again: a moved table that has no Iceberg
table yet is converted then, a converted one is left alone. The moved directories are kept
(delete ``_tiering/legacy`` once the Iceberg tables are checked).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from fluss_spark.tiering.lake import TIERING_DIR, LakeError, LakeTable
from fluss_spark.tiering import legacy

log = logging.getLogger(__name__)

LEGACY_DIR = "legacy"


def _legacy_dirs(root: Path) -> dict[str, Path]:
    """table name -> directory of every old-format table, in place or already moved."""
    found: dict[str, Path] = {}
    moved = root / TIERING_DIR / LEGACY_DIR
    for base in (moved, root):
        if not base.is_dir():
            continue
        for mdir in base.glob(f"*/*/{legacy.MANIFEST_DIR}"):
            rel = mdir.parent.relative_to(base)
            if base == root and rel.parts[0].startswith("_"):
                continue
            if mdir.is_dir():
                found[".".join(rel.parts)] = mdir.parent
    return found


def legacy_tables(lake_root: str | Path) -> dict[str, Path]:
    """Old-format tables of a lake that are not converted yet (name -> directory)."""
    root = Path(lake_root).absolute()
    out = {}
    for name, d in _legacy_dirs(root).items():
        if d.is_relative_to(root / TIERING_DIR):
            try:
                if LakeTable.open(root, name).state().snapshot_id is not None:
                    continue
            except LakeError:
                pass
        out[name] = d
    return out


def migrate_lake(lake_root: str | Path) -> list[dict]:
    """Convert every old-format table of a lake; one result row per table."""
    root = Path(lake_root).absolute()
    lease_id = None
    job = root / TIERING_DIR / "job.json"
    if job.exists():
        lease_id = json.loads(job.read_text()).get("lease_id")
    rows = []
    for name, d in sorted(legacy_tables(root).items()):
        moved = root / TIERING_DIR / LEGACY_DIR / Path(*name.split("."))
        if d != moved:
            moved.parent.mkdir(parents=True, exist_ok=True)
            d.rename(moved)
        old = legacy.LegacyTable(moved)
        m = old.manifest()
        data = old.read()
        new = LakeTable.open(root, m.table)
        new.create(table=m.table, table_id=m.table_id, schema=m.schema,
                   primary_key=m.primary_key, bucket_key=m.bucket_key,
                   num_buckets=m.num_buckets)
        st = new.import_rows(data, query_id=m.commit.query_id if m.commit else None,
                             batch_id=m.commit.batch_id if m.commit else None,
                             fluss_offsets=m.fluss_offsets, snapshot_complete=m.snapshot_complete,
                             rows_tiered=m.rows_tiered,
                             committed_ms=m.commit.committed_ms if m.commit else None,
                             lease_id=lease_id)
        log.info("converted %s (version %d, %d rows) into Iceberg snapshot %s", m.table,
                 m.table_version, data.num_rows, st.snapshot_id)
        rows.append({"table": m.table, "legacy_version": m.table_version, "rows": st.rows,
                     "snapshot_id": st.snapshot_id, "legacy_dir": str(moved)})
    return rows


__all__ = ["LEGACY_DIR", "legacy_tables", "migrate_lake"]
