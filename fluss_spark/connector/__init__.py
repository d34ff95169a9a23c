"""The Spark source ``format("fluss")``: call ``register(spark)`` once per SparkSession."""

from __future__ import annotations

import importlib.util
import sys
from typing import Any

#: What every node that runs the source or the sink imports: (module, package to install).
NODE_DEPENDENCIES = (("pyarrow", "pyarrow"), ("numpy", "numpy"), ("pandas", "pandas"),
                     ("msgpack", "msgpack"), ("google_crc32c", "google-crc32c"),
                     ("rocksdict", "rocksdict"), ("platformdirs", "platformdirs"))


def check_node_dependencies() -> None:
    """ImportError naming every package this node's Python lacks. Executors import this package
    when they unpickle a reader or writer: without the check, the first missing import fails
    somewhere inside the unpickling, far from saying what to install where."""
    missing = [package for module, package in NODE_DEPENDENCIES
               if importlib.util.find_spec(module) is None]
    if missing:
        raise ImportError(f"fluss_spark needs the Python package(s) {', '.join(missing)} on "
                          f"every Spark node, and {sys.executable} lacks them: install them "
                          f"there (`pip install {' '.join(missing)}`, or the fluss-spark wheel "
                          "with its dependencies)", name=missing[0])


check_node_dependencies()


def register(spark: Any, source: Any = None) -> None:
    """Register the ``fluss`` data source (or another ``source`` class, e.g. the tiering job's)
    with ``spark`` (idempotent).

    Where Spark already found it by itself (the ``pyspark_fluss`` module is importable), this
    does nothing: registering again would replace that registration, and Spark would warn about
    it for every query.
    """
    if source is None:
        from fluss_spark.connector.source import FlussDataSource
        source = FlussDataSource
    if not _registered(spark, source.name()):
        spark.dataSource.register(source)


def _registered(spark: Any, name: str) -> bool:
    try:
        return bool(spark._jsparkSession.sessionState().dataSourceManager()
                    .dataSourceExists(name))
    except Exception:  # noqa: BLE001 - Spark Connect or another version: just register
        return False


__all__ = ["NODE_DEPENDENCIES", "check_node_dependencies", "register"]
