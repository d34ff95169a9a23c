"""Durability of local files: fsync by path."""

from __future__ import annotations

import os
from pathlib import Path


def fsync_path(path: str | Path, *, best_effort: bool = False) -> None:
    """fsync a file or a directory (to make a rename or a new entry in it durable).

    A failing fsync is ignored: some file systems refuse it on directories. Failing to open
    ``path`` raises OSError unless ``best_effort``.
    """
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        if best_effort:
            return
        raise
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
