"""TableWriter: data conversion to the table schema, bucketing, chunking (fake connection)."""

from __future__ import annotations

import decimal
import threading
from concurrent.futures import ThreadPoolExecutor

import pyarrow as pa
import pytest
from hypothesis import given, settings, strategies as st

from fluss_spark.client import TableInfo
from fluss_spark.client.embedded.writer import TableWriter, chunks, to_arrow
from fluss_spark.errors import ConfigError, NonPrimaryKeyTable, PartitionNotExist, RecordTooLarge
from fluss_spark.protocol.messages import PartitionInfo
from fluss_spark.protocol.arrow_ipc import bytes_to_table
from fluss_spark.protocol.rows import bucket_of, encode_key

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("name", pa.string()),
                    ("amount", pa.float64())])


class FakeConn:
    """Records PRODUCE calls and answers with offsets counted per bucket."""

    def __init__(self, fail_bucket=None):
        self.calls = []
        self.next = {}
        self.lock = threading.Lock()
        self.pool = ThreadPoolExecutor(4)
        self.fail_bucket = fail_bucket

    def executor(self):
        return self.pool

    def call_bucket(self, table, bucket, request, partition_id=None):
        body = request.to_wire()
        if bucket == self.fail_bucket:
            raise RecordTooLarge(f"bucket {bucket} refuses")
        rows = bytes_to_table(body["records"])
        with self.lock:
            self.calls.append((bucket, body["op"], rows))
            base = self.next.get(bucket, 0)
            self.next[bucket] = base + rows.num_rows
        return request.decode_response({"base_offset": base, "end_offset": base + rows.num_rows})


def info(pk=("id",), buckets=3, bucket_key=None):
    return TableInfo(table_id=1, name="db.t", schema=SCHEMA, primary_key=tuple(pk),
                     bucket_key=tuple(pk if bucket_key is None else bucket_key),
                     num_buckets=buckets)


def test_dicts_tuples_and_arrow_convert_to_the_same_table():
    expected = pa.table({"id": [1, 2], "name": ["a", None], "amount": [1.5, 2.0]}, schema=SCHEMA)
    assert to_arrow([{"id": 1, "name": "a", "amount": 1.5}, {"id": 2, "amount": 2}], SCHEMA) \
        .equals(expected)
    assert to_arrow([(1, "a", 1.5), (2, None, 2.0)], SCHEMA).equals(expected)
    reordered = pa.table({"amount": [1.5, 2.0], "name": ["a", None],
                          "id": pa.array([1, 2], pa.int32())})
    assert to_arrow(reordered, SCHEMA).equals(expected)
    assert to_arrow(reordered.to_batches()[0], SCHEMA).equals(expected)


def test_missing_column_is_named():
    with pytest.raises(ConfigError, match="missing column.*amount"):
        to_arrow(pa.table({"id": [1], "name": ["a"]}), SCHEMA)


def test_extra_column_is_named():
    with pytest.raises(ConfigError, match="unknown column.*colour"):
        to_arrow([{"id": 1, "name": "a", "amount": 1.0, "colour": "red"}], SCHEMA)


def test_mistyped_column_is_named():
    with pytest.raises(ConfigError, match="column 'amount'"):
        to_arrow(pa.table({"id": [1], "name": ["a"], "amount": ["lots"]}), SCHEMA)
    with pytest.raises(ConfigError, match="column 'id'"):
        to_arrow([("x", "a", 1.0)], SCHEMA)


def test_tuple_of_wrong_length_is_refused():
    with pytest.raises(ConfigError, match="row 1 has 2 values"):
        to_arrow([(1, "a", 1.0), (2, "b")], SCHEMA)


def test_lossy_cast_is_refused():
    with pytest.raises(ConfigError, match="column 'id'"):
        to_arrow(pa.table({"id": [1.5], "name": ["a"], "amount": [1.0]}), SCHEMA)


def test_unsupported_input_type():
    with pytest.raises(ConfigError, match="expected a pyarrow Table"):
        to_arrow("id,name", SCHEMA)
    with pytest.raises(ConfigError, match="all dicts or all tuples"):
        to_arrow([{"id": 1}, (1, "a", 2.0)], SCHEMA)


def test_decimal_and_timestamp_values_convert():
    schema = pa.schema([("d", pa.decimal128(10, 2)), ("ts", pa.timestamp("us", tz="UTC"))])
    t = to_arrow([{"d": decimal.Decimal("1.25"), "ts": 1_700_000_000_000_000}], schema)
    assert t.column("d")[0].as_py() == decimal.Decimal("1.25")
    assert t.schema == schema


def test_upsert_splits_rows_by_key_bucket():
    conn = FakeConn()
    w = TableWriter(conn, info())
    rows = [{"id": i, "name": f"n{i}", "amount": float(i)} for i in range(30)]
    result = w.upsert(rows)
    assert {b for b, _, _ in conn.calls} == set(result)
    for bucket, op, t in conn.calls:
        assert op == "upsert"
        assert all(bucket_of(encode_key([i]), 3) == bucket for i in t.column("id").to_pylist())
    assert sum(t.num_rows for _, _, t in conn.calls) == 30
    assert all(end - base == conn.next[b] for b, (base, end) in result.items())


def test_upsert_refuses_null_keys():
    with pytest.raises(ConfigError, match="'id' must not be null"):
        TableWriter(FakeConn(), info()).upsert([{"id": None, "name": "a", "amount": 1.0}])


def test_delete_accepts_key_columns_only_or_full_rows():
    conn = FakeConn()
    w = TableWriter(conn, info(buckets=1))
    w.delete([{"id": 1}])
    w.delete([(2,)])
    w.delete([{"id": 3, "name": "x", "amount": 1.0}])
    assert [c[2].schema.names for c in conn.calls] == [["id"], ["id"], ["id", "name", "amount"]]
    assert [c[1] for c in conn.calls] == ["delete"] * 3


def test_append_on_pk_table_and_upsert_on_log_table_are_refused():
    with pytest.raises(ConfigError, match="has a primary key"):
        TableWriter(FakeConn(), info()).append([(1, "a", 1.0)])
    with pytest.raises(NonPrimaryKeyTable, match="no primary key"):
        TableWriter(FakeConn(), info(pk=())).upsert([(1, "a", 1.0)])


def test_log_table_without_bucket_key_is_sticky_per_call_and_rotates():
    conn = FakeConn()
    w = TableWriter(conn, info(pk=(), buckets=3))
    for _ in range(6):
        w.append([(i, "a", 1.0) for i in range(5)])
    buckets = [b for b, _, _ in conn.calls]
    assert all(t.num_rows == 5 for _, _, t in conn.calls)   # whole batch to one bucket
    assert sorted(buckets) == [0, 0, 1, 1, 2, 2]
    assert all(buckets[i] != buckets[i + 1] for i in range(5))


def test_log_table_with_bucket_key_splits_by_key():
    conn = FakeConn()
    TableWriter(conn, info(pk=(), buckets=2, bucket_key=("name",))).append(
        [(i, f"k{i % 4}", 1.0) for i in range(40)])
    for bucket, _, t in conn.calls:
        assert {bucket_of(encode_key([n]), 2) for n in t.column("name").to_pylist()} == {bucket}


def test_empty_write_sends_nothing():
    conn = FakeConn()
    assert TableWriter(conn, info(pk=())).append([]) == {}
    assert TableWriter(conn, info()).upsert(SCHEMA.empty_table()) == {}
    assert conn.calls == []


def test_large_batches_are_chunked_and_offsets_span_all_chunks():
    table = pa.table({"id": list(range(1000)), "name": ["x" * 100] * 1000,
                      "amount": [1.0] * 1000}, schema=SCHEMA)
    parts = chunks(table, max_bytes=20_000)
    assert len(parts) > 3 and sum(p.num_rows for p in parts) == 1000
    assert pa.concat_tables(parts).equals(table)
    assert all(p.nbytes <= 25_000 for p in parts)
    conn = FakeConn()
    result = TableWriter(conn, info(buckets=1), max_request_bytes=20_000).upsert(table)
    assert len(conn.calls) > 3
    assert result == {0: (0, 1000)}


def test_narrow_tables_are_chunked_by_rows_too():
    # A boolean column is 1 bit a row: 10 million rows fit 8 MB, but a request carries at most
    # MAX_REQUEST_ROWS (4 million), within the servers' rpc.arrow.max-request-rows.
    table = pa.table({"flag": pa.array([False] * 10_000_000)})
    parts = chunks(table)
    assert [p.num_rows for p in parts] == [4_000_000, 4_000_000, 2_000_000]
    assert [p.num_rows for p in chunks(pa.table({"n": pa.nulls(5)}), max_rows=2)] == [2, 2, 1]


def test_a_failing_bucket_fails_the_call_after_the_others_finish():
    conn = FakeConn(fail_bucket=1)
    with pytest.raises(RecordTooLarge, match="bucket 1"):
        TableWriter(conn, info()).upsert([(i, "a", 1.0) for i in range(30)])
    assert {b for b, _, _ in conn.calls} == {0, 2}


@settings(max_examples=40, deadline=None)
@given(ids=st.lists(st.integers(-2**40, 2**40), max_size=60, unique=True),
       buckets=st.integers(1, 5))
def test_upsert_partitions_rows_exactly_once_into_their_key_bucket(ids, buckets):
    conn = FakeConn()
    result = TableWriter(conn, info(buckets=buckets)).upsert([(i, str(i), 0.5) for i in ids])
    sent = [(b, r) for b, _, t in conn.calls for r in t.to_pylist()]
    assert sorted(r["id"] for _, r in sent) == sorted(ids)
    assert all(bucket_of(encode_key([r["id"]]), buckets) == b for b, r in sent)
    assert all(r["name"] == str(r["id"]) for _, r in sent)
    assert sum(end - base for base, end in result.values()) == len(ids)


class PartitionedConn(FakeConn):
    """A FakeConn whose table is partitioned by ``name``; CREATE_PARTITION adds one."""

    def __init__(self, names):
        super().__init__()
        self.ids = {n: 10 + i for i, n in enumerate(names)}
        self.created, self.partition_ids, self.written = [], [], []

    def info(self):
        return TableInfo(table_id=1, name="db.t", schema=SCHEMA, primary_key=("id", "name"),
                         bucket_key=("id",), num_buckets=2, partition_keys=("name",),
                         partitions=tuple(PartitionInfo(pid, n) for n, pid in self.ids.items()))

    def refresh_table(self, name):
        return self.info()

    def admin(self):
        return self

    def create_partition(self, table, spec, ignore_if_exists=False):
        self.created.append((table, spec))
        self.ids[spec.split("=")[1]] = 10 + len(self.ids)

    def call_bucket(self, table, bucket, request, partition_id=None):
        assert request.partition_id == partition_id
        rows = bytes_to_table(request.to_wire()["records"])
        with self.lock:
            self.partition_ids.append((partition_id, bucket))
            self.written.append((partition_id, bucket, rows))
        return super().call_bucket(table, bucket, request, partition_id)


def test_rows_go_to_their_partition_then_to_a_bucket_by_the_bucket_key():
    conn = PartitionedConn(["a", "b"])
    rows = [(i, "ab"[i % 2], float(i)) for i in range(20)]
    spans = TableWriter(conn, conn.info()).upsert(rows)
    assert sorted({p for p, _ in conn.partition_ids}) == [10, 11]
    written = [(b, r) for b, _, t in conn.calls for r in t.to_pylist()]
    assert sorted(r["id"] for _, r in written) == list(range(20))
    for pid, bucket, t in conn.written:
        assert set(t.column("name").to_pylist()) == {"ab"[pid - 10]}
        assert {bucket_of(encode_key([r["id"]]), 2) for r in t.to_pylist()} == {bucket}
    assert {p for p, _ in spans} == {"a", "b"}


def test_a_row_of_an_unknown_partition_fails_the_call_and_writes_nothing():
    conn = PartitionedConn(["a"])
    with pytest.raises(PartitionNotExist, match=r"^partition name=zz of table db.t does not "
                                                r"exist; create it with `fluss-spark partition "
                                                r"create db.t name=zz` before writing, or let "
                                                r"writers create partitions \(client.writer."
                                                r"dynamic-create-partition.enabled=true\)$"):
        TableWriter(conn, conn.info()).upsert([(1, "a", 1.0), (2, "zz", 2.0)])
    assert conn.calls == [] and conn.created == []
    with pytest.raises(ConfigError, match="partition value of 'name' 'a/b' is invalid"):
        TableWriter(conn, conn.info()).upsert([(1, "a/b", 1.0)])
    with pytest.raises(ConfigError, match="unknown client writer option"):
        TableWriter(conn, conn.info(), options={"client.writer.nope": "1"})


def test_dynamic_partition_creation_creates_the_missing_partition_then_writes():
    conn = PartitionedConn(["a"])
    writer = TableWriter(conn, conn.info(),
                         options={"client.writer.dynamic-create-partition.enabled": "true"})
    spans = writer.upsert([(1, "a", 1.0), (2, "zz", 2.0)])
    assert conn.created == [("db.t", "name=zz")]
    assert sorted(p for p, _ in spans) == ["a", "zz"]
    assert sorted(p for p, _ in conn.partition_ids) == [10, 11]


