"""Readable excerpts of a failed job's output for test assertions."""

from __future__ import annotations

import re

_FRAME = re.compile(r"^\s+(at |\.\.\. \d+ more)")


def failure_excerpt(output: str, limit: int = 8000) -> str:
    """The end of ``output`` without JVM stack frames, so the Python traceback and the error
    lines that name the cause fit in an assertion message."""
    lines = [ln for ln in output.splitlines() if not _FRAME.match(ln)]
    return "\n".join(lines)[-limit:]
