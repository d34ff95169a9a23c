"""The client: the ``Cluster`` interface and its two backends.

``embedded/`` is the client of this project's servers (``EmbeddedCluster`` over a
``FlussConnection``: admin, writer, log and KV scanners); ``apache_fluss/`` is the client of a real
Apache Fluss cluster (``ApacheFlussWireCluster``). ``backends.open_cluster`` picks one.
"""

from fluss_spark.client.cluster import Capabilities, Cluster
from fluss_spark.client.embedded.admin import Admin
from fluss_spark.client.embedded.cluster import EmbeddedCluster
from fluss_spark.client.embedded.connection import FlussConnection
from fluss_spark.client.embedded.log_scanner import LogScanner
from fluss_spark.client.embedded.model import LogBatch
from fluss_spark.client.embedded.writer import TableWriter
from fluss_spark.protocol.messages import LeaseInfo, SnapshotInfo, TableInfo
from fluss_spark.transport.tls import TlsClientConfig
from fluss_spark.transport.tls import from_environment as tls_from_environment

#: Compatibility: the former name of ``EmbeddedCluster``, kept so existing callers still import.
FlussCluster = EmbeddedCluster

__all__ = ["Admin", "Capabilities", "Cluster", "EmbeddedCluster", "FlussCluster",
           "FlussConnection", "LeaseInfo", "LogBatch", "LogScanner", "SnapshotInfo", "TableInfo",
           "TableWriter", "TlsClientConfig", "tls_from_environment"]
