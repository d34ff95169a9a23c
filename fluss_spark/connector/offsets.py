"""The source offset: where every bucket of every table stands, as versioned JSON in the checkpoint.

Version evolution (every version listed here must keep decoding):

- **1** ``{"version": 1, "lease_id": str, "tables": {"<table_id>": {"name": str,
  "snapshot": {"<bucket>": [snapshot_id, row_count, next_row, log_offset]},
  "log": {"<bucket>": next_offset}}}}``
- **2** version 1 plus ``"query": {"holder": str, "startup_mode": str,
  "startup_timestamp_ms": int | null, "layout": "single" | "multi"}``: the identity of the query
  the checkpoint belongs to, compared with the restarted query's options at every restart point.
  ``holder`` is a random id made once per checkpoint: the coordinator records it beside the pins,
  so another query that reuses the lease id cannot move them. A version 1 offset has no identity;
  its lease id stands in for the holder.
- **3** version 2 plus, per table, ``"live": {"<bucket>": log_offset}``: the bucket's KV state
  was read through a live scan session reflecting changelog offsets ``< log_offset`` (read in
  the batch whose end offset first shows the entry; its changelog continues at that offset). An
  offset without live entries is written as version 2, as before.
- **4** version 2 or 3 plus ``"origin": {"<table_id>": {"<bucket>": log_offset}}``: where each
  bucket's changelog stood when a new query started. Only the end offset of a new query's first
  batch carries it: Spark never logs that batch's start, and a run restarted inside it plans
  another initial offset, so the replay takes its start from ``origin`` (and the snapshots the
  end offset names) and reads exactly the rows of the killed run.

A bucket with a ``snapshot`` entry first reads rows ``[0, row_count)`` of that KV snapshot; while
``next_row < row_count`` its ``log`` entry stays at the snapshot's ``log_offset`` (the first
changelog record the snapshot does not contain). Once the snapshot is consumed, ``log`` advances.
Snapshot rows and changelog records are one measure ("offsets") for admission control.

Spark stores offsets verbatim and compares them as JSON text, so keys are always written in the
same (numeric) order.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any, Mapping

from fluss_spark.errors import ConfigError

VERSION = 4
SUPPORTED_VERSIONS = (1, 2, 3, 4)
LAYOUTS = ("single", "multi")

_WHAT_TO_DO = ("The checkpoint (checkpointLocation) belongs to another source or is corrupt; "
               "restart the query with a new checkpointLocation.")


class OffsetError(ConfigError):
    """A checkpointed source offset is malformed, foreign, or from a newer version."""


@dataclass(frozen=True)
class SnapshotPos:
    """How far one bucket's KV snapshot has been read."""

    snapshot_id: int
    row_count: int
    next_row: int
    log_offset: int

    @property
    def complete(self) -> bool:
        return self.next_row >= self.row_count

    @property
    def remaining(self) -> int:
        return max(0, self.row_count - self.next_row)


@dataclass(frozen=True)
class TablePos:
    """One table's buckets: snapshot progress (PK tables in full mode), live scans read (bucket
    -> the log offset the scan reflected) and changelog positions."""

    name: str
    snapshot: Mapping[int, SnapshotPos] = field(default_factory=dict)
    log: Mapping[int, int] = field(default_factory=dict)
    live: Mapping[int, int] = field(default_factory=dict)

    @property
    def snapshot_complete(self) -> bool:
        return all(s.complete for s in self.snapshot.values())


@dataclass(frozen=True)
class QueryIdentity:
    """What a checkpoint's query was started with; a query restarted on it must match."""

    holder: str
    startup_mode: str
    startup_timestamp_ms: int | None
    layout: str

    def to_json(self) -> dict[str, Any]:
        return {"holder": self.holder, "startup_mode": self.startup_mode,
                "startup_timestamp_ms": self.startup_timestamp_ms, "layout": self.layout}


@dataclass(frozen=True)
class SourceOffset:
    """The whole source position; ``tables`` is keyed by table id.

    ``query`` is None only for an offset decoded from version 1 (it is then written as version 1).
    ``origin`` (table id -> bucket -> changelog offset) is set only on the end offset of a new
    query's first batch: that batch's start, which Spark does not log.
    """

    lease_id: str
    tables: Mapping[int, TablePos]
    query: QueryIdentity | None = None
    origin: Mapping[int, Mapping[int, int]] | None = None

    @property
    def holder(self) -> str:
        """The lease holder id of the checkpoint (version 1: the lease id)."""
        return self.query.holder if self.query is not None else self.lease_id

    def with_tables(self, tables: Mapping[int, TablePos]) -> "SourceOffset":
        return SourceOffset(self.lease_id, tables, self.query, self.origin)

    def with_origin(self, start: "SourceOffset") -> "SourceOffset":
        """This offset as the end of a new query's first batch, which starts at ``start``."""
        return SourceOffset(self.lease_id, self.tables, self.query,
                            {tid: dict(t.log) for tid, t in start.tables.items()})

    def first_batch_start(self) -> "SourceOffset | None":
        """The start of the first batch this offset ends (None unless it carries ``origin``):
        each snapshot it names from its first row, each changelog from ``origin``."""
        if self.origin is None:
            return None
        return SourceOffset(self.lease_id, {
            tid: TablePos(t.name, {b: replace(p, next_row=0) for b, p in t.snapshot.items()},
                          dict(self.origin.get(tid, t.log)))
            for tid, t in self.tables.items()}, self.query)

    def to_json(self) -> dict[str, Any]:
        """The JSON-ready dict Spark checkpoints (string keys, numeric key order)."""
        tables: dict[str, dict[str, Any]] = {}
        for tid in sorted(self.tables):
            t = self.tables[tid]
            tables[str(tid)] = {
                "name": t.name,
                "snapshot": {str(b): [s.snapshot_id, s.row_count, s.next_row, s.log_offset]
                             for b, s in sorted(t.snapshot.items())},
                "log": {str(b): int(o) for b, o in sorted(t.log.items())},
            }
            if t.live:
                tables[str(tid)]["live"] = {str(b): int(o) for b, o in sorted(t.live.items())}
        if self.query is None:
            return {"version": 1, "lease_id": self.lease_id, "tables": tables}
        live = any(t.live for t in self.tables.values())
        out = {"version": VERSION if self.origin is not None else 3 if live else 2,
               "lease_id": self.lease_id, "query": self.query.to_json(), "tables": tables}
        if self.origin is not None:
            out["origin"] = {str(tid): {str(b): int(o) for b, o in sorted(logs.items())}
                             for tid, logs in sorted(self.origin.items())}
        return out

    def dumps(self) -> str:
        return json.dumps(self.to_json())

    def table_by_name(self, name: str) -> tuple[int, TablePos] | None:
        for tid, t in self.tables.items():
            if t.name == name:
                return tid, t
        return None


def decode(value: Any) -> SourceOffset:
    """Parse a checkpointed offset (dict or JSON text); raise ``OffsetError`` saying what to do."""
    if isinstance(value, (str, bytes)):
        try:
            value = json.loads(value)
        except ValueError as e:
            raise OffsetError(f"the fluss source offset is not JSON ({e}). {_WHAT_TO_DO}") from None
    if not isinstance(value, dict) or "version" not in value:
        raise OffsetError(f"the offset {_preview(value)} is not a fluss source offset (no "
                          f"'version'). {_WHAT_TO_DO}")
    version = value["version"]
    if not isinstance(version, int) or isinstance(version, bool):
        raise OffsetError(f"the fluss source offset has version {version!r}, not a number. "
                          f"{_WHAT_TO_DO}")
    if version not in SUPPORTED_VERSIONS:
        raise OffsetError(f"the fluss source offset has version {version}, this fluss_spark reads "
                          f"versions {list(SUPPORTED_VERSIONS)}; upgrade fluss_spark or restart "
                          f"with a new checkpointLocation")
    offset = _decode_v1(value)
    if version >= 2:
        offset = SourceOffset(offset.lease_id, offset.tables, _decode_query(value.get("query")),
                              _decode_origin(value["origin"]) if "origin" in value else None)
    return offset


def _decode_origin(raw: Any) -> dict[int, dict[int, int]]:
    if not isinstance(raw, dict) or not all(isinstance(v, dict) for v in raw.values()):
        raise OffsetError(f"the fluss source offset's 'origin' is not a map of tables to bucket "
                          f"offsets. {_WHAT_TO_DO}")
    return dict(sorted((_int_key(tid, "table id"), _offsets(f"id {tid}", logs, "origin offset"))
                       for tid, logs in raw.items()))


def _decode_query(raw: Any) -> QueryIdentity:
    if not isinstance(raw, dict):
        raise OffsetError(f"the fluss source offset has no 'query' map. {_WHAT_TO_DO}")
    holder, mode = raw.get("holder"), raw.get("startup_mode")
    ts, layout = raw.get("startup_timestamp_ms"), raw.get("layout")
    if not isinstance(holder, str) or not holder or not isinstance(mode, str):
        raise OffsetError(f"the fluss source offset's 'query' has no holder or startup_mode. "
                          f"{_WHAT_TO_DO}")
    if ts is not None and not _is_int(ts):
        raise OffsetError(f"the fluss source offset's startup_timestamp_ms {ts!r} is not an "
                          f"integer. {_WHAT_TO_DO}")
    if layout not in LAYOUTS:
        raise OffsetError(f"the fluss source offset's layout {layout!r} is not one of "
                          f"{list(LAYOUTS)}. {_WHAT_TO_DO}")
    return QueryIdentity(holder, mode, ts, layout)


def _decode_v1(value: dict[str, Any]) -> SourceOffset:
    lease_id = value.get("lease_id")
    if not isinstance(lease_id, str) or not lease_id:
        raise OffsetError(f"the fluss source offset has no 'lease_id'. {_WHAT_TO_DO}")
    raw_tables = value.get("tables")
    if not isinstance(raw_tables, dict):
        raise OffsetError(f"the fluss source offset has no 'tables' map. {_WHAT_TO_DO}")
    tables: dict[int, TablePos] = {}
    for tid_text, t in raw_tables.items():
        tid = _int_key(tid_text, "table id")
        if not isinstance(t, dict) or not isinstance(t.get("name"), str):
            raise OffsetError(f"table {tid_text} of the fluss source offset has no name. "
                              f"{_WHAT_TO_DO}")
        snap_raw, log_raw = t.get("snapshot", {}), t.get("log", {})
        if not isinstance(snap_raw, dict) or not isinstance(log_raw, dict):
            raise OffsetError(f"table {t['name']!r} of the fluss source offset has a malformed "
                              f"'snapshot' or 'log' map. {_WHAT_TO_DO}")
        snapshot = {}
        for b_text, entry in snap_raw.items():
            b = _int_key(b_text, "bucket")
            if (not isinstance(entry, list) or len(entry) != 4
                    or not all(_is_int(x) for x in entry)):
                raise OffsetError(f"table {t['name']!r} bucket {b}: snapshot position {entry!r} "
                                  f"is not [snapshot_id, row_count, next_row, log_offset]. "
                                  f"{_WHAT_TO_DO}")
            snapshot[b] = SnapshotPos(*entry)
        log = _offsets(t["name"], log_raw, "log offset")
        live_raw = t.get("live", {})
        if not isinstance(live_raw, dict):
            raise OffsetError(f"table {t['name']!r} of the fluss source offset has a malformed "
                              f"'live' map. {_WHAT_TO_DO}")
        live = _offsets(t["name"], live_raw, "live scan log offset")
        tables[tid] = TablePos(t["name"], dict(sorted(snapshot.items())), log, live)
    return SourceOffset(lease_id, dict(sorted(tables.items())))


def _offsets(table: str, raw: dict[str, Any], what: str) -> dict[int, int]:
    """``{"<bucket>": offset}`` as ints, in bucket order."""
    out = {}
    for b_text, off in raw.items():
        b = _int_key(b_text, "bucket")
        if not _is_int(off) or off < 0:
            raise OffsetError(f"table {table!r} bucket {b}: {what} {off!r} is not a "
                              f"non-negative integer. {_WHAT_TO_DO}")
        out[b] = off
    return dict(sorted(out.items()))


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _int_key(text: Any, what: str) -> int:
    try:
        return int(text)
    except (TypeError, ValueError):
        raise OffsetError(f"the fluss source offset has {what} key {text!r}, not a number. "
                          f"{_WHAT_TO_DO}") from None


def _preview(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."


def rows_between(start: SourceOffset, end: SourceOffset) -> dict[int, int]:
    """Snapshot rows + changelog records in ``(start, end]``, per table id."""
    out = {}
    for tid, e in end.tables.items():
        s = start.tables.get(tid)
        total = 0
        for b, es in e.snapshot.items():
            ss = s.snapshot.get(b) if s else None
            base = ss.next_row if ss and ss.snapshot_id == es.snapshot_id else 0
            total += max(0, es.next_row - base)
        for b, eo in e.log.items():
            if not live_read_in(s, e, b):    # its changelog only starts after the live scan
                total += max(0, eo - log_start(s, e, b))
        out[tid] = total
    return out


def live_read_in(start: TablePos | None, end: TablePos, bucket: int) -> bool:
    """Whether the batch ``start -> end`` reads ``bucket``'s KV state through a live scan."""
    return bucket in end.live and (start is None or start.live.get(bucket) != end.live[bucket])


def log_start(start: TablePos | None, end: TablePos, bucket: int) -> int:
    """Where the changelog of ``bucket`` is read from in a batch ``start -> end``.

    If the bucket's snapshot changed between them (a lost snapshot replaced by a newer one), its
    changelog restarts at the new snapshot's ``log_offset``.
    """
    es = end.snapshot.get(bucket)
    ss = start.snapshot.get(bucket) if start else None
    if es is not None and (ss is None or ss.snapshot_id != es.snapshot_id):
        return es.log_offset
    if start is None or bucket not in start.log:
        return es.log_offset if es is not None else end.log.get(bucket, 0)
    return start.log[bucket]
