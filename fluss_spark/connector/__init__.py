"""The Spark source ``format("fluss")``: call ``register(spark)`` once per SparkSession."""

from __future__ import annotations

from typing import Any


def register(spark: Any) -> None:
    """Register the ``fluss`` data source with ``spark`` (idempotent).

    Where Spark already found it by itself (the ``pyspark_fluss`` module is importable), this
    does nothing: registering again would replace that registration, and Spark would warn about
    it for every query.
    """
    if _registered(spark):
        return
    from fluss_spark.connector.source import FlussDataSource

    spark.dataSource.register(FlussDataSource)


def _registered(spark: Any) -> bool:
    try:
        return bool(spark._jsparkSession.sessionState().dataSourceManager()
                    .dataSourceExists("fluss"))
    except Exception:  # noqa: BLE001 - Spark Connect or another version: just register
        return False


__all__ = ["register"]
