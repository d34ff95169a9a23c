"""Fakes for driving the connector without a cluster: an in-memory admin, clock and client."""

from __future__ import annotations

import pyarrow as pa
import pytest

from fluss_spark.errors import KvSnapshotNotExist, LogOffsetOutOfRange
from fluss_spark.testing.fake_admin import BASE_TIMESTAMP_MS, FakeAdmin, FakeClock


def project(schema: pa.Schema, columns: list | None) -> pa.Schema:
    return schema if columns is None else pa.schema([schema.field(c) for c in columns])


class _FakeKvScan:
    """An iterator of pages with ``close()``, like the client's KvScan."""

    def __init__(self, batches):
        self._it = iter(batches)
        self.closed = False

    def __iter__(self):
        return self

    def __next__(self):
        return next(self._it)

    def close(self):
        self.closed = True


class FakeConnection:
    """Client facade over a FakeAdmin: admin(), kv_scanner(), log_scanner(), close()."""

    def __init__(self, admin: FakeAdmin, page_rows: int = 3):
        self._admin = admin
        self.page_rows = page_rows
        self.closed = False
        self.projections: list[tuple[str, list | None]] = []   # (scan | log, columns asked for)

    def admin(self):
        return self._admin

    def close(self):
        self.closed = True

    def kv_scanner(self, table):
        conn = self

        class Kv:
            def scan(self, bucket, snapshot_id=None, live=False, projection=None, limit=None,
                     start_row=0, batch_size_bytes=0):
                t = conn._admin._table(table)
                if snapshot_id not in t.snapshots[bucket]:
                    def gone():
                        raise KvSnapshotNotExist(f"snapshot {snapshot_id}")
                        yield
                    return gone()
                conn.projections.append(("scan", projection))
                schema = project(t.info.schema, projection)
                rows = t.snapshots[bucket][snapshot_id][0]
                rows = rows[start_row: None if limit is None else start_row + limit]
                pages = [rows[i:i + conn.page_rows] for i in range(0, len(rows), conn.page_rows)]
                return _FakeKvScan([pa.RecordBatch.from_pylist(p, schema=schema) for p in pages])
        return Kv()

    def log_scanner(self, table, projection=None):
        conn = self
        conn.projections.append(("log", projection))

        class Log:
            def read(self, bucket, start, end):
                t = conn._admin._table(table)
                if start < t.log_start[bucket]:
                    raise LogOffsetOutOfRange(f"{start}")
                recs = t.log[bucket][start:end]
                schema = t.info.changelog_schema(projection)
                rows = [dict(row, _change_type=ct, _log_offset=start + i,
                             _commit_timestamp=BASE_TIMESTAMP_MS + start + i)
                        for i, (ct, row) in enumerate(recs)]
                if rows:
                    yield pa.RecordBatch.from_pylist(rows, schema=schema)
        return Log()


@pytest.fixture
def clock():
    return FakeClock()


@pytest.fixture
def admin(clock):
    return FakeAdmin(clock)


@pytest.fixture
def fake_connection():
    return FakeConnection
