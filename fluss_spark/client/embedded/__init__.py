"""A client of this project's own servers (the embedded backend): ``EmbeddedCluster`` over a
``FlussConnection`` with its metadata cache, admin, writer, log scanner and KV scanner."""

from fluss_spark.client.embedded.cluster import EmbeddedCluster
from fluss_spark.client.embedded.connection import FlussConnection

__all__ = ["EmbeddedCluster", "FlussConnection"]
