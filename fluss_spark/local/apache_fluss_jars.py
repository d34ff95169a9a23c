"""The jars of an Apache Fluss server release, fetched from Maven Central by Maven and cached."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from fluss_spark.errors import FlussError

DEFAULT_VERSION = "0.9.1-incubating"

#: Jars of the binary distribution's ``lib/`` besides ``fluss-server``, per Fluss release: the
#: log4j version is the ``log4j.version`` property of that release's root pom.
LOG4J_VERSIONS = {"0.9.1-incubating": "2.25.4", "0.9.0-incubating": "2.25.4"}
LOG4J_ARTIFACTS = ("log4j-api", "log4j-core", "log4j-slf4j-impl", "log4j-1.2-api")

#: Pinned, so that a fetch does the same thing on every machine.
DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1"

INSTALL_HINT = "install Maven and Java (sudo apt-get install -y maven openjdk-17-jre-headless)"

#: Written when every jar is in place; its presence makes ``ensure_jars`` skip Maven.
_COMPLETE = ".complete"


def cache_root() -> Path:
    """``$FLUSS_SPARK_CACHE``, else ``.cache`` at the top of the source checkout."""
    env = os.environ.get("FLUSS_SPARK_CACHE")
    if env:
        return Path(env).expanduser().absolute()
    return Path(__file__).resolve().parents[2] / ".cache"


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
    lib = lib_dir(version)
    if not (lib / _COMPLETE).exists():
        return None
    jars = [lib / f"{a}-{v}.jar" for _, a, v in artifacts(version)]
    return jars if all(j.is_file() for j in jars) else None


def _pom(version: str) -> str:
    deps = "".join(
        f"    <dependency><groupId>{g}</groupId><artifactId>{a}</artifactId>"
        f"<version>{v}</version></dependency>\n" for g, a, v in artifacts(version))
    return ("<project xmlns=\"http://maven.apache.org/POM/4.0.0\">\n"
            "  <modelVersion>4.0.0</modelVersion>\n"
            "  <groupId>local.fluss-spark</groupId><artifactId>apache-fluss-jars</artifactId>"
            "<version>1</version><packaging>pom</packaging>\n"
            f"  <dependencies>\n{deps}  </dependencies>\n</project>\n")


def ensure_jars(version: str = DEFAULT_VERSION, mvn: str | None = None,
                timeout_s: float = 1800.0) -> list[Path]:
    """The classpath jars of an Apache Fluss ``version`` server, fetched once with Maven (strict
    checksums, no transitive dependencies) into ``lib_dir(version)``; later calls only look."""
    done = cached_jars(version)
    if done is not None:
        return done
    mvn = mvn or os.environ.get("MVN") or shutil.which("mvn")
    if not mvn:
        raise FlussError(f"Maven (mvn) was not found on PATH; it fetches the Apache Fluss "
                         f"{version} jars from Maven Central; {INSTALL_HINT}")
    lib = lib_dir(version)
    lib.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="fluss-jars-", dir=lib.parent) as work:
        pom = Path(work) / "pom.xml"
        pom.write_text(_pom(version))
        staging = Path(work) / "lib"
        # -C fails on a checksum mismatch instead of warning; copy-dependencies of a pom that
        # lists exactly the wanted jars with excludeTransitive copies those and nothing else.
        cmd = [mvn, "-B", "-q", "-C", "-f", str(pom),
               f"{DEPENDENCY_PLUGIN}:copy-dependencies", "-DexcludeTransitive=true",
               "-DincludeScope=runtime", f"-DoutputDirectory={staging}"]
        try:
            res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s,
                                 stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise FlussError(f"fetching the Apache Fluss {version} jars timed out after "
                             f"{timeout_s:.0f}s: {' '.join(cmd)}") from None
        except OSError as e:
            raise FlussError(f"cannot run {mvn}: {e}; {INSTALL_HINT}") from None
        if res.returncode != 0:
            out = (res.stdout + res.stderr).strip().splitlines()
            raise FlussError(f"fetching the Apache Fluss {version} jars failed (exit status "
                             f"{res.returncode}): {' '.join(cmd)}\n" + "\n".join(out[-30:]))
        jars = []
        for _, a, v in artifacts(version):
            name = f"{a}-{v}.jar"
            if not (staging / name).is_file():
                raise FlussError(f"Maven did not produce {name}: {' '.join(cmd)}")
            # Same file system (staging is under the cache), so each jar appears whole or not.
            os.replace(staging / name, lib / name)
            jars.append(lib / name)
    (lib / _COMPLETE).write_text("".join(f"{j.name}\n" for j in jars))
    return jars


def classpath(version: str = DEFAULT_VERSION) -> str:
    return os.pathsep.join(str(j) for j in ensure_jars(version))


def main(argv: list[str] | None = None) -> int:
    """``python -m fluss_spark.local.apache_fluss_jars [VERSION]``: fetch and list the jars."""
    import sys
    args = sys.argv[1:] if argv is None else argv
    try:
        for jar in ensure_jars(args[0] if args else DEFAULT_VERSION):
            print(jar)
    except FlussError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
