"""Output of the ``fluss-spark`` command: JSON documents and aligned tables."""

from __future__ import annotations

import datetime as dt
import decimal
import json
import sys
from pathlib import Path
from typing import Any


def _json_default(v: Any):
    if isinstance(v, (dt.datetime, dt.date, dt.time)):
        return v.isoformat()
    if isinstance(v, decimal.Decimal):
        return str(v)
    if isinstance(v, bytes):
        return v.hex()
    if isinstance(v, (set, frozenset, tuple)):
        return list(v)
    if isinstance(v, Path):
        return str(v)
    return str(v)


def emit_json(doc: Any, out=None) -> None:
    out = out or sys.stdout
    json.dump(doc, out, default=_json_default, indent=None)
    out.write("\n")


def _cell(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, (list, tuple)):
        return ",".join(map(str, v))
    if isinstance(v, dict):
        return ",".join(f"{k}={val}" for k, val in v.items())
    if isinstance(v, float):
        return f"{v:.6g}"
    if isinstance(v, bytes):
        return v.hex()
    return str(v)


def print_table(rows: list[dict], columns: list[str] | None = None, out=None) -> None:
    """Aligned columns with a header line; '(none)' for an empty list."""
    out = out or sys.stdout
    if not rows:
        out.write("(none)\n")
        return
    columns = columns or list(rows[0])
    cells = [[_cell(r.get(c)) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
    out.write("  ".join(c.upper().ljust(w) for c, w in zip(columns, widths)).rstrip() + "\n")
    for row in cells:
        out.write("  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip() + "\n")


def _fmt_ms(ms: int | None) -> str | None:
    if not ms:
        return None
    return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def _print_metrics(m: dict) -> None:
    print_table([{"metric": k, "value": v} for k, v in sorted((m.get("metrics") or {}).items())])
    tables = m.get("tables") or {}
    if tables:
        print()
        print_table([{"table": t, **vals} for t, vals in sorted(tables.items())])
