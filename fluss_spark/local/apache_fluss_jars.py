"""The pinned jars of an Apache Fluss server release, fetched from a Maven repository."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TextIO

from fluss_spark.errors import FlussError
from fluss_spark.local import maven
from fluss_spark.local.maven import Jar, JarSet

DEFAULT_VERSION = "0.9.1-incubating"

_LOG4J = "org.apache.logging.log4j"

#: Every jar a server of each release runs with: ``fluss-server`` is shaded (its dependencies,
#: ZooKeeper's client included, are inside), and the binary distribution's ``lib/`` adds log4j
#: (the ``log4j.version`` of that release's root pom). Sizes and SHA-256 sums are those of
#: Maven Central's files (their published SHA-1 sums were checked when they were pinned).
RELEASES: dict[str, tuple[Jar, ...]] = {
    "0.9.1-incubating": (
        Jar("org.apache.fluss", "fluss-server", "0.9.1-incubating", 85810597,
            "fdda82aa7cc936086c420090920836066d48d741cf7e0aadde3c0e6f0832a169"),
        Jar(_LOG4J, "log4j-api", "2.25.4", 351127,
            "c4b642a7f047275215de117e0e3847eb2c7711d84a0aa7433e7b3c096daf341d"),
        Jar(_LOG4J, "log4j-core", "2.25.4", 2023860,
            "10fee2c0485d54fa44ee75d314f6295508f7b932281873db61a91b88073200e6"),
        Jar(_LOG4J, "log4j-slf4j-impl", "2.25.4", 25388,
            "7ac68a0afcc83d54f48d116d79370a43f0a2a6b71b5c1d6dda943bb6a95ddbaa"),
        Jar(_LOG4J, "log4j-1.2-api", "2.25.4", 359214,
            "7b1a61507950ea67b3d6b11437ee37fad9db06f855c92c25c08aee074c757395"),
    ),
}


#: Each release's filesystem plugins by remote storage kind: shaded jars with their own Hadoop
#: client, put on the servers' classpath when remote.data.dir is in such a store.
FILESYSTEMS: dict[str, dict[str, tuple[Jar, ...]]] = {
    "0.9.1-incubating": {
        "s3": (Jar("org.apache.fluss", "fluss-fs-s3", "0.9.1-incubating", 31382851,
                   "9d85c2d83daa0ad5a7c3980162e96022154467f378b08333faa9d37beab682e3"),),
    },
}


def jar_set(version: str = DEFAULT_VERSION) -> JarSet:
    """The pinned jars a server of ``version`` runs with."""
    jars = RELEASES.get(version)
    if jars is None:
        raise FlussError(f"Apache Fluss {version} is not a release whose jars are pinned here; "
                         f"known releases: {', '.join(sorted(RELEASES))}")
    return JarSet(f"the Apache Fluss {version} jars", f"apache-fluss/{version}/lib", jars)


def cached_jars(version: str = DEFAULT_VERSION) -> list[Path] | None:
    """The cached jars of ``version``, or None when the cache does not hold all of them."""
    return jar_set(version).cached()


def ensure_jars(version: str = DEFAULT_VERSION, out: TextIO | None = sys.stderr) -> list[Path]:
    """The classpath jars of an Apache Fluss ``version`` server, fetched once (checked against
    their pins, progress on ``out``) into the cache; later calls only look."""
    return jar_set(version).ensure(out)


def ensure_filesystem_jars(version: str, kind: str,
                           out: TextIO | None = sys.stderr) -> list[Path]:
    """The jars of release ``version``'s filesystem for remote storage ``kind`` (``s3``),
    fetched once like the server's."""
    jars = FILESYSTEMS.get(version, {}).get(kind)
    if jars is None:
        raise FlussError(f"no {kind} filesystem of Apache Fluss {version} is pinned here")
    return JarSet(f"the Apache Fluss {version} {kind} filesystem",
                  f"apache-fluss/{version}/plugins/{kind}", jars).ensure(out)


def main(argv: list[str] | None = None) -> int:
    """``python -m fluss_spark.local.apache_fluss_jars [VERSION]``: fetch and list the jars, the
    server's and its filesystems'."""
    args = sys.argv[1:] if argv is None else argv
    version = args[0] if args else DEFAULT_VERSION
    return maven.main(lambda: ensure_jars(version) + [
        jar for kind in FILESYSTEMS.get(version, {}) for jar in ensure_filesystem_jars(version,
                                                                                      kind)])


if __name__ == "__main__":
    raise SystemExit(main())
