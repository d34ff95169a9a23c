"""One table's tiering query: a checkpointed ``format("fluss")`` stream whose sink commits rounds.

Exactly-once: a round is ONE Iceberg commit whose snapshot summary holds ``(query id, batch id)``,
the Fluss offsets the round ends at and the job's lease id. Spark replays the batch it had not
marked done after a crash; the lake's last committed round decides what happens to it: a batch
the lake already has is skipped without being read, and a batch must start where the lake's
offsets end (else the checkpoint and the lake have diverged, and the round is refused). The
query id comes from the checkpoint (``<lake>/_tiering/checkpoints/<table>``), so it survives
restarts. The offsets are read from the checkpoint's offset log (through the source's versioned
offset decoder): the lake copy after the round equals the table at those offsets.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fluss_spark.client.cluster import TableInfo
from fluss_spark.connector.offsets import OffsetError, SourceOffset, TablePos, decode
from fluss_spark.connector.startup import await_sources
from fluss_spark.tiering.config import TieringConfig, TieringError
from fluss_spark.tiering.lake import LakeError, LakeTable, MapTasks, on_threads
from fluss_spark.tiering.round_files import RoundFiles
from fluss_spark.tiering.round_source import FORMAT as ROUND_FORMAT, WRITER_OPTION

log = logging.getLogger(__name__)

def checkpoint_query_id(checkpoint: Path) -> str:
    """The streaming query id Spark keeps in ``<checkpoint>/metadata`` (stable over restarts)."""
    try:
        return json.loads((checkpoint / "metadata").read_text().splitlines()[0])["id"]
    except (OSError, ValueError, KeyError, IndexError) as e:
        raise TieringError(f"cannot read the query id from {checkpoint}/metadata ({e})") from None


def batch_end_offset(checkpoint: Path, batch_id: int) -> SourceOffset:
    """The fluss source offset batch ``batch_id`` ends at, from the checkpoint's offset log
    (written by Spark before the batch runs: ``v1``, batch metadata, then one line per source)."""
    p = checkpoint / "offsets" / str(batch_id)
    try:
        lines = [ln for ln in p.read_text().splitlines() if ln.strip()]
        return decode(lines[-1])
    except (OSError, OffsetError, IndexError) as e:
        raise TieringError(f"cannot read the end offset of batch {batch_id} from {p} ({e})"
                           ) from None


def lake_offsets(source_offset: SourceOffset, table: str) -> tuple[dict, bool]:
    """A table's part of a source offset as stored in the lake's snapshot summary, and whether
    its snapshot phase is over. A partitioned table's is one position per partition it reads,
    by partition id (a partition the source reported gone is no longer among them; the lake
    keeps its rows)."""
    found = source_offset.table_by_name(table)
    if found is None:
        raise TieringError(f"the source offset has no entry for table {table!r}")
    t = found[1]
    if not t.partitioned:
        return _position(t), t.snapshot_complete
    parts = {str(pid): {"name": p.name, **_position(p)} for pid, p in sorted(t.partitions.items())}
    out: dict = {"partitions": parts}
    if t.gone != (0, 0):
        out["gone"] = {"partitions": t.gone[0], "unread": t.gone[1]}
    return out, t.snapshot_complete


def _position(t: TablePos) -> dict:
    """One read unit's position: changelog offsets and snapshot progress per bucket."""
    snap = {str(b): [s.snapshot_id, s.row_count, s.next_row] for b, s in t.snapshot.items()}
    return {"log": {str(b): o for b, o in t.log.items()}, "snapshot": snap}


class TableSink:
    """The ``foreachBatch`` function of one table's query: one round -> one lake commit."""

    def __init__(self, table: str, lake: LakeTable, checkpoint: Path,
                 primary_key: tuple[str, ...] = (),
                 retain_versions: int = 20, compact_max_files: int = 32,
                 spark_lock: Any = None, lease_id: str | None = None,
                 snapshot_retention_s: float | None = 86_400.0, copy_on_write: str = "auto"):
        self.table, self.lake, self.checkpoint = table, lake, checkpoint
        self.copy_on_write = copy_on_write
        self.lease_id = lease_id
        self.snapshot_retention_s = snapshot_retention_s
        self.primary_key = primary_key
        #: Shared by the sinks of one job (see ``TieringJob.spark_lock``): rounds are written
        #: one at a time, never while another query's source is initializing.
        self.spark_lock = spark_lock or threading.Lock()
        self.retain_versions, self.compact_max_files = retain_versions, compact_max_files
        #: (batch id, rows in, seconds reading and writing the round, seconds committing it).
        self.rounds: list[tuple[int, int, float, float]] = []
        #: The error a round raised, as raised: Spark hands the job only its text, wrapped.
        self.failure: BaseException | None = None

    def __call__(self, df: Any, batch_id: int) -> None:
        try:
            self._round(df, batch_id)
        except BaseException as e:
            self.failure = e
            raise

    def _round(self, df: Any, batch_id: int) -> None:
        query_id = checkpoint_query_id(self.checkpoint)
        if self.lake.already_applied(query_id, batch_id):
            log.info("table %s: batch %d is already in the lake (replayed after a restart); "
                     "skipped", self.table, batch_id)
            return
        offsets, done = lake_offsets(batch_end_offset(self.checkpoint, batch_id), self.table)
        self._check_start(query_id, batch_id)
        t0 = time.perf_counter()
        written = self._write(df)
        t1 = time.perf_counter()
        m = self.lake.commit_files(written, query_id=query_id, batch_id=batch_id,
                                   fluss_offsets=offsets, snapshot_complete=done,
                                   lease_id=self.lease_id, run=self._rewriter(df))
        if m is not None:
            self.rounds.append((batch_id, written.rows_in, t1 - t0, time.perf_counter() - t1))
            log.info("table %s: batch %d -> Iceberg snapshot %d (%d rows in, %d files, %d in the "
                     "lake; read and written %.2fs, committed %.2fs)", self.table, batch_id,
                     m.snapshot_id, written.rows_in, len(written.files), m.rows, t1 - t0,
                     time.perf_counter() - t1)
        if m is not None and batch_id % 10 == 9:
            self._maintain()

    def _write(self, df: Any) -> RoundFiles:
        """The round's data files, written by the tasks that read its rows: the micro-batch of
        ``round_source`` is their metadata (no row comes to the driver, nor into the JVM)."""
        with self.spark_lock:
            results = df.toArrow()
        return RoundFiles.merge(results, self.primary_key)

    def _rewriter(self, df: Any) -> MapTasks:
        """Where a PK round's copy-on-write runs (``TieringConfig.copy_on_write``)."""
        sc = df.sparkSession.sparkContext
        where = self.copy_on_write
        if where == "auto":
            where = "driver" if sc.master.startswith("local") else "tasks"
        if where == "driver":
            return on_threads

        def run(fn: Any, items: list) -> list:
            if not items:
                return []
            with self.spark_lock:
                return sc.parallelize(items, len(items)).map(fn).collect()
        return run

    def _check_start(self, query_id: str, batch_id: int) -> None:
        """A batch must start at the lake's offsets: the previous batch is the lake's last round."""
        c = self.lake.state().commit
        if batch_id == 0 or c is None or c.query_id != query_id:
            return      # first round, or a table another query wrote (refused by the commit)
        if c.batch_id != batch_id - 1:
            raise TieringError(
                f"table {self.table}: batch {batch_id} does not follow the lake's last round "
                f"(batch {c.batch_id} of query {query_id}): the checkpoint {self.checkpoint} and "
                f"the lake diverged (restored from different times?). Restore the matching "
                f"checkpoint, or drop the Iceberg table {self.table} to tier it again")

    def _maintain(self) -> None:
        """Compact a table of many small files; expire snapshots past the retention."""
        try:
            self.lake.compact(self.compact_max_files)
            if self.snapshot_retention_s is not None:
                now_ms = int(self.lake.clock() * 1000)
                self.lake.expire(now_ms - int(self.snapshot_retention_s * 1000),
                                 retain_last=self.retain_versions)
        except LakeError as e:
            # The next round's commit is what must not fail; maintenance tries again later.
            log.warning("table %s: lake maintenance skipped: %s", self.table, e)


@dataclass
class TableQuery:
    """A running tiering query of one table: the Spark query, its sink and the table it reads."""

    info: TableInfo
    query: Any
    sink: TableSink


def start_table_query(spark: Any, config: TieringConfig, lease_id: str, info: TableInfo,
                      lake: LakeTable, checkpoint: Path, spark_lock: Any) -> TableQuery:
    """Create the table's lake copy if new and start its query (``full`` mode, the job's lease),
    under ``spark_lock`` until its sources exist (docs/spark_source.md, "Several queries in one
    SparkSession")."""
    lake.create(table=info.name, table_id=info.table_id, schema=info.schema,
                primary_key=info.primary_key, bucket_key=info.bucket_key,
                num_buckets=info.num_buckets, partition_keys=info.partition_keys)
    writer = lake.writer()
    reader = (spark.readStream.format(ROUND_FORMAT)
              .option(WRITER_OPTION, writer.to_json())
              .option("bootstrap.servers", config.bootstrap_servers)
              .option("table", info.name)
              .option("scan.startup.mode", "full")
              .option("scan.kv.snapshot.lease.id", lease_id)
              .option("scan.kv.snapshot.lease.duration", f"{config.lease_duration_ms}ms"))
    if config.max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(config.max_offsets_per_trigger))
    for k, v in config.source_options.items():
        reader = reader.option(k, str(v))
    sink = TableSink(info.name, lake, checkpoint, writer.primary_key, config.retain_versions,
                     config.compact_max_files, spark_lock, lease_id,
                     config.snapshot_retention_s, config.copy_on_write)
    writer = (reader.load().writeStream.queryName(f"tier_{info.name.replace('.', '_')}")
              .option("checkpointLocation", str(checkpoint)).foreachBatch(sink))
    writer = (writer.trigger(availableNow=True) if config.available_now
              else writer.trigger(processingTime=config.trigger_interval))
    with spark_lock:
        query = writer.start()
        await_sources(query)
    log.info("tiering %s (table id %d) into %s", info.name, info.table_id, lake.path)
    return TableQuery(info, query, sink)


__all__ = ["TableQuery", "TableSink", "batch_end_offset", "checkpoint_query_id", "lake_offsets",
           "start_table_query"]
