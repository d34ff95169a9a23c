"""The jars of an Apache Fluss server release, fetched from Maven Central by Maven and cached."""

from __future__ import annotations

import os
from pathlib import Path

from fluss_spark.errors import FlussError
from fluss_spark.local import maven
from fluss_spark.local.maven import cache_root

DEFAULT_VERSION = "0.9.1-incubating"

#: Jars of the binary distribution's ``lib/`` besides ``fluss-server``, per Fluss release: the
#: log4j version is the ``log4j.version`` property of that release's root pom.
LOG4J_VERSIONS = {"0.9.1-incubating": "2.25.4", "0.9.0-incubating": "2.25.4"}
LOG4J_ARTIFACTS = ("log4j-api", "log4j-core", "log4j-slf4j-impl", "log4j-1.2-api")


def lib_dir(version: str = DEFAULT_VERSION) -> Path:
    return cache_root() / "apache-fluss" / version / "lib"


def artifacts(version: str = DEFAULT_VERSION) -> list[tuple[str, str, str]]:
    """(groupId, artifactId, version) of every jar a server of ``version`` runs with."""
    log4j = LOG4J_VERSIONS.get(version)
    if log4j is None:
        raise FlussError(f"no known log4j version for Apache Fluss {version}; known releases: "
                         f"{', '.join(sorted(LOG4J_VERSIONS))}")
    # fluss-server is shaded (its dependencies, ZooKeeper's client included, are inside), so
    # nothing transitive is fetched.
    return ([("org.apache.fluss", "fluss-server", version)]
            + [("org.apache.logging.log4j", a, log4j) for a in LOG4J_ARTIFACTS])


def cached_jars(version: str = DEFAULT_VERSION) -> list[Path] | None:
    """The cached jars of ``version``, or None when the cache does not hold all of them."""
    return maven.cached(lib_dir(version), artifacts(version))


def ensure_jars(version: str = DEFAULT_VERSION, mvn: str | None = None,
                timeout_s: float = 1800.0) -> list[Path]:
    """The classpath jars of an Apache Fluss ``version`` server, fetched once with Maven (strict
    checksums, no transitive dependencies) into ``lib_dir(version)``; later calls only look."""
    return maven.fetch(lib_dir(version), artifacts(version), f"the Apache Fluss {version} jars",
                       mvn=mvn, timeout_s=timeout_s)


def classpath(version: str = DEFAULT_VERSION) -> str:
    return os.pathsep.join(str(j) for j in ensure_jars(version))


def main(argv: list[str] | None = None) -> int:
    """``python -m fluss_spark.local.apache_fluss_jars [VERSION]``: fetch and list the jars."""
    import sys
    args = sys.argv[1:] if argv is None else argv
    return maven.main(lambda: ensure_jars(args[0] if args else DEFAULT_VERSION))


if __name__ == "__main__":
    raise SystemExit(main())
