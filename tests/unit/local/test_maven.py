"""Pinned jars fetched from a repository served on loopback: checks, progress, failures, cache."""

from __future__ import annotations

import hashlib
import io
import threading
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from fluss_spark.errors import FlussError
from fluss_spark.local import apache_fluss_jars, iceberg_jars, maven, zookeeper_jars
from fluss_spark.local.cache import cache_root
from fluss_spark.local.maven import Jar, JarSet
from fluss_spark.local.ports import free_port


class _Handler(SimpleHTTPRequestHandler):
    requests: list[str] = []

    def do_GET(self):  # noqa: N802 - the name http.server calls
        type(self).requests.append(self.path)
        super().do_GET()

    def log_message(self, *args):
        pass


@pytest.fixture
def repo(tmp_path, monkeypatch):
    """A Maven repository layout under tmp_path/repo, served over HTTP on loopback and named
    by FLUSS_SPARK_MAVEN_REPOSITORY; returns (root dir, requested paths)."""
    root = tmp_path / "repo"
    root.mkdir()
    handler = type("Handler", (_Handler,), {"requests": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(handler, directory=str(root)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv(maven.REPOSITORY_ENV, f"http://127.0.0.1:{server.server_address[1]}/m2")
    yield root, handler.requests
    server.shutdown()
    server.server_close()


def publish(root: Path, artifact: str, data: bytes, sha256: str | None = None) -> Jar:
    """Put ``data`` in the repository as org.example:<artifact>:1.0; the pin it gets."""
    jar = Jar("org.example", artifact, "1.0", len(data),
              sha256 or hashlib.sha256(data).hexdigest())
    path = root / "m2" / jar.path
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return jar


def test_fetch_checks_each_jar_reports_progress_and_then_only_looks(repo, tmp_path):
    root, requests = repo
    big = bytes(range(256)) * (6_000_000 // 256)            # 10% steps of progress
    jars = [publish(root, "big", big), publish(root, "small", b"PK\x03\x04 small jar")]
    out = io.StringIO()
    lib = tmp_path / "lib"
    got = maven.fetch(lib, jars, "the example jars", out=out)
    assert got == [lib / "big-1.0.jar", lib / "small-1.0.jar"]
    assert got[0].read_bytes() == big and got[1].read_bytes() == b"PK\x03\x04 small jar"
    assert sorted(p.name for p in lib.iterdir()) == ["big-1.0.jar", "small-1.0.jar"]
    assert requests == ["/m2/org/example/big/1.0/big-1.0.jar",
                        "/m2/org/example/small/1.0/small-1.0.jar"]
    lines = out.getvalue().splitlines()
    assert lines[0] == (f"fetching the example jars: 2 jar(s), 6.0 MB, from "
                        f"{maven.repository()} into {lib}")
    progress = [ln for ln in lines if ln.startswith("  big-1.0.jar: ")]
    assert len(progress) == 10 and progress[-1] == "  big-1.0.jar: 6.0 MB of 6.0 MB (100%)"
    assert progress[0] == "  big-1.0.jar: 786 kB of 6.0 MB (13%)"
    assert lines[-1] == "  small-1.0.jar: 14 B of 14 B (100%)"
    # Cached: no request, no output.
    again = io.StringIO()
    assert maven.fetch(lib, jars, "the example jars", out=again) == got
    assert len(requests) == 2 and again.getvalue() == ""


def test_a_jar_that_does_not_match_its_pin_is_not_cached(repo, tmp_path):
    root, _ = repo
    jar = publish(root, "evil", b"other bytes", sha256="0" * 64)
    with pytest.raises(FlussError) as e:
        maven.fetch(tmp_path / "lib", [jar], "the example jars", out=None)
    msg = str(e.value)
    assert "org.example:evil:1.0" in msg and "SHA-256" in msg and "0" * 64 in msg
    assert "nothing was cached" in msg and maven.REPOSITORY_ENV in msg and "\n" not in msg
    assert list((tmp_path / "lib").iterdir()) == []          # no jar, no partial file


def test_a_jar_the_repository_does_not_have_fails_at_once(repo, tmp_path):
    _, requests = repo
    jar = Jar("org.example", "absent", "1.0", 10, "0" * 64)
    slept: list[float] = []
    with pytest.raises(FlussError) as e:
        maven.fetch(tmp_path / "lib", [jar], "x", out=None, sleep=slept.append)
    assert str(e.value) == (f"{maven.repository()} answered HTTP 404 for org.example:absent:1.0 "
                            f"({maven.repository()}org/example/absent/1.0/absent-1.0.jar); set "
                            f"{maven.REPOSITORY_ENV} to a Maven repository or mirror that has it")
    assert len(requests) == 1 and slept == []


def test_an_unreachable_repository_is_tried_again_then_named(monkeypatch, tmp_path):
    url = f"http://127.0.0.1:{free_port()}/"
    monkeypatch.setenv(maven.REPOSITORY_ENV, url)
    jar = Jar("org.example", "a", "1.0", 10, "0" * 64)
    slept: list[float] = []
    out = io.StringIO()
    with pytest.raises(FlussError) as e:
        maven.fetch(tmp_path / "lib", [jar], "x", out=out, sleep=slept.append)
    assert str(e.value).startswith(f"cannot fetch org.example:a:1.0 from {url}org/example/a/")
    assert "refused" in str(e.value) and str(e.value).endswith(
        f"check the network, or set {maven.REPOSITORY_ENV} to a reachable Maven mirror")
    assert slept == [1, 2] and out.getvalue().count("trying again") == 2
    assert list((tmp_path / "lib").iterdir()) == []


def test_a_cache_that_cannot_be_written_is_named(tmp_path):
    (tmp_path / "file").write_text("not a directory")
    lib = tmp_path / "file" / "lib"
    with pytest.raises(FlussError) as e:
        maven.fetch(lib, [Jar("g", "a", "1", 3, "0" * 64)], "the example jars", out=None)
    assert str(e.value) == (f"cannot write the jars of the example jars into {lib}: Not a "
                            "directory; set FLUSS_SPARK_CACHE to a writable directory")


def test_repository_and_cache_overrides(monkeypatch, tmp_path):
    monkeypatch.delenv(maven.REPOSITORY_ENV, raising=False)
    assert maven.repository() == "https://repo1.maven.org/maven2/"
    monkeypatch.setenv(maven.REPOSITORY_ENV, "file:///srv/m2")
    assert maven.repository() == "file:///srv/m2/"
    monkeypatch.setenv("FLUSS_SPARK_CACHE", str(tmp_path / "c"))
    assert cache_root() == tmp_path / "c"
    assert apache_fluss_jars.jar_set().lib == tmp_path / "c/apache-fluss/0.9.1-incubating/lib"
    monkeypatch.delenv("FLUSS_SPARK_CACHE")
    # The per-user cache, never the installed package.
    assert cache_root().name == "fluss-spark"
    assert Path(maven.__file__).resolve().parents[2] not in cache_root().parents


def test_cached_wants_every_jar_at_its_pinned_size(tmp_path):
    jars = [Jar("g", "a", "1", 3, "0" * 64), Jar("g", "b", "1", 2, "0" * 64, classifier="x")]
    assert jars[1].file_name == "b-1-x.jar" and jars[1].coordinates == "g:b:1:x"
    (tmp_path / "a-1.jar").write_bytes(b"abc")
    assert maven.cached(tmp_path, jars) is None
    (tmp_path / "b-1-x.jar").write_bytes(b"abc")           # a size that is not the pin's
    assert maven.cached(tmp_path, jars) is None
    (tmp_path / "b-1-x.jar").write_bytes(b"ab")
    assert maven.cached(tmp_path, jars) == [tmp_path / "a-1.jar", tmp_path / "b-1-x.jar"]


@pytest.mark.parametrize("jar_set", [apache_fluss_jars.jar_set(), iceberg_jars.JARS,
                                     zookeeper_jars.JARS], ids=lambda s: s.subdir)
def test_pins_are_well_formed(jar_set: JarSet):
    names = [j.file_name for j in jar_set.jars]
    assert len(set(names)) == len(names)
    assert all(len(j.sha256) == 64 and int(j.sha256, 16) >= 0 and j.size > 0
               for j in jar_set.jars)


def test_apache_fluss_release_pins():
    # The set Maven resolved before: fluss-server (shaded) and the distribution's log4j.
    assert [j.coordinates for j in apache_fluss_jars.jar_set().jars] == [
        "org.apache.fluss:fluss-server:0.9.1-incubating",
        "org.apache.logging.log4j:log4j-api:2.25.4",
        "org.apache.logging.log4j:log4j-core:2.25.4",
        "org.apache.logging.log4j:log4j-slf4j-impl:2.25.4",
        "org.apache.logging.log4j:log4j-1.2-api:2.25.4"]
    with pytest.raises(FlussError, match="Apache Fluss 0.0.1 is not a release whose jars are "
                                         "pinned here; known releases: 0.9.1-incubating"):
        apache_fluss_jars.jar_set("0.0.1")
