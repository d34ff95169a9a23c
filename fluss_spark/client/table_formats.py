"""The Fluss table properties that choose how rows are stored, and the values this client reads."""

from __future__ import annotations

from fluss_spark.client.cluster import TableInfo
from fluss_spark.errors import UnsupportedVersion

#: Property -> (the one value this client decodes, which is Fluss's default; what it shapes).
#: Apache Fluss 0.9.1 also accepts ``table.log.format`` ``indexed``/``compacted`` (records as
#: rows, not Arrow) and ``table.kv.format`` ``indexed`` (KV values as indexed rows).
READABLE = {"table.log.format": ("arrow", "its changelog"),
            "table.kv.format": ("compacted", "its KV snapshots")}


def check_readable(info: TableInfo, *, reads_kv: bool) -> None:
    """Refuse, in one line, a table whose rows this client cannot decode: its changelog always,
    its KV snapshots when ``reads_kv`` (a PK table read in full or as a batch)."""
    for key, (value, what) in READABLE.items():
        if key == "table.kv.format" and not (reads_kv and info.primary_key):
            continue
        got = info.properties.get(key, value).lower()
        if got != value:
            raise UnsupportedVersion(
                f"table {info.name!r} has {key}={got!r}: the source reads {what} only in the "
                f"{value!r} format (Fluss's default); recreate the table without {key}")


__all__ = ["READABLE", "check_readable"]
