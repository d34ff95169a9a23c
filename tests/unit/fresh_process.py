"""Python code run by a fresh interpreter: what a new Spark Python process would import."""

from __future__ import annotations

import subprocess
import sys


def fresh_output(code: str, timeout_s: float = 60) -> str:
    """The standard output of ``code`` run by a fresh interpreter; an error fails the test."""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=timeout_s)
    assert done.returncode == 0, done.stderr
    return done.stdout
