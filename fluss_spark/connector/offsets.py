"""The source offset: where every bucket of every read unit stands, as versioned JSON in the
checkpoint.

A **read unit** is an unpartitioned table or one partition of a partitioned table, keyed
``(table id, partition id)`` with ``None`` for an unpartitioned table (``UnitKey``). Each unit's
position has the same shape: KV snapshot progress, changelog offsets and live scans per bucket.

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
- **5** version 2, 3 or 4 plus partitioned tables. A partitioned table's entry is
  ``{"name": str, "partition_keys": [str], "partitions": {"<partition_id>": {"name": str,
  "snapshot": ..., "log": ..., "live": ...}}}``: one position per partition, shaped like an
  unpartitioned table's, under the partition's name (``2026-11-25``); optionally ``"gone":
  {"partitions": int, "unread": int}``, how many of its partitions disappeared while the query
  read them and how many of their records were known and not read. Its ``origin`` entry is
  ``{"partitions": {"<partition_id>": {"<bucket>": log_offset}}}``. An offset without
  partitioned tables is written as version 2, 3 or 4, as before.
- **6** version 2 to 5 plus ``"columns": {"<table name>": [[name, type], ...]}`` in ``query``:
  each table's columns (Arrow type text) as the query run saw them when it started. A run
  restarted on the checkpoint accepts a table whose columns were only appended to since, and
  refuses any other change. An offset without them is written as before.

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
from typing import Any, Iterable, Mapping

from fluss_spark.client.cluster import partition_spec
from fluss_spark.errors import ConfigError

VERSION = 6
SUPPORTED_VERSIONS = (1, 2, 3, 4, 5, 6)
LAYOUTS = ("single", "multi")

#: ``(table id, partition id)`` of a read unit; the partition id is None for an unpartitioned
#: table (a table is either partitioned or not, so keys of one table never mix None and ids).
UnitKey = tuple[int, "int | None"]

_WHAT_TO_DO = ("The checkpoint (checkpointLocation) belongs to another source or is corrupt; "
               "restart the query with a new checkpointLocation.")


class OffsetError(ConfigError):
    """A checkpointed source offset is malformed, foreign, or from a newer version."""


def unit_order(key: UnitKey) -> tuple[int, int]:
    """A sort key of unit keys: by table id, then partition id."""
    return key[0], -1 if key[1] is None else key[1]


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
    """One read unit's buckets: snapshot progress (PK tables in full mode), live scans read
    (bucket -> the log offset the scan reflected) and changelog positions.

    A partitioned table's own entry holds no buckets: ``partition_keys`` names its keys and
    ``partitions`` holds one position per partition id, each named by the partition's name.
    ``gone``: (partitions that disappeared while the query read them, their records known and
    not read).
    """

    name: str
    snapshot: Mapping[int, SnapshotPos] = field(default_factory=dict)
    log: Mapping[int, int] = field(default_factory=dict)
    live: Mapping[int, int] = field(default_factory=dict)
    partition_keys: tuple[str, ...] = ()
    partitions: Mapping[int, "TablePos"] = field(default_factory=dict)
    gone: tuple[int, int] = (0, 0)

    @property
    def partitioned(self) -> bool:
        return bool(self.partition_keys)

    @property
    def snapshot_complete(self) -> bool:
        return (all(s.complete for s in self.snapshot.values())
                and all(p.snapshot_complete for p in self.partitions.values()))

    @property
    def has_snapshot(self) -> bool:
        """Whether the unit (any partition of a partitioned table) reads a KV snapshot."""
        return bool(self.snapshot) or any(p.snapshot for p in self.partitions.values())


@dataclass(frozen=True)
class QueryIdentity:
    """What a checkpoint's query was started with; a query restarted on it must match."""

    holder: str
    startup_mode: str
    startup_timestamp_ms: int | None
    layout: str
    #: Table name -> its columns as (name, Arrow type text) when the run started (None: not
    #: recorded, an offset before version 6).
    columns: Mapping[str, tuple[tuple[str, str], ...]] | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"holder": self.holder, "startup_mode": self.startup_mode,
                               "startup_timestamp_ms": self.startup_timestamp_ms,
                               "layout": self.layout}
        if self.columns is not None:
            out["columns"] = {n: [list(c) for c in cols]
                              for n, cols in sorted(self.columns.items())}
        return out


@dataclass(frozen=True)
class SourceOffset:
    """The whole source position; ``tables`` is keyed by table id.

    ``query`` is None only for an offset decoded from version 1 (it is then written as version 1).
    ``origin`` (unit key -> bucket -> changelog offset) is set only on the end offset of a new
    query's first batch: that batch's start, which Spark does not log.
    """

    lease_id: str
    tables: Mapping[int, TablePos]
    query: QueryIdentity | None = None
    origin: Mapping[UnitKey, Mapping[int, int]] | None = None

    @property
    def holder(self) -> str:
        """The lease holder id of the checkpoint (version 1: the lease id)."""
        return self.query.holder if self.query is not None else self.lease_id

    def units(self) -> dict[UnitKey, TablePos]:
        """Every read unit's position, in key order."""
        out: dict[UnitKey, TablePos] = {}
        for tid in sorted(self.tables):
            t = self.tables[tid]
            if t.partitioned:
                for pid in sorted(t.partitions):
                    out[(tid, pid)] = t.partitions[pid]
            else:
                out[(tid, None)] = t
        return out

    def with_units(self, units: Mapping[UnitKey, TablePos],
                   drop: Iterable[UnitKey] = ()) -> "SourceOffset":
        """This offset with the positions of ``units`` (a partition not there yet is added) and
        without the partitions ``drop`` names."""
        dropped = set(drop)
        tables: dict[int, TablePos] = {}
        for tid, t in self.tables.items():
            if t.partitioned:
                parts = {pid: units.get((tid, pid), p) for pid, p in t.partitions.items()}
                parts.update({pid: u for (k, pid), u in units.items()
                              if k == tid and pid is not None})
                tables[tid] = replace(t, partitions={pid: parts[pid] for pid in sorted(parts)
                                                     if (tid, pid) not in dropped})
            else:
                tables[tid] = units.get((tid, None), t)
        return self.with_tables(tables)

    def table_name(self, key: UnitKey) -> str:
        return self.tables[key[0]].name

    def partition_name(self, key: UnitKey) -> str | None:
        """The name a cluster call takes for the unit's partition (None: unpartitioned)."""
        return None if key[1] is None else self.tables[key[0]].partitions[key[1]].name

    def where(self, key: UnitKey, name: str | None = None) -> str:
        """The unit for messages: ``table 'db.t'`` or ``table 'db.t' partition dt=2026-11-25``
        (``name``: the partition's name where the offset no longer holds the unit)."""
        t = self.tables[key[0]]
        if key[1] is None:
            return f"table {t.name!r}"
        name = name if name is not None else t.partitions[key[1]].name
        return f"table {t.name!r} partition {partition_spec(t.partition_keys, name)}"

    def with_tables(self, tables: Mapping[int, TablePos]) -> "SourceOffset":
        return SourceOffset(self.lease_id, tables, self.query, self.origin)

    def with_origin(self, start: "SourceOffset") -> "SourceOffset":
        """This offset as the end of a new query's first batch, which starts at ``start``."""
        return SourceOffset(self.lease_id, self.tables, self.query,
                            {k: dict(u.log) for k, u in start.units().items()})

    def first_batch_start(self) -> "SourceOffset | None":
        """The start of the first batch this offset ends (None unless it carries ``origin``):
        each snapshot it names from its first row, each changelog from ``origin``."""
        if self.origin is None:
            return None
        origin = self.origin
        units = {k: TablePos(u.name, {b: replace(p, next_row=0) for b, p in u.snapshot.items()},
                             dict(origin.get(k, u.log)))
                 for k, u in self.units().items()}
        return SourceOffset(self.lease_id, self.with_units(units).tables, self.query)

    def to_json(self) -> dict[str, Any]:
        """The JSON-ready dict Spark checkpoints (string keys, numeric key order)."""
        tables: dict[str, dict[str, Any]] = {}
        for tid in sorted(self.tables):
            t = self.tables[tid]
            if not t.partitioned:
                tables[str(tid)] = _unit_json(t)
                continue
            entry: dict[str, Any] = {
                "name": t.name, "partition_keys": list(t.partition_keys),
                "partitions": {str(pid): _unit_json(p) for pid, p in sorted(t.partitions.items())}}
            if t.gone != (0, 0):
                entry["gone"] = {"partitions": t.gone[0], "unread": t.gone[1]}
            tables[str(tid)] = entry
        partitioned = any(t.partitioned for t in self.tables.values())
        if self.query is None and not partitioned:
            return {"version": 1, "lease_id": self.lease_id, "tables": tables}
        live = any(u.live for u in self.units().values())
        version = 5 if partitioned else 4 if self.origin is not None else 3 if live else 2
        if self.query is not None and self.query.columns is not None:
            version = 6
        out: dict[str, Any] = {"version": version, "lease_id": self.lease_id}
        if self.query is not None:
            out["query"] = self.query.to_json()
        out["tables"] = tables
        if self.origin is not None:
            out["origin"] = _origin_json(self.origin)
        return out

    def dumps(self) -> str:
        return json.dumps(self.to_json())

    def table_by_name(self, name: str) -> tuple[int, TablePos] | None:
        for tid, t in self.tables.items():
            if t.name == name:
                return tid, t
        return None


def _unit_json(u: TablePos) -> dict[str, Any]:
    out: dict[str, Any] = {
        "name": u.name,
        "snapshot": {str(b): [s.snapshot_id, s.row_count, s.next_row, s.log_offset]
                     for b, s in sorted(u.snapshot.items())},
        "log": {str(b): int(o) for b, o in sorted(u.log.items())},
    }
    if u.live:
        out["live"] = {str(b): int(o) for b, o in sorted(u.live.items())}
    return out


def _origin_json(origin: Mapping[UnitKey, Mapping[int, int]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for (tid, pid), logs in sorted(origin.items(), key=lambda kv: unit_order(kv[0])):
        offsets = {str(b): int(o) for b, o in sorted(logs.items())}
        if pid is None:
            out[str(tid)] = offsets
        else:
            out.setdefault(str(tid), {"partitions": {}})["partitions"][str(pid)] = offsets
    return out


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
    offset = _decode_tables(value, version)
    if version >= 2:
        offset = SourceOffset(offset.lease_id, offset.tables, _decode_query(value.get("query")),
                              _decode_origin(value["origin"]) if "origin" in value else None)
    return offset


def _decode_origin(raw: Any) -> dict[UnitKey, dict[int, int]]:
    if not isinstance(raw, dict) or not all(isinstance(v, dict) for v in raw.values()):
        raise OffsetError(f"the fluss source offset's 'origin' is not a map of tables to bucket "
                          f"offsets. {_WHAT_TO_DO}")
    out: dict[UnitKey, dict[int, int]] = {}
    for tid_text, logs in raw.items():
        tid = _int_key(tid_text, "table id")
        if "partitions" not in logs:
            out[(tid, None)] = _offsets(f"id {tid}", logs, "origin offset")
            continue
        parts = logs["partitions"]
        if not isinstance(parts, dict) or not all(isinstance(v, dict) for v in parts.values()):
            raise OffsetError(f"the fluss source offset's 'origin' of table id {tid} is not a "
                              f"map of partitions to bucket offsets. {_WHAT_TO_DO}")
        for pid_text, offsets in parts.items():
            out[(tid, _int_key(pid_text, "partition id"))] = _offsets(
                f"id {tid} partition id {pid_text}", offsets, "origin offset")
    return dict(sorted(out.items(), key=lambda kv: unit_order(kv[0])))


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
    return QueryIdentity(holder, mode, ts, layout, _decode_columns(raw.get("columns")))


def _decode_columns(raw: Any) -> dict[str, tuple[tuple[str, str], ...]] | None:
    if raw is None:
        return None
    ok = isinstance(raw, dict) and all(
        isinstance(name, str) and isinstance(cols, list) and all(
            isinstance(c, list) and len(c) == 2 and all(isinstance(x, str) for x in c)
            for c in cols) for name, cols in raw.items())
    if not ok:
        raise OffsetError(f"the fluss source offset's 'columns' {_preview(raw)} is not a map of "
                          f"tables to [name, type] lists. {_WHAT_TO_DO}")
    return {name: tuple((c[0], c[1]) for c in cols) for name, cols in raw.items()}


def _decode_tables(value: dict[str, Any], version: int) -> SourceOffset:
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
        if version >= 5 and "partitions" in t:
            tables[tid] = _decode_partitioned(t)
        else:
            tables[tid] = _decode_unit(repr(t["name"]), t)
    return SourceOffset(lease_id, dict(sorted(tables.items())))


def _decode_partitioned(t: dict[str, Any]) -> TablePos:
    what = f"partitioned table {t['name']!r} of the fluss source offset"
    keys, parts, gone = t.get("partition_keys"), t["partitions"], t.get("gone")
    if (not isinstance(keys, list) or not keys
            or not all(isinstance(k, str) and k for k in keys)):
        raise OffsetError(f"{what} has no 'partition_keys' list. {_WHAT_TO_DO}")
    if not isinstance(parts, dict):
        raise OffsetError(f"{what} has a malformed 'partitions' map. {_WHAT_TO_DO}")
    if gone is not None and (not isinstance(gone, dict) or not all(
            _is_int(gone.get(k)) and gone[k] >= 0 for k in ("partitions", "unread"))):
        raise OffsetError(f"{what} has a malformed 'gone' count {gone!r}. {_WHAT_TO_DO}")
    positions = {}
    for pid_text, p in parts.items():
        pid = _int_key(pid_text, "partition id")
        if not isinstance(p, dict) or not isinstance(p.get("name"), str) or not p["name"]:
            raise OffsetError(f"partition {pid_text} of {what} has no name. {_WHAT_TO_DO}")
        positions[pid] = _decode_unit(f"{t['name']!r} partition {p['name']!r}", p)
    return TablePos(t["name"], partition_keys=tuple(keys),
                    partitions=dict(sorted(positions.items())),
                    gone=(gone["partitions"], gone["unread"]) if gone else (0, 0))


def _decode_unit(label: str, t: dict[str, Any]) -> TablePos:
    """One unit's position; ``label`` names it in errors (``'db.t'``)."""
    snap_raw, log_raw = t.get("snapshot", {}), t.get("log", {})
    if not isinstance(snap_raw, dict) or not isinstance(log_raw, dict):
        raise OffsetError(f"table {label} of the fluss source offset has a malformed "
                          f"'snapshot' or 'log' map. {_WHAT_TO_DO}")
    snapshot = {}
    for b_text, entry in snap_raw.items():
        b = _int_key(b_text, "bucket")
        if (not isinstance(entry, list) or len(entry) != 4
                or not all(_is_int(x) for x in entry)):
            raise OffsetError(f"table {label} bucket {b}: snapshot position {entry!r} "
                              f"is not [snapshot_id, row_count, next_row, log_offset]. "
                              f"{_WHAT_TO_DO}")
        snapshot[b] = SnapshotPos(*entry)
    log = _offsets(label, log_raw, "log offset")
    live_raw = t.get("live", {})
    if not isinstance(live_raw, dict):
        raise OffsetError(f"table {label} of the fluss source offset has a malformed "
                          f"'live' map. {_WHAT_TO_DO}")
    live = _offsets(label, live_raw, "live scan log offset")
    return TablePos(t["name"], dict(sorted(snapshot.items())), log, live)


def _offsets(table: str, raw: dict[str, Any], what: str) -> dict[int, int]:
    """``{"<bucket>": offset}`` as ints, in bucket order; ``table`` names the unit in errors."""
    out = {}
    for b_text, off in raw.items():
        b = _int_key(b_text, "bucket")
        if not _is_int(off) or off < 0:
            raise OffsetError(f"table {table} bucket {b}: {what} {off!r} is not a "
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
    """Snapshot rows + changelog records in ``(start, end]``, per table id (summed over a
    partitioned table's partitions)."""
    out = {tid: 0 for tid in end.tables}
    before = start.units()
    for key, e in end.units().items():
        s = before.get(key)
        total = 0
        for b, es in e.snapshot.items():
            ss = s.snapshot.get(b) if s else None
            base = ss.next_row if ss and ss.snapshot_id == es.snapshot_id else 0
            total += max(0, es.next_row - base)
        for b, eo in e.log.items():
            if not live_read_in(s, e, b):    # its changelog only starts after the live scan
                total += max(0, eo - log_start(s, e, b))
        out[key[0]] += total
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
