"""Starting several fluss queries in one SparkSession without Spark's environment-map race.

Spark keeps one environment map per Python data source, shared by all the session's queries of
``format("fluss")``; each query's source writes to it when it starts. A write that makes the map
grow while another query's task is serialized fails that task ("Task serialization failed:
Illegal size N of collection, expected M"). Starting queries one after another, each once its
sources exist, rules that out (docs/spark_source.md, "Several queries in one SparkSession").
"""

from __future__ import annotations

import time
from typing import Any, Iterable

#: The status messages of a streaming query before its sources exist.
_INITIALIZING = ("Initializing StreamExecution", "Initializing sources")


def await_sources(query: Any, timeout_s: float = 300.0) -> None:
    """Return once ``query`` has created its sources (or stopped, or ``timeout_s`` passed)."""
    deadline = time.monotonic() + timeout_s
    while (query.isActive and query.status.get("message") in _INITIALIZING
           and time.monotonic() < deadline):
        time.sleep(0.05)


def start_one_by_one(writers: Iterable[Any]) -> list[Any]:
    """``writer.start()`` each ``DataStreamWriter`` in turn, waiting for its sources."""
    queries = []
    for writer in writers:
        queries.append(writer.start())
        await_sources(queries[-1])
    return queries


__all__ = ["await_sources", "start_one_by_one"]
