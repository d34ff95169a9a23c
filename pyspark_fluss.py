"""Lets Spark find ``format("fluss")`` without a ``register()`` call.

Spark imports every top-level ``pyspark_*`` module it can see and registers its ``DefaultSource``.
"""

from fluss_spark.connector.source import FlussDataSource as DefaultSource

__all__ = ["DefaultSource"]
