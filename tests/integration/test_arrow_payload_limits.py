"""A compression bomb sent to a real tablet server process: a few KB of zstd-compressed Arrow
announcing 160 MB of int64 zeros is refused from its headers with RECORD_TOO_LARGE, nothing is
stored, the server's memory stays where it was, and it goes on serving the table."""

from __future__ import annotations

import time

import numpy as np
import pyarrow as pa
import pytest

from fluss_spark.errors import RecordTooLarge
from fluss_spark.protocol.messages import ApiVersionsRequest, ProduceRequest

MB = 1 << 20


def zstd_stream(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema,
                           options=pa.ipc.IpcWriteOptions(compression="zstd")) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def status_kb(pid: int, field: str) -> int:
    """VmHWM (peak RSS) or VmRSS of a process, in kB."""
    for line in open(f"/proc/{pid}/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


@pytest.fixture(scope="module")
def bomb() -> bytes:
    rows = 20_000_000
    data = zstd_stream(pa.table({"id": pa.array(np.zeros(rows, dtype=np.int64))}))
    assert len(data) < 64 * 1024          # 160 MB of int64 once decoded
    return data


def test_a_compression_bomb_is_refused_and_nothing_is_stored(cluster, conn, table_name, bomb):
    info = conn.admin().create_table(table_name, "id BIGINT")
    writer = conn.writer(info)
    writer.append(pa.table({"id": pa.array([1, 2, 3], pa.int64())}))
    before = conn.admin().list_offsets(info, [0])[0]
    tablet_id = info.assignment[0]
    pid = next(p["pid"] for p in cluster.processes()
               if p["role"] == "tablet" and p["id"] == tablet_id)
    hwm_before, rss_before = status_kb(pid, "VmHWM"), status_kb(pid, "VmRSS")

    rpc = conn.tablet_for(info.table_id, 0)
    with pytest.raises(RecordTooLarge) as e:
        rpc.call(ProduceRequest(table_id=info.table_id, bucket=0, op="append", records=bomb))
    msg = str(e.value)
    assert (f"PRODUCE to table {table_name} (id {info.table_id}) bucket 0 refused, nothing "
            "written") in msg
    assert "record batch 0 decodes to 160,000,000 bytes" in msg
    assert "server option rpc.arrow.max-decoded-batch-size" in msg

    hwm_grown = (status_kb(pid, "VmHWM") - hwm_before) / 1024
    rss_grown = (status_kb(pid, "VmRSS") - rss_before) / 1024
    print(f"tablet {pid}: VmHWM {hwm_before / 1024:.0f} MB (+{hwm_grown:.1f}), "
          f"VmRSS {rss_before / 1024:.0f} MB (+{rss_grown:.1f})")
    assert hwm_grown < 32 and rss_grown < 32, \
        f"the tablet grew by {hwm_grown:.0f} MB peak, {rss_grown:.0f} MB resident"

    # Nothing was stored; the table reads back fast and the server still answers.
    assert conn.admin().list_offsets(info, [0])[0] == before
    started = time.monotonic()
    rows = list(conn.log_scanner(info).read(0, 0, before))
    assert sum(b.num_rows for b in rows) == before == 3
    assert time.monotonic() - started < 5
    assert rpc.call(ApiVersionsRequest()).api_keys
    # A compressed request of normal size is still written.
    normal = zstd_stream(pa.table({"id": pa.array(np.arange(10_000, dtype=np.int64))}))
    resp = rpc.call(ProduceRequest(table_id=info.table_id, bucket=0, op="append",
                                   records=normal))
    assert (resp.base_offset, resp.end_offset) == (before, before + 10_000)


def test_rows_over_the_limit_are_refused_by_a_tablet(cluster, conn, table_name):
    info = conn.admin().create_table(table_name, "flag BOOLEAN")
    many = zstd_stream(pa.table({"flag": pa.array(np.zeros(9_000_000, dtype=np.bool_))}))
    rpc = conn.tablet_for(info.table_id, 0)
    with pytest.raises(RecordTooLarge, match=r"hold 9,000,000 rows, over the limit of "
                                             r"8,000,000 rows per payload \(server option "
                                             r"rpc\.arrow\.max-request-rows raises it\)"):
        rpc.call(ProduceRequest(table_id=info.table_id, bucket=0, op="append", records=many))
    assert conn.admin().list_offsets(info, [0])[0] == 0
