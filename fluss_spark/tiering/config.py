"""What a tiering job tiers (``TieringConfig``) and the job's identity in its lake
(``JobRecord``)."""

from __future__ import annotations

import json
import logging
import os
import re
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from fluss_spark.clock import wall_ms
from fluss_spark.errors import ConfigError, FlussError
from fluss_spark.tiering.lake import TIERING_DIR, LakeError

log = logging.getLogger(__name__)

JOB_FILE = "job.json"
JOB_VERSION = 1


class TieringError(FlussError):
    """The tiering job cannot start or one of its table queries failed."""


COPY_ON_WRITE = ("auto", "tasks", "driver")


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
    #: Iceberg snapshots older than ``snapshot_retention_s`` are expired by the job (every 10
    #: rounds, with the files only they used), keeping at least the last ``retain_versions``;
    #: None keeps every snapshot (expire with ``fluss-spark tier expire``).
    retain_versions: int = 20
    snapshot_retention_s: float | None = 86_400.0
    #: A table with more data files than this is rewritten into few (every 10 rounds).
    compact_max_files: int = 32
    #: Where a PK round rewrites the data files holding its keys (copy-on-write): ``tasks``
    #: (Spark tasks, one per data file), ``driver`` (threads of the job's process), or ``auto``:
    #: the driver's threads on a ``local`` master (the same machine, without Spark's per-task
    #: cost: docs/tiering.md), Spark tasks otherwise.
    copy_on_write: str = "auto"
    #: pyiceberg catalog properties (``load_catalog``); None: the lake's recorded catalog, or
    #: the embedded SQLite catalog in ``<lake>/_tiering/catalog.db``.
    catalog: dict | None = field(default=None, hash=False)
    #: A table query that fails with a transient error (see ``restarts.restartable``) is started
    #: again from its checkpoint after ``restart_backoff_s`` (doubling per restart, plus up to
    #: half again at random so that queries which failed together restart apart), at most
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
        if self.copy_on_write not in COPY_ON_WRITE:
            raise ConfigError(f"copy_on_write is {self.copy_on_write!r}; use one of "
                              f"{', '.join(COPY_ON_WRITE)}")
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
                  wall_ms())
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_suffix(".tmp")
        tmp.write_text(json.dumps({"version": JOB_VERSION, **rec.__dict__}, sort_keys=True))
        os.replace(tmp, p)
        return rec


__all__ = ["JOB_FILE", "JobRecord", "TieringConfig", "TieringError"]
