"""``SparkLoop``: drives the source's enumerator the way Spark's micro-batch engine does.

As docs/spark_source.md ("How the source meets Spark") describes it: the end offset is written to
the offset log before the batch runs, ``commit`` lags one batch, and a run restarted before batch
0 committed calls ``initial_offset`` again and replays batch 0 up to the logged offset. A driver
"dies" by dropping its enumerator at a chosen point; the next run starts a fresh one on the same
logs.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql.streaming.datasource import ReadMaxRows

from fluss_spark.connector.enumerator import Enumerator
from fluss_spark.connector.options import parse_options
from fluss_spark.connector.splits import LogSplit, SnapshotSplit


class SparkLoop:
    """An offset log, a commit log and an idempotent sink keyed by batch id, like Spark's."""

    def __init__(self, cluster, clock, wall=None, **options):
        """``wall`` (epoch ms, default ``clock``) tells a partition expired by retention."""
        self.cluster, self.clock, self.wall = cluster, clock, wall or clock
        self.options = options
        self.offsets: list[dict] = []
        self.committed = 0
        self.output: dict[int, list] = {}   # batch id -> splits (a replay overwrites)
        #: The current run's enumerator, and the start of its next batch (set by ``run``).
        self.enum: Any = None
        self.start: Any = None

    def run(self, **options) -> "SparkLoop":
        """A new driver run on the same checkpoint (options may differ, as a user may change
        them)."""
        opts = {"bootstrap.servers": "h:1", "table": "db.pk", **self.options, **options}
        parsed = parse_options({k: v for k, v in opts.items() if v is not None})
        self.enum = Enumerator(parsed, list(parsed.tables),
                               lambda: self.cluster, clock=self.clock,
                               renew_in_thread=False, wall=self.wall)
        if not self.offsets:
            self.start = self.enum.initial_offset()
            assert self.enum.initial_offset() == self.start  # Spark calls it twice
        elif self.committed < len(self.offsets):  # replay the uncommitted batch
            n = len(self.offsets) - 1
            start = self.offsets[n - 1] if n else self.enum.initial_offset()
            self.output[n] = self.enum.partitions(start, self.offsets[n])
            self.committed = n + 1
            self.start = self.offsets[n]
        else:
            self.start = self.offsets[-1]
        return self

    def plan(self, max_rows: int = 5) -> bool:
        """latestOffset + offset log write; False when there is nothing new."""
        end = self.enum.latest_offset(self.start, ReadMaxRows(max_rows))
        if end == self.start:
            return False
        self.offsets.append(end)
        if len(self.offsets) >= 2:
            self.enum.commit(self.offsets[-2])
        return True

    def execute(self) -> None:
        """partitions + the sink, for the batch just planned (not yet committed)."""
        n = len(self.offsets) - 1
        self.output[n] = self.enum.partitions(self.start, self.offsets[n])

    def finish(self) -> None:
        self.committed = len(self.offsets)
        self.start = self.offsets[-1]

    def batch(self, max_rows: int = 5) -> bool:
        if not self.plan(max_rows):
            return False
        self.execute()
        self.finish()
        return True

    def kill_at(self, point: str) -> "SparkLoop":
        """Run until the driver "dies" at ``point``: inside batch 0 (``offsets/0`` logged, not
        committed), mid-snapshot (after one more batch), or after the snapshot phase."""
        self.plan()
        self.execute()
        if point in ("mid-snapshot", "after the snapshot phase"):
            self.finish()
            self.drain() if point == "after the snapshot phase" else self.batch()
        return self

    def drain(self, max_rows: int = 5) -> None:
        for _ in range(200):
            if not self.batch(max_rows):
                return
        raise AssertionError("the query never caught up")

    # -- what a test checks -------------------------------------------------------------------
    def snapshot_rows(self) -> list[tuple[int, int, int]]:
        """(bucket, snapshot id, row) of every snapshot row the sink holds."""
        return [(s.bucket, s.snapshot_id, r) for splits in self.output.values() for s in splits
                if isinstance(s, SnapshotSplit) for r in range(s.row_start, s.row_end)]

    def log_records(self) -> list[tuple[int, int]]:
        return [(s.bucket, o) for splits in self.output.values() for s in splits
                if isinstance(s, LogSplit) for o in range(s.start, s.end)]

    def reads(self) -> list[tuple]:
        """``(partition, bucket, snapshot id, row)`` of every snapshot row and ``(partition,
        bucket, None, offset)`` of every changelog record the sink holds."""
        out: list[tuple] = []
        for splits in self.output.values():
            for s in splits:
                if isinstance(s, SnapshotSplit):
                    out += [(s.partition, s.bucket, s.snapshot_id, r)
                            for r in range(s.row_start, s.row_end)]
                elif isinstance(s, LogSplit):
                    out += [(s.partition, s.bucket, None, o) for o in range(s.start, s.end)]
        return sorted(out, key=lambda r: (r[0] or "", r[1], r[2] is not None, r[2] or 0, r[3]))

    def lease_ids_in_offsets(self) -> set[str]:
        return {o["lease_id"] for o in self.offsets}


__all__ = ["SparkLoop"]
