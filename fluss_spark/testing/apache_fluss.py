"""Test data for a real Apache Fluss cluster, written and read with the official client ``pyfluss``.

pyfluss (``import fluss``) is asynchronous; every function here runs its calls to completion on a
private event loop, so tests call them like ordinary functions::

    create_pk_table(bootstrap, "db.orders", "id BIGINT, v STRING", primary_key=["id"], buckets=2)
    upsert(bootstrap, "db.orders", [(1, "a"), (2, "b")])
    delete(bootstrap, "db.orders", [(2,)])
    read_log(bootstrap, "db.orders")   # [("+I", {"id": 1, "v": "a"}), ...]

``PyFluss`` keeps one connection for many calls. Table names are ``database.table``; a missing
database is created. Table ``properties`` set per-table options such as ``table.log.ttl`` or
``table.log.tiered.local-segments`` (log retention); ``local_segment_starts`` and
``remote_segment_files`` show where a local cluster keeps a table's log segments.
"""

from __future__ import annotations

import asyncio
import time
from contextlib import closing
from pathlib import Path
from typing import Any, Iterable, Sequence

import pyarrow as pa

from fluss_spark.client.apache_fluss.cluster import NEW_TABLE_LEADERS_S, ApacheFlussWireCluster
from fluss_spark.client.apache_fluss.pyfluss_writer import until_answered
from fluss_spark.protocol.apache_fluss.errors import RETRIABLE

#: How often pyfluss's writer resends a batch that failed with a retriable error before its
#: flush fails. Its default (Fluss's, 2^31 - 1) resends at once, without a pause: a writer whose
#: leader went away was measured keeping a core of this process busy for good, even after it was
#: given up on (pyfluss has no way to stop it); after such writers, every later pyfluss write of
#: a CI test process went unanswered. The helpers resend themselves, after a pause, on a new
#: connection.
WRITER_RETRIES = "3"
#: The pause before a write that failed with a retriable error is sent again.
RESEND_PAUSE_S = 0.5

#: SQL type names of the schema strings this module accepts, as Arrow types (pyfluss maps Arrow
#: types to Fluss types).
SQL_TYPES: dict[str, pa.DataType] = {
    "BOOLEAN": pa.bool_(), "TINYINT": pa.int8(), "SMALLINT": pa.int16(), "INT": pa.int32(),
    "INTEGER": pa.int32(), "BIGINT": pa.int64(), "FLOAT": pa.float32(), "DOUBLE": pa.float64(),
    "STRING": pa.string(), "BYTES": pa.binary(), "DATE": pa.date32(),
    "TIMESTAMP": pa.timestamp("us"), "TIMESTAMP_LTZ": pa.timestamp("us", tz="UTC"),
}


def arrow_schema(schema) -> pa.Schema:
    """A ``pa.Schema`` from one, from ``[(name, arrow type), ...]`` or from ``"id BIGINT, v
    STRING"`` (types from ``SQL_TYPES``; ``NOT NULL`` after a type is accepted)."""
    if isinstance(schema, pa.Schema):
        return schema
    if isinstance(schema, str):
        fields = []
        for part in schema.split(","):
            words = part.split()
            if len(words) < 2:
                raise ValueError(f"schema column {part.strip()!r} is not 'name TYPE'")
            name, type_name, rest = words[0], words[1].upper(), " ".join(words[2:]).upper()
            if type_name not in SQL_TYPES:
                raise ValueError(f"unknown type {words[1]!r}; known: {', '.join(SQL_TYPES)}")
            fields.append(pa.field(name, SQL_TYPES[type_name], nullable=rest != "NOT NULL"))
        return pa.schema(fields)
    return pa.schema([pa.field(n, t) for n, t in schema])


def split_name(name: str) -> tuple[str, str]:
    db, sep, table = name.partition(".")
    if not sep or not db or not table or "." in table:
        raise ValueError(f"table name {name!r} is not database.table")
    return db, table


class PyFluss:
    """One pyfluss connection to ``bootstrap`` (``host:port``) with blocking helper methods.

    ``properties`` are client options; Fluss's Java names (``client.security.protocol``,
    ``client.security.sasl.username``, ... as ``ApacheFlussProcesses.client_properties`` gives
    them) are passed under pyfluss's names, which lack the ``client.`` prefix."""

    def __init__(self, bootstrap: str, properties: dict[str, str] | None = None):
        import fluss
        self._fluss = fluss
        self._bootstrap, self._properties = bootstrap, dict(properties or {})
        # pyfluss's calls expect a running event loop, so each method runs one coroutine here.
        self._loop = asyncio.new_event_loop()
        options = {k.removeprefix("client."): v for k, v in (properties or {}).items()}
        options.setdefault("writer.retries", WRITER_RETRIES)
        self._config = fluss.Config({"bootstrap.servers": bootstrap, **options})

        async def connect():
            return await fluss.FlussConnection.create(self._config)
        self.conn = self._run(connect())
        self.admin = self.conn.get_admin()

    def _run(self, coro):
        return self._loop.run_until_complete(coro)

    def close(self) -> None:
        if not self._loop.is_closed():
            self._run(self._close_connection())
            self._loop.close()

    async def _close_connection(self, wait_s: float = 10.0) -> None:
        # close() waits for unacknowledged writes, which after a write timeout may never come;
        # the connection is then left to the process's exit.
        try:
            await asyncio.wait_for(self.conn.close(), wait_s)
        except asyncio.TimeoutError:
            pass

    async def _reconnect(self) -> None:
        """A new connection in place of this one (a writer created on a connection that saw
        a leader go away may never be served; a new one is)."""
        await self._close_connection(wait_s=2.0)
        self.conn = await self._fluss.FlussConnection.create(self._config)
        self.admin = self.conn.get_admin()

    def __enter__(self) -> "PyFluss":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def path(self, name: str):
        return self._fluss.TablePath(*split_name(name))

    # -- metadata -------------------------------------------------------------------------------
    def server_nodes(self) -> list[tuple[str, int, str, int]]:
        """``(server_type, id, host, port)`` of every live server."""
        async def go():
            return [(n.server_type, n.id, n.host, n.port)
                    for n in await self.admin.get_server_nodes()]
        return self._run(go())

    def create_table(self, name: str, schema, *, primary_key: Sequence[str] = (),
                     buckets: int = 1, properties: dict[str, str] | None = None,
                     partition_keys: Sequence[str] = (), timeout_s: float = 60.0) -> int:
        """Create a log table (no ``primary_key``) or a primary-key table, partitioned by
        ``partition_keys`` if given; returns its table id once every bucket has a leader that
        answers (a write sent before may go unanswered; a partitioned table has none yet)."""
        f = self._fluss
        db, _ = split_name(name)
        fs = f.Schema(arrow_schema(schema), primary_keys=list(primary_key) or None)
        # pyfluss takes no partition_keys=None: an unpartitioned table leaves the argument out
        partitioned = {"partition_keys": list(partition_keys)} if partition_keys else {}
        desc = f.TableDescriptor(fs, bucket_count=buckets, properties=dict(properties or {}),
                                 **partitioned)

        async def go() -> int:
            await self.admin.create_database(db, ignore_if_exists=True)
            deadline = time.monotonic() + timeout_s
            while True:
                await self.admin.create_table(self.path(name), desc, False)
                table_id = (await self.admin.get_table_info(self.path(name))).table_id
                settle_s = min(NEW_TABLE_LEADERS_S, deadline - time.monotonic())
                if partition_keys:
                    # No buckets before its partitions: the coordinator is asked directly.
                    if self._coordinator_knows(table_id, settle_s):
                        return table_id
                else:
                    try:
                        await until_answered(lambda: self._latest_offsets(name), settle_s)
                        return table_id
                    except Exception:  # noqa: BLE001 - pyfluss raises one FlussError for all
                        pass
                if time.monotonic() >= deadline:
                    raise TimeoutError(f"the coordinator did not take in new table {name} in "
                                       f"{timeout_s:.0f} s, however often it was created")
                # A table the coordinator lost (as ApacheFlussWireCluster.create_table explains)
                # never gets leaders, nor do its partitions: it is new and empty, so it is
                # created again.
                await self.admin.drop_table(self.path(name), ignore_if_not_exists=True)
        return self._run(go())

    def _coordinator_knows(self, table_id: int, timeout_s: float) -> bool:
        """Whether the coordinator knows new table ``table_id`` within ``timeout_s``."""
        props = self._properties
        with closing(ApacheFlussWireCluster.connect(
                self._bootstrap, username=props.get("client.security.sasl.username"),
                password=props.get("client.security.sasl.password"))) as wire:
            return wire.coordinator_knows(table_id, timeout_s)

    def drop_table(self, name: str) -> None:
        async def go():
            await self.admin.drop_table(self.path(name), ignore_if_not_exists=True)
        self._run(go())

    def table_id(self, name: str) -> int:
        async def go() -> int:
            return (await self.admin.get_table_info(self.path(name))).table_id
        return self._run(go())

    def primary_key(self, name: str) -> list[str]:
        async def go() -> list[str]:
            return (await self.admin.get_table_info(self.path(name))).get_primary_keys()
        return self._run(go())

    def create_partition(self, name: str, spec: dict[str, str], ignore_if_exists: bool = False,
                         timeout_s: float = 60.0) -> None:
        """Create the partition ``spec``; returns once each of its buckets has a leader that
        answers (as ``create_table``: a write sent before may go unanswered)."""
        async def go():
            await self.admin.create_partition(self.path(name), spec, ignore_if_exists)
            info = await self.admin.get_table_info(self.path(name))
            partition = "$".join(spec[k] for k in info.get_partition_keys())
            buckets = list(range(info.num_buckets))
            await until_answered(lambda: self.admin.list_partition_offsets(
                self.path(name), partition, buckets, self._fluss.OffsetSpec.latest()), timeout_s)
        self._run(go())

    def drop_partition(self, name: str, spec: dict[str, str]) -> None:
        async def go():
            await self.admin.drop_partition(self.path(name), spec, False)
        self._run(go())

    def partitions(self, name: str) -> dict[str, int]:
        """``{partition name: partition id}`` of a partitioned table."""
        async def go():
            return {p.partition_name: p.partition_id
                    for p in await self.admin.list_partition_infos(self.path(name))}
        return self._run(go())

    async def _latest_offsets(self, name: str) -> dict:
        """``{bucket: log end offset}``; ``{(partition id, bucket): ...}`` of every partition
        of a partitioned table."""
        info = await self.admin.get_table_info(self.path(name))
        buckets, latest = list(range(info.num_buckets)), self._fluss.OffsetSpec.latest()
        if not info.is_partitioned():
            return await self.admin.list_offsets(self.path(name), buckets, latest)
        ends = {}
        for p in await self.admin.list_partition_infos(self.path(name)):
            for b, o in (await self.admin.list_partition_offsets(
                    self.path(name), p.partition_name, buckets, latest)).items():
                ends[(p.partition_id, b)] = o
        return ends

    def latest_offsets(self, name: str) -> dict:
        """``{bucket: log end offset}`` (``{(partition id, bucket): ...}`` if partitioned)."""
        return self._run(self._latest_offsets(name))

    # -- writes ---------------------------------------------------------------------------------
    def append(self, name: str, rows: Iterable, timeout_s: float = 60.0) -> None:
        """Append ``rows`` (dicts or tuples in schema order) to a log table; returns once the
        servers acknowledged them."""
        self._write(name, lambda t: t.new_append().create_writer(), "append", rows, timeout_s)

    def upsert(self, name: str, rows: Iterable, timeout_s: float = 60.0) -> None:
        """Insert or update ``rows`` of a primary-key table; returns once acknowledged."""
        self._write(name, lambda t: t.new_upsert().create_writer(), "upsert", rows, timeout_s)

    def delete(self, name: str, keys: Iterable, timeout_s: float = 60.0) -> None:
        """Delete the rows with these primary keys (dicts, or tuples in key order)."""
        self._write(name, lambda t: t.new_upsert().create_writer(), "delete", keys, timeout_s)

    def _write(self, name: str, writer_of, method: str, items: Iterable,
               timeout_s: float) -> None:
        """Send ``items`` with ``writer_of(table).<method>`` and wait for the acknowledgements;
        TimeoutError after ``timeout_s``.

        A write that failed with a retriable error (a leader gone, a connection refused) is sent
        again on a new connection, after a pause. Upserts and deletes leave the table the same
        when sent twice (its changelog gains the repeats); an append is sent again only while
        the table's log end offsets show none of it landed, else the error is raised."""
        items = [_row(item) for item in items]
        before: dict | None = None
        last: Exception | None = None

        async def attempt() -> None:
            nonlocal before
            if method == "append":
                now = await self._latest_offsets(name)
                if before is None:
                    before = now
                elif now != before:
                    raise RuntimeError(f"writing {name}: {last}; not sent again, as part of it "
                                       f"landed (log end offsets {before} -> {now})")
            writer = writer_of(await self.conn.get_table(self.path(name)))
            for item in items:
                getattr(writer, method)(item)
            await writer.flush()

        async def go() -> None:
            nonlocal last
            deadline = time.monotonic() + timeout_s
            while True:
                try:
                    await asyncio.wait_for(attempt(), max(deadline - time.monotonic(), 0.0))
                    return
                except asyncio.TimeoutError:
                    raise TimeoutError("the servers did not acknowledge the writes within "
                                       f"{timeout_s:.0f}s") from None
                except Exception as e:  # noqa: BLE001 - pyfluss raises one class for all
                    if getattr(e, "error_code", None) not in RETRIABLE:
                        raise
                    if time.monotonic() + RESEND_PAUSE_S >= deadline:
                        raise TimeoutError("the servers did not acknowledge the writes within "
                                           f"{timeout_s:.0f}s (last: {e})") from e
                    last = e
                    await asyncio.sleep(RESEND_PAUSE_S)
                    await self._reconnect()
        self._run(go())

    # -- reads ----------------------------------------------------------------------------------
    def lookup(self, name: str, key) -> dict[str, Any] | None:
        async def go():
            table = await self.conn.get_table(self.path(name))
            return await table.new_lookup().create_lookuper().lookup(_row(key))
        return self._run(go())

    def read_log(self, name: str, timeout_s: float = 30.0) -> list[tuple[str, dict[str, Any]]]:
        """Every change in the table's log from the start up to the end offsets it had when
        called, as ``(change type, row)`` in offset order per bucket: ``+A`` for a log table,
        ``+I``/``-U``/``+U``/``-D`` for a primary-key table."""
        return self._run(self._read_log(name, timeout_s))

    async def _read_log(self, name: str, timeout_s: float) -> list[tuple[str, dict[str, Any]]]:
        end = await self._latest_offsets(name)
        got = await self._read_ranges(name, {b: (None, o) for b, o in end.items()}, timeout_s)
        return [(kind, row) for b in sorted(got) for _, kind, row in got[b]]

    def read_log_ranges(self, name: str, ranges: dict[int, tuple[int | None, int]],
                        timeout_s: float = 60.0, quiet_s: float | None = None
                        ) -> dict[int, list[tuple[int, str, dict]]]:
        """The changes of offsets ``[start, end)`` of each bucket of ``ranges`` (``{bucket:
        (start, end)}``; start None: the earliest retained offset), as ``{bucket: [(offset,
        change type, row), ...]}`` in offset order; TimeoutError when a bucket's records up to
        ``end`` do not all arrive in time. ``quiet_s``: for a log whose last offsets hold no
        record (a merge engine that ignored a write), return once nothing more arrives for that
        long."""
        return self._run(self._read_ranges(name, ranges, timeout_s, quiet_s))

    async def _read_ranges(self, name: str, ranges: dict[Any, tuple[int | None, int]],
                           timeout_s: float, quiet_s: float | None = None
                           ) -> dict[Any, list[tuple[int, str, dict]]]:
        """As ``read_log_ranges``; keys ``(partition id, bucket)`` read a partitioned table."""
        got: dict[Any, list[tuple[int, str, dict[str, Any]]]] = {b: [] for b in ranges}
        todo = {b: (s or 0, e) for b, (s, e) in ranges.items() if e > (s or 0)}
        if not todo:
            return got
        table = await self.conn.get_table(self.path(name))
        scanner = await table.new_scan().create_log_scanner()
        starts = {b: self._fluss.EARLIEST_OFFSET if ranges[b][0] is None else ranges[b][0]
                  for b in todo}
        partitioned = isinstance(next(iter(todo)), tuple)
        if partitioned:
            scanner.subscribe_partition_buckets(starts)
        else:
            scanner.subscribe_buckets(starts)
        deadline = time.monotonic() + timeout_s
        last_record = time.monotonic()

        def reached(b: int) -> int:
            return got[b][-1][0] + 1 if got[b] else todo[b][0]
        while any(reached(b) < e for b, (_, e) in todo.items()):
            if quiet_s is not None and time.monotonic() - last_record > quiet_s:
                break
            if time.monotonic() > deadline:
                have = {b: reached(b) for b in todo}
                raise TimeoutError(f"reading {name}: reached offsets {have} of "
                                   f"{ {b: e for b, (_, e) in todo.items()} } within "
                                   f"{timeout_s:.0f}s")
            for bucket, records in (await scanner.poll(500)).items():
                b = (bucket.partition_id, bucket.bucket_id) if partitioned else bucket.bucket_id
                if b not in todo:
                    continue
                for r in records:
                    if todo[b][0] <= r.offset < todo[b][1]:
                        got[b].append((r.offset, r.change_type.short_string(), r.row))
                        last_record = time.monotonic()
        return got

    def rows(self, name: str, timeout_s: float = 30.0) -> list[dict[str, Any]]:
        """The rows of a log table, or the current rows of a primary-key table (its changelog
        applied), in log order."""
        changes = self.read_log(name, timeout_s)
        keys = self.primary_key(name)
        if not keys:
            return [row for _, row in changes]
        current: dict[tuple, dict[str, Any]] = {}
        for kind, row in changes:
            k = tuple(row[c] for c in keys)
            if kind in ("+I", "+U"):
                current[k] = row
            elif kind == "-D":
                current.pop(k, None)
        return list(current.values())


def _row(row) -> Any:
    return row if isinstance(row, dict) else list(row)


# -- one call, one connection ----------------------------------------------------------------------
def create_log_table(bootstrap: str, name: str, schema, buckets: int = 1,
                     properties: dict[str, str] | None = None) -> int:
    """Create a log table; returns its table id."""
    with PyFluss(bootstrap) as c:
        return c.create_table(name, schema, buckets=buckets, properties=properties)


def create_pk_table(bootstrap: str, name: str, schema, primary_key: Sequence[str],
                    buckets: int = 1, properties: dict[str, str] | None = None) -> int:
    """Create a primary-key table; returns its table id."""
    with PyFluss(bootstrap) as c:
        return c.create_table(name, schema, primary_key=primary_key, buckets=buckets,
                              properties=properties)


def append(bootstrap: str, name: str, rows: Iterable, timeout_s: float = 60.0) -> None:
    with PyFluss(bootstrap) as c:
        c.append(name, rows, timeout_s)


def upsert(bootstrap: str, name: str, rows: Iterable, timeout_s: float = 60.0) -> None:
    with PyFluss(bootstrap) as c:
        c.upsert(name, rows, timeout_s)


def delete(bootstrap: str, name: str, keys: Iterable, timeout_s: float = 60.0) -> None:
    with PyFluss(bootstrap) as c:
        c.delete(name, keys, timeout_s)


def read_log(bootstrap: str, name: str, timeout_s: float = 30.0) -> list[tuple[str, dict]]:
    with PyFluss(bootstrap) as c:
        return c.read_log(name, timeout_s)


def rows(bootstrap: str, name: str, timeout_s: float = 30.0) -> list[dict[str, Any]]:
    with PyFluss(bootstrap) as c:
        return c.rows(name, timeout_s)


def lookup(bootstrap: str, name: str, key) -> dict[str, Any] | None:
    with PyFluss(bootstrap) as c:
        return c.lookup(name, key)


def drop_table(bootstrap: str, name: str) -> None:
    with PyFluss(bootstrap) as c:
        c.drop_table(name)


def local_segment_starts(local: Any, name: str) -> list[int]:
    """The start offsets of table ``name``'s log segment files on the tablet servers' disks of
    the local cluster ``local`` (``ApacheFlussProcesses``), in order."""
    db, table = split_name(name)
    return sorted(int(p.stem) for s in local.servers.values() if s.role == "tablet"
                  for p in (s.data_dir / db).glob(f"{table}-*/log-*/*.log"))


def remote_segment_files(local: Any, name: str) -> list[Path]:
    """Table ``name``'s log segment files in the local cluster's remote storage
    (``remote.data.dir/log/<db>/<table>-<id>/<bucket>/<segment id>/<start>.log``)."""
    db, table = split_name(name)
    return sorted((local.remote_data_dir / "log" / db).glob(f"{table}-*/*/*/*.log"))
