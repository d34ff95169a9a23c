"""The client: connections, admin, writer, log scanner and KV scan pager."""

from fluss_spark.client.admin import Admin
from fluss_spark.client.connection import FlussConnection
from fluss_spark.client.log_scanner import LogScanner
from fluss_spark.client.model import LeaseInfo, LogBatch, SnapshotInfo, TableInfo
from fluss_spark.client.writer import TableWriter

__all__ = ["Admin", "FlussConnection", "LeaseInfo", "LogBatch", "LogScanner", "SnapshotInfo",
           "TableInfo", "TableWriter"]
