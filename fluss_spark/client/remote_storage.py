"""How a client reaches a cluster's remote storage (``remote.data.dir``) through pyarrow.

Apache Fluss tells its clients where KV snapshot files and tiered log segments are (``s3://``,
``hdfs://``, ``oss://`` ... paths, or local ones); the client reads them itself, on Spark's
driver and executors. ``RemoteStorage`` holds what the path alone does not say: for S3, the
endpoint, region and keys. Whatever it leaves unset pyarrow takes its own way (``AWS_*``
environment variables, ``~/.aws`` files, the instance role; for HDFS ``HADOOP_HOME`` and
``CLASSPATH``), so a node configured for S3 needs no options at all.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import pyarrow as pa

if TYPE_CHECKING:
    # Imported where a file is opened: pyarrow.fs (and its S3 module) costs ~40 ms to import,
    # which a driver or a reader of the embedded engine never needs.
    import pyarrow.fs as pafs

from fluss_spark.errors import ConfigError, UnsupportedVersion


@dataclass(frozen=True)
class RemoteStorage:
    """S3 settings of the remote storage; None: pyarrow's default for that setting."""

    s3_endpoint: str | None = None          # http(s)://host:port of an S3-compatible store
    s3_region: str | None = None
    s3_access_key: str | None = None
    s3_secret_key: str | None = field(default=None, repr=False)    # never in logs or errors

    def __post_init__(self) -> None:
        if (self.s3_access_key is None) != (self.s3_secret_key is None):
            raise ConfigError("the S3 access key and secret key go together: give both or "
                              "neither (neither: pyarrow's AWS_* environment or ~/.aws files)")
        if self.s3_endpoint is not None and urlsplit(self.s3_endpoint).scheme not in (
                "http", "https"):
            raise ConfigError(f"S3 endpoint {self.s3_endpoint!r} must be an http:// or "
                              "https:// URL, e.g. http://127.0.0.1:8333")

    @property
    def configured(self) -> bool:
        return any(v is not None for v in (self.s3_endpoint, self.s3_region, self.s3_access_key))

    def s3(self) -> pafs.S3FileSystem:
        """An S3 filesystem with these settings (pyarrow's defaults for the others)."""
        import pyarrow.fs as pafs
        kwargs: dict[str, object] = {}
        if self.s3_endpoint is not None:
            url = urlsplit(self.s3_endpoint)
            kwargs.update(endpoint_override=url.netloc, scheme=url.scheme)
        if self.s3_region is not None:
            kwargs["region"] = self.s3_region
        if self.s3_access_key is not None:
            kwargs.update(access_key=self.s3_access_key, secret_key=self.s3_secret_key)
        return pafs.S3FileSystem(**kwargs)


_S3_SCHEMES = ("s3", "s3a", "s3n")
_cache: dict[RemoteStorage, "pafs.FileSystem"] = {}
_cache_lock = threading.Lock()


def filesystem(path: str, storage: RemoteStorage = RemoteStorage()) -> tuple[pafs.FileSystem, str]:
    """The pyarrow filesystem of a remote path and the path inside it.

    S3 paths (``s3://``, and Hadoop's ``s3a://`` / ``s3n://`` spellings Fluss may report) use
    ``storage``'s settings; other schemes are opened by pyarrow from the path alone."""
    import pyarrow.fs as pafs
    scheme = urlsplit(path).scheme.lower()
    try:
        if scheme in _S3_SCHEMES and storage.configured:
            with _cache_lock:
                fs = _cache.get(storage)
                if fs is None:
                    fs = _cache[storage] = storage.s3()
            return fs, path.split("://", 1)[1]
        if scheme in ("s3a", "s3n"):
            path = "s3" + path[len(scheme):]
        return pafs.FileSystem.from_uri(path)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, OSError, ValueError) as e:
        raise UnsupportedVersion(
            f"cannot open {path!r} (the cluster's remote.data.dir) through pyarrow: {e}. KV "
            "snapshot files and tiered log segments must be reachable from Spark's driver and "
            "executors: local or shared disk, s3:// (endpoint and keys: the s3.* source "
            "options or AWS_* variables), gs://, hdfs:// (with libhdfs), abfs://") from None


def warm(storage: RemoteStorage) -> None:
    """Import pyarrow.fs (~7 ms) and build ``storage``'s S3 filesystem now, if it has S3
    settings (a process's first takes ~30 ms: the AWS SDK starts), which a caller can spend
    while it waits for something else."""
    import pyarrow.fs  # noqa: F401
    if storage.configured:
        filesystem("s3://", storage)


__all__ = ["RemoteStorage", "filesystem", "warm"]
