"""Per-table tiering progress: rows tiered, lag and last round time, from the lake and the job.

Two sources are merged: the lake tables' current Iceberg snapshots (authoritative: what is
committed, and the Fluss offsets it corresponds to) and ``_tiering/status.json``, which the
running job rewrites after every poll (whether each table's query is active, its lag from query
progress, errors).

``status.json`` versions: **1** ``{version: 1, job_id, lease_id, pid, updated_ms,
tables: {name: {active, lag, error, restarts}}}``; each table also has ``rows_tiered`` and
``batch_id`` (the lake's, None before the first round) since the job prints a line per round
(absent in older files: read as unknown).
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Any, Mapping

from fluss_spark.errors import PartitionNotExist
from fluss_spark.tiering.lake import TIERING_DIR, LakeError, LakeState, list_lake_tables

STATUS_FILE = "status.json"
STATUS_VERSION = 1


#: A table's latest changelog offsets: bucket -> offset; of a partitioned table, partition id
#: -> bucket -> offset, for every partition it has now.
Latest = Mapping[int, Any]


def lag_from_state(manifest: LakeState, latest: Latest) -> int:
    """Snapshot rows not yet tiered plus changelog records between the lake's offsets and
    ``latest`` (the table's latest offsets, ``Latest``): of a partitioned table, the sum over its
    partitions (a partition the lake has no position for yet counts from offset 0; one that is
    gone from the table counts nothing, its rows stay in the lake)."""
    offsets = manifest.fluss_offsets or {}
    if manifest.partition_keys:
        parts = offsets.get("partitions") or {}
        return sum(_unit_lag(parts.get(str(pid)) or {}, ends) for pid, ends in latest.items())
    return _unit_lag(offsets, latest)


def _unit_lag(offsets: Mapping[str, Any], latest: Mapping[int, int]) -> int:
    """The lag of one read unit (an unpartitioned table, or a partition)."""
    log = {int(b): int(o) for b, o in (offsets.get("log") or {}).items()}
    lag = 0
    for b, entry in (offsets.get("snapshot") or {}).items():
        _, row_count, next_row = entry[:3]
        lag += max(0, int(row_count) - int(next_row))
    for b, end in latest.items():
        lag += max(0, int(end) - log.get(int(b), 0))
    return lag


def latest_offsets(cluster: Any, table: str, known: Any = None) -> Latest:
    """``table``'s ``Latest`` offsets from ``cluster`` (a ``Cluster`` or an embedded ``Admin``:
    both have ``get_table`` and ``list_offsets``). ``known``: the table's ``TableInfo`` as
    already fetched; an unpartitioned one saves the metadata call (a partitioned one is fetched
    again for its current partitions)."""
    info = known if known is not None and not known.partitioned else cluster.get_table(table)
    if not info.partitioned:
        return cluster.list_offsets(table, spec="latest")
    out: dict[int, Any] = {}
    for p in info.partitions:
        try:
            out[p.partition_id] = cluster.list_offsets(table, spec="latest", partition=p.name)
        except PartitionNotExist:
            continue        # dropped since it was listed: nothing of it is left to tier
    return out


def write_status(lake_root: str | Path, doc: dict) -> None:
    """Replace ``status.json`` atomically (readers never see half a document)."""
    d = Path(lake_root) / TIERING_DIR
    d.mkdir(parents=True, exist_ok=True)
    tmp = d / f".{STATUS_FILE}.{uuid.uuid4().hex[:8]}"
    tmp.write_text(json.dumps({"version": STATUS_VERSION, **doc}, sort_keys=True))
    os.replace(tmp, d / STATUS_FILE)


def read_status(lake_root: str | Path) -> dict:
    """The job's last status document, or {} when no job has run (or it is unreadable)."""
    p = Path(lake_root) / TIERING_DIR / STATUS_FILE
    try:
        doc = json.loads(p.read_text())
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) and doc.get("version") == STATUS_VERSION else {}


def table_progress(lake_root: str | Path, latest: Mapping[str, Latest] | None = None,
                   lag_unknown: str | None = None) -> list[dict]:
    """One row per lake table: ``table, kind, rows_tiered, lake_rows, lag, reported_lag,
    last_round_ms, batch_id, version, snapshot_complete, active, error, restarts``.

    ``latest`` (table name -> ``Latest``, from the cluster) gives an exact lag;
    without it the lag is the job's last reported one (None when unknown). ``lag_unknown``: why
    the cluster could not be asked (the lag is then None; ``reported_lag`` keeps the job's).
    """
    status = read_status(lake_root)
    per_table = status.get("tables") or {}
    rows: list[dict[str, Any]] = []
    for lake in list_lake_tables(lake_root):
        try:
            m = lake.state()
        except LakeError as e:
            rows.append({"table": lake.name, "error": str(e)})
            continue
        s = per_table.get(m.table) or {}
        lag: int | None
        if latest is not None and m.table in latest:
            lag = lag_from_state(m, latest[m.table])
        elif lag_unknown is not None:
            lag = None          # a stale number would read as "caught up"
        else:
            lag = s.get("lag")
        rows.append({
            "table": m.table, "kind": m.kind, "rows_tiered": m.rows_tiered,
            "lake_rows": m.rows, "lag": lag, "reported_lag": s.get("lag"),
            "last_round_ms": m.commit.committed_ms if m.commit else None,
            "batch_id": m.commit.batch_id if m.commit else None,
            "version": m.table_version, "snapshot_id": m.snapshot_id,
            "snapshot_complete": m.snapshot_complete,
            "active": bool(s.get("active")), "error": s.get("error"),
            "restarts": int(s.get("restarts") or 0),
        })
    return rows


def job_status(lake_root: str | Path, latest: Mapping[str, Latest] | None = None,
               lag_unknown: str | None = None) -> dict[str, Any]:
    """The whole picture for ``fluss-spark tier status``: the job and its tables."""
    status = read_status(lake_root)
    return {"lake": str(lake_root), "job_id": status.get("job_id"),
            "lease_id": status.get("lease_id"), "pid": status.get("pid"),
            "updated_ms": status.get("updated_ms"), "lag_unknown": lag_unknown,
            "tables": table_progress(lake_root, latest, lag_unknown)}


__all__ = ["Latest", "lag_from_state", "latest_offsets", "write_status", "read_status",
           "table_progress", "job_status", "TIERING_DIR"]
