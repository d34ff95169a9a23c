"""A tiering job that pauses inside a round, for kill -9 tests: the job of
``examples/tier_tables.py`` with its sink patched to stop at one point of a round.

Run under spark-submit (``spark_submit_command(SCRIPT, [point, seconds, marker, *job args])``);
at ``point`` the driver writes its pid to ``marker`` (so a test can kill it there) and sleeps
``seconds``:

- ``before-commit``: the round's rows are read and its files written, the lake commit not begun;
- ``mid-commit``: the round's data files and manifests are written, the catalog commit not made
  (they are left as orphans);
- ``after-commit``: the round is in the lake, Spark has not recorded the batch as done (the
  restarted query replays a round the lake already has).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

from fluss_spark.tiering.lake import LakeTable
from fluss_spark.tiering.table_query import TableSink

SCRIPT = Path(__file__).resolve()
POINTS = ("before-commit", "mid-commit", "after-commit")


def install(point: str, seconds: float, marker: Path, *,
            patch: Callable[[Any, str, Any], None] = setattr,
            sleep: Callable[[float], None] = time.sleep) -> None:
    """Patch (with ``patch``: a test passes ``monkeypatch.setattr``) this process's tiering sink
    and lake table to pause at ``point`` of every round."""
    if point not in POINTS:
        raise ValueError(f"pause point {point!r} is not one of {', '.join(POINTS)}")
    from pyiceberg.table import Transaction

    in_round = threading.local()

    def pause(at: str) -> None:
        if at == point:
            marker.write_text(str(os.getpid()))
            sleep(seconds)

    write, commit_files = TableSink._write, LakeTable.commit_files
    commit_transaction = Transaction.commit_transaction

    def paused_write(self: TableSink, df: Any) -> Any:
        written = write(self, df)
        pause("before-commit")
        return written

    def paused_commit_files(self: LakeTable, *args: Any, **kwargs: Any) -> Any:
        in_round.active = True
        try:
            state = commit_files(self, *args, **kwargs)
        finally:
            in_round.active = False
        pause("after-commit")
        return state

    def paused_commit_transaction(self: Any) -> Any:
        # The catalog swap of a round: its data files and manifests are written by now.
        if getattr(in_round, "active", False):
            pause("mid-commit")
        return commit_transaction(self)

    patch(TableSink, "_write", paused_write)
    patch(LakeTable, "commit_files", paused_commit_files)
    patch(Transaction, "commit_transaction", paused_commit_transaction)


def main(argv: list[str] | None = None) -> int:
    """``tier_pause.py POINT SECONDS MARKER <tiering job arguments>``."""
    args = sys.argv[1:] if argv is None else argv
    point, seconds, marker, job_args = args[0], float(args[1]), Path(args[2]), args[3:]
    install(point, seconds, marker)
    from fluss_spark.tiering.run import main as run_job
    return run_job(job_args)


if __name__ == "__main__":
    sys.exit(main())
