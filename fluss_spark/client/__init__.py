"""The client: the ``Cluster`` interface and its two backends.

``embedded/`` is the client of this project's servers (``EmbeddedCluster`` over a
``FlussConnection``: admin, writer, log and KV scanners); ``apache_fluss/`` is the client of a real
Apache Fluss cluster (``ApacheFlussWireCluster``). ``backends.open_cluster`` picks one.

The names below are imported on first use: importing one backend (``client.apache_fluss`` in a
Spark worker reading Apache Fluss) does not load the other.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fluss_spark.client.cluster import Capabilities, Cluster
    from fluss_spark.client.embedded.admin import Admin
    from fluss_spark.client.embedded.cluster import EmbeddedCluster
    from fluss_spark.client.embedded.cluster import EmbeddedCluster as FlussCluster
    from fluss_spark.client.embedded.connection import FlussConnection
    from fluss_spark.client.embedded.log_scanner import LogScanner
    from fluss_spark.client.embedded.model import LogBatch
    from fluss_spark.client.embedded.writer import TableWriter
    from fluss_spark.protocol.messages import LeaseInfo, SnapshotInfo, TableInfo
    from fluss_spark.transport.tls import TlsClientConfig
    from fluss_spark.transport.tls import from_environment as tls_from_environment

#: name -> (module, attribute). ``FlussCluster`` is the former name of ``EmbeddedCluster``,
#: kept so existing callers still import.
_LAZY = {
    "Capabilities": ("fluss_spark.client.cluster", "Capabilities"),
    "Cluster": ("fluss_spark.client.cluster", "Cluster"),
    "Admin": ("fluss_spark.client.embedded.admin", "Admin"),
    "EmbeddedCluster": ("fluss_spark.client.embedded.cluster", "EmbeddedCluster"),
    "FlussCluster": ("fluss_spark.client.embedded.cluster", "EmbeddedCluster"),
    "FlussConnection": ("fluss_spark.client.embedded.connection", "FlussConnection"),
    "LogScanner": ("fluss_spark.client.embedded.log_scanner", "LogScanner"),
    "LogBatch": ("fluss_spark.client.embedded.model", "LogBatch"),
    "TableWriter": ("fluss_spark.client.embedded.writer", "TableWriter"),
    "LeaseInfo": ("fluss_spark.protocol.messages", "LeaseInfo"),
    "SnapshotInfo": ("fluss_spark.protocol.messages", "SnapshotInfo"),
    "TableInfo": ("fluss_spark.protocol.messages", "TableInfo"),
    "TlsClientConfig": ("fluss_spark.transport.tls", "TlsClientConfig"),
    "tls_from_environment": ("fluss_spark.transport.tls", "from_environment"),
}


def __getattr__(name: str) -> Any:
    try:
        module, attribute = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    value = getattr(importlib.import_module(module), attribute)
    globals()[name] = value
    return value


__all__ = ["Admin", "Capabilities", "Cluster", "EmbeddedCluster", "FlussCluster",
           "FlussConnection", "LeaseInfo", "LogBatch", "LogScanner", "SnapshotInfo", "TableInfo",
           "TableWriter", "TlsClientConfig", "tls_from_environment"]
