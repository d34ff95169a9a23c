"""fluss_spark: Apache Fluss's primary-key read path and a PySpark streaming source over it."""

__version__ = "0.1.0"
