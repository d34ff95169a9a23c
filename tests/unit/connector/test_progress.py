"""table_lag: per-table backlog from a query's progress."""

import json

from fluss_spark.connector.offsets import SnapshotPos, SourceOffset, TablePos
from fluss_spark.connector.progress import table_lag


def test_lag_from_progress():
    end = SourceOffset("L", {1: TablePos("db.a", {0: SnapshotPos(3, 50, 20, 9)}, {0: 9}),
                             2: TablePos("db.b", {}, {0: 5, 1: 5})})
    latest = SourceOffset("L", {1: TablePos("db.a", {0: SnapshotPos(3, 50, 50, 9)}, {0: 9}),
                                2: TablePos("db.b", {}, {0: 8, 1: 6})})
    progress = {"sources": [
        {"description": "other", "endOffset": {"topic": 1}, "latestOffset": {"topic": 2}},
        {"description": "fluss", "endOffset": json.dumps(end.to_json()),
         "latestOffset": latest.to_json()},
    ]}
    assert table_lag(progress) == {"db.a": 30, "db.b": 4}
    assert table_lag(json.dumps(progress)) == {"db.a": 30, "db.b": 4}
    assert table_lag(None) == {}
    assert table_lag({"sources": [{"endOffset": None, "latestOffset": None}]}) == {}
