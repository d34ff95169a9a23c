"""The tiering job: one checkpointed streaming query per Fluss table, each round committed to the
lake.

For every table matching the job's pattern it runs ``spark.readStream.format("fluss")`` in
``full`` mode (PK tables: the KV snapshot, then the changelog; log tables: the changelog from the
earliest offset) with a ``foreachBatch`` sink that applies the round to the table's lake copy
(``fluss_spark/tiering/table_query.py``). All queries use ONE lease id, the job's
(``tier-<job id>``), kept in ``<lake>/_tiering/job.json``, so every snapshot phase of the job is
pinned by one lease.

This module is the job's loop: it discovers tables, starts their queries, restarts a query that
failed with an error that may pass (``fluss_spark/tiering/restarts.py``), releases finished
snapshot phases from the lease (``fluss_spark/tiering/leases.py``) and writes the status file.
"""

from __future__ import annotations

import fcntl
import logging
import os
import random
import re
import threading
import time
from pathlib import Path
from typing import IO, Any, Callable

from fluss_spark.client.cluster import Cluster, TableInfo
from fluss_spark.clock import Clock, wall_ms
from fluss_spark.errors import FlussError, TableNotExist
from fluss_spark.tiering.config import JOB_FILE, JobRecord, TieringConfig, TieringError
from fluss_spark.tiering.lake import LakeState, LakeTable
from fluss_spark.tiering.leases import release_finished_snapshots
from fluss_spark.tiering.progress import TIERING_DIR, write_status
from fluss_spark.tiering.restarts import RestartPolicy, error_summary, failure_text
from fluss_spark.tiering.table_query import TableSink, start_table_query

log = logging.getLogger(__name__)

LOCK_FILE = "job.lock"
CHECKPOINTS = "checkpoints"

#: The error shown for a table whose query stopped because the table was dropped.
DROPPED = "the table was dropped; its lake copy is kept as it was"

#: How long the job's own calls to the cluster keep retrying retriable errors.
_REQUEST_TIMEOUT = "30s"


class TieringJob:
    """Keeps the lake copies of every table matching ``config.table_pattern`` up to date.

    ``start()`` takes the lake's job lock, starts one query per table; ``poll()`` discovers new
    tables, releases finished snapshot phases from the lease, restarts queries failed by a
    transient error (or fails the job), and writes the status file; ``run()`` does that until
    told to stop (or, with ``available_now``, until every query has caught up). ``clock`` gives
    epoch milliseconds; ``connect()`` opens the job's own ``Cluster`` (default: the cluster the
    queries read, with the same credentials).
    """

    def __init__(self, spark: Any, config: TieringConfig, *, clock: Clock = wall_ms,
                 jitter: Callable[[], float] = random.random,
                 connect: Callable[[], Cluster] | None = None):
        self.spark, self.config, self.clock = spark, config, clock
        self._connect = connect or self._connect_from_config
        #: Held while a round's tasks run and while a query's source initializes. Spark keeps
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
        self.infos: dict[str, TableInfo] = {}
        self.errors: dict[str, str] = {}
        #: Tables this job released from its lease (what a cluster that cannot describe a lease
        #: needs to know not to release them again).
        self._released: set[str] = set()
        #: In [0, 1) from ``jitter``: spreads restart delays so queries that failed together
        #: restart apart.
        self.restart_policy = RestartPolicy(
            max_restarts=config.max_restarts, backoff_ms=int(config.restart_backoff_s * 1000),
            window_ms=int(config.restart_window_s * 1000), clock=clock, jitter=jitter)
        self._lock_fh: IO[str] | None = None
        self._cluster: Cluster | None = None
        self._last_discover_ms: int | None = None

    # -- lifecycle ------------------------------------------------------------------------------
    def _connect_from_config(self) -> Cluster:
        from fluss_spark.connector.options import parse_options
        return parse_options({"bootstrap.servers": self.config.bootstrap_servers,
                              "table.pattern": self.config.table_pattern,
                              "client.request.timeout": _REQUEST_TIMEOUT,
                              **self.config.source_options}).connect()

    @property
    def cluster(self) -> Cluster:
        if self._cluster is None:
            self._cluster = self._connect()
        return self._cluster

    def start(self) -> "TieringJob":
        from fluss_spark.connector import register
        from fluss_spark.tiering.round_source import RoundSource
        self._lock()
        self._check_lake()
        self.record = JobRecord.load_or_create(self.lake_root, self.config)
        register(self.spark, RoundSource)
        self.discover()
        if not self.queries:
            raise TieringError(f"no table on {self.config.bootstrap_servers} matches "
                               f"{self.config.table_pattern!r}; create one or fix the pattern")
        return self

    def _check_lake(self) -> None:
        """Record the lake's catalog; refuse a lake still in the old Parquet-manifest format."""
        from fluss_spark.tiering.lake import catalog_properties, write_lake_file
        from fluss_spark.tiering.migrate import legacy_tables
        old = legacy_tables(self.lake_root)
        if old:
            raise TieringError(f"lake {self.lake_root} holds {len(old)} table(s) in the old "
                               f"Parquet-manifest format ({', '.join(sorted(old)[:5])}); convert "
                               f"them to Iceberg first: fluss-spark tier migrate --lake "
                               f"{self.lake_root}")
        if self.config.catalog:
            recorded = ((self.lake_root / TIERING_DIR / "lake.json").exists()
                        and catalog_properties(self.lake_root))
            if recorded and recorded != dict(self.config.catalog):
                raise TieringError(f"lake {self.lake_root} uses catalog {recorded}, not "
                                   f"{self.config.catalog}: use the lake's catalog, or another "
                                   "lake directory")
            write_lake_file(self.lake_root, dict(self.config.catalog))

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
        self.restart_policy.cancel()       # a stopping job starts nothing new
        for q in list(self.queries.values()):
            try:
                q.stop()
            except Exception as e:  # noqa: BLE001 - stop every query even if one fails
                log.warning("stopping %s failed: %s", q.name, e)
        try:
            self.poll(discover=False, check=False)
        except Exception as e:  # noqa: BLE001 - final status is best effort
            log.warning("final tiering poll failed: %s", e)
        if self._cluster is not None:
            self._cluster.close()
            self._cluster = None
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
        self._last_discover_ms = self.clock()
        pattern = re.compile(self.config.table_pattern)
        started = []
        for name in self.cluster.list_tables():
            if not pattern.fullmatch(name) or name in self.queries:
                continue
            self._start_query(self.cluster.get_table(name))
            started.append(name)
        return started

    def checkpoint(self, table: str) -> Path:
        return self.lake_root / TIERING_DIR / CHECKPOINTS / table

    def _start_query(self, info: TableInfo) -> None:
        if self.record is None:
            raise TieringError("the tiering job starts queries only once started")
        started = start_table_query(self.spark, self.config, self.record.lease_id, info,
                                    LakeTable.open(self.lake_root, info.name),
                                    self.checkpoint(info.name), self.spark_lock)
        self.queries[info.name] = started.query
        self.sinks[info.name] = started.sink
        self.infos[info.name] = info

    # -- monitoring -----------------------------------------------------------------------------
    def poll(self, discover: bool = True, check: bool = True) -> dict:
        """One pass of the job's loop; returns the status document it wrote."""
        if discover and not self.config.available_now and (
                self._last_discover_ms is None or self.clock() - self._last_discover_ms
                >= self.config.discover_interval_s * 1000):
            self.discover()
        failed = {}
        for name, q in list(self.queries.items()):
            exc = q.exception() if not q.isActive else None
            if exc is not None and name not in self.errors:
                cause = self._failure(name, exc)
                self.errors[name] = error_summary(exc)
                log.error("the tiering query of table %s failed:\n%s", name,
                          failure_text(exc)[-20_000:])
                if self._dropped(name):
                    # The lake copy stays as the table's last tiered state; nothing to retry.
                    self.errors[name] = DROPPED
                    log.warning("table %s was dropped: its tiering query stopped (%s)", name,
                                error_summary(exc))
                elif check and self._schedule_restart(name, cause):
                    continue
                else:
                    failed[name] = self.errors[name]
            if check and self.restart_policy.due(name):
                self._restart(name)
        self.release_finished_snapshots()
        doc = self.status()
        write_status(self.lake_root, doc)
        if check and failed:
            raise TieringError("tiering failed for " + "; ".join(
                f"table {t!r}: {e}" for t, e in sorted(failed.items())))
        return doc

    def _failure(self, name: str, exc: BaseException) -> BaseException:
        """The query's failure as raised where Python still has it (its sink), else Spark's."""
        sink = self.sinks.get(name)
        return sink.failure if sink is not None and sink.failure is not None else exc

    def _schedule_restart(self, name: str, error: BaseException) -> bool:
        """Plan a restart of a failed table query if its error may pass and the budget allows."""
        delay_ms = self.restart_policy.schedule(name, error)
        if delay_ms is None:
            return False
        cfg = self.config
        log.warning("table %s: restarting its tiering query from its checkpoint in %.1fs "
                    "(restart %d of at most %d within %.0fs)", name, delay_ms / 1000,
                    len(self.restarts[name]) + 1, cfg.max_restarts, cfg.restart_window_s)
        return True

    def _restart(self, name: str) -> None:
        self.restart_policy.cancel(name)
        if self._dropped(name):            # dropped during the backoff: nothing to restart
            self.errors[name] = DROPPED
            log.warning("table %s was dropped; its tiering query is not restarted", name)
            return
        self.restart_policy.started(name)
        try:
            self._start_query(self.infos[name])
        except Exception as e:  # noqa: BLE001 - a failed start counts as a failed run
            self.errors[name] = error_summary(e)
            if not self._schedule_restart(name, e):
                raise TieringError(f"tiering failed for table {name!r}: restarting its query "
                                   f"failed: {self.errors[name]}") from None
            return
        del self.errors[name]

    @property
    def restarts(self) -> dict[str, list[int]]:
        """Per table: clock times (ms) of its query's restarts within the window."""
        return self.restart_policy.restarts

    @property
    def restarting(self) -> bool:
        """Whether a failed query is waiting for its restart."""
        return self.restart_policy.pending

    def _dropped(self, name: str) -> bool:
        """Whether the table a query read is gone (or was recreated under a new id)."""
        try:
            return self.cluster.get_table(name).table_id != self.infos[name].table_id
        except TableNotExist:
            return True
        except FlussError:
            return False

    def release_finished_snapshots(self) -> list[str]:
        """Unpin tables whose snapshot phase is committed in the lake and done in Spark."""
        if self.record is None:
            return []
        released = release_finished_snapshots(self.cluster, self.record.lease_id,
                                              self.lake_root, self.infos, self.errors,
                                              self._finished_batch, self._released)
        self._released.update(released)
        return released

    def _finished_batch(self, name: str) -> int:
        q = self.queries.get(name)
        progress = q.lastProgress if q is not None else None
        return progress["batchId"] if progress else -1

    def lake_lag(self, name: str) -> int:
        """Snapshot rows + changelog records of ``name`` not yet committed to its lake copy."""
        return self._lag(name, LakeTable.open(self.lake_root, name).state())

    def _lag(self, name: str, state: LakeState) -> int:
        from fluss_spark.tiering.progress import lag_from_state, latest_offsets
        return lag_from_state(state, latest_offsets(self.cluster, name, self.infos.get(name)))

    def status(self) -> dict:
        from fluss_spark.connector.progress import table_lag
        tables = {}
        for name, q in self.queries.items():
            lag: int | None
            state = None
            try:
                state = LakeTable.open(self.lake_root, name).state()
                lag = self._lag(name, state)
            except (FlussError, OSError):
                # Cluster unreachable: fall back to what the query last saw.
                try:
                    lag = table_lag(q.lastProgress).get(name)
                except Exception:  # noqa: BLE001 - progress from another source version
                    lag = None
            tables[name] = {"active": q.isActive, "lag": lag, "error": self.errors.get(name),
                            "restarts": len(self.restarts.get(name, ())),
                            "rows_tiered": state.rows_tiered if state else None,
                            "batch_id": state.commit.batch_id if state and state.commit else None}
        return {"job_id": self.record.job_id if self.record else None,
                "lease_id": self.record.lease_id if self.record else None,
                "pid": os.getpid(), "updated_ms": self.clock(), "tables": tables}

    def caught_up(self) -> bool:
        """Every table's lake copy is at the table's latest offsets (no snapshot rows left)."""
        return not any(self.lake_lag(name) for name in self.queries if name not in self.errors)

    def run(self, duration_s: float | None = None,
            on_poll: Callable[[dict], None] | None = None) -> dict:
        """Poll until ``duration_s`` passed, or (available_now) every query finished;
        ``on_poll`` gets the status document of every poll (``tiering/round_report.py``)."""
        deadline = None if duration_s is None else self.clock() + int(duration_s * 1000)
        while True:
            doc = self.poll()
            if on_poll is not None:
                on_poll(doc)
            if self.config.available_now and not self.restarting and \
                    not any(q.isActive for q in self.queries.values()):
                doc = self.poll(discover=False)
                if not self.restarting:    # a query that failed just now is restarted first
                    return doc
            if deadline is not None and self.clock() >= deadline:
                return doc
            self._wait(self.config.poll_interval_s)

    def _wait(self, timeout_s: float) -> None:
        """Up to ``timeout_s``, less when a running query stops first: a ``--once`` job ends as
        its last query does, and a failed query is seen at once, not at the next poll."""
        from pyspark.errors import StreamingQueryException
        active = [q for q in self.queries.values() if q.isActive]
        if not active:
            time.sleep(timeout_s)
            return
        try:
            active[0].awaitTermination(timeout_s)
        except StreamingQueryException:
            pass    # the next poll reads the failure from the query


__all__ = ["CHECKPOINTS", "DROPPED", "JOB_FILE", "LOCK_FILE", "TieringConfig", "TieringError",
           "TieringJob"]
