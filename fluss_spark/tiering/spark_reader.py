"""Spark reads of the lake through Iceberg's own Spark runtime (``iceberg-spark-runtime``).

On pyspark 4.3 the runtime's catalog (``SparkCatalog``) and its ``format("iceberg")`` source do
not link (docs/tiering.md, "Reading the lake from Spark"), but Iceberg's table and scan do. So a
table is loaded in the JVM by Iceberg's Java catalog (the JDBC catalog over the lake's SQLite
catalog, or the REST catalog), wrapped in Iceberg's ``SparkTable`` and planned as a
``DataSourceV2Relation``: the rows come from Iceberg's Spark scan (its manifests, delete files and
Parquet readers), not from pyiceberg. The runtime jar must be on the session's classpath
(``spark.jars``: ``fluss_spark.local.iceberg_jars.spark_jars()``), and for a warehouse in S3
Iceberg's AWS bundle (``S3FileIO``), which ``spark_jars()`` includes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fluss_spark.tiering.lake import CATALOG_NAME, LakeError, identifier
from fluss_spark.tiering.lake_catalog import connection_properties

_JAVA_CATALOGS: dict[tuple, Any] = {}

S3_FILE_IO = "org.apache.iceberg.aws.s3.S3FileIO"


def java_properties(props: dict[str, str]) -> dict[str, str]:
    """pyiceberg catalog properties as Iceberg's Java catalogs take them (besides ``type`` and
    ``uri``). The ``s3.*`` keys have the same names in both, except the region
    (``client.region``); an ``s3://`` warehouse is read with ``S3FileIO``, path-style unless
    pyiceberg was told to address buckets as virtual hosts."""
    out = {k: v for k, v in props.items() if k not in ("type", "uri")}
    if str(props.get("warehouse", "")).startswith(("s3://", "s3a://")) and "io-impl" not in props:
        out["io-impl"] = S3_FILE_IO
        virtual = str(props.get("s3.force-virtual-addressing", "false")).lower() == "true"
        out.setdefault("s3.path-style-access", str(not virtual).lower())
        if "s3.region" in props:
            out.setdefault("client.region", props["s3.region"])
    return out


def _java_catalog(spark: Any, lake_root: Path) -> Any:
    props = connection_properties(lake_root)
    key = (id(spark), tuple(sorted(props.items())))
    cat = _JAVA_CATALOGS.get(key)
    if cat is not None:
        return cat
    jvm = spark._jvm
    jprops = jvm.java.util.HashMap()
    kind = props.get("type", "rest")
    if kind == "sql":
        uri = props["uri"]
        if uri.startswith("sqlite:///"):
            uri = "jdbc:sqlite:" + uri[len("sqlite:///"):]
        elif not uri.startswith("jdbc:"):
            raise LakeError(f"the lake's SQL catalog {uri!r} has no JDBC form for Spark; use "
                            "SQLite or a jdbc: URI")
        cls = "org.apache.iceberg.jdbc.JdbcCatalog"
        jprops.put("uri", uri)
    elif kind == "rest":
        cls = "org.apache.iceberg.rest.RESTCatalog"
        jprops.put("uri", props["uri"])
    else:
        raise LakeError(f"catalog type {kind!r} of lake {lake_root} is not readable from Spark "
                        "here (sql and rest are)")
    for k, v in java_properties(props).items():
        jprops.put(k, v)
    try:
        java_class: Any = jvm
        for part in cls.split("."):
            java_class = getattr(java_class, part)
        cat = java_class()
    except Exception as e:  # noqa: BLE001 - py4j errors carry the Java class name
        raise LakeError(f"Iceberg's Spark runtime is not on this SparkSession's classpath "
                        f"({cls}: {e}); start Spark with spark.jars="
                        "fluss_spark.local.iceberg_jars.spark_jars()") from None
    cat.initialize(CATALOG_NAME, jprops)
    _JAVA_CATALOGS[key] = cat
    return cat


def read_lake_table(spark: Any, lake_root: str | Path, table: str,
                    snapshot_id: int | None = None) -> Any:
    """The lake copy of Fluss table ``table`` as a Spark DataFrame, at its current Iceberg
    snapshot or at ``snapshot_id`` (time travel)."""
    from pyspark.sql import DataFrame
    jvm = spark._jvm
    cat = _java_catalog(spark, Path(lake_root).absolute())
    ns, name = identifier(table)
    ident = jvm.org.apache.iceberg.catalog.TableIdentifier.parse(f"{ns}.{name}")
    if not cat.tableExists(ident):
        raise LakeError(f"no lake table {table} in lake {lake_root}; run the tiering job first")
    jtable = cat.loadTable(ident)
    snap = None if snapshot_id is None else jvm.java.lang.Long.valueOf(str(snapshot_id))
    if snapshot_id is not None and jtable.snapshot(int(snapshot_id)) is None:
        raise LakeError(f"lake table {table} has no snapshot {snapshot_id} (expired?)")
    spark_table = jvm.org.apache.iceberg.spark.source.SparkTable(jtable, snap, False)
    none = jvm.scala.Option.empty()
    rel = jvm.org.apache.spark.sql.execution.datasources.v2.DataSourceV2Relation.create(
        spark_table, none, none)
    return DataFrame(jvm.org.apache.spark.sql.classic.Dataset.ofRows(spark._jsparkSession, rel),
                     spark)


__all__ = ["java_properties", "read_lake_table"]
