"""Folding PK changelog rounds by key and appending log rounds (no Spark)."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fluss_spark.errors import ConfigError
from fluss_spark.tiering.apply import append_rows, apply_pk, conform, fold_changes, last_per_key


def changes(rows):
    """rows: [(id, v, change_type, offset)]"""
    return pa.table({"id": pa.array([r[0] for r in rows], pa.int64()),
                     "v": pa.array([r[1] for r in rows], pa.string()),
                     "_change_type": [r[2] for r in rows],
                     "_log_offset": pa.array([r[3] for r in rows], pa.int64())})


def state(rows):
    return pa.table({"id": pa.array([r[0] for r in rows], pa.int64()),
                     "v": pa.array([r[1] for r in rows], pa.string())})


def as_dict(t):
    return {r["id"]: r["v"] for r in t.to_pylist()}


def test_last_record_per_key_wins_in_log_order_whatever_the_input_order():
    c = changes([(1, "b", "+U", 5), (1, "a", "+I", -1), (1, "a", "-U", 4), (2, "x", "+I", -1)])
    last = last_per_key(c, ["id"])
    assert last.to_pylist() == [
        {"id": 1, "v": "b", "_change_type": "+U", "_log_offset": 5},
        {"id": 2, "v": "x", "_change_type": "+I", "_log_offset": -1}]


def test_apply_upserts_updates_and_deletes_onto_existing_state():
    existing = state([(1, "old1"), (2, "old2"), (3, "old3")])
    c = changes([(2, "old2", "-U", 10), (2, "new2", "+U", 11), (3, "old3", "-D", 12),
                 (4, "four", "+I", 13), (5, "gone", "+I", 14), (5, "gone", "-D", 15)])
    out = apply_pk(existing, c, ["id"])
    assert as_dict(out) == {1: "old1", 2: "new2", 4: "four"}
    assert out.column("id").to_pylist() == [1, 2, 4]  # sorted by key


def test_a_round_ending_between_minus_u_and_plus_u_removes_the_key_until_the_next_round():
    existing = state([(7, "a")])
    after_first = apply_pk(existing, changes([(7, "a", "-U", 3)]), ["id"])
    assert as_dict(after_first) == {}
    assert as_dict(apply_pk(after_first, changes([(7, "b", "+U", 4)]), ["id"])) == {7: "b"}


def test_composite_keys_fold_per_full_key():
    c = pa.table({"a": [1, 1, 1], "b": ["x", "y", "x"], "v": [1, 2, 3],
                  "_change_type": ["+I", "+I", "+U"], "_log_offset": [0, 1, 2]})
    puts, touched = fold_changes(c, ["a", "b"])
    assert sorted((r["a"], r["b"], r["v"]) for r in puts.to_pylist()) == [(1, "x", 3), (1, "y", 2)]
    assert touched.num_rows == 2


def test_unknown_change_type_is_refused():
    with pytest.raises(ConfigError, match="unknown change type"):
        fold_changes(changes([(1, "a", "?X", 0)]), ["id"])


def test_log_rounds_are_appended_without_metadata_and_pk_types_are_refused():
    c = changes([(1, "a", "+A", 0), (1, "a", "+A", 1)])
    assert append_rows(c).to_pylist() == [{"id": 1, "v": "a"}, {"id": 1, "v": "a"}]
    with pytest.raises(ConfigError, match="only appends"):
        append_rows(changes([(1, "a", "-D", 0)]))


def test_conform_casts_spark_types_back_to_the_table_types():
    t = pa.table({"ts": pa.array([1_000_000], pa.timestamp("us", tz="UTC")),
                  "n": pa.array([3], pa.int64()), "_change_type": ["+A"],
                  "extra": [1]})
    schema = pa.schema([("n", pa.int32()), ("ts", pa.timestamp("ms", tz="UTC"))])
    out = conform(t, schema, keep=("_change_type",))
    assert out.schema.names == ["n", "ts", "_change_type"]
    assert out.schema.field("ts").type == pa.timestamp("ms", tz="UTC")
    with pytest.raises(ConfigError, match="lack column"):
        conform(t.drop_columns(["n"]), schema)


ops = st.lists(st.tuples(st.sampled_from(["upsert", "delete"]), st.integers(0, 9),
                         st.integers(0, 99)), max_size=60)


@settings(max_examples=60, deadline=None)
@given(ops, st.lists(st.integers(0, 60), max_size=4))
def test_applying_a_changelog_in_rounds_equals_the_table_state(operations, cuts):
    # A model PK table produces the changelog exactly as a bucket would; cut into rounds anywhere.
    table, log = {}, []
    for op, k, v in operations:
        if op == "upsert":
            if k in table:
                log += [(k, table[k], "-U"), (k, str(v), "+U")]
            else:
                log.append((k, str(v), "+I"))
            table[k] = str(v)
        elif k in table:
            log.append((k, table.pop(k), "-D"))
    rows = [(k, v, t, i) for i, (k, v, t) in enumerate(log)]
    bounds = sorted({0, len(rows), *[min(c, len(rows)) for c in cuts]})
    lake = None
    for lo, hi in zip(bounds, bounds[1:]):
        lake = apply_pk(lake, changes(rows[lo:hi]), ["id"])
    assert as_dict(lake if lake is not None else state([])) == table
