"""Turn a streaming query's progress into how far behind each Fluss table it is."""

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
    if progress is None:
        return {}
    if isinstance(progress, str):
        progress = json.loads(progress)
    elif not isinstance(progress, dict):
        progress = json.loads(progress.json)
    lag: dict[str, int] = {}
    for source in progress.get("sources") or []:
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


__all__ = ["table_lag"]
