"""Batch cutting of scan cursors: every batch fits its budget, and paging loses no row."""

from __future__ import annotations

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from fluss_spark.protocol.arrow_ipc import bytes_to_table
from fluss_spark.server.tablet.scan_cursor import LiveCursor, SnapshotCursor, fit_batch

SCHEMA = pa.schema([("id", pa.int64()), ("s", pa.string())])


def table_of(lengths) -> pa.Table:
    return pa.table({"id": list(range(len(lengths))), "s": ["x" * n for n in lengths]},
                    schema=SCHEMA)


class MemorySnapshot:
    """A snapshot file stand-in with the SnapshotFile reading interface."""

    def __init__(self, table):
        self.table, self.schema, self.num_rows = table, table.schema, table.num_rows
        self.log_offset, self.snapshot_id = 42, 3
        self.avg_row_bytes = 10.0             # deliberately wrong: the cursor must correct it

    def read_slice(self, start, n, columns=None):
        part = self.table.slice(start, n)
        return part.select(columns) if columns else part


class MemoryView:
    """A live view stand-in yielding chunks of ``chunk`` rows."""

    def __init__(self, table):
        self.table, self.schema, self.log_offset, self.closed = table, table.schema, 9, False

    def iter_batches(self, columns, max_rows):
        t = self.table.select(columns) if columns else self.table
        for b in t.to_batches(max_chunksize=max_rows):
            yield b

    def close(self):
        self.closed = True


lengths = st.lists(st.integers(0, 3000), min_size=1, max_size=300)


@settings(max_examples=60, deadline=None)
@given(lengths=lengths, budget=st.integers(1, 200_000), est=st.floats(1, 10_000))
def test_fit_batch_fits_the_budget_unless_one_row_is_larger(lengths, budget, est):
    table = table_of(lengths)
    got, data = fit_batch(lambda n: table.slice(0, n), table.num_rows, budget, est)
    assert got.num_rows >= 1
    assert len(data) <= budget or got.num_rows == 1
    assert bytes_to_table(data).equals(table.slice(0, got.num_rows))


def page(cursor, budget):
    parts, batches = [], []
    while True:
        batch = cursor.commit(cursor.next_batch(budget))
        batches.append(batch)
        parts.append(bytes_to_table(batch.records))
        if not batch.has_more:
            return pa.concat_tables(parts), batches


@settings(max_examples=40, deadline=None)
@given(lengths=lengths, budget=st.integers(1, 50_000), start=st.integers(0, 320),
       limit=st.none() | st.integers(0, 320), chunk=st.integers(1, 100), live=st.booleans())
def test_paging_returns_exactly_the_requested_rows(lengths, budget, start, limit, chunk, live):
    table = table_of(lengths)
    if live:
        view = MemoryView(table)
        cursor = LiveCursor(view, None, start, limit, chunk)
    else:
        cursor = SnapshotCursor(MemorySnapshot(table), None, start, limit)
    got, batches = page(cursor, budget)
    end = table.num_rows if limit is None else min(table.num_rows, start + limit)
    assert got.equals(table.slice(start, max(end - start, 0)))
    assert all(b.row_count >= 1 for b in batches[:-1]) and batches[-1].has_more is False
    expected_start = min(start, table.num_rows) if live else start
    assert [b.row_start for b in batches][0] == expected_start
    for a, b in zip(batches, batches[1:]):
        assert b.row_start == a.row_start + a.row_count
    if live:
        cursor.close()
        assert view.closed


def test_projection_keeps_the_requested_column_order():
    table = table_of([5, 6, 7])
    cursor = SnapshotCursor(MemorySnapshot(table), ["s", "id"], 0, None)
    got, _ = page(cursor, 1 << 20)
    assert got.schema.names == ["s", "id"] and got.num_rows == 3


def test_whole_batches_of_a_mapped_snapshot_are_served_as_they_lie_in_the_file(tmp_path):
    from fluss_spark.protocol.codec import Gather
    from fluss_spark.server.tablet.snapshot import SnapshotFile, write_snapshot
    table = table_of([20] * 1000)
    path = str(tmp_path / "snap.arrow")
    write_snapshot(table.to_batches(max_chunksize=100), SCHEMA, 1000, path, table_id=1,
                   bucket=0, snapshot_id=3, log_offset=42)
    with SnapshotFile.open(path) as snap:
        assert snap.batch_starts[:3] == [0, 100, 200]
        one = snap.raw_size(0, 1)
        cursor = SnapshotCursor(snap, None, 0, 950)
        served = []
        while True:
            batch = cursor.commit(cursor.next_batch(3 * one + 10))
            served.append(batch)
            if not batch.has_more:
                break
        raw = [b for b in served if isinstance(b.records, Gather)]
        assert [b.row_count for b in raw] == [300, 300, 300]          # three whole batches
        assert not isinstance(served[-1].records, Gather)            # rows 900..950: re-cut
        got = pa.concat_tables(bytes_to_table(b.records.join() if isinstance(b.records, Gather)
                                              else b.records) for b in served)
        assert got.equals(table.slice(0, 950))
        assert sum(b.row_count for b in served) == 950
        # A start inside a batch, a budget under one batch, or a projection: re-encoded.
        for start, budget, columns in ((50, 10 * one, None), (0, one // 2, None),
                                       (0, 10 * one, ["s"])):
            c = SnapshotCursor(snap, columns, start, None)
            assert not isinstance(c.next_batch(budget).records, Gather)
        assert isinstance(SnapshotCursor(snap, ["id", "s"], 0, None).next_batch(
            10 * one).records, Gather)                                # every column, in order
