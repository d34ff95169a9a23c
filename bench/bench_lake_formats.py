"""Lake writers compared on the same tiering rounds: Iceberg (the job's) and pyiceberg upsert.

Run::

    .venv/bin/python bench/bench_lake_formats.py --pk-rows 300000 --log-rows 300000 \\
        --updates 50000 [--round-rows 50000] [--repeat 3]

No Spark, no cluster: the rounds the tiering job would commit are built here, in the form the
job hands them to the lake (the table's columns + ``_change_type`` + ``_log_offset``):

- ``snapshot+log``: a PK table (id BIGINT NOT NULL key, name STRING, amount DOUBLE; ``--buckets``
  buckets, the embedded cluster's key hashing) of ``--pk-rows`` snapshot rows (``+I``, offset -1,
  bucket by bucket), and a log table of ``--log-rows`` appends (``+A``, round-robin over the
  buckets, offsets per bucket); their rounds interleaved, as the job's two queries commit them;
- ``changelog``: ``--updates`` random existing keys of the PK table, 90% updated (a ``-U`` of the
  old row and a ``+U`` of the new one), 10% deleted (``-D`` of the old row), with offsets
  continuing each bucket's log (the snapshot's rows were written as ``+I`` records first);
- ``append``: another ``--log-rows`` appends to the log table.

``--round-rows N`` cuts every phase into rounds of at most N rows (default: one round per table
and phase). A key's changelog records always stay in one round (rounds end between keys), as
the job's PK rounds fold whole keys.

Each repeat replays all rounds in order, on one thread, into two fresh lakes (a local
warehouse, SQLite catalog), in alternating writer order:

- ``iceberg-job``: ``LakeTable.commit_round``, the job's writer (rows folded and written as data
  files, then one Iceberg commit; PK rounds: one overwrite snapshot, copy-on-write of the data
  files holding a touched key). The job writes a round's files in its Spark tasks and commits
  them on the driver (``commit_files``); here both run on this thread;
- ``iceberg-upsert``: pyiceberg's own ``upsert`` (+ a delete of the deleted keys), one
  transaction per round: the alternative PK mechanism.

Only the rounds are timed (table creation and the checks are not). Every lake's final PK rows
and log rows are checked equal to the expected state (the rounds folded with ``apply_pk``).
Printed: per writer, min/median/max seconds (total and per phase), rows/s of the median, and the
time over the job's writer's time in the same repeat (min/median/max of those paired ratios).
"""

from __future__ import annotations

import itertools
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, NamedTuple

import numpy as np
import pyarrow as pa

from common import parser
from fluss_spark.client.cluster import (APPEND, CHANGE_TYPE, DELETE, INSERT, LOG_OFFSET,
                                        UPDATE_AFTER, UPDATE_BEFORE)
from fluss_spark.protocol.rows import bucket_ids
from fluss_spark.tiering.apply import append_rows, apply_pk, conform, fold_changes
from fluss_spark.tiering.lake import TIERING_DIR, LakeTable, key_filter

PK, LOG = "bench.pk", "bench.log"
PHASES = ("snapshot+log", "changelog", "append")
PK_SCHEMA = pa.schema([pa.field("id", pa.int64(), False), pa.field("name", pa.string()),
                       pa.field("amount", pa.float64())])
LOG_SCHEMA = pa.schema([pa.field("id", pa.int64()), pa.field("name", pa.string()),
                        pa.field("amount", pa.float64())])
#: What Spark hands the lake: nullable columns, then the changelog's metadata columns.
ROUND_SCHEMA = pa.schema([pa.field("id", pa.int64()), pa.field("name", pa.string()),
                          pa.field("amount", pa.float64()), pa.field(CHANGE_TYPE, pa.string()),
                          pa.field(LOG_OFFSET, pa.int64())])


class TableDef(NamedTuple):
    table_id: int
    schema: pa.Schema
    primary_key: tuple[str, ...]
    bucket_key: tuple[str, ...]
    num_buckets: int


class Round(NamedTuple):
    table: str
    phase: str
    changes: pa.Table
    snapshot_complete: bool


# -- the rounds ----------------------------------------------------------------------------------
def _records(ids: np.ndarray, names: list[str], amounts: np.ndarray, types: list[str] | str,
             offsets: np.ndarray) -> pa.Table:
    n = len(ids)
    return pa.table([pa.array(ids, pa.int64()), pa.array(names, pa.string()),
                     pa.array(amounts, pa.float64()),
                     pa.array(types if isinstance(types, list) else [types] * n, pa.string()),
                     pa.array(offsets, pa.int64())], schema=ROUND_SCHEMA)


def _cut(t: pa.Table, size: int | None, keys: np.ndarray | None = None) -> list[pa.Table]:
    """``t`` in slices of at most ``size`` rows; with ``keys``, never between two rows of one
    key (the rows of a key are contiguous)."""
    if not t.num_rows:
        return []
    if size is None or t.num_rows <= size:
        return [t]
    out, start = [], 0
    while start < t.num_rows:
        end = min(start + size, t.num_rows)
        if keys is not None:
            while end < t.num_rows and end > start + 1 and keys[end] == keys[end - 1]:
                end -= 1
        out.append(t.slice(start, end - start))
        start = end
    return out


def build_rounds(pk_rows: int, log_rows: int, updates: int, buckets: int,
                 round_rows: int | None, seed: int = 1) -> list[Round]:
    ids = np.arange(pk_rows, dtype=np.int64)
    names = [f"p{i}" for i in range(pk_rows)]
    amounts = ids * 0.5
    bucket = np.asarray(bucket_ids(pa.table({"id": pa.array(ids)}), ["id"], buckets)
                        .to_numpy(zero_copy_only=False), dtype=np.int64)
    # The snapshot, bucket by bucket (as the source's splits read it).
    order = np.lexsort((ids, bucket))
    snapshot = _records(ids[order], [names[i] for i in order], amounts[order], INSERT,
                        np.full(pk_rows, -1, dtype=np.int64))
    pk_snap = _cut(snapshot, round_rows)
    # The log table: round-robin over the buckets, offsets per bucket; read bucket by bucket.

    def appends(lo: int, hi: int, tag: str) -> list[pa.Table]:
        i = np.arange(lo, hi, dtype=np.int64)
        b, off = i % buckets, i // buckets
        o = np.lexsort((off, b))
        t = _records(i[o], [f"{tag}{k}" for k in i[o]], i[o] * 0.5, APPEND, off[o])
        return _cut(t, round_rows)
    log_first = appends(0, log_rows, "l")
    log_more = appends(log_rows, 2 * log_rows, "m")

    # The changelog: upserts of existing keys (-U old, +U new), then deletes (-D old); each
    # bucket's log continues after the snapshot's +I records.
    rnd = random.Random(seed)
    keys = np.array(rnd.sample(range(pk_rows), min(updates, pk_rows)), dtype=np.int64)
    n_del = len(keys) // 10
    upd, dels = keys[n_del:], keys[:n_del]
    c_ids = np.concatenate([np.repeat(upd, 2), dels])
    c_types = [UPDATE_BEFORE, UPDATE_AFTER] * len(upd) + [DELETE] * len(dels)
    new = np.tile(np.array([False, True]), len(upd))
    new = np.concatenate([new, np.zeros(len(dels), dtype=bool)])
    c_names = ["u" if n else names[k] for k, n in zip(c_ids.tolist(), new.tolist())]
    c_amounts = np.where(new, 1.0, c_ids * 0.5)
    c_bucket = bucket[c_ids]
    next_off = np.bincount(bucket, minlength=buckets).astype(np.int64)
    c_off = np.empty(len(c_ids), dtype=np.int64)
    for b in range(buckets):
        idx = np.flatnonzero(c_bucket == b)
        c_off[idx] = next_off[b] + np.arange(len(idx))
    o = np.lexsort((c_off, c_bucket))
    changelog = _records(c_ids[o], [c_names[i] for i in o], c_amounts[o],
                         [c_types[i] for i in o], c_off[o])
    pk_changes = _cut(changelog, round_rows, c_ids[o])

    rounds: list[Round] = []
    for i, (p, lg) in enumerate(itertools.zip_longest(pk_snap, log_first)):
        if p is not None:
            rounds.append(Round(PK, PHASES[0], p, i == len(pk_snap) - 1))
        if lg is not None:
            rounds.append(Round(LOG, PHASES[0], lg, True))
    rounds += [Round(PK, PHASES[1], c, True) for c in pk_changes]
    rounds += [Round(LOG, PHASES[2], t, True) for t in log_more]
    return rounds


def expected_state(rounds: list[Round]) -> dict[str, pa.Table]:
    """The PK table's rows after every round (folded with ``apply_pk``) and the log's rows."""
    pk: pa.Table | None = None
    logs = []
    for r in rounds:
        if r.table == PK:
            pk = apply_pk(pk, conform(r.changes, PK_SCHEMA, keep=(CHANGE_TYPE, LOG_OFFSET)),
                          ("id",))
        else:
            logs.append(append_rows(conform(r.changes, LOG_SCHEMA,
                                            keep=(CHANGE_TYPE, LOG_OFFSET))))
    empty = _nullable(PK_SCHEMA).empty_table()
    return {PK: pk if pk is not None else empty,
            LOG: pa.concat_tables(logs) if logs else empty}


def _nullable(schema: pa.Schema) -> pa.Schema:
    return pa.schema([pa.field(f.name, f.type, True) for f in schema])


def _normalized(t: pa.Table) -> pa.Table:
    t = t.select(PK_SCHEMA.names).cast(_nullable(PK_SCHEMA)).combine_chunks()
    return t.sort_by([("id", "ascending"), ("name", "ascending"), ("amount", "ascending")])


# -- the writers ---------------------------------------------------------------------------------
class IcebergLake:
    """The job's writer: ``LakeTable.commit_round``."""

    def __init__(self, lake: LakeTable):
        self.lake = lake

    def commit_round(self, changes: pa.Table, **kw: Any) -> None:
        self.lake.commit_round(changes, **kw)

    def read(self) -> pa.Table:
        return self.lake.read()


class UpsertLake(IcebergLake):
    """The alternative PK mechanism: pyiceberg's ``upsert`` (+ delete) in one transaction."""

    def commit_round(self, changes: pa.Table, **kw: Any) -> None:
        tbl = self.lake.iceberg()
        st = self.lake.state()
        rows = conform(changes, st.schema, keep=(CHANGE_TYPE, LOG_OFFSET))
        storage = tbl.schema().as_arrow()
        tx = tbl.transaction()
        if st.is_pk:
            puts, touched = fold_changes(rows, st.primary_key)
            gone = touched.join(puts.select(list(st.primary_key)), keys=list(st.primary_key),
                                join_type="left anti")
            if gone.num_rows and st.rows:
                tx.delete(key_filter(gone))
            if puts.num_rows:
                tx.upsert(puts.cast(storage), join_cols=list(st.primary_key))
        else:
            tx.append(rows.select(st.schema.names).cast(storage))
        tx.commit_transaction()


Maker = Callable[[Path, str, TableDef], Any]


def make_iceberg(root: Path, name: str, d: TableDef) -> IcebergLake:
    (root / TIERING_DIR).mkdir(parents=True, exist_ok=True)
    t = LakeTable.open(root, name)
    t.create(table=name, table_id=d.table_id, schema=d.schema, primary_key=d.primary_key,
             bucket_key=d.bucket_key, num_buckets=d.num_buckets)
    return IcebergLake(t)


def make_upsert(root: Path, name: str, d: TableDef) -> UpsertLake:
    return UpsertLake(make_iceberg(root, name, d).lake)


WRITERS: dict[str, Maker] = {"iceberg-job": make_iceberg, "iceberg-upsert": make_upsert}
#: The writer the others are compared with.
BASELINE = "iceberg-job"


def replay(make: Maker, root: Path, rounds: list[Round], tables: dict[str, TableDef],
           check: dict[str, pa.Table] | None) -> dict[str, float]:
    """Seconds per phase to apply ``rounds`` to fresh lakes under ``root`` (then checked)."""
    lakes = {name: make(root, name, d) for name, d in tables.items()}
    batch = dict.fromkeys(tables, 0)
    took = dict.fromkeys(PHASES, 0.0)
    for r in rounds:
        t0 = time.perf_counter()
        lakes[r.table].commit_round(r.changes, query_id="bench-query", batch_id=batch[r.table],
                                    fluss_offsets={}, snapshot_complete=r.snapshot_complete,
                                    lease_id="bench-lease")
        took[r.phase] += time.perf_counter() - t0
        batch[r.table] += 1
    if check is not None:
        for name, want in check.items():
            got = _normalized(lakes[name].read())
            if not got.equals(_normalized(want)):
                raise AssertionError(f"{make.__name__}: lake table {name} differs from the "
                                     f"expected state ({got.num_rows} rows, expected "
                                     f"{want.num_rows})")
    return took


# -- main ----------------------------------------------------------------------------------------
def _stats(xs: list[float]) -> tuple[float, float, float]:
    return min(xs), statistics.median(xs), max(xs)


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__, pk_rows=300_000, log_rows=300_000, updates=50_000, buckets=4, repeat=3)
    p.add_argument("--round-rows", type=int, default=None,
                   help="rows per round at most (default: one round per table and phase)")
    p.add_argument("--work-dir", type=Path, default=None,
                   help="where the lakes are written (default: a temporary directory)")
    args = p.parse_args(argv)
    if args.round_rows is not None and args.round_rows < 2:
        p.error("--round-rows must be at least 2 (an update is two records of one key)")

    tables = {PK: TableDef(1, PK_SCHEMA, ("id",), ("id",), args.buckets),
              LOG: TableDef(2, LOG_SCHEMA, (), (), args.buckets)}
    t0 = time.perf_counter()
    rounds = build_rounds(args.pk_rows, args.log_rows, args.updates, args.buckets,
                          args.round_rows)
    want = expected_state(rounds)
    built = time.perf_counter() - t0
    total = sum(r.changes.num_rows for r in rounds)
    per_phase = {ph: sum(r.changes.num_rows for r in rounds if r.phase == ph) for ph in PHASES}
    n_phase = {ph: sum(1 for r in rounds if r.phase == ph) for ph in PHASES}
    print(f"{len(rounds)} rounds, {total} rows ("
          + ", ".join(f"{ph}: {n_phase[ph]} rounds, {per_phase[ph]} rows" for ph in PHASES)
          + f"); {args.buckets} buckets, {args.round_rows or 'unlimited'} rows per round; "
          f"expected: {want[PK].num_rows} PK rows, {want[LOG].num_rows} log rows "
          f"(built in {built:.1f} s)", flush=True)

    work = args.work_dir or Path(tempfile.mkdtemp(prefix="bench-lake-formats-"))
    work.mkdir(parents=True, exist_ok=True)
    names = list(WRITERS)
    times: dict[str, list[dict[str, float]]] = {w: [] for w in names}
    try:
        # Warm-up (untimed): imports and first-use costs of every writer, on tiny rounds.
        small = build_rounds(200, 200, 40, args.buckets, 100, seed=2)
        for w in names:
            replay(WRITERS[w], work / f"warmup-{w}", small, tables, expected_state(small))
        for rep in range(args.repeat):
            order = names if rep % 2 == 0 else names[::-1]
            for w in order:
                root = work / f"r{rep}-{w}"
                took = replay(WRITERS[w], root, rounds, tables, want)
                times[w].append(took)
                shutil.rmtree(root, ignore_errors=True)
                print(f"repeat {rep + 1}/{args.repeat} {w:<15}{sum(took.values()):>8.2f} s  "
                      + "  ".join(f"{ph} {took[ph]:.2f}" for ph in PHASES), flush=True)
    finally:
        if args.work_dir is None:
            shutil.rmtree(work, ignore_errors=True)

    print(f"\n{args.repeat} repeats, one thread; seconds min/median/max; rows/s of the median; "
          f"time over {BASELINE}'s in the same repeat, min/median/max")
    base_total = [sum(t.values()) for t in times[BASELINE]]
    header = (f"{'writer':<16}{'total s':>20}{'rows/s':>10}{'x ' + BASELINE:>18}"
              + "".join(f"{ph + ' s':>20}" for ph in PHASES))
    print(header)
    for w in names:
        tot = [sum(t.values()) for t in times[w]]
        ratios = [a / b for a, b in zip(tot, base_total)]
        lo, med, hi = _stats(tot)
        rlo, rmed, rhi = _stats(ratios)
        cols = "".join(f"{'%.2f/%.2f/%.2f' % _stats([t[ph] for t in times[w]]):>20}"
                       for ph in PHASES)
        print(f"{w:<16}{f'{lo:.2f}/{med:.2f}/{hi:.2f}':>20}{total / med:>10.0f}"
              f"{f'{rlo:.2f}/{rmed:.2f}/{rhi:.2f}':>18}{cols}")
    phase_med = {w: {ph: statistics.median([t[ph] for t in times[w]]) for ph in PHASES}
                 for w in names}
    print(f"per phase, median time over {BASELINE}'s median: " + "; ".join(
        f"{w}: " + ", ".join(f"{ph} {phase_med[w][ph] / phase_med[BASELINE][ph]:.2f}"
                             for ph in PHASES)
        for w in names if w != BASELINE))
    return 0


if __name__ == "__main__":
    sys.exit(main())
