"""The Spark source ``format("fluss")``: call ``register(spark)`` once per SparkSession."""

from __future__ import annotations

from typing import Any


def register(spark: Any) -> None:
    """Register the ``fluss`` data source with ``spark`` (idempotent)."""
    from fluss_spark.connector.source import FlussDataSource

    spark.dataSource.register(FlussDataSource)


__all__ = ["register"]
