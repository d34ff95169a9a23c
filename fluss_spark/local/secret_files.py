"""Files of a local cluster that hold passwords: written once, mode 600, in a 0700 directory."""

from __future__ import annotations

import os
import secrets
from pathlib import Path


def random_password() -> str:
    return secrets.token_urlsafe(24)


def write_secret_file(path: Path, text: str, *, replace: bool = False) -> None:
    """Write ``text`` to ``path`` (mode 600) unless it exists; ``replace``: write it anyway.

    The file is never readable by others, not even for a moment: it is created with its mode,
    and a replacement is written beside it and renamed over it."""
    if path.exists() and not replace:
        return
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)   # secrets inside
    tmp = path.with_name(path.name + ".tmp") if replace else path
    if replace:
        tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    if replace:
        os.replace(tmp, path)


__all__ = ["random_password", "write_secret_file"]
