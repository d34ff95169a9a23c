"""An Apache Fluss KV snapshot's file list, its recorded row count, and copying its files.

What the driver needs of a snapshot (planning, leases) without the decoders that read its rows
(``kv_snapshot``): a driver-side source process imports this module, its readers both.
"""

from __future__ import annotations

import json
import os
import posixpath
import shutil
from dataclasses import dataclass

from fluss_spark.client.remote_storage import RemoteStorage, filesystem
from fluss_spark.errors import CorruptMessage, KvSnapshotNotExist

#: The snapshot's own description, written by Fluss next to its private files.
METADATA_FILE = "_METADATA"


@dataclass(frozen=True)
class KvSnapshotFiles:
    """One KV snapshot's files, ``(remote path, name in the checkpoint)``, and its log offset."""

    table: str
    bucket: int
    snapshot_id: int
    log_offset: int
    files: tuple[tuple[str, str], ...]
    #: The partition's name, for a snapshot of a partitioned table's bucket.
    partition: str | None = None
    #: How the files are reached (S3 endpoint and keys).
    storage: RemoteStorage = RemoteStorage()

    @property
    def directory(self) -> str:
        """The snapshot's own directory (``.../snap-<id>``): where its private files are."""
        for remote, local in self.files:
            if local == "CURRENT":
                return posixpath.dirname(remote)
        raise CorruptMessage(f"{self.describe()} lists no CURRENT file: {self.files}")

    def describe(self) -> str:
        where = "" if self.partition is None else f" partition {self.partition}"
        return f"KV snapshot {self.snapshot_id} of {self.table}{where} bucket {self.bucket}"


def read_row_count(files: KvSnapshotFiles) -> int | None:
    """The row count Fluss recorded in the snapshot's ``_METADATA`` (None when it has none:
    tables in the WAL changelog mode, snapshots of servers before 0.9)."""
    fs, path = filesystem(posixpath.join(files.directory, METADATA_FILE), files.storage)
    try:
        with fs.open_input_stream(path) as f:
            node = json.loads(f.read())
    except FileNotFoundError:
        raise KvSnapshotNotExist(f"{files.describe()} is gone from remote storage "
                                 f"({path} is missing)") from None
    except ValueError as e:
        raise CorruptMessage(f"{files.describe()}: {path} is not JSON: {e}") from None
    count = node.get("row_count") if isinstance(node, dict) else None
    return int(count) if isinstance(count, int) and count >= 0 else None


def snapshot_gone(files: KvSnapshotFiles, remote: str) -> KvSnapshotNotExist:
    """The error for a file of the snapshot that is missing from remote storage."""
    return KvSnapshotNotExist(f"{files.describe()} is gone from remote storage ({remote} is "
                              "missing): retention removed it")


def download(files: KvSnapshotFiles, into: str) -> None:
    """Copy the snapshot's files into the directory ``into`` under their checkpoint names."""
    for remote, local in files.files:
        if not local or "/" in local or local in (".", ".."):
            raise CorruptMessage(f"{files.describe()}: unsafe checkpoint file name {local!r}")
        fs, path = filesystem(remote, files.storage)
        try:
            with fs.open_input_stream(path) as src, open(os.path.join(into, local), "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
        except FileNotFoundError:
            raise snapshot_gone(files, remote) from None


__all__ = ["KvSnapshotFiles", "METADATA_FILE", "download", "read_row_count", "snapshot_gone"]
