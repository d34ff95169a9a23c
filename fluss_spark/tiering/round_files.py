"""A round's data files, written where its rows are (on the executors), and what comes back.

A tiering round is written in two steps. Each Spark task of the round (one split of the fluss
source: a bucket's changelog range or a range of its snapshot rows) turns its rows into Iceberg
data files itself (``RoundWriter``, run by ``mapInArrow``) and hands back only their metadata:
the pickled ``DataFile`` of every file, for a PK table the keys the task touched, and how many
rows it read. The driver then makes the round ONE Iceberg commit (``LakeTable.commit_files``).
No row travels to the driver.

Folding a PK round task by task is exact because the fluss source never puts one key in two
splits of a micro-batch: a key lives in one bucket, a bucket's snapshot rows are split by
disjoint row ranges, and a bucket reads either snapshot rows or ONE changelog range per
micro-batch (``connector/splits.py``). ``RoundFiles.merge`` checks it: a key touched by two tasks
raises ``SplitOverlap``, and the round is applied from the driver instead.
"""

from __future__ import annotations

import itertools
import pickle
import uuid
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Sequence

import pyarrow as pa

from fluss_spark.client.cluster import CHANGE_TYPE, LOG_OFFSET
from fluss_spark.tiering.apply import append_rows, conform, fold_changes
from fluss_spark.tiering.lake_catalog import LakeError
from fluss_spark.tiering.lake_schema import decode_schema, to_storage

#: What each task of a round hands back (``mapInArrow``'s output schema): one row per data file
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


@dataclass(frozen=True)
class RoundWriter:
    """Writes rows of a round (table columns + ``_change_type`` + ``_log_offset``) as data files
    of one Iceberg table; picklable, so Spark ships it to the executors.

    ``metadata_json`` is the table's metadata without its snapshot history (the writer needs the
    schema, the partition spec, the location and the write properties); ``io_properties`` open
    the warehouse's file system.
    """

    metadata_json: str
    io_properties: dict
    fluss_schema: str
    primary_key: tuple[str, ...]

    @classmethod
    def of(cls, tbl: Any, fluss_schema: str, primary_key: Sequence[str]) -> "RoundWriter":
        """The writer of a pyiceberg table as it is now."""
        md = tbl.metadata.model_copy(update={"snapshots": [], "snapshot_log": [],
                                             "metadata_log": [], "refs": {},
                                             "current_snapshot_id": None})
        return cls(md.model_dump_json(), dict(tbl.io.properties), fluss_schema,
                   tuple(primary_key))

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """``mapInArrow``: one task's rows in, its ``RESULT_SCHEMA`` rows out."""
        chunks = list(batches)
        if not chunks:
            return
        yield from self.results(self.write(pa.Table.from_batches(chunks)))

    def write(self, changes: pa.Table) -> RoundFiles:
        """Write ``changes`` as data files (PK: folded by key, each key's last row, sorted)."""
        from pyiceberg.io import load_file_io
        from pyiceberg.io.pyarrow import _dataframe_to_data_files
        from pyiceberg.table.metadata import TableMetadataUtil
        md = TableMetadataUtil.parse_raw(self.metadata_json)
        rows = conform(changes, decode_schema(self.fluss_schema), keep=(CHANGE_TYPE, LOG_OFFSET))
        touched = None
        if self.primary_key:
            data, touched = fold_changes(rows, self.primary_key)
            if data.num_rows > 1:
                data = data.sort_by([(k, "ascending") for k in self.primary_key])
        else:
            data = append_rows(rows)
        files: tuple[Any, ...] = ()
        if data.num_rows:
            io = load_file_io(self.io_properties, md.location)
            # A fresh uuid per call: file names never collide between tasks or attempts.
            files = tuple(_dataframe_to_data_files(md, to_storage(data, md.schema().as_arrow()),
                                                   io, uuid.uuid4(), itertools.count(0)))
        return RoundFiles(files, touched, changes.num_rows)

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


__all__ = ["RESULT_SCHEMA", "RoundFiles", "RoundWriter", "SplitOverlap"]
