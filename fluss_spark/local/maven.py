"""Jars fetched once over HTTPS from a Maven repository, checked against pinned SHA-256 sums.

No Maven install is needed: each jar of a set is pinned (coordinates, size, SHA-256), downloaded
from ``$FLUSS_SPARK_MAVEN_REPOSITORY`` (default Maven Central) into a temporary file beside its
place in the cache, checked, then renamed into place. A jar in the cache under its own name is
therefore whole and checked, so later calls only look; concurrent fetches of the same set (two
checkouts, a test run and CI) each write their own temporary file and the last rename wins with
the same bytes.
"""

from __future__ import annotations

import hashlib
import http.client
import os
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, TextIO

from fluss_spark.errors import FlussError
from fluss_spark.local.cache import CACHE_ENV, cache_root

DEFAULT_REPOSITORY = "https://repo1.maven.org/maven2/"
#: Overrides the repository: a mirror or proxy (https://, http://) or a local copy (file://).
REPOSITORY_ENV = "FLUSS_SPARK_MAVEN_REPOSITORY"

_CHUNK = 1 << 18
#: Seconds a connection or a read may stall before the attempt fails.
_SOCKET_TIMEOUT_S = 60.0
#: Attempts per jar when the network fails (not when the repository answers 4xx or the bytes
#: do not match: another attempt would get the same answer).
_ATTEMPTS = 3


@dataclass(frozen=True)
class Jar:
    """One pinned jar of a Maven repository."""

    group: str
    artifact: str
    version: str
    size: int
    sha256: str
    classifier: str = ""

    @property
    def file_name(self) -> str:
        tail = f"-{self.classifier}" if self.classifier else ""
        return f"{self.artifact}-{self.version}{tail}.jar"

    @property
    def path(self) -> str:
        """The jar's path in a repository (Maven's layout)."""
        return f"{self.group.replace('.', '/')}/{self.artifact}/{self.version}/{self.file_name}"

    @property
    def coordinates(self) -> str:
        tail = f":{self.classifier}" if self.classifier else ""
        return f"{self.group}:{self.artifact}:{self.version}{tail}"


def repository() -> str:
    """``$FLUSS_SPARK_MAVEN_REPOSITORY`` (with a trailing slash), else Maven Central."""
    url = os.environ.get(REPOSITORY_ENV) or DEFAULT_REPOSITORY
    return url if url.endswith("/") else url + "/"


def cached(lib: Path, jars: list[Jar]) -> list[Path] | None:
    """The jars of ``jars`` in ``lib``, or None when it does not hold all of them."""
    paths = [lib / j.file_name for j in jars]
    for jar, path in zip(jars, paths):
        try:
            if path.stat().st_size != jar.size:
                return None
        except OSError:
            return None
    return paths


def _size(n: int) -> str:
    if n >= 1_000_000:
        return f"{n / 1e6:.1f} MB"
    return f"{n / 1e3:.0f} kB" if n >= 1000 else f"{n} B"


class _Progress:
    """Lines ``<file>: <done> of <total> (<pct>%)`` on ``out``, one per tenth of a large file."""

    def __init__(self, out: TextIO | None, name: str, total: int):
        self.out, self.name, self.total = out, name, total
        # Files under 5 MB take a moment: only their last line is printed.
        self.step = max(total // 10, 1) if total >= 5_000_000 else total
        self.next = self.step

    def update(self, done: int) -> None:
        if self.out is None or done < self.next:
            return
        while self.next <= done:
            self.next += self.step
        pct = 100 * done // self.total if self.total else 100
        print(f"  {self.name}: {_size(done)} of {_size(self.total)} ({pct}%)", file=self.out,
              flush=True)


class _Mismatch(FlussError):
    """The repository served other bytes than the pinned jar."""


def _download(url: str, jar: Jar, lib: Path, out: TextIO | None) -> Path:
    """One attempt: ``url`` into ``lib/<jar>`` through a temporary file, checked before it is
    renamed into place; nothing is left behind when it fails."""
    fd, tmp = tempfile.mkstemp(dir=lib, prefix=f".{jar.file_name}.", suffix=".part")
    try:
        digest = hashlib.sha256()
        done = 0
        progress = _Progress(out, jar.file_name, jar.size)
        with os.fdopen(fd, "wb") as f, \
                urllib.request.urlopen(url, timeout=_SOCKET_TIMEOUT_S) as resp:
            while chunk := resp.read(_CHUNK):
                f.write(chunk)
                digest.update(chunk)
                done += len(chunk)
                progress.update(done)
        got = digest.hexdigest()
        if done != jar.size or got != jar.sha256:
            raise _Mismatch(f"{jar.coordinates} from {url} is {done} bytes with SHA-256 {got}, "
                            f"not the pinned {jar.size} bytes with SHA-256 {jar.sha256}; "
                            f"nothing was cached: set {REPOSITORY_ENV} to a repository that "
                            "serves Maven Central's file")
        final = lib / jar.file_name
        os.replace(tmp, final)
        return final
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _fetch_one(base: str, jar: Jar, lib: Path, out: TextIO | None,
               sleep: Callable[[float], None]) -> Path:
    url = base + jar.path
    for attempt in range(1, _ATTEMPTS + 1):
        try:
            return _download(url, jar, lib, out)
        except urllib.error.HTTPError as e:
            if e.code < 500 or attempt == _ATTEMPTS:
                raise FlussError(f"{base} answered HTTP {e.code} for {jar.coordinates} ({url}); "
                                 f"set {REPOSITORY_ENV} to a Maven repository or mirror that "
                                 "has it") from None
            why = f"HTTP {e.code}"
        except (OSError, http.client.HTTPException) as e:
            # urllib.error.URLError is an OSError: refused, unreachable, timed out, cut short.
            why = str(getattr(e, "reason", None) or e) or type(e).__name__
            if attempt == _ATTEMPTS:
                raise FlussError(f"cannot fetch {jar.coordinates} from {url}: {why}; check the "
                                 f"network, or set {REPOSITORY_ENV} to a reachable Maven mirror"
                                 ) from None
        if out is not None:
            print(f"  {jar.file_name}: attempt {attempt} failed ({why}); trying again",
                  file=out, flush=True)
        sleep(attempt)
    raise AssertionError("unreachable")


def fetch(lib: Path, jars: list[Jar], what: str, *, out: TextIO | None = sys.stderr,
          sleep: Callable[[float], None] = time.sleep) -> list[Path]:
    """The jars of ``jars`` in ``lib``, the missing ones fetched from ``repository()`` and
    checked against their pins; progress lines go to ``out`` (None: silent). ``what`` names
    the set in messages. Later calls only look."""
    done = cached(lib, jars)
    if done is not None:
        return done
    try:
        lib.mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=lib).close()
    except OSError as e:
        raise FlussError(f"cannot write the jars of {what} into {lib}: {e.strerror or e}; set "
                         f"{CACHE_ENV} to a writable directory") from None
    base = repository()
    missing = [j for j in jars if cached(lib, [j]) is None]
    if out is not None:
        print(f"fetching {what}: {len(missing)} jar(s), {_size(sum(j.size for j in missing))}, "
              f"from {base} into {lib}", file=out, flush=True)
    for jar in missing:
        _fetch_one(base, jar, lib, out, sleep)
    return [lib / j.file_name for j in jars]


@dataclass(frozen=True)
class JarSet:
    """Pinned jars that run together, kept in one directory of the cache."""

    #: Names the set in progress lines and errors.
    what: str
    #: The set's directory under ``cache_root()``.
    subdir: str
    jars: tuple[Jar, ...]

    @property
    def lib(self) -> Path:
        return cache_root() / self.subdir

    def cached(self) -> list[Path] | None:
        """The cached jars, or None when the cache does not hold all of them."""
        return cached(self.lib, list(self.jars))

    def ensure(self, out: TextIO | None = sys.stderr) -> list[Path]:
        """The jars, fetched once (progress on ``out``); later calls only look."""
        return fetch(self.lib, list(self.jars), self.what, out=out)

    def classpath(self) -> str:
        return os.pathsep.join(str(j) for j in self.ensure())


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


__all__ = ["DEFAULT_REPOSITORY", "REPOSITORY_ENV", "Jar", "JarSet", "cached", "fetch", "main",
           "repository"]
