"""Bucket writes: changelog semantics of log and PK tables, validation, KV recovery, fetch."""

from __future__ import annotations

import threading
import time

import pyarrow as pa
import pytest

from fluss_spark.errors import (InvalidColumnProjection, InvalidRequest, LogOffsetOutOfRange,
                                NonPrimaryKeyTable)
from fluss_spark.metadata.layout import TableRecord
from fluss_spark.protocol.arrow_ipc import bytes_to_table, serialize_schema
from fluss_spark.server.tablet.bucket import Bucket, with_change_columns
from fluss_spark.testing.clock import FakeClock

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("name", pa.string()),
                    ("score", pa.int32())])


def _table(pk: bool, props=None) -> TableRecord:
    return TableRecord(table_id=7, name="db.t", schema=serialize_schema(SCHEMA),
                       primary_key=["id"] if pk else [], bucket_key=["id"] if pk else [],
                       num_buckets=1, properties=props or {})


def _rows(ids, names, scores=None) -> pa.Table:
    scores = scores if scores is not None else [len(n or "") for n in names]
    return pa.table({"id": pa.array(ids, pa.int64()), "name": names,
                     "score": pa.array(scores, pa.int32())})


def _log(bucket: Bucket, offset: int = 0) -> list[tuple]:
    r = bucket.fetch(offset, None, 1 << 30, 0, None)
    if r.records is None:
        return []
    t = bytes_to_table(r.records)
    return list(zip(t.column("_change_type").to_pylist(), t.column("id").to_pylist(),
                    t.column("name").to_pylist()))


def _state(bucket: Bucket) -> list[tuple]:
    with bucket.open_live_view() as view:
        out = []
        for b in view.iter_batches(None, 2):
            out += list(zip(b.column("id").to_pylist(), b.column("name").to_pylist()))
        return out


@pytest.fixture
def pk(tmp_path):
    b = Bucket(_table(True), 0, tmp_path / "pk")
    yield b
    b.close()


@pytest.fixture
def logt(tmp_path):
    b = Bucket(_table(False), 0, tmp_path / "log")
    yield b
    b.close()


def test_log_table_appends_plus_a_records(logt):
    assert logt.write("append", _rows([1, 1, 2], ["a", "b", "c"])) == (0, 3)
    assert _log(logt) == [("+A", 1, "a"), ("+A", 1, "b"), ("+A", 2, "c")]
    assert logt.write("append", _rows([], [])) == (3, 3)


def test_pk_insert_update_delete_changelog(pk):
    assert pk.write("upsert", _rows([1, 2], ["a", "b"])) == (0, 2)
    assert pk.write("upsert", _rows([1], ["a2"])) == (2, 4)
    assert pk.write("delete", pa.table({"id": pa.array([2], pa.int64())})) == (4, 5)
    assert _log(pk) == [("+I", 1, "a"), ("+I", 2, "b"), ("-U", 1, "a"), ("+U", 1, "a2"),
                        ("-D", 2, "b")]
    assert _state(pk) == [(1, "a2")]


def test_delete_of_a_missing_key_writes_nothing(pk):
    pk.write("upsert", _rows([1], ["a"]))
    assert pk.write("delete", pa.table({"id": pa.array([42, 43], pa.int64())})) == (1, 1)
    assert pk.high_watermark == 1
    # A delete batch may carry the whole row; only the key is used.
    assert pk.write("delete", _rows([1, 1], ["zzz", "zzz"])) == (1, 2)
    assert _log(pk, 1) == [("-D", 1, "a")]
    assert _state(pk) == []


def test_repeated_key_in_one_batch_applies_in_order(pk):
    pk.write("upsert", _rows([5, 5, 6, 5], ["x", "y", "p", "z"]))
    assert _log(pk) == [("+I", 5, "x"), ("-U", 5, "x"), ("+U", 5, "y"), ("+I", 6, "p"),
                        ("-U", 5, "y"), ("+U", 5, "z")]
    pk.write("delete", pa.table({"id": pa.array([6, 6], pa.int64())}))
    assert _log(pk, 6) == [("-D", 6, "p")]
    assert _state(pk) == [(5, "z")]


def test_changelog_rows_keep_all_columns_and_one_commit_timestamp(tmp_path):
    clock = FakeClock()
    b = Bucket(_table(True), 0, tmp_path, clock=clock)
    b.write("upsert", _rows([1], ["a"], [10]))
    clock.advance(5000)
    b.write("upsert", _rows([1], ["b"], [20]))
    t = bytes_to_table(b.fetch(0, None, 1 << 20, 0, None).records)
    assert t.column("score").to_pylist() == [10, 10, 20]
    assert t.column("_commit_timestamp").to_pylist() == [1_700_000_000_000,
                                                         1_700_000_005_000, 1_700_000_005_000]
    assert b.offset_for("timestamp", 1_700_000_001_000) == 1
    assert b.offset_for("timestamp", 1_800_000_000_000) == 3
    assert (b.offset_for("earliest"), b.offset_for("latest")) == (0, 3)
    b.close()


def test_schema_validation_names_the_column(pk, logt):
    with pytest.raises(InvalidRequest, match="lacks column.*score"):
        pk.write("upsert", pa.table({"id": pa.array([1], pa.int64()), "name": ["a"]}))
    with pytest.raises(InvalidRequest, match="unknown column.*bogus"):
        logt.write("append", _rows([1], ["a"]).append_column("bogus", pa.array([1])))
    with pytest.raises(InvalidRequest, match="'score'.*does not convert"):
        logt.write("append", pa.table({"id": pa.array([1], pa.int64()), "name": ["a"],
                                       "score": pa.array([2**40], pa.int64())}))
    with pytest.raises(InvalidRequest, match="primary key column 'id'"):
        pk.write("upsert", pa.table({"id": pa.array([None], pa.int64()), "name": ["a"],
                                     "score": pa.array([1], pa.int32())}))
    with pytest.raises(InvalidRequest, match="lacks primary key column"):
        pk.write("delete", pa.table({"name": ["a"]}))
    assert pk.high_watermark == 0 and logt.high_watermark == 0


def test_lossless_casts_and_column_order_are_accepted(logt):
    data = pa.table({"score": pa.array([7], pa.int64()), "name": ["a"],
                     "id": pa.array([3], pa.int32())})
    assert logt.write("append", data) == (0, 1)
    t = bytes_to_table(logt.fetch(0, None, 1 << 20, 0, None).records)
    assert t.schema.names[:3] == ["id", "name", "score"] and t.column("score").type == pa.int32()


def test_ops_must_match_the_table_kind(pk, logt):
    with pytest.raises(InvalidRequest, match="append"):
        pk.write("append", _rows([1], ["a"]))
    with pytest.raises(NonPrimaryKeyTable):
        logt.write("upsert", _rows([1], ["a"]))
    with pytest.raises(InvalidRequest, match="unknown op"):
        logt.write("merge", _rows([1], ["a"]))
    with pytest.raises(NonPrimaryKeyTable):
        logt.open_live_view()


def test_kv_state_is_replayed_from_the_changelog_after_a_crash(tmp_path):
    b = Bucket(_table(True), 0, tmp_path)
    b.write("upsert", _rows([1, 2, 3], ["a", "b", "c"]))
    # Simulate a crash after the changelog fsync but before the KV write of the next batch.
    changes = with_change_columns(_rows([1, 2], ["a", "b"]), pa.array(["-U", "-D"]), 1)
    changes = pa.concat_tables([changes, with_change_columns(_rows([1], ["a9"]), "+U", 1)])
    b.changelog.append(changes.take([0, 2, 1]), 1)
    b.changelog.close()
    b.kv.close()
    b2 = Bucket(_table(True), 0, tmp_path)
    assert b2.kv.applied_offset() == 6
    assert _state(b2) == [(1, "a9"), (3, "c")]
    b2.write("upsert", _rows([3], ["c2"]))
    assert _log(b2, 6) == [("-U", 3, "c"), ("+U", 3, "c2")]
    b2.close()


def test_state_survives_a_clean_reopen(tmp_path):
    b = Bucket(_table(True), 0, tmp_path)
    b.write("upsert", _rows(list(range(100)), [str(i) for i in range(100)]))
    b.write("delete", pa.table({"id": pa.array(range(0, 100, 2), pa.int64())}))
    b.close()
    b = Bucket(_table(True), 0, tmp_path)
    assert [k for k, _ in _state(b)] == list(range(1, 100, 2))
    assert b.high_watermark == 150
    b.close()


def test_live_view_is_point_in_time(pk):
    pk.write("upsert", _rows([1, 2], ["a", "b"]))
    view = pk.open_live_view()
    pk.write("upsert", _rows([1, 3], ["changed", "new"]))
    pk.write("delete", pa.table({"id": pa.array([2], pa.int64())}))
    assert view.log_offset == 2 and view.row_count() == 2
    rows = [r for b in view.iter_batches(["name"], 10) for r in b.column("name").to_pylist()]
    assert rows == ["a", "b"]
    assert view.iter_batches(["name"], 10).__next__().schema.names == ["name"]
    view.close()
    assert _state(pk) == [(1, "changed"), (3, "new")]


def test_fetch_range_projection_and_errors(logt):
    logt.write("append", _rows([1, 2, 3], ["a", "b", "c"]))
    r = logt.fetch(1, 2, 1 << 20, 0, ["name"])
    t = bytes_to_table(r.records)
    assert t.schema.names == ["name", "_change_type", "_commit_timestamp"]
    assert t.column("name").to_pylist() == ["b"]
    assert (r.base_offset, r.next_offset, r.high_watermark, r.log_start_offset) == \
        (1, 2, 3, 0)
    empty = logt.fetch(3, None, 1 << 20, 0, None)
    assert empty.records is None and empty.next_offset == 3
    with pytest.raises(LogOffsetOutOfRange, match="past the end"):
        logt.fetch(4, None, 100, 0, None)
    with pytest.raises(InvalidColumnProjection, match="nope"):
        logt.fetch(0, None, 100, 0, ["nope"])


def test_fetch_below_log_start_names_table_bucket_and_offsets(tmp_path):
    clock = FakeClock()
    b = Bucket(_table(False, {"table.log.ttl": "1s"}), 3, tmp_path, segment_bytes=1, clock=clock)
    b.write("append", _rows([1], ["a"]))
    b.write("append", _rows([2], ["b"]))
    clock.advance(10_000)
    assert b.apply_retention(clock()) == 1
    with pytest.raises(LogOffsetOutOfRange) as e:
        b.fetch(0, None, 100, 0, None)
    assert "db.t" in str(e.value) and "bucket 3" in str(e.value)
    assert "offset 0" in str(e.value) and "earliest retained offset 1" in str(e.value)
    assert b.offset_for("earliest") == 1
    b.close()


def test_long_poll_wakes_on_append(logt):
    got = {}

    def fetch():
        got["r"] = logt.fetch(0, None, 1 << 20, 10_000, None)

    t = threading.Thread(target=fetch)
    start = time.monotonic()
    t.start()
    time.sleep(0.2)
    logt.write("append", _rows([9], ["z"]))
    t.join(5)
    assert not t.is_alive() and time.monotonic() - start < 3
    assert bytes_to_table(got["r"].records).column("id").to_pylist() == [9]
    # With nothing arriving the wait ends at max_wait_ms.
    start = time.monotonic()
    assert logt.fetch(1, None, 100, 150, None).records is None
    assert 0.1 < time.monotonic() - start < 2


def test_pk_rows_must_belong_to_the_bucket(tmp_path):
    from fluss_spark.protocol.rows import split_by_bucket
    rec = TableRecord(table_id=7, name="db.t", schema=serialize_schema(SCHEMA), primary_key=["id"],
                      bucket_key=["id"], num_buckets=4, properties={})
    rows = _rows(list(range(40)), [str(i) for i in range(40)])
    parts = split_by_bucket(rows, ["id"], 4)
    b = Bucket(rec, 2, tmp_path)
    assert b.write("upsert", parts[2]) == (0, parts[2].num_rows)
    with pytest.raises(InvalidRequest, match="belongs to bucket 1, not 2"):
        b.write("upsert", parts[1])
    assert b.high_watermark == parts[2].num_rows
    b.close()


def test_upsert_mixing_new_and_existing_keys(pk):
    pk.write("upsert", _rows([1, 2], ["a", "b"]))
    pk.write("upsert", _rows([3, 1, 4, 2], ["c", "a2", "d", "b2"]))
    assert _log(pk, 2) == [("+I", 3, "c"), ("-U", 1, "a"), ("+U", 1, "a2"), ("+I", 4, "d"),
                           ("-U", 2, "b"), ("+U", 2, "b2")]
    assert _state(pk) == [(1, "a2"), (2, "b2"), (3, "c"), (4, "d")]


def test_random_writes_match_a_dict_model(tmp_path):
    """Changelog and state agree with a plain dict for random upsert/delete batches, and the
    changelog replayed from scratch rebuilds the same state."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    batch = st.tuples(st.sampled_from(["upsert", "delete"]),
                      st.lists(st.tuples(st.integers(0, 6), st.text("xyz", max_size=3)),
                               min_size=1, max_size=6))
    counter = iter(range(10**6))

    @settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.lists(batch, min_size=1, max_size=6))
    def run(batches):
        b = Bucket(_table(True), 0, tmp_path / str(next(counter)))
        model: dict[int, str] = {}
        expected: list[tuple] = []
        try:
            for op, rows in batches:
                ids, names = [r[0] for r in rows], [r[1] for r in rows]
                for k, v in rows:
                    old = model.get(k)
                    if op == "upsert":
                        expected += [("+I", k, v)] if old is None else [("-U", k, old),
                                                                        ("+U", k, v)]
                        model[k] = v
                    elif old is not None:
                        expected.append(("-D", k, old))
                        del model[k]
                b.write(op, _rows(ids, names))
            assert _log(b) == expected
            assert _state(b) == sorted(model.items())
            # Replaying the whole changelog into a fresh KV store gives the same state.
            from fluss_spark.protocol.rows import encode_key
            b.kv.write({encode_key([k]): None for k, _ in _state(b)}, 0)
            assert _state(b) == []
            b.changelog.close()
            b.kv.close()
            b = Bucket(_table(True), 0, b.dir)
            assert _state(b) == sorted(model.items())
        finally:
            b.close()

    run()


def test_pk_table_with_decimal_date_and_timestamp_columns(tmp_path):
    import datetime
    import decimal
    schema = pa.schema([("k", pa.string()), ("d", pa.decimal128(10, 2)), ("day", pa.date32()),
                        ("ts", pa.timestamp("us", tz="UTC")), ("b", pa.binary())])
    rec = TableRecord(3, "db.types", serialize_schema(schema), ["k", "day"], ["k", "day"], 1, {})
    b = Bucket(rec, 0, tmp_path)
    day = datetime.date(2024, 2, 29)
    ts = datetime.datetime(2024, 1, 1, 12, 30, tzinfo=datetime.timezone.utc)
    row = pa.table({"k": ["x"], "d": pa.array([decimal.Decimal("12.34")], pa.decimal128(10, 2)),
                    "day": pa.array([day], pa.date32()),
                    "ts": pa.array([ts], pa.timestamp("us", tz="UTC")), "b": [b"\x00\x01"]})
    b.write("upsert", row)
    b.write("upsert", row.set_column(1, "d", pa.array([decimal.Decimal("1.50")],
                                                     pa.decimal128(10, 2))))
    t = bytes_to_table(b.fetch(0, None, 1 << 20, 0, None).records)
    assert t.column("_change_type").to_pylist() == ["+I", "-U", "+U"]
    assert t.column("d").to_pylist() == [decimal.Decimal("12.34"), decimal.Decimal("12.34"),
                                         decimal.Decimal("1.50")]
    with b.open_live_view() as view:
        state = pa.Table.from_batches(list(view.iter_batches(None, 10)))
    assert state.schema == schema
    assert state.to_pylist() == [{"k": "x", "d": decimal.Decimal("1.50"), "day": day, "ts": ts,
                                  "b": b"\x00\x01"}]
    b.close()
