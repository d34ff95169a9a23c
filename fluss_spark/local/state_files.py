"""The JSON state files of local processes: versioned, replaced whole, never seen half-written."""

from __future__ import annotations

import json
import os
from pathlib import Path

from fluss_spark.errors import FlussError


def read_state_file(path: Path, version: int) -> dict | None:
    """The state file at ``path`` (None when absent); refuses versions other than ``version``."""
    try:
        state = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise FlussError(f"cannot read {path}: {e}") from None
    found = state.get("version") if isinstance(state, dict) else None
    if found != version:
        raise FlussError(f"{path} has version {found!r}; this fluss-spark reads version "
                         f"{version}")
    return state


def write_state_file(path: Path, state: dict) -> None:
    """Write ``state`` to ``path`` through a temporary file renamed over it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(state, indent=2))
    os.replace(tmp, path)


__all__ = ["read_state_file", "write_state_file"]
