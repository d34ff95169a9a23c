"""Apache Fluss table options that shape a primary-key table's changelog, read by the Spark source:
every ``table.merge-engine`` (first_row, versioned, aggregation), ``table.delete.behavior``
(ignore, disable) and ``table.changelog.image`` (WAL) that 0.9.1 accepts.

One table per option, written with pyfluss (inserts; then updates, stale versions, nulls and
deletes after a KV snapshot covers the inserts), all read by two queries over every table at
once: an ``earliest`` stream, whose records must equal what pyfluss reads from each bucket's
changelog (offset, change type and row), and a ``full`` stream (each table's snapshot, then its
changelog), whose fold must equal each key's row as the tablet server looks it up.
"""

from __future__ import annotations

import uuid
from collections import Counter
from contextlib import closing

import pytest

from fluss_spark.client.apache_fluss import ApacheFlussWireCluster
from fluss_spark.local.ports import wait_until
from fluss_spark.testing.apache_fluss import PyFluss

pytestmark = pytest.mark.spark

SCHEMA = "id BIGINT NOT NULL, ver BIGINT, v STRING"
KEYS = range(30)
OPTIONS = {
    "first_row": {"table.merge-engine": "first_row"},
    "versioned": {"table.merge-engine": "versioned",
                  "table.merge-engine.versioned.ver-column": "ver"},
    # No aggregate function named: every column keeps its last non-null value.
    "aggregation": {"table.merge-engine": "aggregation"},
    "delete_ignore": {"table.delete.behavior": "ignore"},
    "delete_disable": {"table.delete.behavior": "disable"},
    "wal_image": {"table.changelog.image": "WAL"},
}


def available_now(spark, servers: str, tables: list[str], mode: str, tmp_path) -> list[dict]:
    """Every row of one AvailableNow query over ``tables`` in ``mode``, flattened: its table's
    columns, ``_table`` and the metadata columns."""
    name = f"engines_{mode}"
    q = (spark.readStream.format("fluss").option("bootstrap.servers", servers)
         .option("tables", ",".join(tables)).option("scan.startup.mode", mode).load()
         .writeStream.format("memory").queryName(name)
         .option("checkpointLocation", str(tmp_path / mode)).trigger(availableNow=True).start())
    q.awaitTermination(180)
    assert q.exception() is None, q.exception()
    out = []
    for r in spark.table(name).collect():
        row = r.asDict(recursive=True)
        out.append({**row[row["_table"]], "_table": row["_table"],
                    "_change_type": row["_change_type"], "_log_offset": row["_log_offset"],
                    "_commit_timestamp": row["_commit_timestamp"]})
    return out


def test_every_changelog_shaping_option_reads_exactly(spark, apache_fluss, tmp_path):
    servers = apache_fluss.bootstrap_servers
    db = f"engines_{uuid.uuid4().hex[:8]}"
    tables = {kind: f"{db}.{kind}" for kind in OPTIONS}
    with PyFluss(servers) as fluss, closing(ApacheFlussWireCluster.connect(
            servers, request_timeout_s=30)) as wire:
        for kind, table in tables.items():
            fluss.create_table(table, SCHEMA, primary_key=["id"], buckets=2,
                               properties=OPTIONS[kind])
            fluss.upsert(table, [(i, 1, f"a{i}") for i in KEYS])
        for table in tables.values():     # a KV snapshot every few seconds on this cluster
            wait_until(lambda: all(s.log_offset > 0 for s in
                                   wire.latest_kv_snapshots(table).values())
                       and len(wire.latest_kv_snapshots(table)) == 2, 60,
                       f"the KV snapshots of {table}")
        # After the snapshots: new values, stale versions, nulls, deletes.
        for kind, table in tables.items():
            fluss.upsert(table, [(i, 2, f"b{i}") for i in range(10)]
                         + [(i, 0, "stale") for i in range(10, 15)]
                         + [(i, 3, None) for i in range(15, 20)])
            try:
                fluss.delete(table, [(i,) for i in range(20, 25)])
            except Exception:  # noqa: BLE001 - "disable": the server refuses them (checked below)
                assert kind == "delete_disable"
            fluss.upsert(table, [(100, 1, "new")])
        ends = {kind: wire.list_offsets(table) for kind, table in tables.items()}
        # Ignored writes take offsets without records: read until nothing more arrives.
        changelogs = {kind: fluss.read_log_ranges(table, {b: (0, e) for b, e in ends[kind].items()},
                                                  timeout_s=60, quiet_s=2.0)
                      for kind, table in tables.items()}
        state = {kind: {k: fluss.lookup(table, (k,)) for k in [*KEYS, 100]}
                 for kind, table in tables.items()}

    earliest = available_now(spark, servers, list(tables.values()), "earliest", tmp_path)
    full = available_now(spark, servers, list(tables.values()), "full", tmp_path)
    for kind, table in tables.items():
        # The changelog, record for record (a key lives in one bucket, so (offset, id) is unique).
        want = Counter((o, c, r["id"], r["ver"], r["v"])
                       for recs in changelogs[kind].values() for o, c, r in recs)
        got = Counter((r["_log_offset"], r["_change_type"], r["id"], r["ver"], r["v"])
                      for r in earliest if r["_table"] == table)
        assert got == want, (kind, sorted((got - want).elements())[:5],
                             sorted((want - got).elements())[:5])
        # Full mode folds to what the tablet server holds per key.
        rows = sorted((r for r in full if r["_table"] == table),
                      key=lambda r: (r["_log_offset"], r["_commit_timestamp"] is not None))
        folded: dict = {}
        for r in rows:
            if r["_change_type"] in ("+I", "+U"):
                folded[r["id"]] = (r["ver"], r["v"])
            elif r["_change_type"] == "-D":
                folded.pop(r["id"], None)
        want_state = {k: (row["ver"], row["v"]) for k, row in state[kind].items()
                      if row is not None}
        assert folded == want_state, kind
        kinds = set(want_kind for _, want_kind, *_ in want)
        # What each option does to the changelog, as Fluss documents it.
        if kind == "first_row":
            assert kinds == {"+I"} and want_state[0] == (1, "a0")
        elif kind == "versioned":
            assert want_state[0] == (2, "b0") and want_state[10] == (1, "a10")
        elif kind == "aggregation":
            assert want_state[15] == (3, "a15")       # a null keeps the last non-null value
        elif kind in ("delete_ignore", "delete_disable"):
            assert "-D" not in kinds and 20 in want_state
        elif kind == "wal_image":
            assert "-U" not in kinds and "-D" in kinds and 20 not in want_state
