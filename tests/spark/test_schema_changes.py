"""A column added while a stream runs, on both engines: the stream goes on with its schema, a
restart from the same checkpoint shows the new column, and a batch read shows it too, null in
the rows written before."""

from __future__ import annotations

import uuid

import pyarrow as pa
import pytest

from fluss_spark.client.apache_fluss import ApacheFlussWireCluster
from fluss_spark.local.ports import wait_until
from fluss_spark.testing.apache_fluss import PyFluss
from fluss_spark.testing.streams import create_pk, source_offsets
from tests.spark.test_apache_fluss_pk import wait_for_snapshots

pytestmark = pytest.mark.spark


def _reader(spark, servers: str, table: str, stream: bool, **options):
    reader = (spark.readStream if stream else spark.read).format("fluss")
    reader = reader.option("bootstrap.servers", servers).option("table", table)
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return reader.load()


def _rows(df, *columns) -> list[tuple]:
    return sorted(tuple(r) for r in df.select(*columns).collect())


def _write_in_new_schema(wire, table: str, write) -> None:
    """``write()`` until the table's log end moves. An Apache Fluss 0.9.1 tablet server learns a
    new schema some ms after ALTER TABLE and refuses a write in it until then
    (SchemaNotExistException in its log), which pyfluss's flush does not report. A refused
    write moved no offset, so writing again duplicates nothing."""
    before = sum(wire.list_offsets(table).values())

    def landed() -> bool:
        write()
        return sum(wire.list_offsets(table).values()) > before
    wait_until(landed, 60, f"a write to {table} in its new schema")


def _run_available_now(df, out, ckpt) -> None:
    q = (df.writeStream.format("parquet").option("path", str(out))
         .option("checkpointLocation", str(ckpt)).trigger(availableNow=True).start())
    try:
        assert q.awaitTermination(300), "the AvailableNow query did not finish"
        assert q.exception() is None, q.exception()
    finally:
        q.stop()


def test_embedded_pk_table_gains_a_column_while_a_full_mode_stream_runs(
        spark, cluster, conn, table_name, tmp_path):
    servers = cluster.bootstrap_servers
    create_pk(conn, table_name, 20)             # its KV snapshots are of the first schema
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    q = (_reader(spark, servers, table_name, True).writeStream.format("parquet")
         .option("path", str(out)).option("checkpointLocation", str(ckpt)).start())
    try:
        q.processAllAvailable()
        info = conn.admin().add_columns(table_name, "note STRING")
        assert (info.schema_id, info.schema.names) == (2, ["id", "v", "note"])
        conn.writer(table_name).upsert(pa.table({
            "id": pa.array([0, 20, 21], pa.int64()), "v": ["u0", "v20", "v21"],
            "note": ["n0", "n20", None]}))
        q.processAllAvailable()
    finally:
        q.stop()
    got = spark.read.parquet(str(out))
    assert got.columns == ["id", "v", "_change_type", "_log_offset", "_commit_timestamp"]
    assert _rows(got, "id", "v", "_change_type") == sorted(
        [(i, f"v{i}", "+I") for i in range(22)] + [(0, "v0", "-U"), (0, "u0", "+U")])
    assert source_offsets(ckpt)[-1]["query"]["columns"][table_name] == [
        ["id", "int64"], ["v", "string"]]

    # A restart on the same checkpoint takes the new schema: the new column, null where unset.
    conn.writer(table_name).upsert(pa.table({"id": pa.array([22, 1], pa.int64()),
                                             "v": ["v22", "u1"], "note": ["n22", "n1"]}))
    _run_available_now(_reader(spark, servers, table_name, True), out, ckpt)
    got = spark.read.option("mergeSchema", "true").parquet(str(out))
    assert _rows(got, "id", "v", "note", "_change_type") == sorted(
        [(i, f"v{i}", None, "+I") for i in range(22)]
        + [(0, "v0", None, "-U"), (0, "u0", None, "+U")]   # read before the restart
        + [(1, "v1", None, "-U"), (1, "u1", "n1", "+U"), (22, "v22", "n22", "+I")])
    assert source_offsets(ckpt)[-1]["query"]["columns"][table_name][-1] == ["note", "string"]

    # A batch read: the snapshot of the first schema merged with the changelog of both.
    batch = _reader(spark, servers, table_name, False)
    assert _rows(batch, "id", "v", "note") == sorted(
        [(0, "u0", "n0"), (1, "u1", "n1")] + [(i, f"v{i}", None) for i in range(2, 20)]
        + [(20, "v20", "n20"), (21, "v21", None), (22, "v22", "n22")])


def test_apache_fluss_tables_gain_a_column(spark, apache_fluss, tmp_path):
    """A log table while a stream reads it; then a PK table whose KV snapshot holds values of
    both schema ids."""
    servers = apache_fluss.bootstrap_servers
    name = f"sp.t_{uuid.uuid4().hex[:10]}"
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    with PyFluss(servers) as fluss, ApacheFlussWireCluster.connect(servers) as wire:
        fluss.create_table(name, "id BIGINT, v STRING", buckets=1)
        fluss.append(name, [(i, f"v{i}") for i in range(5)])
        q = (_reader(spark, servers, name, True, **{"scan.startup.mode": "earliest"})
             .writeStream.format("parquet").option("path", str(out))
             .option("checkpointLocation", str(ckpt)).start())
        try:
            q.processAllAvailable()
            info = wire.add_columns(name, pa.schema([("note", pa.string())]))
            assert (info.schema_id, info.schema.names) == (2, ["id", "v", "note"])
            _write_in_new_schema(wire, name, lambda: fluss.append(
                name, [(5, "v5", "n5"), (6, "v6", None)]))
            q.processAllAvailable()
        finally:
            q.stop()
        got = spark.read.parquet(str(out))
        assert "note" not in got.columns
        assert _rows(got, "id", "v") == [(i, f"v{i}") for i in range(7)]

        fluss.append(name, [(7, "v7", "n7")])
        _run_available_now(_reader(spark, servers, name, True,
                                   **{"scan.startup.mode": "earliest"}), out, ckpt)
        got = spark.read.option("mergeSchema", "true").parquet(str(out))
        assert _rows(got, "id", "v", "note") == (
            [(i, f"v{i}", None) for i in range(7)] + [(7, "v7", "n7")])

        batch = _reader(spark, servers, name, False)
        assert _rows(batch, "id", "v", "note") == (
            [(i, f"v{i}", None) for i in range(5)]
            + [(5, "v5", "n5"), (6, "v6", None), (7, "v7", "n7")])

        pk = f"sp.pk_{uuid.uuid4().hex[:10]}"
        fluss.create_table(pk, "id BIGINT NOT NULL, v STRING", primary_key=["id"], buckets=1)
        fluss.upsert(pk, [(i, f"v{i}") for i in range(4)])
        wait_for_snapshots(wire, pk)
        wire.add_columns(pk, pa.schema([("note", pa.string())]))
        _write_in_new_schema(wire, pk, lambda: fluss.upsert(
            pk, [(0, "u0", "n0"), (4, "v4", "n4")]))
        assert wait_for_snapshots(wire, pk)[0].row_count == 5
        assert _rows(_reader(spark, servers, pk, False), "id", "v", "note") == (
            [(0, "u0", "n0")] + [(i, f"v{i}", None) for i in range(1, 4)] + [(4, "v4", "n4")])
