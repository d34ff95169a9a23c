"""``FlussWireConnection``: connections to an Apache Fluss cluster's servers and its metadata."""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Callable, Sequence, TypeVar

import pyarrow as pa

from fluss_spark.client.remote_storage import RemoteStorage
from fluss_spark.errors import (ApiError, ConfigError, LeaderNotAvailable, NetworkError,
                                PartitionNotExist, TableNotExist, UnknownServerError)
from fluss_spark.protocol.apache_fluss.framing import MAX_RESPONSE_BYTES
from fluss_spark.protocol.apache_fluss.messages import (FlussRequest, GetTableInfoRequest,
                                                 GetTableSchemaRequest,
                                                 MetadataRequest, MetadataResponse,
                                                 PbPhysicalTablePath, PbTablePath, PbServerNode)
from fluss_spark.protocol.apache_fluss.proto import ProtoMessage
from fluss_spark.protocol.apache_fluss.table_json import (FlussTableDescriptor, parse_schema_json,
                                                   parse_table_json)
from fluss_spark.protocol.ipc_limits import CLIENT_IPC_LIMITS, IpcLimits
from fluss_spark.protocol.partitions import spec_text, values_of
from fluss_spark.retry import retry
from fluss_spark.transport.apache_fluss import FlussRpcConnection

R = TypeVar("R", bound=ProtoMessage)
T = TypeVar("T")

#: GET_KV_SNAPSHOT_METADATA answers a connection keeps, so a driver's splits can carry the files
#: it learned while planning (``Cluster.snapshot_location``).
KNOWN_SNAPSHOTS = 1024


def split_table_name(name: str) -> PbTablePath:
    """``db.table`` -> Fluss's (database, table); the table part may itself hold dots."""
    database, sep, table = name.partition(".")
    if not sep or not database or not table:
        raise ConfigError(f"table name {name!r} is not 'database.table'")
    return PbTablePath(database_name=database, table_name=table)


def parse_servers(bootstrap_servers: str) -> list[tuple[str, int]]:
    out = []
    for part in bootstrap_servers.split(","):
        host, sep, port = part.strip().rpartition(":")
        if not sep or not host or not port.isdigit():
            raise ConfigError(f"bootstrap server {part.strip()!r} is not host:port")
        out.append((host, int(port)))
    if not out:
        raise ConfigError("no bootstrap servers given")
    return out


@dataclass
class TableMetadata:
    """What the cluster said about one table: id, descriptor, and bucket leaders."""

    name: str
    path: PbTablePath
    table_id: int
    schema_id: int
    descriptor: FlussTableDescriptor
    created_ms: int
    leaders: dict[int, int | None] = field(default_factory=dict)


@dataclass
class PartitionMetadata:
    """What the cluster said about one partition of a table: its id, name and bucket leaders."""

    table: str
    name: str
    partition_id: int
    leaders: dict[int, int | None] = field(default_factory=dict)


class FlussWireConnection:
    """Connections to one Apache Fluss cluster: the coordinator, the tablet servers (by id) and
    a metadata cache (tables by name, partitions by table and name, bucket -> leader tablet),
    refreshed on stale-metadata errors. Thread-safe.

    ``ipc_limits``: what the Arrow record batches of one FETCH_LOG response may make this
    client decode (refused with RecordTooLarge from their headers, before decompression);
    ``max_response_bytes``: largest response frame accepted (512 MB), read as its bytes arrive;
    ``username`` and ``password``: a SASL PLAIN login on every connection (a listener with
    ``security.protocol.map`` ``...:SASL``).
    """

    def __init__(self, bootstrap_servers: str, *, request_timeout_s: float = 60.0,
                 ipc_limits: IpcLimits = CLIENT_IPC_LIMITS,
                 max_response_bytes: int = MAX_RESPONSE_BYTES,
                 username: str | None = None, password: str | None = None,
                 storage: RemoteStorage = RemoteStorage()):
        #: How this client reads the files the servers point it to (remote.data.dir).
        self.storage = storage
        self._credentials: tuple[str, str] | None = None
        if username is not None and password is not None:
            self._credentials = (username, password)
        elif username is not None or password is not None:
            raise ConfigError("a SASL login needs both a username and a password, or neither")
        self.bootstrap = parse_servers(bootstrap_servers)
        self.request_timeout_s = request_timeout_s
        self.ipc_limits = ipc_limits
        self.max_response_bytes = max_response_bytes
        self._lock = threading.RLock()
        self._conns: dict[tuple[str, int], FlussRpcConnection] = {}
        self._coordinator: tuple[str, int] | None = None
        self._tablets: dict[int, tuple[str, int]] = {}
        self._tables: dict[str, TableMetadata] = {}
        self._partitions: dict[tuple[str, str], PartitionMetadata] = {}
        self._schemas: dict[tuple[int, int], tuple[pa.Schema, pa.Schema]] = {}
        # GET_KV_SNAPSHOT_METADATA's answers by (table id, partition id or None, bucket,
        # snapshot id), the newest last: a snapshot's files never change.
        self._snapshots: OrderedDict[tuple[int, int | None, int, int], ProtoMessage] = \
            OrderedDict()

    def snapshot_answered(self, snapshot: tuple[int, int | None, int, int],
                          answer: ProtoMessage) -> None:
        """Keep GET_KV_SNAPSHOT_METADATA's ``answer`` about ``snapshot`` (the last
        ``KNOWN_SNAPSHOTS`` answers are kept)."""
        with self._lock:
            self._snapshots[snapshot] = answer
            self._snapshots.move_to_end(snapshot)
            while len(self._snapshots) > KNOWN_SNAPSHOTS:
                self._snapshots.popitem(last=False)

    def snapshot_answer(self, snapshot: tuple[int, int | None, int, int]
                        ) -> ProtoMessage | None:
        """The kept answer about ``snapshot`` (table id, partition id or None, bucket,
        snapshot id), if any."""
        with self._lock:
            return self._snapshots.get(snapshot)

    @property
    def credentials(self) -> tuple[str, str] | None:
        """The SASL PLAIN (username, password) every connection logs in with, if any."""
        return self._credentials

    # -- connections ----------------------------------------------------------------------------
    def connection(self, host: str, port: int) -> FlussRpcConnection:
        with self._lock:
            conn = self._conns.get((host, port))
            if conn is None:
                conn = FlussRpcConnection(host, port, timeout_s=self.request_timeout_s,
                                          max_response_bytes=self.max_response_bytes,
                                          credentials=self._credentials)
                self._conns[(host, port)] = conn
            return conn

    def _ask_any(self, request: FlussRequest[R]) -> R:
        """``request``'s answer from the coordinator once known, else from the first bootstrap
        server that answers. No API_VERSIONS first: the request itself shows the server is
        there, a round trip sooner (versions are asked only where a capability needs them)."""
        with self._lock:
            known = self._coordinator
        if known is not None:
            return self.connection(*known).call(request)
        last: ApiError | None = None
        for host, port in self.bootstrap:
            try:
                return self.connection(host, port).call(request)
            except NetworkError as e:
                last = e
        assert last is not None
        raise last

    def coordinator(self) -> FlussRpcConnection:
        with self._lock:
            known = self._coordinator
        if known is None:
            self._apply(self._ask_any(MetadataRequest()))
            with self._lock:
                known = self._coordinator
            if known is None:
                raise NetworkError("the cluster reports no coordinator yet")
        return self.connection(*known)

    def tablet(self, server_id: int) -> FlussRpcConnection:
        with self._lock:
            address = self._tablets.get(server_id)
        if address is None:
            self._apply(self._ask_any(MetadataRequest()))
            with self._lock:
                address = self._tablets.get(server_id)
            if address is None:
                raise LeaderNotAvailable(f"tablet server {server_id} is not alive")
        return self.connection(*address)

    def tablet_ids(self) -> list[int]:
        """The ids of the live tablet servers (asks the cluster when none is known yet)."""
        with self._lock:
            known = sorted(self._tablets)
        if not known:
            self._apply(self._ask_any(MetadataRequest()))
            with self._lock:
                known = sorted(self._tablets)
        return known

    # -- metadata -------------------------------------------------------------------------------
    def _apply(self, resp: MetadataResponse) -> None:
        with self._lock:
            if resp.coordinator_server is not None:
                node = resp.coordinator_server
                self._coordinator = (node.host, node.port)
            if resp.tablet_servers:
                self._tablets = {n.node_id: _address(n) for n in resp.tablet_servers}
            for t in resp.table_metadata:
                name = f"{t.table_path.database_name}.{t.table_path.table_name}"
                descriptor = parse_table_json(t.table_json)
                self._tables[name] = TableMetadata(
                    name=name, path=t.table_path, table_id=t.table_id, schema_id=t.schema_id,
                    descriptor=descriptor, created_ms=t.created_time,
                    leaders={b.bucket_id: b.leader_id for b in t.bucket_metadata})
                self._schemas[(t.table_id, t.schema_id)] = (descriptor.schema,
                                                            descriptor.wire_schema)
            names = {meta.table_id: name for name, meta in self._tables.items()}
            for p in resp.partition_metadata:
                table = names.get(p.table_id)
                if table is not None:
                    self._partitions[(table, p.partition_name)] = PartitionMetadata(
                        table=table, name=p.partition_name, partition_id=p.partition_id,
                        leaders={b.bucket_id: b.leader_id for b in p.bucket_metadata})

    def _metadata(self, path: PbTablePath, request: MetadataRequest) -> None:
        """Ask for metadata of the table ``path`` (and the partitions ``request`` names)."""
        try:
            self._apply(self._ask_any(request))
        except UnknownServerError:
            # Fluss 0.9.1 answers metadata of a missing table with an unknown server error;
            # GET_TABLE_INFO says TableNotExist for the same table.
            self._ask_any(GetTableInfoRequest(table_path=path))
            raise

    def refresh_table(self, name: str) -> TableMetadata:
        """Ask the cluster about ``name`` again (``TableNotExist`` when it has no such table)."""
        path = split_table_name(name)
        self._metadata(path, MetadataRequest(table_path=[path]))
        with self._lock:
            meta = self._tables.get(name)
        if meta is None:
            raise TableNotExist(f"table {name} does not exist")
        return meta

    def refresh_partitions(self, name: str, *, names: Sequence[str] = (),
                           ids: Sequence[int] = ()) -> list[PartitionMetadata]:
        """Ask the cluster about partitions of table ``name`` (by ``names`` and by ``ids``)
        again; ``PartitionNotExist`` when one of them is gone."""
        path = split_table_name(name)
        wanted, wanted_ids = set(names), {int(i) for i in ids}
        try:
            self._metadata(path, MetadataRequest(
                table_path=[path], partitions_id=sorted(wanted_ids),
                partitions_path=[PbPhysicalTablePath(database_name=path.database_name,
                                                     table_name=path.table_name,
                                                     partition_name=n) for n in sorted(wanted)]))
        except PartitionNotExist:
            raise self._gone(name, names, ids) from None
        with self._lock:
            found = [p for (t, _), p in self._partitions.items() if t == name]
        got = [p for p in found if p.name in wanted or p.partition_id in wanted_ids]
        if wanted - {p.name for p in got}:
            raise self._gone(name, names, ids)
        return got

    def _gone(self, name: str, names: Sequence[str], ids: Sequence[int]) -> PartitionNotExist:
        """The one-line error of partitions of ``name`` that are gone (or never existed)."""
        keys = self.table(name).descriptor.partition_key
        which = ", ".join([spec_text(keys, values_of(n)) for n in names]
                          + [f"id {i}" for i in ids])
        return PartitionNotExist(f"partition {which} of table {name} does not exist (never "
                                 "created, dropped, or expired by auto-partition retention)")

    def partition(self, name: str, partition: str) -> PartitionMetadata:
        """The metadata of the partition named ``partition`` of table ``name`` (cached)."""
        with self._lock:
            meta = self._partitions.get((name, partition))
        if meta is None:
            meta = next(p for p in self.refresh_partitions(name, names=[partition])
                        if p.name == partition)
        return meta

    def table(self, name: str) -> TableMetadata:
        with self._lock:
            meta = self._tables.get(name)
        return meta if meta is not None else self.refresh_table(name)

    def table_name(self, table_id: int) -> str | None:
        """The name of a table this connection has looked up, by id (None: never looked up)."""
        with self._lock:
            return next((n for n, m in self._tables.items() if m.table_id == table_id), None)

    def invalidate(self, name: str | None = None) -> None:
        """Forget cached metadata (of ``name`` and its partitions, or everything and the
        coordinator's address)."""
        with self._lock:
            if name is None:
                self._tables.clear()
                self._partitions.clear()
                self._coordinator = None
            else:
                self._tables.pop(name, None)
                for key in [k for k in self._partitions if k[0] == name]:
                    del self._partitions[key]

    def schema(self, meta: TableMetadata, schema_id: int) -> tuple[pa.Schema, pa.Schema]:
        """(Arrow schema, Arrow wire schema) of schema ``schema_id`` of a table."""
        key = (meta.table_id, schema_id)
        with self._lock:
            found = self._schemas.get(key)
        if found is None:
            resp = self.call_coordinator(GetTableSchemaRequest(table_path=meta.path,
                                                               schema_id=schema_id))
            schema, wire, _ = parse_schema_json(json.loads(resp.schema_json))
            found = (schema, wire)
            with self._lock:
                self._schemas[key] = found
        return found

    # -- calls with retries ---------------------------------------------------------------------
    def with_retries(self, op: Callable[[], T], *, table: str | None = None) -> T:
        """Run ``op``, retrying retriable errors until the request timeout; stale-metadata
        errors drop the cached metadata (of ``table``) first."""
        def on_retry(error: ApiError) -> None:
            if error.refresh_metadata:
                self.invalidate(table)
        return retry(op, timeout_s=self.request_timeout_s, on_retry=on_retry)

    def call_coordinator(self, request: FlussRequest[R]) -> R:
        def op() -> R:
            try:
                return self.coordinator().call(request)
            except ApiError as e:
                if e.refresh_metadata:
                    self.invalidate()
                raise
        return self.with_retries(op)

    def call_coordinator_many(self, requests: Sequence[FlussRequest[R]]) -> list[R | ApiError]:
        """Each request's answer from the coordinator, or the error it was answered with (not
        raised), sent a window at a time (``FlussRpcConnection.call_many``): for requests that
        may be sent twice (reads). One answered with a retriable error is sent again through
        ``call_coordinator``, alone."""
        if not requests:
            return []
        found = self.with_retries(lambda: self.coordinator().call_many(requests))
        for i, answer in enumerate(found):
            if isinstance(answer, ApiError) and (answer.retriable or answer.refresh_metadata):
                try:
                    found[i] = self.call_coordinator(requests[i])
                except ApiError as e:
                    found[i] = e
        return found

    def leader_id(self, name: str, bucket: int, partition: str | None = None) -> int:
        """The id of the tablet server leading ``bucket`` (of the partition named
        ``partition``; ``LeaderNotAvailable`` if none)."""
        where = name if partition is None else f"partition {partition} of {name}"
        leaders = (self.table(name) if partition is None
                   else self.partition(name, partition)).leaders
        if bucket not in leaders:
            raise ConfigError(f"{where} has no bucket {bucket} (it has {len(leaders)})")
        leader = leaders[bucket]
        if leader is None:
            self.invalidate(name)
            raise LeaderNotAvailable(f"bucket {bucket} of {where} has no leader yet")
        return leader

    def leader(self, name: str, bucket: int,
               partition: str | None = None) -> tuple[TableMetadata, FlussRpcConnection]:
        """The table's metadata and the connection to the leader of ``bucket`` (of the
        partition named ``partition``)."""
        meta = self.table(name)
        return meta, self.tablet(self.leader_id(name, bucket, partition))

    def close(self) -> None:
        with self._lock:
            conns = list(self._conns.values())
            self._conns.clear()
        for conn in conns:
            conn.close()


def _address(node: PbServerNode) -> tuple[str, int]:
    return node.host, node.port


__all__ = ["FlussWireConnection", "PartitionMetadata", "TableMetadata", "parse_servers",
           "split_table_name"]
