"""The snapshot store's layout, shared by the tablets that write it and the coordinator that
registers and collects what they wrote::

    <remote_data_dir>/<table_id>/<bucket>/snapshot-<snapshot_id>.arrow
    <remote_data_dir>/<table_id>/p<partition_id>/<bucket>/snapshot-<snapshot_id>.arrow
"""

from __future__ import annotations

import os
import posixpath

import pyarrow.fs as pafs

from fluss_spark.protocol.snapshot_file import resolve


def snapshot_name(table_id: int, bucket: int, snapshot_id: int,
                  partition_id: int | None = None) -> str:
    """A snapshot's path relative to the store root."""
    where = f"{table_id}" if partition_id is None else f"{table_id}/p{partition_id}"
    return f"{where}/{bucket}/snapshot-{snapshot_id}.arrow"


def snapshot_location(remote_data_dir: str, table_id: int, bucket: int, snapshot_id: int,
                      partition_id: int | None = None) -> str:
    """Where snapshot ``snapshot_id`` of a bucket lives (a URI when the store is a URI)."""
    name = snapshot_name(table_id, bucket, snapshot_id, partition_id)
    if "://" in remote_data_dir:
        return f"{remote_data_dir.rstrip('/')}/{name}"
    return os.path.join(os.path.abspath(remote_data_dir), name)


def _normal(path_or_uri: str) -> str:
    if "://" in path_or_uri:
        scheme, _, rest = path_or_uri.partition("://")
        return f"{scheme}://{posixpath.normpath(rest)}"
    return os.path.realpath(path_or_uri)


def is_within(root: str, path: str) -> bool:
    """Whether ``path`` lies strictly inside the store ``root`` (``..`` and symlinks resolved
    for local paths), so nothing outside the store is ever deleted on a request's word."""
    root_n, path_n = _normal(root), _normal(path)
    return path_n != root_n and path_n.startswith(root_n.rstrip("/") + "/")


def same_location(a: str, b: str) -> bool:
    return _normal(a) == _normal(b)


def is_file(path: str) -> bool:
    fs, p = resolve(path)
    return fs.get_file_info(p).type == pafs.FileType.File
