"""The tiering job: one checkpointed streaming query per Fluss table, each round committed to the lake.

For every table matching the job's pattern it runs ``spark.readStream.format("fluss")`` in
``full`` mode (PK tables: the KV snapshot, then the changelog; log tables: the changelog from the
earliest offset) with a ``foreachBatch`` sink that applies the round to the table's lake copy
(``LakeTable.commit_round``). All queries use ONE lease id, the job's (``tier-<job id>``), kept
in ``<lake>/_tiering/job.json``, so every snapshot phase of the job is pinned by one lease.

Exactly-once: a round is committed under ``(query id, batch id)``; Spark replays the batch it had
not marked done after a crash, and the lake skips a batch it already has, without reading it.
The query id comes from the checkpoint (``<lake>/_tiering/checkpoints/<table>``), so it survives
restarts. The Fluss offsets a round ends at are read from the checkpoint's offset log and stored
in the manifest: the lake copy after the round equals the table at those offsets.

Leases: the source releases a table's pins when it commits a batch after the snapshot phase,
which Spark does only when a NEXT batch runs. The job therefore also releases, itself, the pins
of every table whose snapshot phase is committed in the lake and marked done by Spark, so no
lease outlives the snapshot phases even on a quiet table.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import random
import re
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from fluss_spark.connector.offsets import decode as decode_offset
from fluss_spark.connector.startup import await_sources
from fluss_spark.errors import ConfigError, FlussError, LeaseNotFound
from fluss_spark.tiering.lake import LakeError, LakeTable, table_dir
from fluss_spark.tiering.progress import TIERING_DIR, write_status

log = logging.getLogger(__name__)

JOB_FILE = "job.json"
JOB_VERSION = 1
LOCK_FILE = "job.lock"
CHECKPOINTS = "checkpoints"

#: Fault injection for tests: sleep this long inside a round, having first created the marker
#: file (so a test can kill -9 there): after the rows are read and before the lake commit
#: (point ``before-commit``, the default) or after the lake commit, before Spark records the batch
#: as done (``after-commit``: the restarted query replays a round the lake already has).
PAUSE_ENV, MARKER_ENV = "FLUSS_SPARK_TIER_PAUSE_S", "FLUSS_SPARK_TIER_MARKER"
PAUSE_POINT_ENV = "FLUSS_SPARK_TIER_PAUSE_POINT"


#: The error shown for a table whose query stopped because the table was dropped.
DROPPED = "the table was dropped; its lake copy is kept as it was"


class TieringError(FlussError):
    """The tiering job cannot start or one of its table queries failed."""


@dataclass(frozen=True)
class TieringConfig:
    """What a tiering job tiers, where to, and how often."""

    lake: Path
    bootstrap_servers: str
    table_pattern: str
    trigger_interval: str = "5 seconds"
    available_now: bool = False
    max_offsets_per_trigger: int | None = None
    lease_duration_ms: int = 600_000
    discover_interval_s: float = 30.0
    poll_interval_s: float = 1.0
    retain_versions: int = 10
    compact_max_files: int = 32
    #: A table query that fails with a transient error (see ``restartable``) is started again
    #: from its checkpoint after ``restart_backoff_s`` (doubling per restart, plus up to half
    #: again at random so that queries which failed together restart apart), at most
    #: ``max_restarts`` times within ``restart_window_s``; then the job fails.
    max_restarts: int = 3
    restart_backoff_s: float = 5.0
    restart_window_s: float = 600.0
    source_options: dict = field(default_factory=dict, hash=False, repr=False)

    def __post_init__(self):
        try:
            re.compile(self.table_pattern)
        except re.error as e:
            raise ConfigError(f"table pattern {self.table_pattern!r} is not a valid regex: {e}"
                              ) from None
        if self.max_restarts < 0 or self.restart_backoff_s < 0:
            raise ConfigError(f"max_restarts ({self.max_restarts}) and restart_backoff_s "
                              f"({self.restart_backoff_s}) cannot be negative")


@dataclass(frozen=True)
class JobRecord:
    """``_tiering/job.json``. Versions: **1** ``{version, job_id, lease_id, table_pattern,
    bootstrap_servers, created_ms}``."""

    job_id: str
    lease_id: str
    table_pattern: str
    bootstrap_servers: str
    created_ms: int

    @classmethod
    def load_or_create(cls, lake: Path, config: TieringConfig) -> "JobRecord":
        p = lake / TIERING_DIR / JOB_FILE
        if p.exists():
            try:
                d = json.loads(p.read_text())
                if d.get("version") != JOB_VERSION:
                    raise LakeError(f"{p} has version {d.get('version')!r}; upgrade fluss_spark")
                rec = cls(d["job_id"], d["lease_id"], d["table_pattern"], d["bootstrap_servers"],
                          int(d["created_ms"]))
            except (ValueError, KeyError, TypeError) as e:
                raise LakeError(f"{p} is corrupt ({e}); move the lake directory away") from None
            if rec.table_pattern != config.table_pattern:
                log.warning("tiering lake %s was started with pattern %r, now %r: tables that "
                            "no longer match keep their lake copies but are not updated",
                            lake, rec.table_pattern, config.table_pattern)
            return rec
        job_id = uuid.uuid4().hex[:16]
        rec = cls(job_id, f"tier-{job_id}", config.table_pattern, config.bootstrap_servers,
                  int(time.time() * 1000))
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_suffix(".tmp")
        tmp.write_text(json.dumps({"version": JOB_VERSION, **rec.__dict__}, sort_keys=True))
        os.replace(tmp, p)
        return rec


def checkpoint_query_id(checkpoint: Path) -> str:
    """The streaming query id Spark keeps in ``<checkpoint>/metadata`` (stable over restarts)."""
    try:
        return json.loads((checkpoint / "metadata").read_text().splitlines()[0])["id"]
    except (OSError, ValueError, KeyError, IndexError) as e:
        raise TieringError(f"cannot read the query id from {checkpoint}/metadata ({e})") from None


def batch_end_offset(checkpoint: Path, batch_id: int) -> dict:
    """The fluss source offset batch ``batch_id`` ends at, from the checkpoint's offset log
    (written by Spark before the batch runs: ``v1``, batch metadata, then one line per source)."""
    p = checkpoint / "offsets" / str(batch_id)
    try:
        lines = [ln for ln in p.read_text().splitlines() if ln.strip()]
        return json.loads(lines[-1])
    except (OSError, ValueError, IndexError) as e:
        raise TieringError(f"cannot read the end offset of batch {batch_id} from {p} ({e})"
                           ) from None


def lake_offsets(source_offset: dict, table: str) -> tuple[dict, bool]:
    """A table's part of a source offset as stored in the manifest, and whether its snapshot
    phase is over (read through the source's versioned offset decoder)."""
    found = decode_offset(source_offset).table_by_name(table)
    if found is None:
        raise TieringError(f"the source offset has no entry for table {table!r}")
    t = found[1]
    snap = {str(b): [s.snapshot_id, s.row_count, s.next_row] for b, s in t.snapshot.items()}
    return {"log": {str(b): o for b, o in t.log.items()}, "snapshot": snap}, t.snapshot_complete


class TableSink:
    """The ``foreachBatch`` function of one table's query: one round -> one lake commit."""

    def __init__(self, table: str, lake: LakeTable, checkpoint: Path, columns: list[str],
                 retain_versions: int = 10, compact_max_files: int = 32,
                 collect_lock: Any = None):
        self.table, self.lake, self.checkpoint = table, lake, checkpoint
        self.columns = columns
        #: Shared by the sinks of one job (see ``TieringJob.spark_lock``): rounds are collected
        #: one at a time, never while another query's source is initializing.
        self.collect_lock = collect_lock or threading.Lock()
        self.retain_versions, self.compact_max_files = retain_versions, compact_max_files
        #: (batch id, rows in, seconds reading the round, seconds committing it) per round.
        self.rounds: list[tuple[int, int, float, float]] = []

    def __call__(self, df: Any, batch_id: int) -> None:
        query_id = checkpoint_query_id(self.checkpoint)
        if self.lake.already_applied(query_id, batch_id):
            log.info("table %s: batch %d is already in the lake (replayed after a restart); "
                     "skipped", self.table, batch_id)
            return
        offsets, done = lake_offsets(batch_end_offset(self.checkpoint, batch_id), self.table)
        t0 = time.perf_counter()
        with self.collect_lock:
            rows = df.select(*[f"`{c}`" for c in self.columns], "_change_type",
                             "_log_offset").toArrow()
        t1 = time.perf_counter()
        _maybe_pause("before-commit")
        m = self.lake.commit_round(rows, query_id=query_id, batch_id=batch_id,
                                   fluss_offsets=offsets, snapshot_complete=done)
        _maybe_pause("after-commit")
        if m is not None:
            self.rounds.append((batch_id, rows.num_rows, t1 - t0, time.perf_counter() - t1))
            log.info("table %s: batch %d -> lake version %d (%d rows in, %d in the lake; read "
                     "%.2fs, commit %.2fs)", self.table, batch_id, m.table_version, rows.num_rows,
                     m.rows, t1 - t0, time.perf_counter() - t1)
        if m is not None and m.table_version % 10 == 0:
            self.lake.compact(self.compact_max_files)
            self.lake.vacuum(self.retain_versions)


def _maybe_pause(point: str) -> None:
    pause = os.environ.get(PAUSE_ENV)
    if not pause or os.environ.get(PAUSE_POINT_ENV, "before-commit") != point:
        return
    marker = os.environ.get(MARKER_ENV)
    if marker:
        Path(marker).write_text(str(os.getpid()))
    time.sleep(float(pause))


class TieringJob:
    """Keeps the lake copies of every table matching ``config.table_pattern`` up to date.

    ``start()`` takes the lake's job lock, starts one query per table; ``poll()`` discovers new
    tables, releases finished snapshot phases from the lease, restarts queries failed by a
    transient error (or fails the job), and writes the status file; ``run()`` does that until
    told to stop (or, with ``available_now``, until every query has caught up).
    """

    def __init__(self, spark: Any, config: TieringConfig, *, clock: Callable[[], float] = time.time,
                 jitter: Callable[[], float] = random.random):
        self.spark, self.config, self.clock = spark, config, clock
        #: In [0, 1): spreads restart delays so queries that failed together restart apart.
        self.jitter = jitter
        #: Held while a round is collected and while a query's source initializes. Spark keeps
        #: ONE environment map per Python data source, shared by every query that reads it, and
        #: each query's source start writes to it; a write that makes the map grow, while another
        #: query's task is serialized (the map travels with every task), fails that task with
        #: "Task serialization failed: Illegal size N of collection, expected M"
        #: (see fluss_spark.connector.startup).
        self.spark_lock = threading.Lock()
        self.lake_root = Path(config.lake).absolute()
        self.record: JobRecord | None = None
        self.queries: dict[str, Any] = {}
        self.sinks: dict[str, TableSink] = {}
        self.infos: dict[str, Any] = {}
        self.errors: dict[str, str] = {}
        self.released: set[str] = set()
        #: Per table: clock times of its query's restarts; when the pending one is due.
        self.restarts: dict[str, list[float]] = {}
        self._restart_due: dict[str, float] = {}
        self._lock_fh = None
        self._conn = None
        self._last_discover = 0.0

    # -- lifecycle ------------------------------------------------------------------------------
    @property
    def conn(self):
        if self._conn is None:
            from fluss_spark.client import FlussConnection
            opts = self.config.source_options
            self._conn = FlussConnection(self.config.bootstrap_servers, request_timeout_s=30.0,
                                         username=opts.get("client.security.sasl.username"),
                                         password=opts.get("client.security.sasl.password"))
        return self._conn

    def start(self) -> "TieringJob":
        from fluss_spark.connector import register
        self._lock()
        self.record = JobRecord.load_or_create(self.lake_root, self.config)
        register(self.spark)
        self.discover()
        if not self.queries:
            raise TieringError(f"no table on {self.config.bootstrap_servers} matches "
                               f"{self.config.table_pattern!r}; create one or fix the pattern")
        return self

    def _lock(self) -> None:
        d = self.lake_root / TIERING_DIR
        d.mkdir(parents=True, exist_ok=True)
        fh = open(d / LOCK_FILE, "a+")
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.seek(0)
            holder = fh.read().strip() or "?"
            fh.close()
            raise TieringError(f"another tiering job (pid {holder}) is running on lake "
                               f"{self.lake_root}; stop it first") from None
        fh.seek(0)
        fh.truncate()
        fh.write(str(os.getpid()))
        fh.flush()
        self._lock_fh = fh

    def stop(self) -> None:
        self._restart_due.clear()          # a stopping job starts nothing new
        for q in list(self.queries.values()):
            try:
                q.stop()
            except Exception as e:  # noqa: BLE001 - stop every query even if one fails
                log.warning("stopping %s failed: %s", q.name, e)
        try:
            self.poll(discover=False, check=False)
        except Exception as e:  # noqa: BLE001 - final status is best effort
            log.warning("final tiering poll failed: %s", e)
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        if self._lock_fh is not None:
            self._lock_fh.close()
            self._lock_fh = None

    def __enter__(self) -> "TieringJob":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- tables ---------------------------------------------------------------------------------
    def discover(self) -> list[str]:
        """Start a query for every matching table that has none yet; returns the new tables."""
        self._last_discover = self.clock()
        pattern = re.compile(self.config.table_pattern)
        admin = self.conn.admin()
        started = []
        for name in admin.list_tables():
            if not pattern.fullmatch(name) or name in self.queries:
                continue
            self._start_query(admin.get_table(name))
            started.append(name)
        return started

    def checkpoint(self, table: str) -> Path:
        return self.lake_root / TIERING_DIR / CHECKPOINTS / table

    def _start_query(self, info: Any) -> None:
        cfg = self.config
        lake = LakeTable(table_dir(self.lake_root, info.name))
        lake.create(table=info.name, table_id=info.table_id, schema=info.schema,
                    primary_key=info.primary_key, bucket_key=info.bucket_key,
                    num_buckets=info.num_buckets)
        reader = (self.spark.readStream.format("fluss")
                  .option("bootstrap.servers", cfg.bootstrap_servers)
                  .option("table", info.name)
                  .option("scan.startup.mode", "full")
                  .option("scan.kv.snapshot.lease.id", self.record.lease_id)
                  .option("scan.kv.snapshot.lease.duration", f"{cfg.lease_duration_ms}ms"))
        if cfg.max_offsets_per_trigger:
            reader = reader.option("maxOffsetsPerTrigger", str(cfg.max_offsets_per_trigger))
        for k, v in cfg.source_options.items():
            reader = reader.option(k, str(v))
        ckpt = self.checkpoint(info.name)
        sink = TableSink(info.name, lake, ckpt, list(info.schema.names), cfg.retain_versions,
                         cfg.compact_max_files, self.spark_lock)
        writer = (reader.load().writeStream.queryName(f"tier_{info.name.replace('.', '_')}")
                  .option("checkpointLocation", str(ckpt)).foreachBatch(sink))
        writer = (writer.trigger(availableNow=True) if cfg.available_now
                  else writer.trigger(processingTime=cfg.trigger_interval))
        with self.spark_lock:
            query = writer.start()
            await_sources(query)
        self.queries[info.name] = query
        self.sinks[info.name] = sink
        self.infos[info.name] = info
        log.info("tiering %s (table id %d) into %s", info.name, info.table_id, lake.path)

    # -- monitoring -----------------------------------------------------------------------------
    def poll(self, discover: bool = True, check: bool = True) -> dict:
        """One pass of the job's loop; returns the status document it wrote."""
        if discover and not self.config.available_now and \
                self.clock() - self._last_discover >= self.config.discover_interval_s:
            self.discover()
        failed = {}
        for name, q in list(self.queries.items()):
            exc = q.exception() if not q.isActive else None
            if exc is not None and name not in self.errors:
                self.errors[name] = error_summary(exc)
                log.error("the tiering query of table %s failed:\n%s", name,
                          failure_text(exc)[-20_000:])
                if self._dropped(name):
                    # The lake copy stays as the table's last tiered state; nothing to retry.
                    self.errors[name] = DROPPED
                    log.warning("table %s was dropped: its tiering query stopped (%s)", name,
                                error_summary(exc))
                elif check and self._schedule_restart(name):
                    continue
                else:
                    failed[name] = self.errors[name]
            if check and name in self._restart_due and self.clock() >= self._restart_due[name]:
                self._restart(name)
        self.release_finished_snapshots()
        doc = self.status()
        write_status(self.lake_root, doc)
        if check and failed:
            raise TieringError("tiering failed for " + "; ".join(
                f"table {t!r}: {e}" for t, e in sorted(failed.items())))
        return doc

    def _schedule_restart(self, name: str) -> bool:
        """Plan a restart of a failed table query if its error may pass and the budget allows."""
        cfg = self.config
        now = self.clock()
        recent = [t for t in self.restarts.get(name, []) if now - t < cfg.restart_window_s]
        self.restarts[name] = recent
        if not restartable(self.errors[name]) or len(recent) >= cfg.max_restarts:
            return False
        delay = cfg.restart_backoff_s * (2 ** len(recent)) * (1 + self.jitter() / 2)
        self._restart_due[name] = now + delay
        log.warning("table %s: restarting its tiering query from its checkpoint in %.1fs "
                    "(restart %d of at most %d within %.0fs)", name, delay, len(recent) + 1,
                    cfg.max_restarts, cfg.restart_window_s)
        return True

    def _restart(self, name: str) -> None:
        del self._restart_due[name]
        if self._dropped(name):            # dropped during the backoff: nothing to restart
            self.errors[name] = DROPPED
            log.warning("table %s was dropped; its tiering query is not restarted", name)
            return
        self.restarts.setdefault(name, []).append(self.clock())
        try:
            self._start_query(self.infos[name])
        except Exception as e:  # noqa: BLE001 - a failed start counts as a failed run
            self.errors[name] = error_summary(e)
            if not self._schedule_restart(name):
                raise TieringError(f"tiering failed for table {name!r}: restarting its query "
                                   f"failed: {self.errors[name]}") from None
            return
        del self.errors[name]

    @property
    def restarting(self) -> bool:
        """Whether a failed query is waiting for its restart."""
        return bool(self._restart_due)

    def _dropped(self, name: str) -> bool:
        """Whether the table a query read is gone (or was recreated under a new id)."""
        from fluss_spark.errors import TableNotExist
        try:
            return self.conn.admin().get_table(name).table_id != self.infos[name].table_id
        except TableNotExist:
            return True
        except FlussError:
            return False

    def release_finished_snapshots(self) -> list[str]:
        """Unpin tables whose snapshot phase is committed in the lake and done in Spark."""
        if self.record is None:
            return []
        try:
            lease = self.conn.admin().describe_kv_snapshot_lease(self.record.lease_id)
        except LeaseNotFound:
            return []
        except FlussError as e:
            log.warning("cannot describe lease %s: %s", self.record.lease_id, e)
            return []
        released = []
        for name, info in self.infos.items():
            pins = lease.tables.get(info.table_id)
            if pins and name in self.errors:
                continue  # a failed query's pins go with the lease's expiry or a restart
            if not pins:
                continue
            m = LakeTable(table_dir(self.lake_root, name)).manifest()
            q = self.queries.get(name)
            progress = q.lastProgress if q is not None else None
            finished_batch = progress["batchId"] if progress else -1
            if (m.commit is not None and m.snapshot_complete and m.fluss_offsets.get("snapshot")
                    and finished_batch >= m.commit.batch_id):
                try:
                    self.conn.admin().release_kv_snapshot_lease(self.record.lease_id,
                                                                {info.table_id: sorted(pins)})
                except LeaseNotFound:
                    pass
                released.append(name)
                log.info("released table %s from lease %s after its snapshot phase", name,
                         self.record.lease_id)
        return released

    def lake_lag(self, name: str) -> int:
        """Snapshot rows + changelog records of ``name`` not yet committed to its lake copy."""
        from fluss_spark.tiering.progress import lag_from_manifest
        m = LakeTable(table_dir(self.lake_root, name)).manifest()
        return lag_from_manifest(m, self.conn.admin().list_offsets(name, spec="latest"))

    def status(self) -> dict:
        from fluss_spark.connector.progress import table_lag
        tables = {}
        for name, q in self.queries.items():
            try:
                lag = self.lake_lag(name)
            except (FlussError, OSError):
                # Cluster unreachable: fall back to what the query last saw.
                try:
                    lag = table_lag(q.lastProgress).get(name)
                except Exception:  # noqa: BLE001 - progress from another source version
                    lag = None
            tables[name] = {"active": q.isActive, "lag": lag, "error": self.errors.get(name),
                            "restarts": len(self.restarts.get(name, ()))}
        return {"job_id": self.record.job_id if self.record else None,
                "lease_id": self.record.lease_id if self.record else None,
                "pid": os.getpid(), "updated_ms": int(self.clock() * 1000), "tables": tables}

    def caught_up(self) -> bool:
        """Every table's lake copy is at the table's latest offsets (no snapshot rows left)."""
        return not any(self.lake_lag(name) for name in self.queries if name not in self.errors)

    def run(self, duration_s: float | None = None) -> dict:
        """Poll until ``duration_s`` passed, or (available_now) every query finished."""
        deadline = None if duration_s is None else self.clock() + duration_s
        while True:
            doc = self.poll()
            if self.config.available_now and not self.restarting and \
                    not any(q.isActive for q in self.queries.values()):
                doc = self.poll(discover=False)
                if not self.restarting:    # a query that failed just now is restarted first
                    return doc
            if deadline is not None and self.clock() >= deadline:
                return doc
            time.sleep(self.config.poll_interval_s)


#: The line of a Spark job failure that names the task's error, e.g. "... most recent failure:
#: Lost task 0.0 in stage 3.0 (TID 5) (host executor driver): java.io.IOException: ...".
_TASK_FAILURE = re.compile(r"most recent failure: Lost task [^:]*?\): (.+)$")
_EXCEPTION_LINE = re.compile(r"^(Caused by: )?[\w.$]+(Exception|Error)\b.*$")


def restartable(summary: str) -> bool:
    """Whether a query failure (its ``error_summary``) may pass on a restart: a retriable Fluss
    error (a server down longer than the client's timeout) or a Spark/JVM error, but not a
    configuration, data-loss or lake error, which needs an operator."""
    m = re.match(r"^fluss_spark\.([\w.]+)\.(\w+): ", summary)
    if m is None:
        return True
    from fluss_spark import errors
    cls = getattr(errors, m.group(2), None) if m.group(1) == "errors" else None
    return isinstance(cls, type) and issubclass(cls, errors.ApiError) and cls.retriable


def error_summary(exc: Any) -> str:
    """One line for a (Spark-wrapped) failure: the fluss_spark error raised inside, else the
    error the failed task raised, else the first exception line."""
    lines = [ln.strip() for ln in failure_text(exc).splitlines() if ln.strip()]
    ours = [ln for ln in lines if re.match(r"^fluss_spark\.[\w.]+: ", ln)]
    task = [m.group(1) for ln in lines if (m := _TASK_FAILURE.search(ln))]
    named = [ln for ln in lines if _EXCEPTION_LINE.match(ln)]
    best = ours[-1:] or task[-1:] or named[-1:] or lines[:1] or [type(exc).__name__]
    return best[0][:500]


def failure_text(exc: Any) -> str:
    """A (Spark-wrapped) failure's full message without JVM stack frames."""
    return strip_jvm_frames(str(getattr(exc, "desc", None) or exc).strip())


def strip_jvm_frames(text: str) -> str:
    """``text`` without the ``at ...`` / ``... N more`` lines of JVM stack traces, so that the
    Python traceback and the lines naming the cause stay readable."""
    return "\n".join(ln for ln in text.splitlines()
                     if not re.match(r"^\s+(at |\.\.\. \d+ more)", ln))


__all__ = ["TieringJob", "TieringConfig", "TableSink", "TieringError", "JobRecord", "error_summary",
           "failure_text", "strip_jvm_frames", "restartable", "batch_end_offset",
           "checkpoint_query_id", "lake_offsets"]
