"""Layout v1 KV snapshot znodes, as releases before the snapshot index wrote them, for tests
and benches of the upgrade."""

from __future__ import annotations

from typing import Iterable

from fluss_spark.metadata import layout
from fluss_spark.metadata.layout import AssignmentRecord, SnapshotRecord, TableRecord

__all__ = ["create_nodes", "create_pk_tables", "write_v1_snapshots"]


def create_pk_tables(store, tables: int, buckets: int) -> None:
    """Tables ``db.t1`` .. ``db.t<tables>`` (ids 1..tables, PK ``id``, ``buckets`` buckets on
    tablet 1) written straight into ZooKeeper, as a cluster of an older release holds them."""
    from fluss_spark.protocol.arrow_ipc import serialize_schema
    from fluss_spark.protocol.types import parse_schema
    schema = serialize_schema(parse_schema("id BIGINT NOT NULL, v STRING"))
    for t in range(1, tables + 1):
        store.create_table(TableRecord(t, f"db.t{t}", schema, ["id"], ["id"], buckets),
                           AssignmentRecord([1] * buckets))
    store.zk.ensure_path(layout.TABLE_ID_COUNTER)
    store.zk.set(layout.TABLE_ID_COUNTER, layout.encode_int(tables))


def create_nodes(zk, nodes: list[tuple[str, bytes]], batch: int = 400,
                 max_bytes: int = 700_000) -> None:
    """Create ``(path, data)`` nodes in order, at most ``batch`` and ``max_bytes`` per
    ZooKeeper multi (a request over ~1 MB makes ZooKeeper drop the connection)."""
    i = 0
    while i < len(nodes):
        tx, size, n = zk.transaction(), 0, 0
        while i < len(nodes) and n < batch and (n == 0 or size + len(nodes[i][1]) <= max_bytes):
            tx.create(*nodes[i])
            size, n, i = size + len(nodes[i][1]), n + 1, i + 1
        bad = [r for r in tx.commit() if isinstance(r, Exception)]
        if bad:
            raise RuntimeError(f"creating {n} znodes from {nodes[i - n][0]} failed: {bad[0]!r}")


def write_v1_snapshots(zk, records: Iterable[SnapshotRecord]) -> None:
    """One znode per snapshot under ``/fluss/snapshots/<table_id>/<bucket>``, with the table
    and bucket nodes, as a layout v1 coordinator registered them."""
    zk.ensure_path(layout.SNAPSHOTS)
    nodes: list[tuple[str, bytes]] = []
    buckets: dict[int, set[int]] = {}       # the bucket nodes of each table seen, made or found
    for r in records:
        if r.table_id not in buckets:
            path = layout.snapshots_path(r.table_id)
            if zk.exists(path):
                buckets[r.table_id] = {int(b) for b in zk.get_children(path)}
            else:
                buckets[r.table_id] = set()
                nodes.append((path, b""))
        if r.bucket not in buckets[r.table_id]:
            buckets[r.table_id].add(r.bucket)
            nodes.append((layout.snapshots_path(r.table_id, r.bucket), b""))
        nodes.append((layout.snapshot_path(r.table_id, r.bucket, r.snapshot_id), r.encode()))
    create_nodes(zk, nodes)
