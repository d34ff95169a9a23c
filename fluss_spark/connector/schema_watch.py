"""The table schemas a query run started with: checked against its checkpoint's on a restart
(columns appended since are taken, any other change refused) and watched while it reads (one
WARN per table whose columns grew: its rows are read without them until a restart)."""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Callable, Iterable, Mapping

from fluss_spark.client.cluster import Cluster, TableInfo, additive_problem, column_texts
from fluss_spark.clock import Clock
from fluss_spark.connector.offsets import QueryIdentity

log = logging.getLogger(__name__)

#: How often (ms) a running query looks for columns added to its tables.
CHECK_INTERVAL_MS = 10_000

Columns = tuple[tuple[str, str], ...]


class SchemaWatch:
    """The columns of each table when the run started, and the tables already warned about."""

    def __init__(self, cluster: Callable[[], Cluster], clock: Clock,
                 interval_ms: int = CHECK_INTERVAL_MS):
        self._cluster = cluster
        self._clock = clock
        self._interval_ms = interval_ms
        self._next_ms: int | None = None
        self.columns: dict[str, Columns] | None = None
        self._warned: set[str] = set()

    def started(self, infos: Iterable[TableInfo]) -> None:
        """Record the tables as the run first resolved them (later calls change nothing); the
        first look for new columns comes an interval later (these were just read)."""
        if self.columns is None:
            self.columns = {i.name: column_texts(i.schema) for i in infos}
            self._next_ms = self._clock() + self._interval_ms

    def identity(self, logged: QueryIdentity | None) -> QueryIdentity | None:
        """A checkpoint's identity with this run's columns (what its offsets record from now)."""
        return None if logged is None else replace(logged, columns=self.columns)

    def problems(self, logged: QueryIdentity | None, infos: Mapping[str, TableInfo]) -> list[str]:
        """What changed in the tables since the checkpoint's run started, other than columns
        appended at the end (those are logged: this run reads them)."""
        out: list[str] = []
        theirs = logged.columns if logged is not None else None
        for name, before in sorted((theirs or {}).items()):
            info = infos.get(name)
            if info is None:
                continue
            now = column_texts(info.schema)
            problem = additive_problem(before, now)
            if problem is not None:
                out.append(f"its table {name!r} changed incompatibly since ({problem}); only "
                           f"nullable columns appended at the end are taken")
            elif len(now) > len(before):
                log.info("table %s has new column(s) %s since the checkpoint was written; this "
                         "run reads them (null in rows written before)", name,
                         ", ".join(n for n, _ in now[len(before):]))
        return out

    def check(self, names: Iterable[str]) -> None:
        """At most every ``interval_ms``: warn once per table that has columns the run does not
        read (added after it started)."""
        now = self._clock()
        if self.columns is None or (self._next_ms is not None and now < self._next_ms):
            return
        self._next_ms = now + self._interval_ms
        for name in names:
            before = self.columns.get(name)
            if name in self._warned or before is None:
                continue
            try:
                info = self._cluster().get_table(name)
            except Exception as e:  # noqa: BLE001 - a look that failed is tried next time
                log.debug("schema check of %s failed: %s", name, e)
                continue
            now_cols = column_texts(info.schema)
            if len(now_cols) > len(before) and additive_problem(before, now_cols) is None:
                self._warned.add(name)
                added = ", ".join(n for n, _ in now_cols[len(before):])
                log.warning("table %s has column(s) %s added after this query started (schema "
                            "id %d): the query keeps its columns and reads newer rows without "
                            "them; restart it on its checkpoint to read them", name, added,
                            info.schema_id)


__all__ = ["CHECK_INTERVAL_MS", "SchemaWatch"]
