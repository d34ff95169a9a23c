"""The Apache Iceberg Spark runtime jar (a Spark reader of the tiered lake), fetched by Maven."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from fluss_spark.errors import FlussError
from fluss_spark.local.apache_fluss_jars import DEPENDENCY_PLUGIN, INSTALL_HINT, cache_root

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

_COMPLETE = ".complete"


def artifacts() -> list[tuple[str, str, str]]:
    """(groupId, artifactId, version) of every jar a Spark reader of the lake needs."""
    return [(GROUP, RUNTIME, RUNTIME_VERSION), SQLITE_JDBC]


def lib_dir() -> Path:
    return cache_root() / "iceberg" / f"{RUNTIME}-{RUNTIME_VERSION}"


def cached_jars() -> list[Path] | None:
    """The cached jars, or None when the cache does not hold all of them."""
    lib = lib_dir()
    jars = [lib / f"{a}-{v}.jar" for _, a, v in artifacts()]
    return jars if (lib / _COMPLETE).exists() and all(j.is_file() for j in jars) else None


def ensure_jars(mvn: str | None = None, timeout_s: float = 1800.0) -> list[Path]:
    """The Iceberg Spark runtime and the SQLite JDBC driver, fetched once with Maven (strict
    checksums; the runtime is shaded, so nothing transitive) into ``lib_dir()``; later calls only
    look."""
    done = cached_jars()
    if done is not None:
        return done
    mvn = mvn or os.environ.get("MVN") or shutil.which("mvn")
    if not mvn:
        raise FlussError(f"Maven (mvn) was not found on PATH; it fetches {GROUP}:{RUNTIME}:"
                         f"{RUNTIME_VERSION} from Maven Central; {INSTALL_HINT}")
    lib = lib_dir()
    lib.mkdir(parents=True, exist_ok=True)
    deps = "".join(f"<dependency><groupId>{g}</groupId><artifactId>{a}</artifactId>"
                   f"<version>{v}</version></dependency>" for g, a, v in artifacts())
    with tempfile.TemporaryDirectory(prefix="iceberg-jars-", dir=lib.parent) as work:
        pom = Path(work) / "pom.xml"
        pom.write_text(
            "<project xmlns=\"http://maven.apache.org/POM/4.0.0\">\n"
            "  <modelVersion>4.0.0</modelVersion>\n"
            "  <groupId>local.fluss-spark</groupId><artifactId>iceberg-jars</artifactId>"
            "<version>1</version><packaging>pom</packaging>\n"
            f"  <dependencies>{deps}</dependencies>\n</project>\n")
        staging = Path(work) / "lib"
        cmd = [mvn, "-B", "-q", "-C", "-f", str(pom),
               f"{DEPENDENCY_PLUGIN}:copy-dependencies", "-DexcludeTransitive=true",
               "-DincludeScope=runtime", f"-DoutputDirectory={staging}"]
        try:
            res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s,
                                 stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise FlussError(f"fetching the Iceberg Spark jars timed out after {timeout_s:.0f}s:"
                             f" {' '.join(cmd)}") from None
        except OSError as e:
            raise FlussError(f"cannot run {mvn}: {e}; {INSTALL_HINT}") from None
        names = [f"{a}-{v}.jar" for _, a, v in artifacts()]
        if res.returncode != 0 or not all((staging / n).is_file() for n in names):
            out = (res.stdout + res.stderr).strip().splitlines()
            raise FlussError(f"fetching the Iceberg Spark jars failed (exit status "
                             f"{res.returncode}): {' '.join(cmd)}\n" + "\n".join(out[-30:]))
        for n in names:
            # Same file system (staging is under the cache), so each jar appears whole or not.
            os.replace(staging / n, lib / n)
    (lib / _COMPLETE).write_text("".join(n + "\n" for n in names))
    return [lib / n for n in names]


def spark_jars() -> str:
    """The ``spark.jars`` value that puts the runtime and the SQLite JDBC driver on the
    classpath of a SparkSession (fetching them first if needed)."""
    return ",".join(str(j) for j in ensure_jars())


def main(argv: list[str] | None = None) -> int:
    """``python -m fluss_spark.local.iceberg_jars``: fetch and print the runtime jar."""
    import sys
    try:
        for jar in ensure_jars():
            print(jar)
    except FlussError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
