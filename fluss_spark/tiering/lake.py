"""The lake: one Apache Iceberg table per Fluss table, written with pyiceberg, one commit per round.

Catalog: pyiceberg's SQL catalog on SQLite (``<lake>/_tiering/catalog.db``, warehouse ``<lake>``)
unless ``<lake>/_tiering/lake.json`` names other catalog properties (a REST catalog, an S3
warehouse: anything ``pyiceberg.catalog.load_catalog`` takes; secrets come from pyiceberg's
``PYICEBERG_CATALOG__FLUSS_LAKE__*`` environment variables, never from the file). Fluss table
``db.t`` is Iceberg table ``db.t``; with a local warehouse its location is ``<lake>/db/t``.

Each round is ONE catalog commit (a pyiceberg transaction): the data and, in the summary of the
round's last snapshot, the Fluss position the table now equals. Summary properties (version 1,
``fluss.summary-version``): ``fluss.query-id``, ``fluss.batch-id`` (the streaming round),
``fluss.lease-id``, ``fluss.offsets`` (JSON ``{log: {bucket: next_offset}, snapshot: {bucket:
[snapshot_id, row_count, next_row]}}``), ``fluss.snapshot-complete``, ``fluss.rows-in``,
``fluss.rows-tiered``, ``fluss.committed-ms``, ``fluss.operation`` (``round``, ``compact``,
``migrate``). A PK round is one overwrite snapshot: the data files holding a key it touches are
replaced by copies without those keys (copy-on-write), and the keys' last rows are added.

Table properties (version 1, ``fluss.format-version``): ``fluss.table``, ``fluss.table-id``,
``fluss.kind``, ``fluss.primary-key``, ``fluss.bucket-key``, ``fluss.num-buckets`` and
``fluss.arrow-schema`` (the Fluss table's Arrow schema, base64 IPC: Iceberg has no 8/16-bit
integers and stores timestamps in microseconds; reads are cast back to the Fluss types). A
partitioned Fluss table's copy has an identity partition spec on its partition keys
(``fluss_spark/tiering/lake_partitions.py``); its ``fluss.offsets`` hold one such position per
partition: ``{partitions: {partition_id: {name, log, snapshot}}}`` (summary version 2).
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import pyarrow as pa

from fluss_spark.tiering.apply import conform
from fluss_spark.tiering.lake_catalog import (CATALOG_NAME, LAKE_FILE, TIERING_DIR, CommitConflict,
                                              LakeError, catalog_properties,
                                              default_catalog_properties, find_lake_root,
                                              identifier, open_catalog, table_dir,
                                              write_lake_file)
from fluss_spark.tiering.lake_files import delete_unused, referenced_files
from fluss_spark.tiering.lake_partitions import (check_partitioning, partition_spec,
                                                 spec_columns, touched_partitions)
from fluss_spark.tiering.round_files import RoundFiles, RoundWriter
from fluss_spark.tiering.lake_schema import (to_storage, decode_schema, encode_schema,
                                             iceberg_schema)

log = logging.getLogger(__name__)

KIND_PK, KIND_LOG = "primary_key", "log"
FORMAT_VERSION = "1"
SUMMARY_VERSION = "1"
#: Rounds of partitioned tables: offsets per partition.
PARTITIONED_SUMMARY_VERSION = "2"

P = "fluss."
(K_QUERY, K_BATCH, K_LEASE, K_OFFSETS, K_DONE, K_ROWS_IN, K_ROWS_TIERED, K_COMMITTED_MS,
 K_OPERATION, K_SUMMARY_VERSION) = (
    P + "query-id", P + "batch-id", P + "lease-id", P + "offsets", P + "snapshot-complete",
    P + "rows-in", P + "rows-tiered", P + "committed-ms", P + "operation", P + "summary-version")
(T_TABLE, T_TABLE_ID, T_KIND, T_PK, T_BUCKET_KEY, T_NUM_BUCKETS, T_SCHEMA, T_FORMAT) = (
    P + "table", P + "table-id", P + "kind", P + "primary-key", P + "bucket-key",
    P + "num-buckets", P + "arrow-schema", P + "format-version")

#: Runs a picklable function over items, wherever (in process, or one Spark task per item),
#: and returns the results in order.
MapTasks = Callable[[Callable[[Any], Any], list], list]

#: Commits lost to a maintenance commit (compaction) of the same table are tried again.
COMMIT_ATTEMPTS = 4



# -- state -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Commit:
    """Which streaming round produced a snapshot: the query (checkpoint) id and its batch id."""

    query_id: str
    batch_id: int
    committed_ms: int
    rows_in: int
    lease_id: str | None = None


@dataclass(frozen=True)
class LakeState:
    """A lake table at one Iceberg snapshot: the Fluss table it copies and the Fluss position."""

    table: str
    table_id: int
    kind: str
    schema: pa.Schema
    primary_key: tuple[str, ...] = ()
    bucket_key: tuple[str, ...] = ()
    num_buckets: int = 1
    #: The identity partition columns of the lake table (a partitioned Fluss table's keys).
    partition_keys: tuple[str, ...] = ()
    snapshot_id: int | None = None
    #: Snapshots in the table's history (all of them, rounds and maintenance).
    table_version: int = 0
    rows: int = 0
    data_files: int = 0
    rows_tiered: int = 0
    commit: Commit | None = None
    operation: str | None = None
    fluss_offsets: dict = field(default_factory=dict, hash=False, compare=False)
    snapshot_complete: bool = True

    @property
    def is_pk(self) -> bool:
        return self.kind == KIND_PK


def _summary_props(summary: Any) -> dict[str, str]:
    if summary is None:
        return {}
    d = summary.additional_properties if hasattr(summary, "additional_properties") else summary
    return {str(k): str(v) for k, v in dict(d).items()}


def _state(tbl: Any, snapshot: Any = None, where: str = "") -> LakeState:
    props = tbl.properties
    if props.get(T_FORMAT) is None:
        raise LakeError(f"Iceberg table {where} was not written by the tiering job (no "
                        f"{T_FORMAT} property)")
    if props[T_FORMAT] != FORMAT_VERSION:
        raise LakeError(f"Iceberg table {where} has {T_FORMAT} {props[T_FORMAT]!r}; this "
                        f"fluss_spark writes {FORMAT_VERSION}: upgrade fluss_spark")
    kind = props[T_KIND]
    snap = snapshot if snapshot is not None else tbl.current_snapshot()
    s = _summary_props(snap.summary) if snap is not None else {}
    base = dict(table=props[T_TABLE], table_id=int(props[T_TABLE_ID]), kind=kind,
                schema=decode_schema(props[T_SCHEMA]),
                primary_key=tuple(json.loads(props.get(T_PK, "[]"))),
                bucket_key=tuple(json.loads(props.get(T_BUCKET_KEY, "[]"))),
                num_buckets=int(props.get(T_NUM_BUCKETS, "1")),
                partition_keys=spec_columns(tbl.spec(), tbl.schema()),
                table_version=len(tbl.metadata.snapshots))
    if snap is None:
        return LakeState(**base, snapshot_complete=kind == KIND_LOG)
    commit = None
    if K_QUERY in s:
        commit = Commit(s[K_QUERY], int(s[K_BATCH]), int(s.get(K_COMMITTED_MS, "0")),
                        int(s.get(K_ROWS_IN, "0")), s.get(K_LEASE) or None)
    return LakeState(**base, snapshot_id=snap.snapshot_id,
                     rows=int(s.get("total-records", "0")),
                     data_files=int(s.get("total-data-files", "0")),
                     rows_tiered=int(s.get(K_ROWS_TIERED, "0")), commit=commit,
                     operation=s.get(K_OPERATION),
                     fluss_offsets=json.loads(s.get(K_OFFSETS, "{}")),
                     snapshot_complete=s.get(K_DONE, "true" if kind == KIND_LOG else "false")
                     == "true")


@dataclass(frozen=True)
class Round:
    """A snapshot that ends a round (or copies one's summary: compaction, migration)."""

    snapshot_id: int
    timestamp_ms: int
    state: LakeState


# -- the table ---------------------------------------------------------------------------------
class LakeTable:
    """The Iceberg copy of one Fluss table in a lake.

    ``LakeTable.open(lake_root, "db.t")``, or ``LakeTable(table_dir(lake_root, "db.t"))`` for a
    local lake. One writer at a time (the tiering job holds the lake's job lock); a second
    committer is detected by the catalog's optimistic concurrency (``CommitConflict``).
    ``clock`` returns epoch seconds (injectable for tests).
    """

    def __init__(self, path: str | Path | None = None, *, lake_root: str | Path | None = None,
                 table: str | None = None, clock: Callable[[], float] = time.time):
        if path is not None:
            lake_root = find_lake_root(path)
            rel = Path(path).absolute().relative_to(lake_root)
            table = ".".join(rel.parts)
        if lake_root is None or table is None:
            raise LakeError("a LakeTable needs a table directory, or a lake root and a table")
        self.lake_root = Path(lake_root).absolute()
        self.name = table
        self.namespace, self.short_name = identifier(table)
        self.clock = clock

    @classmethod
    def open(cls, lake_root: str | Path, table: str, **kw) -> "LakeTable":
        return cls(lake_root=lake_root, table=table, **kw)

    @property
    def path(self) -> Path:
        """The table's directory under a local warehouse."""
        return table_dir(self.lake_root, self.name)

    @property
    def catalog(self):
        return open_catalog(self.lake_root)

    def __repr__(self) -> str:
        return f"LakeTable({self.lake_root}, {self.name!r})"

    # -- reading --------------------------------------------------------------------------------
    def iceberg(self):
        """The pyiceberg ``Table`` (freshly loaded from the catalog)."""
        from pyiceberg.exceptions import NoSuchTableError
        try:
            return self.catalog.load_table((self.namespace, self.short_name))
        except NoSuchTableError:
            hint = ""
            if (self.path / "_manifest").is_dir():
                hint = (" It is in the old Parquet-manifest format: convert it with "
                        f"`fluss-spark tier migrate --lake {self.lake_root}`.")
            raise LakeError(f"no lake table {self.name} in lake {self.lake_root}; run the "
                            f"tiering job first.{hint}") from None

    def exists(self) -> bool:
        from pyiceberg.exceptions import NoSuchTableError
        try:
            self.catalog.load_table((self.namespace, self.short_name))
            return True
        except NoSuchTableError:
            return False

    def state(self, snapshot_id: int | None = None) -> LakeState:
        """The table at its current snapshot (or ``snapshot_id``)."""
        tbl = self.iceberg()
        snap = None
        if snapshot_id is not None:
            snap = tbl.snapshot_by_id(snapshot_id)
            if snap is None:
                raise LakeError(f"lake table {self.name} has no snapshot {snapshot_id}")
        return _state(tbl, snap, self.name)

    def rounds(self) -> list[Round]:
        """The snapshots of the current branch that end a round (oldest first): time travel
        to one of them shows the table at that round's Fluss offsets."""
        tbl = self.iceberg()
        out = []
        for snap in _ancestry(tbl):
            if K_OFFSETS in _summary_props(snap.summary):
                out.append(Round(snap.snapshot_id, snap.timestamp_ms, _state(tbl, snap, self.name)))
        return out[::-1]

    def read(self, snapshot_id: int | None = None) -> pa.Table:
        """The table's rows at its current snapshot (or ``snapshot_id``), in the Fluss types."""
        tbl = self.iceberg()
        schema = _nullable(decode_schema(tbl.properties[T_SCHEMA]))
        if snapshot_id is None and tbl.current_snapshot() is None:
            return schema.empty_table()
        if snapshot_id is not None and tbl.snapshot_by_id(snapshot_id) is None:
            raise LakeError(f"lake table {self.name} has no snapshot {snapshot_id} (expired?)")
        t = tbl.scan(snapshot_id=snapshot_id).to_arrow()
        return t.select(schema.names).cast(schema)

    # -- writing --------------------------------------------------------------------------------
    def create(self, *, table: str, table_id: int, schema: pa.Schema,
               primary_key: Sequence[str] = (), bucket_key: Sequence[str] = (),
               num_buckets: int = 1, partition_keys: Sequence[str] = ()) -> LakeState:
        """Create the Iceberg table (identity-partitioned on ``partition_keys``), or check that
        an existing one copies the same table, partitioned alike."""
        from pyiceberg.exceptions import NamespaceAlreadyExistsError, TableAlreadyExistsError
        if self.exists():
            st = self.state()
            if st.table_id != table_id or st.table != table:
                raise LakeError(f"lake table {self.name} holds table {st.table!r} (id "
                                f"{st.table_id}), not {table!r} (id {table_id}): the Fluss table "
                                f"was dropped and recreated; drop the Iceberg table "
                                f"{self.name} (or move the lake) to tier the new table")
            check_partitioning(self.name, st.partition_keys, table, partition_keys)
            return st
        if (self.path / "_manifest").is_dir():
            raise LakeError(f"{self.path} holds a lake table in the old Parquet-manifest format; "
                            f"convert it with `fluss-spark tier migrate --lake {self.lake_root}`")
        for k in primary_key:
            if k not in schema.names:
                raise LakeError(f"primary key column {k!r} is not a column of {table}")
        props = {T_FORMAT: FORMAT_VERSION, T_TABLE: table, T_TABLE_ID: str(table_id),
                 T_KIND: KIND_PK if primary_key else KIND_LOG,
                 T_PK: json.dumps(list(primary_key)),
                 T_BUCKET_KEY: json.dumps(list(bucket_key or primary_key)),
                 T_NUM_BUCKETS: str(num_buckets), T_SCHEMA: encode_schema(schema),
                 # Every commit writes a metadata file; keep the last 100, not all of them.
                 "write.metadata.delete-after-commit.enabled": "true",
                 "write.metadata.previous-versions-max": "100",
                 # A commit that loses the race must NOT be re-applied blindly on top of the
                 # winner (the round's idempotency check read the old state): commit_round
                 # re-reads the lake and decides (skip, apply again, or refuse).
                 "commit.retry.num-retries": "0"}
        cat = self.catalog
        try:
            cat.create_namespace(self.namespace)
        except NamespaceAlreadyExistsError:
            pass
        location = None
        if str(catalog_properties(self.lake_root).get("warehouse", "")) == \
                self.lake_root.as_uri():
            location = self.path.as_uri()
        ice = iceberg_schema(schema, primary_key)
        try:
            cat.create_table((self.namespace, self.short_name), schema=ice, location=location,
                             partition_spec=partition_spec(ice, partition_keys), properties=props)
        except TableAlreadyExistsError:
            pass    # created meanwhile by another process: checked as an existing table
        return self.create(table=table, table_id=table_id, schema=schema,
                           primary_key=primary_key, bucket_key=bucket_key,
                           num_buckets=num_buckets, partition_keys=partition_keys)

    def already_applied(self, query_id: str, batch_id: int) -> bool:
        """Whether round ``batch_id`` of query ``query_id`` is in the current snapshot."""
        c = self.state().commit
        return c is not None and c.query_id == query_id and batch_id <= c.batch_id

    def writer(self) -> RoundWriter:
        """Writes a round's data files for this table as it is now (on any process)."""
        tbl = self.iceberg()
        base = _state(tbl, where=self.name)
        return RoundWriter.of(tbl, tbl.properties[T_SCHEMA], base.primary_key)

    def commit_round(self, changes: pa.Table, *, query_id: str, batch_id: int,
                     fluss_offsets: dict | None = None, snapshot_complete: bool = True,
                     lease_id: str | None = None) -> LakeState | None:
        """Apply one micro-batch (table columns + ``_change_type`` + ``_log_offset``) in ONE
        Iceberg commit: its data files are written here, then ``commit_files``."""
        if self.already_applied(query_id, batch_id):
            return None
        return self.commit_files(self.writer().write(changes), query_id=query_id,
                                 batch_id=batch_id, fluss_offsets=fluss_offsets,
                                 snapshot_complete=snapshot_complete, lease_id=lease_id)

    def commit_files(self, written: RoundFiles, *, query_id: str, batch_id: int,
                     fluss_offsets: dict | None = None, snapshot_complete: bool = True,
                     lease_id: str | None = None, run: MapTasks | None = None
                     ) -> LakeState | None:
        """Commit one round whose data files are written (``RoundWriter``) in ONE Iceberg commit
        whose summary holds the round's Fluss offsets and lease id.

        Idempotent by ``(query_id, batch_id)``: a round already committed (Spark replays the
        last batch after a crash) returns None and changes nothing (its files stay orphans,
        swept by ``expire``). A table another query wrote is refused (its checkpoint was lost or
        replaced: a fresh query re-reads everything). A commit that loses the race to another
        committer is retried when that commit was maintenance of this query's rounds
        (compaction), refused otherwise. ``run`` runs the copy-on-write of a PK round's touched
        data files (default: in this process).
        """
        from pyiceberg.exceptions import CommitFailedException
        for attempt in range(COMMIT_ATTEMPTS):
            tbl = self.iceberg()
            base = _state(tbl, where=self.name)
            if base.commit is not None:
                if base.commit.query_id == query_id and batch_id <= base.commit.batch_id:
                    return None
                if base.commit.query_id != query_id:
                    raise LakeError(
                        f"lake table {self.name} was written by streaming query "
                        f"{base.commit.query_id} (lease {base.commit.lease_id}) but query "
                        f"{query_id} now writes it (its checkpoint was replaced, or another job "
                        f"writes this lake). Restore the old checkpoint, or drop the Iceberg "
                        f"table {self.name} to tier {base.table!r} again from scratch")
            offsets = fluss_offsets if fluss_offsets is not None else base.fluss_offsets
            props = {K_SUMMARY_VERSION: PARTITIONED_SUMMARY_VERSION if "partitions" in offsets
                     else SUMMARY_VERSION, K_OPERATION: "round",
                     K_QUERY: query_id, K_BATCH: str(int(batch_id)),
                     K_LEASE: lease_id or "", K_DONE: "true" if snapshot_complete else "false",
                     K_OFFSETS: json.dumps(offsets, sort_keys=True),
                     K_ROWS_IN: str(written.rows_in),
                     K_ROWS_TIERED: str(base.rows_tiered + written.rows_in),
                     K_COMMITTED_MS: str(int(self.clock() * 1000))}
            tx = tbl.transaction()
            if base.is_pk:
                _pk_round(tbl, tx, base, written, props, run or in_process)
            else:
                with tx.update_snapshot(snapshot_properties=props).fast_append() as fa:
                    for f in written.files:
                        fa.append_data_file(f)
            try:
                tx.commit_transaction()
            except CommitFailedException as e:
                head = self.state()
                c = head.commit
                if c is not None and c.query_id == query_id and c.batch_id >= batch_id:
                    return None     # this very round, committed by an earlier attempt
                if c is not None and c.query_id == query_id and head.operation != "round":
                    log.info("lake table %s: round %d lost its commit to %s; applying it again",
                             self.name, batch_id, head.operation)
                    continue
                raise CommitConflict(
                    f"lake table {self.name}: another writer committed snapshot "
                    f"{head.snapshot_id} ({head.operation or 'not a tiering round'}, query "
                    f"{c.query_id if c else '-'}) while round {batch_id} of query {query_id} was "
                    f"being written ({e}); only one tiering job may write a lake table") from None
            return self.state()
        raise CommitConflict(f"lake table {self.name}: round {batch_id} lost its commit "
                             f"{COMMIT_ATTEMPTS} times to maintenance commits; stop the "
                             "compaction running against this table")

    def import_rows(self, rows: pa.Table, *, query_id: str | None, batch_id: int | None,
                    fluss_offsets: dict, snapshot_complete: bool, rows_tiered: int,
                    committed_ms: int | None, lease_id: str | None = None) -> LakeState:
        """Append a whole table state to an EMPTY lake table in one commit whose summary is
        the given round position (the conversion of an old-format lake)."""
        tbl = self.iceberg()
        if tbl.current_snapshot() is not None:
            raise LakeError(f"lake table {self.name} already has snapshots; it cannot be "
                            "imported into")
        base = _state(tbl, where=self.name)
        props = {K_SUMMARY_VERSION: SUMMARY_VERSION, K_OPERATION: "migrate",
                 K_LEASE: lease_id or "", K_DONE: "true" if snapshot_complete else "false",
                 K_OFFSETS: json.dumps(fluss_offsets, sort_keys=True),
                 K_ROWS_IN: str(rows.num_rows), K_ROWS_TIERED: str(rows_tiered),
                 K_COMMITTED_MS: str(committed_ms or int(self.clock() * 1000))}
        if query_id is not None and batch_id is not None:
            props.update({K_QUERY: query_id, K_BATCH: str(batch_id)})
        data = conform(rows, base.schema)
        if base.is_pk and data.num_rows > 1:
            data = data.sort_by([(k, "ascending") for k in base.primary_key])
        tbl.append(to_storage(data, tbl.schema().as_arrow()), snapshot_properties=props)
        return self.state()

    # -- maintenance ----------------------------------------------------------------------------
    def compact(self, max_files: int = 32, force: bool = False) -> LakeState | None:
        """Rewrite the table into as few files as the writer's target size allows when it has
        more than ``max_files`` data files (or ``force``). Rows, and the Fluss offsets the
        table equals, are unchanged: the new snapshot carries the current round's summary."""
        from pyiceberg.exceptions import CommitFailedException
        tbl = self.iceberg()
        st = _state(tbl, where=self.name)
        if st.snapshot_id is None or (st.data_files <= max_files and not force):
            return None
        data = tbl.scan(snapshot_id=st.snapshot_id).to_arrow()
        if st.is_pk and data.num_rows > 1:
            data = data.sort_by([(k, "ascending") for k in st.primary_key])
        props = dict(_summary_props(tbl.current_snapshot().summary))
        props = {k: v for k, v in props.items() if k.startswith(P)}
        props[K_OPERATION] = "compact"
        try:
            tbl.overwrite(data, snapshot_properties=props)
        except CommitFailedException as e:
            raise CommitConflict(f"lake table {self.name} changed while it was compacted ({e}); "
                                 "run the compaction again") from None
        return self.state()

    def expire(self, older_than_ms: int, retain_last: int = 1,
               orphan_grace_ms: int = 3_600_000) -> dict:
        """Expire snapshots older than ``older_than_ms`` (epoch ms), keeping the last
        ``retain_last`` and the current one; then delete (in a local warehouse or an object
        store) the files only expired snapshots used, and files no snapshot ever committed
        (orphans of rounds killed before their commit) older than ``orphan_grace_ms``. Returns
        what was removed."""
        tbl = self.iceberg()
        snaps = sorted(tbl.metadata.snapshots, key=lambda s: s.timestamp_ms)
        keep = {s.snapshot_id for s in snaps[-max(1, retain_last):]}
        cur = tbl.current_snapshot()
        if cur is not None:
            keep.add(cur.snapshot_id)
        expired = [s for s in snaps if s.timestamp_ms < older_than_ms and s.snapshot_id not in keep]
        before = referenced_files(tbl, snaps)
        if expired:
            tbl.maintenance.expire_snapshots().by_ids([s.snapshot_id for s in expired]).commit()
            tbl = self.iceberg()
        after = referenced_files(tbl, tbl.metadata.snapshots)
        removed = delete_unused(tbl, before, after, int(self.clock() * 1000), orphan_grace_ms)
        return {"table": self.name, "expired_snapshots": [s.snapshot_id for s in expired],
                "removed_files": len(removed), "snapshots": len(tbl.metadata.snapshots)}


def _pk_round(tbl: Any, tx: Any, base: LakeState, written: RoundFiles, props: dict[str, str],
              run: MapTasks) -> None:
    """Stage a PK round in ``tx`` as ONE overwrite snapshot: every data file holding a touched
    key is replaced by a copy without those keys (copy-on-write, one ``KeyRemover`` task per
    data file, run by ``run``), and the round's data files (each touched key's last row, where
    it was not deleted) are added. Of a partitioned table only the data files of the partitions
    the round touches are read."""
    from pyiceberg.expressions import AlwaysTrue
    touched = written.touched
    snap = tbl.current_snapshot()
    tasks: list[Any] = []
    if snap is not None and touched is not None and touched.num_rows and base.rows:
        # A key lives in one partition: only the partitions the round touches are read.
        where = (key_filter(touched_partitions(touched, base.partition_keys))
                 if base.partition_keys else AlwaysTrue())
        tasks = list(tbl.scan(row_filter=where, snapshot_id=snap.snapshot_id).plan_files())
    if any(t.delete_files for t in tasks):
        # Delete files came from another writer: let pyiceberg apply them while deleting.
        tx.delete(key_filter(touched), snapshot_properties={K_OPERATION: "round-delete"})
        with tx.update_snapshot(snapshot_properties=props).fast_append() as fa:
            for f in written.files:
                fa.append_data_file(f)
        return
    replaced = []
    if tasks and touched is not None:
        remover = RoundWriter.of(tbl, tbl.properties[T_SCHEMA], base.primary_key) \
            .without_keys(touched)
        replaced = [r for r in run(remover, [t.file for t in tasks]) if r is not None]
    with tx.update_snapshot(snapshot_properties=props).overwrite() as ow:
        for old, copies in replaced:
            ow.delete_data_file(old)
            for f in copies:
                ow.append_data_file(f)
        for f in written.files:
            ow.append_data_file(f)


def in_process(fn: Callable[[Any], Any], items: list) -> list:
    """``MapTasks`` on the calling thread."""
    return [fn(x) for x in items]


def on_threads(fn: Callable[[Any], Any], items: list) -> list:
    """``MapTasks`` on a thread per core (Parquet reads and writes release the GIL)."""
    from concurrent.futures import ThreadPoolExecutor
    if len(items) <= 1:
        return in_process(fn, items)
    with ThreadPoolExecutor(max_workers=min(len(items), os.cpu_count() or 1)) as pool:
        return list(pool.map(fn, items))


def _ancestry(tbl: Any) -> Iterable[Any]:
    snap = tbl.current_snapshot()
    while snap is not None:
        yield snap
        snap = tbl.snapshot_by_id(snap.parent_snapshot_id) if snap.parent_snapshot_id else None


def key_filter(keys: pa.Table):
    """An Iceberg row filter matching exactly the given keys (one column: IN; several: an OR
    of per-key ANDs)."""
    from pyiceberg import expressions as ex
    # Typed as pydantic models (keyword fields); the positional constructors are the API.
    And: Any = ex.And
    EqualTo: Any = ex.EqualTo
    In: Any = ex.In
    Or: Any = ex.Or
    cols = keys.column_names
    if len(cols) == 1:
        return In(cols[0], set(_literal(v) for v in keys.column(0).to_pylist()))
    exprs = [And(*[EqualTo(c, _literal(r[c])) for c in cols]) for r in keys.to_pylist()]
    return exprs[0] if len(exprs) == 1 else Or(*exprs)


def _literal(v: Any) -> Any:
    if isinstance(v, datetime) and v.tzinfo is not None:
        return v.astimezone(timezone.utc).isoformat()
    return v


def _nullable(schema: pa.Schema) -> pa.Schema:
    return pa.schema([pa.field(f.name, f.type, True) for f in schema])


def list_lake_tables(lake_root: str | Path) -> list[LakeTable]:
    """Every tiered table of a lake (Iceberg tables carrying the tiering job's properties)."""
    root = Path(lake_root)
    if not (root / TIERING_DIR).is_dir():
        return []
    cat = open_catalog(root)
    out = []
    for ns in cat.list_namespaces():
        for ident in cat.list_tables(ns):
            # A shared catalog may hold tables of other writers: only the job's are the lake's.
            if T_FORMAT in cat.load_table(ident).properties:
                out.append(LakeTable(lake_root=root, table=".".join(ident)))
    return sorted(out, key=lambda t: t.name)


__all__ = ["LakeTable", "LakeState", "Commit", "Round", "LakeError", "CommitConflict",
           "table_dir", "list_lake_tables", "open_catalog", "catalog_properties",
           "default_catalog_properties", "write_lake_file", "iceberg_schema", "key_filter",
           "identifier", "encode_schema", "KIND_PK", "KIND_LOG", "TIERING_DIR", "CATALOG_NAME",
           "LAKE_FILE"]
