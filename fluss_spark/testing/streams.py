"""Helpers for tests of streaming reads: table content, changelog folding, offset logs, leases."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pyarrow as pa

from fluss_spark.client.cluster import APPEND, CHANGE_TYPE, INSERT, LOG_OFFSET, UPDATE_AFTER


def table_state(conn, table: str) -> dict:
    """The table's current content, read through live scans of every bucket: ``{id: v}``, or
    for a partitioned table ``{(id, partition name): v}`` over every partition."""
    info = conn.admin().get_table(table)
    state = {}
    parts = [(p.name, p.name) for p in info.partitions] if info.partitioned else [(None, None)]
    for part, name in parts:
        for b in range(info.num_buckets):
            for batch in conn.kv_scanner(table, part).scan(b, live=True):
                for row in batch.to_pylist():
                    state[row["id"] if name is None else (row["id"], name)] = row["v"]
    return state


def fold(df, key: tuple[str, ...] = ("id",)) -> dict:
    """Fold a changelog into the latest row per key (snapshot rows sit at their snapshot's
    log_offset - 1, before every changelog record of their bucket): ``{id: v}``, or with several
    key columns (``("id", "dt")``, a key never changes bucket) ``{(id, dt): v}``."""
    from pyspark.sql import functions as F
    from pyspark.sql.window import Window

    w = Window.partitionBy(*key).orderBy(F.col(LOG_OFFSET).desc(), F.col(CHANGE_TYPE).desc())
    last = (df.withColumn("_rn", F.row_number().over(w)).where("_rn = 1")
            .where(F.col(CHANGE_TYPE).isin(INSERT, UPDATE_AFTER, APPEND)))
    return {(r[key[0]] if len(key) == 1 else tuple(r[k] for k in key)): r["v"]
            for r in last.select(*key, "v").collect()}


def source_offsets(checkpoint: Path) -> list[dict]:
    """The fluss source offsets of every batch in the checkpoint's offset log."""
    out = []
    for f in sorted((checkpoint / "offsets").iterdir(), key=lambda p: int(p.name)
                    if p.name.isdigit() else -1):
        if f.name.isdigit():
            out.append(json.loads(f.read_text().strip().splitlines()[-1]))
    return out


class LeaseWatcher:
    """Polls the coordinator's lease list in the background while a query runs."""

    def __init__(self, admin, zookeeper_address: str | None = None, interval_s: float = 0.05):
        self.admin, self.interval_s = admin, interval_s
        self.seen: list[tuple[float, list]] = []
        self.in_zookeeper: set[str] = set()
        #: lease id -> the (table id, partition id) whose pins its ZooKeeper record held.
        self.partitions_in_zookeeper: dict[str, set[tuple[int, int]]] = {}
        self.store = None
        if zookeeper_address:
            from fluss_spark.metadata.store import MetadataStore
            self.store = MetadataStore(zookeeper_address).start()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(5)
        if self.store is not None:
            self.store.close()

    def _run(self):
        while not self._stop.is_set():
            self.seen.append((time.time(), self.admin.list_kv_snapshot_leases()))
            if self.store is not None:
                for lease_id in self.store.lease_ids():
                    self.in_zookeeper.add(lease_id)
                    record = self.store.load_lease(lease_id)
                    pinned = {(t, p) for t, parts in (record.partitions if record else {}).items()
                              for p, pins in parts.items() if pins}
                    self.partitions_in_zookeeper.setdefault(lease_id, set()).update(pinned)
            self._stop.wait(self.interval_s)

    def ids(self, table_id: int) -> set[str]:
        """Ids of the leases seen pinning ``table_id`` or one of its partitions (other tests'
        leases are not ours)."""
        return {lease.lease_id for _, leases in self.seen for lease in leases
                if table_id in lease.tables or table_id in lease.partitions}


def leases_on(admin, table: str) -> list:
    """The leases that pin some snapshot of ``table`` (of one of its partitions)."""
    table_id = admin.get_table(table).table_id
    return [x for x in admin.list_kv_snapshot_leases()
            if table_id in x.tables or table_id in x.partitions]


def create_pk(conn, table: str, rows: int, buckets: int = 2, **props):
    admin = conn.admin()
    admin.create_table(table, "id BIGINT NOT NULL, v STRING", primary_key=["id"],
                       num_buckets=buckets, properties=props or None)
    writer = conn.writer(table)
    step = 50_000
    for lo in range(0, rows, step):
        writer.upsert(pa.table({"id": pa.array(range(lo, min(rows, lo + step)), pa.int64()),
                                "v": [f"v{i}" for i in range(lo, min(rows, lo + step))]}))
    snaps = admin.trigger_kv_snapshot(table)
    return writer, snaps
