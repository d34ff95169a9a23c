"""The client: the Cluster interface and FlussCluster; connections, admin, writer, scanners."""

from fluss_spark.client.admin import Admin
from fluss_spark.client.cluster import Capabilities, Cluster
from fluss_spark.client.connection import FlussConnection
from fluss_spark.client.fluss_cluster import FlussCluster
from fluss_spark.client.log_scanner import LogScanner
from fluss_spark.client.model import LogBatch
from fluss_spark.client.writer import TableWriter
from fluss_spark.protocol.messages import LeaseInfo, SnapshotInfo, TableInfo

__all__ = ["Admin", "Capabilities", "Cluster", "FlussCluster", "FlussConnection", "LeaseInfo",
           "LogBatch", "LogScanner", "SnapshotInfo", "TableInfo", "TableWriter"]
