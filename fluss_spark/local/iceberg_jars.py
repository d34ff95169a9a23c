"""The Apache Iceberg Spark runtime jar (a Spark reader of the tiered lake), pinned and cached.

Fetched like the Apache Fluss jars (``fluss_spark.local.maven``) rather than through Spark's
``spark.jars.packages``: Ivy resolves those again at every session start, and needs the network
or its own cache to do it; a pinned jar in the cache is checked once and then only looked up.
"""

from __future__ import annotations

from fluss_spark.local import maven
from fluss_spark.local.maven import Jar, JarSet

#: Which runtime, and why this one (docs/tiering.md, "Reading the lake from Spark"): Maven
#: Central has ``iceberg-spark-runtime-4.0_2.13`` (1.10.0 - 1.11.0) and ``-4.1_2.13`` (1.11.0,
#: 1.12.0), nothing for Spark 4.2 or 4.3. On pyspark 4.3.0 neither build's catalog
#: (``SparkCatalog``: Spark 4.3 made ``connector.catalog.View`` a class) nor its
#: ``format("iceberg")`` source (``CatalogManager`` became an interface) links. Iceberg's own
#: table and scan (``SparkTable``) of the 4.0 build do run on 4.3, planned as a
#: ``DataSourceV2Relation`` (``fluss_spark.tiering.spark_reader``); the 4.1 build's ``SparkTable``
#: calls ``CatalogV2Util.structTypeToV2Columns``, which Spark 4.3 no longer has.
GROUP = "org.apache.iceberg"
RUNTIME = "iceberg-spark-runtime-4.0_2.13"
RUNTIME_VERSION = "1.11.0"

#: The runtime (shaded: nothing transitive); because Iceberg's JDBC catalog (the Spark side of
#: pyiceberg's SQL catalog) needs the driver of the catalog's database and the runtime has none,
#: the SQLite JDBC driver; and Iceberg's AWS bundle (``S3FileIO`` with the AWS SDK it needs,
#: same version as the runtime) for warehouses in S3. Sizes and SHA-256 sums of Maven Central's
#: files.
JARS = JarSet(f"{GROUP}:{RUNTIME}:{RUNTIME_VERSION}, the SQLite JDBC driver and "
              "Iceberg's AWS bundle", f"iceberg/{RUNTIME}-{RUNTIME_VERSION}", (
    Jar(GROUP, RUNTIME, RUNTIME_VERSION, 47926285,
        "63c3b812549dc232c1920865ff42436df8604a9bbacd693930985c06bd97e6dc"),
    Jar("org.xerial", "sqlite-jdbc", "3.54.1.0", 12132578,
        "f8dce420a6016278497f4f0560f65602b9db858de141b541cf91a4644ebe4639"),
    Jar(GROUP, "iceberg-aws-bundle", RUNTIME_VERSION, 63613165,
        "38f01da7e96850cdd05e6616d758b77b43314b712a8808e3f9a824d56976162f"),
))


def spark_jars() -> str:
    """The ``spark.jars`` value that puts the runtime, the SQLite JDBC driver and the AWS
    bundle on the classpath of a SparkSession (fetching them first if needed)."""
    return ",".join(str(j) for j in JARS.ensure())


def main(argv: list[str] | None = None) -> int:
    """``python -m fluss_spark.local.iceberg_jars``: fetch and print the runtime jar."""
    return maven.main(JARS.ensure)


if __name__ == "__main__":
    raise SystemExit(main())
