"""Which files of a table's warehouse its snapshots use (what expiry may delete)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable


def local_path(uri: str) -> Path | None:
    if uri.startswith("file://"):
        return Path(uri[len("file://"):])
    if uri.startswith("/"):
        return Path(uri)
    return None


def referenced_files(tbl: Any, snapshots: Iterable[Any]) -> set[str]:
    """Local paths of every manifest list, manifest and data/delete file ``snapshots`` use."""
    out: set[str] = set()
    io = tbl.io
    for snap in snapshots:
        for uri in [snap.manifest_list]:
            p = local_path(uri)
            if p is not None:
                out.add(str(p))
        for m in snap.manifests(io):
            p = local_path(m.manifest_path)
            if p is not None:
                out.add(str(p))
            for entry in m.fetch_manifest_entry(io, discard_deleted=True):
                p = local_path(entry.data_file.file_path)
                if p is not None:
                    out.add(str(p))
    return out


__all__ = ["local_path", "referenced_files"]
