"""ObjectStore: a local S3-compatible object store (SeaweedFS) as a cluster's remote storage.

SeaweedFS (Apache-2.0) serves the S3 API from one Go binary, ``weed``; ``weed mini`` runs its
master, volume server, filer and S3 gateway in one process. Real S3 semantics (multipart
uploads, listings, deletes) without an AWS account, so ``remote.data.dir`` and the Iceberg
warehouse are exercised the way users run them. The binary is built once per machine from the
Go module proxy (``go`` must be installed; about 5 minutes) into the download cache.

Everything is under ``DIR`` (a cluster directory's ``object-store/``):

- ``object-store.json``, version 1: ``{version, kind: "s3", endpoint, region, bucket, pid,
  ports: {name: port}}``;
- ``credentials``: an AWS shared credentials file (mode 600) with the store's only user, so
  any S3 client can be pointed at it (``AWS_SHARED_CREDENTIALS_FILE``);
- ``data/``: the objects; ``weed.log``: the store's log.
"""

from __future__ import annotations

import configparser
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from xml.sax.saxutils import escape
from typing import TextIO

from fluss_spark.errors import FlussError
from fluss_spark.local.cache import cache_root
from fluss_spark.local.ports import free_port, port_open
from fluss_spark.local.secret_files import random_password, write_secret_file
from fluss_spark.local.server_process import pid_alive, signal_pid, wait_dead
from fluss_spark.local.state_files import read_state_file, write_state_file

#: The SeaweedFS module version that is built (a pseudo-version of the Go module proxy).
SEAWEEDFS_MODULE = "github.com/seaweedfs/seaweedfs"
SEAWEEDFS_VERSION = "v0.0.0-20261109003541-7506e5f91cd6"

STATE_FILE = "object-store.json"
STATE_VERSION = 1
BUCKET = "fluss"
REGION = "us-east-1"
USER = "fluss"
#: The ports ``weed mini`` listens on, each given explicitly: its defaults are fixed numbers,
#: so two stores on one machine would collide, and its gRPC ports default to HTTP + 10000.
_PORTS = ("s3", "s3.port.grpc", "master.port", "master.port.grpc", "volume.port",
          "volume.port.grpc", "filer.port", "filer.port.grpc", "admin.port", "admin.port.grpc")


def weed_binary(out: TextIO | None = sys.stderr) -> Path:
    """The cached ``weed`` binary, built from the Go module proxy on first use."""
    target = cache_root() / "seaweedfs" / SEAWEEDFS_VERSION / "weed"
    if target.exists():
        return target
    go = shutil.which("go")
    if go is None:
        raise FlussError("the local object store (SeaweedFS) is built with Go, which is not on "
                         "the PATH: install Go 1.26 or newer (https://go.dev/dl/), or run "
                         "without --remote-storage")
    if out is not None:
        print(f"building SeaweedFS {SEAWEEDFS_VERSION} (once; a few minutes) into {target}",
              file=out, flush=True)
    # Built inside the module's own directory: its go.mod has replace directives, which
    # `go install module@version` refuses.
    source = json.loads(_go([go, "mod", "download", "-json",
                             f"{SEAWEEDFS_MODULE}@{SEAWEEDFS_VERSION}"], None))["Dir"]
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f"weed.{os.getpid()}.partial")
    _go([go, "build", "-ldflags", "-s -w", "-o", str(partial), "./weed"], source)
    partial.replace(target)
    return target


def _go(cmd: list[str], cwd: str | None) -> str:
    env = {**os.environ, "GOFLAGS": "-mod=mod"}
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise FlussError(f"building SeaweedFS failed ({' '.join(cmd[:3])}): "
                         f"{done.stderr.strip()[-2000:]}")
    return done.stdout


class ObjectStore:
    """A SeaweedFS S3 store rooted at ``directory``, on ``host``; ``start()`` is idempotent."""

    def __init__(self, directory: str | Path, host: str = "127.0.0.1",
                 startup_timeout_s: float = 60.0):
        self.directory = Path(directory)
        self.host = host
        self.startup_timeout_s = startup_timeout_s
        state = read_state_file(self.directory / STATE_FILE, STATE_VERSION) or {}
        self.pid: int | None = state.get("pid")
        self.ports: dict[str, int] = dict(state.get("ports") or {})
        self._proc: subprocess.Popen | None = None

    # -- what clients need ----------------------------------------------------------------------
    @property
    def endpoint(self) -> str:
        if "s3" not in self.ports:
            raise FlussError(f"the object store in {self.directory} was never started: start "
                             "the cluster (fluss-spark cluster start --remote-storage s3)")
        return f"http://{self.host}:{self.ports['s3']}"

    @property
    def credentials_file(self) -> Path:
        return self.directory / "credentials"

    @property
    def credentials(self) -> tuple[str, str]:
        """``(access key, secret key)`` of the store's user, made on first use."""
        write_secret_file(self.credentials_file,
                          f"[default]\naws_access_key_id = {USER}\n"
                          f"aws_secret_access_key = {random_password()}\n")
        parser = configparser.ConfigParser()
        parser.read(self.credentials_file)
        return (parser["default"]["aws_access_key_id"],
                parser["default"]["aws_secret_access_key"])

    def uri(self, path: str = "") -> str:
        """``s3://<bucket>/<path>``."""
        return f"s3://{BUCKET}/{path.strip('/')}".rstrip("/")

    def env(self) -> dict[str, str]:
        """The ``AWS_*`` variables that point pyarrow, pyiceberg and AWS SDKs at the store."""
        key, secret = self.credentials
        return {"AWS_ENDPOINT_URL": self.endpoint, "AWS_ACCESS_KEY_ID": key,
                "AWS_SECRET_ACCESS_KEY": secret, "AWS_REGION": REGION}

    def fluss_options(self) -> dict[str, str]:
        """The ``s3.*`` settings of the Spark source's remote storage options (the keys of
        Fluss's S3 filesystem in server.yaml)."""
        key, secret = self.credentials
        return {"s3.endpoint": self.endpoint, "s3.region": REGION, "s3.access-key": key,
                "s3.secret-key": secret}

    def hadoop_site(self, directory: Path) -> Path:
        """``directory`` with a ``core-site.xml`` (mode 600) holding the store's keys as
        Hadoop's S3A settings, for a JVM that takes them from its classpath."""
        key, secret = self.credentials
        props = "".join(f"  <property><name>{escape(k)}</name><value>{escape(v)}</value>"
                        "</property>\n"
                        for k, v in (("fs.s3a.access.key", key), ("fs.s3a.secret.key", secret)))
        write_secret_file(directory / "core-site.xml",
                          f"<?xml version=\"1.0\"?>\n<configuration>\n{props}</configuration>\n",
                          replace=True)
        return directory

    def describe(self) -> dict:
        """What ``cluster status --json`` reports (no secret: the credentials file's path)."""
        return {"kind": "s3", "endpoint": self.endpoint if self.ports else None,
                "region": REGION, "bucket": BUCKET, "credentials_file": str(self.credentials_file),
                "pid": self.pid, "alive": self.alive}

    # -- lifecycle ------------------------------------------------------------------------------
    @property
    def alive(self) -> bool:
        # Its data dir is on its command line, so a reused pid is never taken for the store.
        return self.pid is not None and pid_alive(self.pid, self._proc, self._dir_flag)

    @property
    def _dir_flag(self) -> str:
        return f"-dir={self.directory / 'data'}"

    def start(self) -> "ObjectStore":
        """Start the store unless it runs; wait until its bucket answers over S3."""
        if self.alive:
            return self
        weed = weed_binary()
        self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        (self.directory / "data").mkdir(exist_ok=True)
        for name in _PORTS:
            # Ports it had keep serving its clients' saved settings across restarts.
            self.ports.setdefault(name, free_port(self.host))
        flags = [f"-{'s3.port' if n == 's3' else n}={p}" for n, p in self.ports.items()]
        cmd = [str(weed), "mini", self._dir_flag, f"-ip={self.host}",
               f"-ip.bind={self.host}", *flags, "-admin.port.legacy=0", "-admin.ui=false",
               "-webdav=false", "-s3.port.iceberg=0", "-s3.port.lance=0",
               "-master.telemetry=false", f"-bucket={BUCKET}"]
        with open(self.directory / "weed.log", "ab") as log:
            self._proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                          stdin=subprocess.DEVNULL, start_new_session=True,
                                          cwd=self.directory,
                                          env={**os.environ, **self.env()})
        self.pid = self._proc.pid
        self._save()
        self._wait_ready()
        return self

    def stop(self, timeout_s: float = 20.0) -> None:
        # Only the store itself: a pid from the state file may belong to another process now.
        if self.alive:
            signal_pid(self.pid, signal.SIGTERM)
            wait_dead([(self.pid, self._proc)], timeout_s)
        self.pid, self._proc = None, None
        if (self.directory / STATE_FILE).exists():
            self._save()

    def _save(self) -> None:
        write_state_file(self.directory / STATE_FILE, {
            "version": STATE_VERSION, "kind": "s3", "endpoint": self.endpoint, "region": REGION,
            "bucket": BUCKET, "pid": self.pid, "ports": self.ports})

    def _wait_ready(self) -> None:
        from fluss_spark.client.remote_storage import RemoteStorage
        key, secret = self.credentials
        deadline = time.monotonic() + self.startup_timeout_s
        error: Exception | None = None
        while time.monotonic() < deadline:
            if not self.alive:
                raise FlussError(f"the object store exited while starting; log "
                                 f"{self.directory / 'weed.log'}:\n{self._tail()}")
            if port_open(self.host, self.ports["s3"]):
                try:
                    fs = RemoteStorage(self.endpoint, REGION, key, secret).s3()
                    if fs.get_file_info(BUCKET).type.name == "Directory":
                        return
                except OSError as e:
                    error = e
            time.sleep(0.1)
        raise FlussError(f"the object store did not serve bucket {BUCKET!r} within "
                         f"{self.startup_timeout_s:.0f}s (last error: {error}); log "
                         f"{self.directory / 'weed.log'}:\n{self._tail()}")

    def _tail(self, lines: int = 20) -> str:
        path = self.directory / "weed.log"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) \
            if path.exists() else ""


def read_state(directory: Path) -> dict | None:
    """The store's state in ``directory`` (None when absent); refuses unknown versions."""
    return read_state_file(Path(directory) / STATE_FILE, STATE_VERSION)


def main() -> int:
    """``python -m fluss_spark.local.object_store``: build (once) and print the ``weed`` binary."""
    try:
        print(weed_binary())
    except FlussError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


__all__ = ["BUCKET", "ObjectStore", "REGION", "SEAWEEDFS_VERSION", "read_state", "weed_binary"]
