"""Cursors behind scan sessions: a position in a snapshot file or a live view, cut into batches.

A cursor never holds more than the batch it is building: a snapshot cursor keeps the open file
and the next row; a live cursor keeps the view's iterator and the rows it has pulled but not
served yet (at most one batch). ``next_batch`` does not move the cursor; ``commit`` does, so a
failure while building a batch leaves the session where it was.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Callable

import pyarrow as pa

from fluss_spark.protocol.arrow_ipc import table_to_buffer
from fluss_spark.protocol.codec import Gather

#: How many times a batch is re-cut to fit its byte budget before settling.
_FIT_ATTEMPTS = 4
#: Aim a little under the budget: IPC framing grows a bit with rows.
_FILL = 0.97


@dataclass(frozen=True)
class Batch:
    """One served batch: Arrow IPC of ``row_count`` rows starting at ``row_start``."""

    records: pa.Buffer | Gather
    row_start: int
    row_count: int
    has_more: bool


def project_schema(schema: pa.Schema, columns: list[str] | None) -> pa.Schema:
    if columns is None:
        return schema
    return pa.schema([schema.field(c) for c in columns], metadata=schema.metadata)


def fit_batch(read: Callable[[int], pa.Table], available: int, budget: int,
              est_row_bytes: float) -> tuple[pa.Table, pa.Buffer]:
    """Read as many rows (>= 1, <= ``available``) as fit in ``budget`` bytes of Arrow IPC.

    ``read(n)`` returns the next ``n`` rows as a table without consuming them. The row count is
    estimated from ``est_row_bytes``, then corrected from the measured size; the result is within
    the budget unless a single row is larger than it.
    """
    rows = int(min(available, max(1, budget * _FILL // max(est_row_bytes, 1.0))))
    best: tuple[pa.Table, pa.Buffer] | None = None
    table = None
    for _ in range(_FIT_ATTEMPTS):
        if table is None or rows > table.num_rows:
            table = read(rows)
            if table.num_rows < rows:          # the source ended early: that is all there is
                available = rows = table.num_rows
        candidate = table.slice(0, rows) if rows < table.num_rows else table
        data = table_to_buffer(candidate)
        per_row = max(len(data) / max(rows, 1), 1.0)
        if len(data) <= budget or rows == 1:
            if best is None or candidate.num_rows > best[0].num_rows:
                best = (candidate, data)
            want = int(min(available, budget * _FILL // per_row))
            if want <= rows or len(data) >= budget * 0.8:
                break
            rows = want                       # under-filled: read more rows
        else:
            rows = max(1, min(rows - 1, int(budget * _FILL // per_row)))
    if best is None:                           # every attempt overshot: take one row
        assert table is not None               # _FIT_ATTEMPTS >= 1, so the loop read
        one = table.slice(0, 1)
        best = (one, table_to_buffer(one))
    return best


class SnapshotCursor:
    """A position in an immutable, key-ordered snapshot file: the open file and the next row."""

    def __init__(self, snapshot, columns: list[str] | None, start_row: int, limit: int | None):
        self.snapshot = snapshot
        self.columns = columns
        self.schema = project_schema(snapshot.schema, columns)
        self.next_row = start_row
        end = snapshot.num_rows if limit is None else min(snapshot.num_rows, start_row + limit)
        self.end_row = max(end, start_row)
        self.log_offset = snapshot.log_offset
        self.snapshot_id = snapshot.snapshot_id
        self._row_bytes = float(max(getattr(snapshot, "avg_row_bytes", 0) or 0, 1))

    def next_batch(self, budget: int) -> Batch:
        available = self.end_row - self.next_row
        if available <= 0:
            return Batch(table_to_buffer(self.schema.empty_table()), self.next_row, 0, False)
        raw = self._raw_batch(budget)
        if raw is not None:
            return raw
        start = self.next_row
        table, data = fit_batch(
            lambda n: self.snapshot.read_slice(start, n, columns=self.columns),
            available, budget, self._row_bytes)
        self._row_bytes = max(len(data) / table.num_rows, 1.0)
        return Batch(data, start, table.num_rows, start + table.num_rows < self.end_row)

    def _raw_batch(self, budget: int) -> Batch | None:
        """Whole record batches of the file as they lie on disk, when the next row starts one,
        no column is dropped and at least one fits in ``budget``; else None (re-encode)."""
        raw_pages = getattr(self.snapshot, "raw_pages", None)
        if raw_pages is None or (self.columns is not None
                                 and self.columns != self.snapshot.schema.names):
            return None
        starts = self.snapshot.batch_starts
        first = bisect.bisect_left(starts, self.next_row)
        if first == len(starts) or starts[first] != self.next_row:
            return None
        bounds = starts + [self.snapshot.num_rows]
        last = first
        while (last < len(starts) and bounds[last + 1] <= self.end_row
               and (self.snapshot.raw_size(first, last + 1) or budget + 1) <= budget):
            last += 1
        if last == first:
            return None
        pages = raw_pages(first, last)
        if pages is None:
            return None
        rows = bounds[last] - self.next_row
        return Batch(Gather(pages), self.next_row, rows, self.next_row + rows < self.end_row)

    def commit(self, batch: Batch) -> Batch:
        """Move past the batch; returns it unchanged (its ``has_more`` is already known)."""
        self.next_row = batch.row_start + batch.row_count
        return batch

    def close(self) -> None:
        close = getattr(self.snapshot, "close", None)
        if close is not None:
            close()


class LiveCursor:
    """A position in a point-in-time view of a bucket's current state (key order)."""

    def __init__(self, view, columns: list[str] | None, start_row: int, limit: int | None,
                 chunk_rows: int):
        self.view = view
        self.columns = columns
        self.schema = project_schema(view.schema, columns)
        self.log_offset = view.log_offset
        self.snapshot_id = None
        self._iter = iter(view.iter_batches(columns, chunk_rows))
        self._pending: list[pa.RecordBatch] = []
        self._pending_rows = 0
        self._exhausted = False
        self._row_bytes = 0.0
        self.next_row = 0
        self.end_row = None if limit is None else start_row + limit
        self._skip(start_row)

    def _pull(self, rows: int) -> None:
        """Pull from the view until ``rows`` rows are pending or the view is exhausted."""
        while self._pending_rows < rows and not self._exhausted:
            try:
                batch = next(self._iter)
            except StopIteration:
                self._exhausted = True
                break
            if batch.num_rows:
                if not self._row_bytes:
                    self._row_bytes = max(batch.nbytes / batch.num_rows, 1.0)
                self._pending.append(batch)
                self._pending_rows += batch.num_rows

    def _peek(self, rows: int) -> pa.Table:
        self._pull(rows)
        table = pa.Table.from_batches(self._pending, schema=self.schema) if self._pending \
            else self.schema.empty_table()
        return table.slice(0, rows)

    def _consume(self, rows: int) -> None:
        table = pa.Table.from_batches(self._pending, schema=self.schema).slice(rows)
        self._pending = [b for b in table.combine_chunks().to_batches() if b.num_rows]
        self._pending_rows = table.num_rows
        self.next_row += rows

    def _skip(self, rows: int) -> None:
        while rows > 0:
            self._pull(min(rows, 65536))
            if not self._pending_rows:
                break
            step = min(rows, self._pending_rows)
            self._consume(step)
            rows -= step

    def _available(self) -> int:
        """Rows that may still be served, pulling one chunk ahead to know whether any are left."""
        self._pull(1)
        left = self._pending_rows if self._exhausted else 2**62
        if self.end_row is not None:
            left = min(left, self.end_row - self.next_row)
        return max(left, 0) if self._pending_rows else 0

    def next_batch(self, budget: int) -> Batch:
        available = self._available()
        if available <= 0:
            return Batch(table_to_buffer(self.schema.empty_table()), self.next_row, 0, False)
        table, data = fit_batch(self._peek, available, budget, self._row_bytes or 64.0)
        self._row_bytes = max(len(data) / table.num_rows, 1.0)
        return Batch(data, self.next_row, table.num_rows, True)

    def commit(self, batch: Batch) -> Batch:
        """Consume the batch; returns it with ``has_more`` settled (needs a look ahead)."""
        self._consume(batch.row_count)
        more = self._available() > 0
        return Batch(batch.records, batch.row_start, batch.row_count, more)

    def close(self) -> None:
        self._pending = []
        close = getattr(self._iter, "close", None)
        if close is not None:
            close()
        self.view.close()
