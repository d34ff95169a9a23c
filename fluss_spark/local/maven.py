"""Jars fetched once from Maven Central by Maven into this checkout's cache, then only looked up."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Callable

from fluss_spark.errors import FlussError

#: Pinned, so that a fetch does the same thing on every machine.
DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1"

INSTALL_HINT = "install Maven and Java (sudo apt-get install -y maven openjdk-17-jre-headless)"

#: Written when every jar is in place; its presence makes ``fetch`` skip Maven.
_COMPLETE = ".complete"

Artifact = tuple[str, str, str]   # (groupId, artifactId, version)


def cache_root() -> Path:
    """``$FLUSS_SPARK_CACHE``, else ``.cache`` at the top of the source checkout."""
    env = os.environ.get("FLUSS_SPARK_CACHE")
    if env:
        return Path(env).expanduser().absolute()
    return Path(__file__).resolve().parents[2] / ".cache"


def cached(lib: Path, artifacts: list[Artifact]) -> list[Path] | None:
    """The jars of ``artifacts`` in ``lib``, or None when it does not hold all of them."""
    jars = [lib / f"{a}-{v}.jar" for _, a, v in artifacts]
    return jars if (lib / _COMPLETE).exists() and all(j.is_file() for j in jars) else None


def _pom(artifacts: list[Artifact]) -> str:
    deps = "".join(
        f"    <dependency><groupId>{g}</groupId><artifactId>{a}</artifactId>"
        f"<version>{v}</version></dependency>\n" for g, a, v in artifacts)
    return ("<project xmlns=\"http://maven.apache.org/POM/4.0.0\">\n"
            "  <modelVersion>4.0.0</modelVersion>\n"
            "  <groupId>local.fluss-spark</groupId><artifactId>jars</artifactId>"
            "<version>1</version><packaging>pom</packaging>\n"
            f"  <dependencies>\n{deps}  </dependencies>\n</project>\n")


def fetch(lib: Path, artifacts: list[Artifact], what: str, *, mvn: str | None = None,
          timeout_s: float = 1800.0) -> list[Path]:
    """The jars of ``artifacts`` (exactly those: nothing transitive), fetched once with Maven
    (strict checksums) into ``lib``; later calls only look. ``what`` names them in errors."""
    done = cached(lib, artifacts)
    if done is not None:
        return done
    mvn = mvn or os.environ.get("MVN") or shutil.which("mvn")
    if not mvn:
        raise FlussError(f"Maven (mvn) was not found on PATH; it fetches {what} from Maven "
                         f"Central; {INSTALL_HINT}")
    lib.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="jars-", dir=lib.parent) as work:
        pom = Path(work) / "pom.xml"
        pom.write_text(_pom(artifacts))
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
            raise FlussError(f"fetching {what} timed out after {timeout_s:.0f}s: "
                             f"{' '.join(cmd)}") from None
        except OSError as e:
            raise FlussError(f"cannot run {mvn}: {e}; {INSTALL_HINT}") from None
        if res.returncode != 0:
            out = (res.stdout + res.stderr).strip().splitlines()
            raise FlussError(f"fetching {what} failed (exit status {res.returncode}): "
                             f"{' '.join(cmd)}\n" + "\n".join(out[-30:]))
        jars = []
        for _, a, v in artifacts:
            name = f"{a}-{v}.jar"
            if not (staging / name).is_file():
                raise FlussError(f"Maven did not produce {name}: {' '.join(cmd)}")
            # Same file system (staging is under the cache), so each jar appears whole or not.
            os.replace(staging / name, lib / name)
            jars.append(lib / name)
    (lib / _COMPLETE).write_text("".join(f"{j.name}\n" for j in jars))
    return jars


def main(jars: Callable[[], list[Path]]) -> int:
    """The ``python -m`` entry point of a jar set: print the jars ``jars()`` fetches, one a
    line; on a FlussError, a one-line error on stderr and status 1."""
    try:
        for jar in jars():
            print(jar)
    except FlussError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


__all__ = ["DEPENDENCY_PLUGIN", "INSTALL_HINT", "cache_root", "cached", "fetch", "main"]
