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


def test_version_6_carries_the_columns_of_the_querys_tables():
    cols = {"db.b": (("id", "int64"), ("v", "string")), "db.a": (("k", "int32"),)}
    v6 = SourceOffset(OFFSET.lease_id, OFFSET.tables,
                      QueryIdentity("h1", "full", None, "multi", cols))
    d = v6.to_json()
    assert d["version"] == 6 and list(d["query"]["columns"]) == ["db.a", "db.b"]
    assert d["query"]["columns"]["db.b"] == [["id", "int64"], ["v", "string"]]
    back = decode(json.dumps(d))
    assert back == v6 and json.dumps(back.to_json()) == json.dumps(d)
    bad = {**d, "query": {**d["query"], "columns": {"db.a": [["k"]]}}}
    with pytest.raises(OffsetError, match="'columns'.*not a map of tables to .name, type. "
                                          "lists.*new checkpointLocation"):
        decode(bad)


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
    ({"version": 99, "lease_id": "x", "tables": {}}, "versions [1, 2, 3, 4, 5, 6]"),
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


QUERY = QueryIdentity("h1", "full", None, "single")
#: db.p partitioned by dt: partition 7 in its snapshot phase, partition 9 on its changelog.
PARTITIONED = SourceOffset("lease-1", {
    3: TablePos("db.a", {}, {0: 4}),
    5: TablePos("db.p", partition_keys=("dt",), gone=(1, 12), partitions={
        9: TablePos("2026-11-25", {}, {0: 3, 1: 0}),
        7: TablePos("2026-11-24", {0: SnapshotPos(11, 40, 10, 6)}, {0: 6, 1: 2}),
    }),
}, QUERY)


def test_version_5_holds_positions_per_partition():
    d = PARTITIONED.to_json()
    assert d["version"] == 5 and list(d["tables"]) == ["3", "5"]
    assert d["tables"]["3"] == {"name": "db.a", "snapshot": {}, "log": {"0": 4}}
    p = d["tables"]["5"]
    assert list(p) == ["name", "partition_keys", "partitions", "gone"]
    assert p["partition_keys"] == ["dt"] and list(p["partitions"]) == ["7", "9"]
    assert p["partitions"]["7"] == {"name": "2026-11-24", "snapshot": {"0": [11, 40, 10, 6]},
                                    "log": {"0": 6, "1": 2}}
    assert p["gone"] == {"partitions": 1, "unread": 12}
    back = decode(json.dumps(d))
    assert back == PARTITIONED and json.dumps(back.to_json()) == json.dumps(d)
    assert list(back.units()) == [(3, None), (5, 7), (5, 9)]
    assert back.partition_name((5, 9)) == "2026-11-25" and back.partition_name((3, None)) is None
    assert back.where((5, 7)) == "table 'db.p' partition dt=2026-11-24"
    assert not back.tables[5].snapshot_complete and back.tables[5].has_snapshot


def test_version_5_first_batch_start_and_unit_changes():
    start = PARTITIONED.with_units({}, drop=[(5, 9)])
    first = PARTITIONED.with_origin(start)
    d = first.to_json()
    assert d["origin"] == {"3": {"0": 4}, "5": {"partitions": {"7": {"0": 6, "1": 2}}}}
    back = decode(json.dumps(d))
    assert back == first
    begin = back.first_batch_start()
    assert begin.tables[5].partitions[7].snapshot == {0: SnapshotPos(11, 40, 0, 6)}
    # A partition the batch added (9) starts where the end offset has it: nothing read of it.
    assert begin.tables[5].partitions[9].log == {0: 3, 1: 0}
    added = PARTITIONED.with_units({(5, 12): TablePos("2026-11-26", {}, {0: 0, 1: 0})})
    assert list(added.tables[5].partitions) == [7, 9, 12]
    assert rows_between(PARTITIONED, added) == {3: 0, 5: 0}


def test_versions_1_to_4_still_decode_and_resume():
    v1 = {"version": 1, "lease_id": "L",
          "tables": {"3": {"name": "db.a", "snapshot": {"0": [9, 10, 4, 20]}, "log": {"0": 20}}}}
    q = {"holder": "h", "startup_mode": "full", "startup_timestamp_ms": None, "layout": "single"}
    v2 = {"version": 2, "lease_id": "L", "query": q, "tables": v1["tables"]}
    v3 = {"version": 3, "lease_id": "L", "query": q, "tables": {"3": {
        **v1["tables"]["3"], "live": {"0": 25}}}}
    v4 = {**v2, "version": 4, "origin": {"3": {"0": 20}}}
    for old in (v1, v2, v3, v4):
        back = decode(json.dumps(old))
        assert back.to_json() == old, old["version"]      # written as it was read
        assert list(back.units()) == [(3, None)] and not back.tables[3].partitioned
    assert decode(v4).first_batch_start().tables[3].snapshot[0].next_row == 0


@pytest.mark.parametrize("table, needle", [
    ({"name": "db.p", "partitions": {}}, "no 'partition_keys'"),
    ({"name": "db.p", "partition_keys": ["dt"], "partitions": []}, "malformed 'partitions'"),
    ({"name": "db.p", "partition_keys": ["dt"], "partitions": {"x": {"name": "a"}}},
     "partition id key 'x'"),
    ({"name": "db.p", "partition_keys": ["dt"], "partitions": {"7": {"log": {}}}}, "no name"),
    ({"name": "db.p", "partition_keys": ["dt"], "partitions": {}, "gone": {"partitions": -1}},
     "malformed 'gone'"),
    ({"name": "db.p", "partition_keys": ["dt"],
      "partitions": {"7": {"name": "a", "log": {"0": -2}}}}, "partition 'a' bucket 0"),
])
def test_malformed_version_5_rejected(table, needle):
    bad = {"version": 5, "lease_id": "L", "query": QUERY.to_json(), "tables": {"5": table}}
    with pytest.raises(OffsetError) as e:
        decode(bad)
    assert needle in str(e.value) and "checkpointLocation" in str(e.value)
