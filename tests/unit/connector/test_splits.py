"""Split planning is a pure function of two offsets; splits pickle."""

import pickle

from fluss_spark.connector.offsets import SnapshotPos, SourceOffset, TablePos
from fluss_spark.connector.splits import LogSplit, SnapshotSplit, plan_splits

START = SourceOffset("L", {1: TablePos("t", {0: SnapshotPos(5, 100, 10, 40)}, {0: 40, 1: 3})})
END = SourceOffset("L", {1: TablePos("t", {0: SnapshotPos(5, 100, 45, 40)}, {0: 40, 1: 9})})


def test_plan_is_deterministic_and_exact():
    splits = plan_splits(START, END)
    assert splits == [SnapshotSplit(1, "t", 0, 5, 10, 45, "L", 40), LogSplit(1, "t", 1, 3, 9)]
    assert plan_splits(START, END) == splits
    assert plan_splits(END, END) == []


def test_split_max_rows_cuts_snapshot_ranges():
    splits = plan_splits(START, END, split_max_rows=15)
    snaps = [(s.row_start, s.row_end) for s in splits if isinstance(s, SnapshotSplit)]
    assert snaps == [(10, 25), (25, 40), (40, 45)]


def test_splits_pickle_and_are_frozen():
    s = SnapshotSplit(1, "t", 0, 5, 10, 45, "L")
    assert pickle.loads(pickle.dumps(s)) == s
    try:
        s.row_end = 3
        raise AssertionError("split is mutable")
    except AttributeError:
        pass
