"""Tiering: keep Apache Iceberg copies of Fluss tables with a long-running Spark job."""

from fluss_spark.tiering.lake import LakeError, LakeTable, list_lake_tables, table_dir

__all__ = ["LakeError", "LakeTable", "list_lake_tables", "table_dir"]
