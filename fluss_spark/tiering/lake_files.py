"""Which files of a table's warehouse its snapshots use, and the deletion of the others (expiry),
in a local warehouse or an object store alike (through the table's pyarrow file system)."""

from __future__ import annotations

from typing import Any, Iterable, Iterator

#: The directories of a table's location that expiry cleans.
SUBDIRS = ("data", "metadata")


def file_key(uri: str) -> str:
    """One name per file whatever form a location takes (``/p``, ``file:///p``; ``s3://b/k``):
    the scheme and the path the scheme's file system uses."""
    from pyiceberg.io.pyarrow import PyArrowFileIO
    scheme, _, path = PyArrowFileIO.parse_location(uri)
    return f"{scheme}:{path}"


def referenced_files(tbl: Any, snapshots: Iterable[Any]) -> set[str]:
    """The ``file_key`` of every manifest list, manifest and data/delete file ``snapshots``
    use."""
    out: set[str] = set()
    io = tbl.io
    for snap in snapshots:
        out.add(file_key(snap.manifest_list))
        for m in snap.manifests(io):
            out.add(file_key(m.manifest_path))
            for entry in m.fetch_manifest_entry(io, discard_deleted=True):
                out.add(file_key(entry.data_file.file_path))
    return out


def table_files(tbl: Any) -> Iterator[tuple[str, str, int | None]]:
    """``(file_key, path, mtime_ms)`` of every file under the table's ``data/`` and
    ``metadata/`` (``path`` as the file system names it); nothing when the table's file IO is
    not pyiceberg's pyarrow one."""
    from pyarrow.fs import FileSelector, FileType
    from pyiceberg.io.pyarrow import PyArrowFileIO
    io = tbl.io
    if not isinstance(io, PyArrowFileIO):
        return
    scheme, netloc, root = io.parse_location(tbl.location(), io.properties)
    fs = io.fs_by_scheme(scheme, netloc)
    for sub in SUBDIRS:
        selector = FileSelector(f"{root.rstrip('/')}/{sub}", recursive=True,
                                allow_not_found=True)
        for info in fs.get_file_info(selector):
            if info.type == FileType.File:
                mtime = info.mtime_ns // 1_000_000 if info.mtime_ns is not None else None
                yield f"{scheme}:{info.path}", info.path, mtime


def delete_unused(tbl: Any, before: set[str], after: set[str], now_ms: int,
                  orphan_grace_ms: int) -> list[str]:
    """Delete the table's files that snapshots used ``before`` but not ``after`` (expired),
    and the files no snapshot names that are older than ``orphan_grace_ms`` (rounds killed
    before their commit; a round being written is younger). Metadata files are the catalog's
    and pyiceberg's to manage. Returns the deleted files' keys."""
    removed: list[str] = []
    files = list(table_files(tbl))
    if not files:
        return removed
    io = tbl.io
    scheme, netloc, _ = io.parse_location(tbl.location(), io.properties)
    fs = io.fs_by_scheme(scheme, netloc)
    for key, path, mtime_ms in files:
        if key in after or path.endswith(".metadata.json"):
            continue
        # A file of unknown age is never taken for an old orphan.
        old = mtime_ms is not None and now_ms - mtime_ms > orphan_grace_ms
        if key in before or old:
            try:
                fs.delete_file(path)
            except FileNotFoundError:
                pass    # deleted meanwhile by another expiry
            removed.append(key)
    return removed


__all__ = ["delete_unused", "file_key", "referenced_files", "table_files"]
