"""Opening files in Apache Fluss's remote storage (``remote.data.dir``) through pyarrow."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.fs as pafs

from fluss_spark.errors import UnsupportedVersion


def filesystem(path: str) -> tuple[pafs.FileSystem, str]:
    """The pyarrow filesystem of a remote path and the path inside it.

    The filesystem is chosen by the path's scheme; it takes its credentials and settings the
    way pyarrow does (for S3 the ``AWS_*`` environment variables or the instance role, for HDFS
    ``HADOOP_HOME`` / ``CLASSPATH`` and the Hadoop configuration)."""
    try:
        return pafs.FileSystem.from_uri(path)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, OSError, ValueError) as e:
        raise UnsupportedVersion(
            f"cannot open {path!r} (Fluss's remote.data.dir) through pyarrow: {e}. KV snapshot "
            "files and tiered log segments must be reachable from Spark's driver and "
            "executors: local or shared disk, s3://, gs://, hdfs:// (with libhdfs), "
            "abfs://") from None


__all__ = ["filesystem"]
