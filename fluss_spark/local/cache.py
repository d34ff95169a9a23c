"""Where downloads are kept: a per-user cache directory, never the installed package."""

from __future__ import annotations

import os
from pathlib import Path

from platformdirs import user_cache_dir

#: Overrides the cache directory (a shared or read-only-home machine, a CI cache).
CACHE_ENV = "FLUSS_SPARK_CACHE"


def cache_root() -> Path:
    """``$FLUSS_SPARK_CACHE``, else the user's cache directory for fluss-spark
    (``~/.cache/fluss-spark`` on Linux, ``~/Library/Caches/fluss-spark`` on macOS).

    Not inside site-packages: ``pip uninstall`` would leave the files behind, and a read-only
    installation could not take them.
    """
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env).expanduser().absolute()
    return Path(user_cache_dir("fluss-spark", appauthor=False))


__all__ = ["CACHE_ENV", "cache_root"]
