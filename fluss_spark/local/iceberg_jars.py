"""The Apache Iceberg Spark runtime jar (a Spark reader of the tiered lake), fetched by Maven."""

from __future__ import annotations

from pathlib import Path

from fluss_spark.local import maven
from fluss_spark.local.maven import cache_root

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
#: Iceberg's JDBC catalog (the Spark side of pyiceberg's SQL catalog) needs the driver of the
#: catalog's database; the runtime jar has none.
SQLITE_JDBC = ("org.xerial", "sqlite-jdbc", "3.54.1.0")

def artifacts() -> list[tuple[str, str, str]]:
    """(groupId, artifactId, version) of every jar a Spark reader of the lake needs."""
    return [(GROUP, RUNTIME, RUNTIME_VERSION), SQLITE_JDBC]


def lib_dir() -> Path:
    return cache_root() / "iceberg" / f"{RUNTIME}-{RUNTIME_VERSION}"


def cached_jars() -> list[Path] | None:
    """The cached jars, or None when the cache does not hold all of them."""
    return maven.cached(lib_dir(), artifacts())


def ensure_jars(mvn: str | None = None, timeout_s: float = 1800.0) -> list[Path]:
    """The Iceberg Spark runtime and the SQLite JDBC driver, fetched once with Maven (strict
    checksums; the runtime is shaded, so nothing transitive) into ``lib_dir()``; later calls only
    look."""
    return maven.fetch(lib_dir(), artifacts(), f"{GROUP}:{RUNTIME}:{RUNTIME_VERSION} and the "
                       "SQLite JDBC driver", mvn=mvn, timeout_s=timeout_s)


def spark_jars() -> str:
    """The ``spark.jars`` value that puts the runtime and the SQLite JDBC driver on the
    classpath of a SparkSession (fetching them first if needed)."""
    return ",".join(str(j) for j in ensure_jars())


def main(argv: list[str] | None = None) -> int:
    """``python -m fluss_spark.local.iceberg_jars``: fetch and print the runtime jar."""
    return maven.main(ensure_jars)


if __name__ == "__main__":
    raise SystemExit(main())
