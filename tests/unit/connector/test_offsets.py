"""Offsets: JSON round trip, stable key order, clear rejection of malformed or foreign offsets."""

import json

import pytest

from fluss_spark.connector.offsets import (OffsetError, QueryIdentity, SnapshotPos,
                                           SourceOffset, TablePos, decode, rows_between)

OFFSET = SourceOffset("lease-1", {
    12: TablePos("db.b", {}, {0: 5, 1: 7}),
    3: TablePos("db.a", {10: SnapshotPos(4, 100, 30, 55), 2: SnapshotPos(9, 10, 10, 20)},
                {2: 25, 10: 55}),
})


def test_round_trip():
    text = json.dumps(OFFSET.to_json())
    back = decode(text)
    assert back == decode(OFFSET.to_json())
    assert back.to_json() == OFFSET.to_json()
    assert back.lease_id == "lease-1"
    assert back.tables[3].snapshot[10] == SnapshotPos(4, 100, 30, 55)
    assert back.tables[12].log == {0: 5, 1: 7}


def test_stable_numeric_key_order():
    d = OFFSET.to_json()
    assert list(d) == ["version", "lease_id", "tables"]
    assert list(d["tables"]) == ["3", "12"]
    assert list(d["tables"]["3"]["snapshot"]) == ["2", "10"]
    assert d["version"] == 1
    # A decode/encode cycle gives the same text: Spark compares offsets as JSON strings.
    assert json.dumps(decode(json.dumps(d)).to_json()) == json.dumps(d)


def test_version_2_carries_the_query_identity():
    v2 = SourceOffset(OFFSET.lease_id, OFFSET.tables, QueryIdentity("h1", "timestamp", 17, "multi"))
    d = v2.to_json()
    assert list(d) == ["version", "lease_id", "query", "tables"] and d["version"] == 2
    assert d["query"] == {"holder": "h1", "startup_mode": "timestamp",
                          "startup_timestamp_ms": 17, "layout": "multi"}
    back = decode(json.dumps(d))
    assert back == v2 and back.holder == "h1"
    assert json.dumps(back.to_json()) == json.dumps(d)


def test_version_4_carries_the_first_batchs_start():
    query = QueryIdentity("h1", "full", None, "single")
    first = SourceOffset(OFFSET.lease_id, OFFSET.tables, query).with_origin(
        SourceOffset(OFFSET.lease_id, {3: TablePos("db.a", {}, {2: 20, 10: 55}),
                                       12: TablePos("db.b", {}, {0: 1, 1: 0})}, query))
    d = first.to_json()
    assert d["version"] == 4 and d["origin"] == {"3": {"2": 20, "10": 55}, "12": {"0": 1, "1": 0}}
    back = decode(json.dumps(d))
    assert back == first and json.dumps(back.to_json()) == json.dumps(d)
    start = back.first_batch_start()
    assert start.tables[3].snapshot == {2: SnapshotPos(9, 10, 0, 20),
                                        10: SnapshotPos(4, 100, 0, 55)}
    assert start.tables[3].log == {2: 20, 10: 55} and start.tables[12].log == {0: 1, 1: 0}
    assert start.origin is None and decode(SourceOffset("l", {}, query).to_json()).origin is None
    with pytest.raises(OffsetError, match="'origin'"):
        decode({**d, "origin": [1]})


def test_version_1_still_decodes_and_its_lease_id_stands_in_for_the_holder():
    v1 = {"version": 1, "lease_id": "lease-1",
          "tables": {"3": {"name": "db.a", "snapshot": {"2": [9, 10, 10, 20]}, "log": {"2": 25}}}}
    back = decode(v1)
    assert back.query is None and back.holder == "lease-1"
    assert back.to_json() == v1


@pytest.mark.parametrize("query, needle", [
    (None, "no 'query' map"),
    ({"startup_mode": "full", "layout": "single"}, "no holder"),
    ({"holder": "h", "startup_mode": "full", "startup_timestamp_ms": "x", "layout": "single"},
     "startup_timestamp_ms 'x'"),
    ({"holder": "h", "startup_mode": "full", "layout": "wide"}, "layout 'wide'"),
])
def test_malformed_query_identity_rejected(query, needle):
    bad = {"version": 2, "lease_id": "x", "query": query, "tables": {}}
    with pytest.raises(OffsetError) as e:
        decode(bad)
    assert needle in str(e.value) and "new checkpointLocation" in str(e.value)


@pytest.mark.parametrize("bad, needle", [
    ("not json", "not JSON"),
    ({"topic": {"0": 5}}, "not a fluss source offset"),
    ([1, 2], "not a fluss source offset"),
    ({"version": "1", "lease_id": "x", "tables": {}}, "not a number"),
    ({"version": 99, "lease_id": "x", "tables": {}}, "versions [1, 2, 3, 4]"),
    ({"version": 1, "tables": {}}, "lease_id"),
    ({"version": 1, "lease_id": "x"}, "'tables'"),
    ({"version": 1, "lease_id": "x", "tables": {"a": {"name": "t"}}}, "table id key 'a'"),
    ({"version": 1, "lease_id": "x", "tables": {"1": {"snapshot": {}}}}, "no name"),
    ({"version": 1, "lease_id": "x", "tables": {"1": {"name": "t", "snapshot": {"0": [1, 2]}}}},
     "snapshot position"),
    ({"version": 1, "lease_id": "x", "tables": {"1": {"name": "t", "log": {"0": -1}}}},
     "non-negative"),
])
def test_malformed_offsets_rejected(bad, needle):
    with pytest.raises(OffsetError) as e:
        decode(bad)
    assert needle in str(e.value)
    if "versions [1]" not in needle:
        assert "checkpointLocation" in str(e.value)


def test_rows_between_counts_snapshot_rows_and_log_records():
    end = SourceOffset("lease-1", {
        12: TablePos("db.b", {}, {0: 9, 1: 7}),
        3: TablePos("db.a", {10: SnapshotPos(4, 100, 100, 55), 2: SnapshotPos(9, 10, 10, 20)},
                    {2: 30, 10: 55}),
    })
    assert rows_between(OFFSET, end) == {12: 4, 3: 70 + 5}


def test_rows_between_replaced_snapshot_counts_from_zero():
    end = SourceOffset("l", {3: TablePos("db.a", {10: SnapshotPos(6, 40, 15, 80)}, {10: 80})})
    start = SourceOffset("l", {3: TablePos("db.a", {10: SnapshotPos(4, 100, 30, 55)}, {10: 55})})
    assert rows_between(start, end) == {3: 15}
