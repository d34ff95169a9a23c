"""A round's data files, written where its rows are (on the executors), and what comes back.

A tiering round is written in two steps. Each Spark task of the round (one split of the fluss
source: a bucket's changelog range or a range of its snapshot rows) turns the rows it reads into
Iceberg data files itself (``RoundWriter``, called by ``round_source``'s partition reader) and
hands back only their metadata: the pickled ``DataFile`` of every file, for a PK table the keys
the task touched, and how many rows it read. The driver then makes the round ONE Iceberg commit
(``LakeTable.commit_files``). No row travels to the driver.

Folding a PK round task by task is exact because no key reaches two tasks of a micro-batch: a
key lives in one bucket, a bucket's snapshot rows are split by disjoint row ranges, and
``round_source`` gives any other splits of one bucket to one task. ``RoundFiles.merge`` checks
it: a key touched by two tasks raises ``SplitOverlap`` (the round is refused, nothing
committed).
"""

from __future__ import annotations

import itertools
import json
import pickle
import uuid
from dataclasses import asdict, dataclass
from typing import Any, Iterable, Iterator, Sequence

import pyarrow as pa

from fluss_spark.client.cluster import CHANGE_TYPE, LOG_OFFSET
from fluss_spark.tiering.apply import append_rows, conform, fold_changes
from fluss_spark.tiering.lake_catalog import LakeError, env_properties, env_variable, is_secret
from fluss_spark.tiering.lake_schema import decode_schema, to_storage

#: What each task of a round hands back (the rows of ``round_source``): one row per data file
#: (``file``: the pickled ``DataFile``), one with the touched keys of a PK table (``keys``: Arrow
#: IPC), and one with the number of rows the task read (``rows-in``).
RESULT_SCHEMA = "kind STRING, payload BINARY, rows BIGINT"
_RESULT = pa.schema([("kind", pa.string()), ("payload", pa.binary()), ("rows", pa.int64())])
FILE, KEYS, ROWS_IN = "file", "keys", "rows-in"


class SplitOverlap(LakeError):
    """Two tasks of one round touched the same key: the round cannot be folded task by task."""


@dataclass(frozen=True)
class RoundFiles:
    """A round's written data files (not yet committed), its touched keys, its input rows."""

    files: tuple[Any, ...]
    #: The keys the round touches (PK tables; None for a log table).
    touched: pa.Table | None
    rows_in: int

    @classmethod
    def merge(cls, results: pa.Table, primary_key: Sequence[str]) -> "RoundFiles":
        """The round from its tasks' results (``RESULT_SCHEMA`` rows, collected)."""
        kinds = results.column("kind").to_pylist()
        payloads = results.column("payload").to_pylist()
        counts = results.column("rows").to_pylist()
        files = tuple(pickle.loads(p) for k, p in zip(kinds, payloads) if k == FILE)
        rows_in = sum(n for k, n in zip(kinds, counts) if k == ROWS_IN)
        if not primary_key:
            return cls(files, None, rows_in)
        parts = [pa.ipc.open_stream(p).read_all() for k, p in zip(kinds, payloads) if k == KEYS]
        touched = pa.concat_tables(parts) if parts else None
        if len(parts) > 1 and touched is not None:
            distinct = touched.group_by(list(primary_key)).aggregate([]).num_rows
            if distinct != touched.num_rows:
                raise SplitOverlap(f"{touched.num_rows - distinct} key(s) were touched by more "
                                   "than one task of the round")
        return cls(files, touched, rows_in)


def shippable(io_properties: dict) -> tuple[dict, tuple[str, ...]]:
    """``io_properties`` without the secrets this process took from its environment (they
    never travel with a task: each process takes them from its own), and their names. Others
    (e.g. credentials a REST catalog hands out with a table) stay."""
    env = env_properties()
    secrets = tuple(sorted(k for k, v in io_properties.items()
                           if is_secret(k) and env.get(k) == v))
    return {k: v for k, v in io_properties.items() if k not in secrets}, secrets


def _table_io(metadata_json: str, io_properties: dict,
              secrets: tuple[str, ...] = ()) -> tuple[Any, Any]:
    """The table's metadata and file IO, with the secrets of this process's environment."""
    from pyiceberg.io import load_file_io
    from pyiceberg.table.metadata import TableMetadataUtil
    env = env_properties()
    missing = [k for k in secrets if k not in env]
    if missing:
        names = ", ".join(env_variable(k) for k in missing)
        raise LakeError(f"this process has no {names} in its environment, which the lake's "
                        f"warehouse needs: give it to the Spark executors too (e.g. --conf "
                        f"spark.executorEnv.{env_variable(missing[0])}=...)")
    md = TableMetadataUtil.parse_raw(metadata_json)
    return md, load_file_io({**env, **io_properties}, md.location)


def _write_files(md: Any, io: Any, data: pa.Table) -> tuple[Any, ...]:
    """``data`` as new data files of the table (a fresh uuid per call: names never collide
    between tasks or attempts)."""
    from pyiceberg.io.pyarrow import _dataframe_to_data_files
    return tuple(_dataframe_to_data_files(md, to_storage(data, md.schema().as_arrow()), io,
                                          uuid.uuid4(), itertools.count(0)))


@dataclass(frozen=True)
class RoundWriter:
    """Writes rows of a round (table columns + ``_change_type`` + ``_log_offset``) as data files
    of one Iceberg table; picklable, so Spark ships it to the executors.

    ``metadata_json`` is the table's metadata without its snapshot history (the writer needs the
    schema, the partition spec, the location and the write properties); ``io_properties`` open
    the warehouse's file system, with the secrets named by ``secrets`` taken from the
    environment of the process that writes (``PYICEBERG_CATALOG__FLUSS_LAKE__*``).
    """

    metadata_json: str
    io_properties: dict
    fluss_schema: str
    primary_key: tuple[str, ...]
    secrets: tuple[str, ...] = ()

    @classmethod
    def of(cls, tbl: Any, fluss_schema: str, primary_key: Sequence[str]) -> "RoundWriter":
        """The writer of a pyiceberg table as it is now."""
        md = tbl.metadata.model_copy(update={"snapshots": [], "snapshot_log": [],
                                             "metadata_log": [], "refs": {},
                                             "current_snapshot_id": None})
        io_properties, secrets = shippable(dict(tbl.io.properties))
        return cls(md.model_dump_json(), io_properties, fluss_schema, tuple(primary_key),
                   secrets)

    def to_json(self) -> str:
        """The writer as text (a Spark option: ``round_source``)."""
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "RoundWriter":
        d = json.loads(text)
        return cls(d["metadata_json"], d["io_properties"], d["fluss_schema"],
                   tuple(d["primary_key"]), tuple(d["secrets"]))

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """One task's rows in, its ``RESULT_SCHEMA`` rows out."""
        chunks = list(batches)
        if not chunks:
            return
        yield from self.results(self.write(pa.Table.from_batches(chunks)))

    def write(self, changes: pa.Table) -> RoundFiles:
        """Write ``changes`` as data files (PK: folded by key, each key's last row, sorted)."""
        md, io = _table_io(self.metadata_json, self.io_properties, self.secrets)
        rows = conform(changes, decode_schema(self.fluss_schema), keep=(CHANGE_TYPE, LOG_OFFSET))
        touched = None
        if self.primary_key:
            data, touched = fold_changes(rows, self.primary_key)     # sorted by key
        else:
            data = append_rows(rows)
        files = _write_files(md, io, data) if data.num_rows else ()
        return RoundFiles(files, touched, changes.num_rows)

    def without_keys(self, touched: pa.Table) -> "KeyRemover":
        """What rewrites the table's data files holding any of ``touched`` (copy-on-write)."""
        return KeyRemover(self.metadata_json, self.io_properties, self.primary_key, touched,
                          self.secrets)

    @staticmethod
    def results(written: RoundFiles) -> Iterable[pa.RecordBatch]:
        kinds, payloads, counts = [ROWS_IN], [b""], [written.rows_in]
        for f in written.files:
            kinds.append(FILE)
            payloads.append(pickle.dumps(f))
            counts.append(f.record_count)
        if written.touched is not None and written.touched.num_rows:
            sink = pa.BufferOutputStream()
            with pa.ipc.new_stream(sink, written.touched.schema) as w:
                w.write_table(written.touched)
            kinds.append(KEYS)
            payloads.append(sink.getvalue().to_pybytes())
            counts.append(written.touched.num_rows)
        yield pa.RecordBatch.from_arrays([pa.array(kinds, pa.string()),
                                          pa.array(payloads, pa.binary()),
                                          pa.array(counts, pa.int64())], schema=_RESULT)


@dataclass(frozen=True)
class KeyRemover:
    """Copy-on-write of one data file: a copy without the touched keys' rows (picklable: runs
    wherever the file is read, e.g. one Spark task per data file)."""

    metadata_json: str
    io_properties: dict
    primary_key: tuple[str, ...]
    touched: pa.Table
    secrets: tuple[str, ...] = ()

    def __call__(self, data_file: Any) -> tuple[Any, tuple[Any, ...]] | None:
        """None when ``data_file`` holds no touched key; else (the file, its replacement
        files: its other rows, none when every row was touched)."""
        import numpy as np
        import pyarrow.parquet as pq
        md, io = _table_io(self.metadata_json, self.io_properties, self.secrets)
        key = list(self.primary_key)
        storage = md.schema().as_arrow()
        with io.new_input(data_file.file_path).open() as fh:
            keys = pq.read_table(fh, columns=key)
        wanted = self.touched.cast(pa.schema([storage.field(k) for k in key]).remove_metadata(),
                                   safe=False)
        hit = rows_with_keys(keys, wanted, key)
        if not len(hit):
            return None
        with io.new_input(data_file.file_path).open() as fh:
            rows = pq.read_table(fh)
        keep = np.ones(rows.num_rows, dtype=bool)
        keep[hit] = False
        kept = rows.filter(pa.array(keep))
        return data_file, (_write_files(md, io, kept.cast(storage)) if kept.num_rows else ())


def rows_with_keys(keys: pa.Table, wanted: pa.Table, key: list[str]) -> Any:
    """Row numbers (numpy) of ``keys`` whose key is in ``wanted``.

    Arrow, not an Iceberg ``In`` filter: pyiceberg binds such a filter literal by literal,
    several times per delete (2.8 s of a 3.8 s round of 50k keys; docs/tiering.md)."""
    import numpy as np
    import pyarrow.compute as pc
    if not wanted.num_rows or not keys.num_rows:
        return np.empty(0, dtype=np.int64)
    if len(key) == 1:
        return np.flatnonzero(pc.is_in(keys.column(0), value_set=wanted.column(0))
                              .to_numpy(zero_copy_only=False))
    numbered = pa.table([*keys.columns, pa.array(np.arange(keys.num_rows))],
                        names=[*key, "__row"])
    return np.sort(numbered.join(wanted, keys=key, join_type="inner")
                   .column("__row").to_numpy())


__all__ = ["KeyRemover", "RESULT_SCHEMA", "RoundFiles", "RoundWriter", "SplitOverlap",
           "rows_with_keys", "shippable"]
