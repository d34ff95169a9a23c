"""Turn a streaming query's progress into how far behind each Fluss table it is, and which of
its partitions disappeared before they were read to the end."""

from __future__ import annotations

import json
from typing import Any

from fluss_spark.connector.offsets import OffsetError, decode, rows_between


def table_lag(progress: Any) -> dict[str, int]:
    """Per table name: snapshot rows + changelog records between the query's end offset and the
    latest offset the source reported (``reportLatestOffset``), summed over every fluss source.

    ``progress`` is ``query.lastProgress`` (a dict), a ``StreamingQueryProgress`` or its JSON.
    Sources that are not fluss sources, or progress without a latest offset, are skipped.
    """
    lag: dict[str, int] = {}
    for source in _sources(progress):
        end, latest = source.get("endOffset"), source.get("latestOffset")
        if end is None or latest is None:
            continue
        try:
            end_off, latest_off = decode(end), decode(latest)
        except OffsetError:
            continue
        for tid, rows in rows_between(end_off, latest_off).items():
            name = latest_off.tables[tid].name
            lag[name] = lag.get(name, 0) + rows
    return lag


def partitions_gone(progress: Any) -> dict[str, dict[str, int]]:
    """Per partitioned table name: ``{"partitions": n, "unread": m}``, the partitions that
    disappeared (dropped, or expired by retention) while the query read them and the records of
    theirs the source knew of and had not read, as of the query's end offset; summed over every
    fluss source. Tables that lost none are left out. ``progress`` as for ``table_lag``."""
    gone: dict[str, dict[str, int]] = {}
    for source in _sources(progress):
        if source.get("endOffset") is None:
            continue
        try:
            end = decode(source["endOffset"])
        except OffsetError:
            continue
        for t in end.tables.values():
            if t.gone != (0, 0):
                seen = gone.setdefault(t.name, {"partitions": 0, "unread": 0})
                seen["partitions"] += t.gone[0]
                seen["unread"] += t.gone[1]
    return gone


def _sources(progress: Any) -> list[dict[str, Any]]:
    """The ``sources`` of a progress given as a dict, its JSON, or a ``StreamingQueryProgress``."""
    if progress is None:
        return []
    if isinstance(progress, str):
        progress = json.loads(progress)
    elif not isinstance(progress, dict):
        progress = json.loads(progress.json)
    return list(progress.get("sources") or [])


__all__ = ["partitions_gone", "table_lag"]
