"""A client of Apache Fluss 0.9.1 over Fluss's own wire protocol (the second backend)."""

from fluss_spark.client.apache_fluss.cluster import ApacheFlussWireCluster
from fluss_spark.client.apache_fluss.connection import FlussWireConnection, split_table_name

__all__ = ["ApacheFlussWireCluster", "FlussWireConnection", "split_table_name"]
