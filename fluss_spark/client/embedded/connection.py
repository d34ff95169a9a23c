"""FlussConnection: bootstrap, metadata, routing to the right server, and retries."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, TypeVar

from fluss_spark.client.bootstrap import parse_bootstrap
from fluss_spark.client.embedded.metadata import MetadataCache
from fluss_spark.errors import (ClusterUnreachable, ConfigError, ConnectionRefused, NetworkError,
                                NotCoordinatorLeader, TableNotExist)
from fluss_spark.protocol.framing import MAX_FRAME_BYTES
from fluss_spark.protocol.ipc_limits import CLIENT_IPC_LIMITS, IpcLimits
from fluss_spark.protocol.messages import GetMetadataRequest, Message, Request, TableInfo
from fluss_spark.retry import retry
from fluss_spark.transport.client import RpcConnection

if TYPE_CHECKING:
    # ssl and the TLS client load with a TLS connection only (channel.py).
    from fluss_spark.transport.tls import TlsClientConfig

R = TypeVar("R", bound=Message)
T = TypeVar("T")


class FlussConnection:
    """The entry point of the client: one per application, safe to share between threads.

    Parameters
    ----------
    bootstrap_servers:
        ``host:port[,host:port]`` of any servers of the cluster (coordinator or tablets); they
        are asked for metadata, which names every other server.
    request_timeout_s:
        How long a call keeps retrying retriable errors (and waits for one response).
    username, password:
        SASL PLAIN credentials, for a cluster with ``security.protocol=SASL``.
    tls:
        Connect with TLS, checking the servers' certificates so (a cluster with
        ``security.ssl.enabled``); None: plaintext.
    ipc_limits:
        What the Arrow IPC payload of one response may make this client decode (rows, decoded
        bytes per batch and per response); more is refused with RecordTooLarge from the
        headers, before anything is decompressed. Defaults: the servers' defaults.
    max_response_bytes:
        Largest response frame accepted (256 MB); a frame is read as its bytes arrive, never
        allocated from its announced length.
    refused_timeout_s:
        When every known server has refused connections (nothing listens) for this long, calls
        fail with ClusterUnreachable instead of retrying until ``request_timeout_s``: a stopped
        cluster or a wrong address is reported in seconds, while a server restarting within
        this window is waited for.
    short_circuit_reads:
        Snapshot scans on a tablet server's own host read its snapshot files directly.
    local_sockets:
        Plaintext connections to servers on this host go through their local sockets
        (``transport.local_socket``) where they have them; False: TCP always.
    """

    def __init__(self, bootstrap_servers: str | Iterable[str], request_timeout_s: float = 60.0,
                 *, rpc_factory: Callable[[str, int, float], Any] | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep,
                 username: str | None = None, password: str | None = None,
                 ipc_limits: IpcLimits = CLIENT_IPC_LIMITS,
                 max_response_bytes: int = MAX_FRAME_BYTES,
                 tls: TlsClientConfig | None = None, refused_timeout_s: float = 4.0,
                 short_circuit_reads: bool = False, local_sockets: bool = True):
        self.bootstrap = parse_bootstrap(bootstrap_servers)
        #: Snapshot scans on a tablet server's own host read its files directly (``KvScanner``).
        self.short_circuit_reads = short_circuit_reads
        self.refused_timeout_s = float(refused_timeout_s)
        #: Since when every server asked for metadata refused the connection (None: one answers).
        self._refused_since: float | None = None
        self.request_timeout_s = float(request_timeout_s)
        if (username is None) != (password is None):
            raise ConfigError("give both a username and a password, or neither")
        credentials = (username, password) if username is not None and password is not None \
            else None
        self.ipc_limits = ipc_limits
        self._rpc_factory = rpc_factory or (
            lambda h, p, t: RpcConnection(h, p, timeout_s=t, credentials=credentials,
                                          max_response_bytes=max_response_bytes, tls=tls,
                                          local_socket=local_sockets))
        self._clock, self._sleep = clock, sleep
        self._meta = MetadataCache()
        self._lock = threading.Lock()
        # One socket per (server, thread): a long call in one thread never blocks another.
        self._rpcs: dict[tuple[tuple[str, int], int], Any] = {}
        self._closed = False
        self._executor: ThreadPoolExecutor | None = None

    # -- lifecycle ------------------------------------------------------------------------------
    def close(self) -> None:
        with self._lock:
            rpcs, self._rpcs, self._closed = list(self._rpcs.values()), {}, True
            executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=True)
        for rpc in rpcs:
            rpc.close()

    def executor(self):
        """A small shared thread pool for calls that fan out to several servers."""
        with self._lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(max_workers=8,
                                                    thread_name_prefix="fluss-client")
            return self._executor

    def __enter__(self) -> "FlussConnection":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- facades --------------------------------------------------------------------------------
    def admin(self):
        from fluss_spark.client.embedded.admin import Admin
        return Admin(self)

    def writer(self, table: str | TableInfo, options: Mapping[str, Any] | None = None):
        """A writer of ``table``; ``options``: client options (``client.writer.*``)."""
        from fluss_spark.client.embedded.writer import TableWriter
        return TableWriter(self, self.resolve(table), options=options)

    def log_scanner(self, table: str | TableInfo, projection: list[str] | None = None,
                    partition: str | None = None):
        """A changelog reader of ``table`` (of its ``partition``, by name or spec)."""
        from fluss_spark.client.embedded.log_scanner import LogScanner
        info = self.resolve(table)
        if projection and not set(projection) <= set(info.schema.names) and isinstance(table, str):
            info = self.refresh_table(table)    # columns added since it was cached
        return LogScanner(self, info, projection, partition=partition)

    def kv_scanner(self, table: str | TableInfo, partition: str | None = None):
        """A KV state reader of ``table`` (of its ``partition``, by name or spec)."""
        from fluss_spark.client.embedded.kv_scanner import KvScanner
        return KvScanner(self, self.resolve(table), partition=partition)

    # -- metadata -------------------------------------------------------------------------------
    def resolve(self, table: str | TableInfo) -> TableInfo:
        return table if isinstance(table, TableInfo) else self.table(table)

    def table(self, name: str) -> TableInfo:
        """The table's metadata (cached; fetched on first use); TableNotExist when absent."""
        return self._meta.table(name) or self.refresh_table(name)

    def table_by_id(self, table_id: int) -> TableInfo:
        info = self._meta.table_by_id(table_id)
        if info is None:
            self.refresh_metadata()
            info = self._meta.table_by_id(table_id)
        if info is None:
            raise TableNotExist(f"no table has id {table_id}")
        return info

    def refresh_table(self, name: str) -> TableInfo:
        try:
            return self._ask_metadata(GetMetadataRequest(tables=(name,)))[0]
        except TableNotExist:
            self._meta.forget(name)
            raise TableNotExist(f"table {name} does not exist") from None

    def refresh_metadata(self) -> list[TableInfo]:
        """Fetch the whole cluster metadata (every table) from any reachable server."""
        return self._ask_metadata(GetMetadataRequest(), complete=True)

    def forget_table(self, name: str) -> None:
        self._meta.forget(name)

    @property
    def tablets(self) -> dict[int, tuple[str, int]]:
        """Live tablet servers by id, as last seen (refreshes when nothing is known yet)."""
        if not self._meta.tablets:
            self.refresh_metadata()
        return dict(self._meta.tablets)

    def _ask_metadata(self, request: GetMetadataRequest,
                      complete: bool = False) -> list[TableInfo]:
        tried, last, refused = [], None, True
        for addr in dict.fromkeys(self._meta.addresses() + self.bootstrap):
            tried.append(f"{addr[0]}:{addr[1]}")
            ticket = self._meta.ticket()
            try:
                answer = self._rpc(addr).call(request)
            except NetworkError as e:
                last, refused = e, refused and isinstance(e, ConnectionRefused)
                continue
            self._refused_since = None
            return self._meta.update(answer, complete=complete, ticket=ticket)
        if refused:
            now = self._clock()
            since = self._refused_since = self._refused_since or now
            if now - since >= self.refused_timeout_s:
                raise ClusterUnreachable(
                    f"no Fluss server listens at {', '.join(tried)} (every one refused the "
                    f"connection for {now - since:.0f}s): the cluster is down or "
                    f"bootstrap.servers is wrong")
        else:
            self._refused_since = None
        raise NetworkError(f"cannot reach any Fluss server (tried {', '.join(tried)}): {last}; "
                           "check bootstrap.servers and that the cluster is running")

    # -- routing --------------------------------------------------------------------------------
    def _rpc(self, addr: tuple[str, int]):
        key = (addr, threading.get_ident())
        with self._lock:
            rpc = self._rpcs.get(key)
            if rpc is None:
                if self._closed:
                    raise NetworkError("the connection is closed")
                rpc = self._rpcs[key] = self._rpc_factory(addr[0], addr[1], self.request_timeout_s)
        return rpc

    def coordinator(self):
        """The active coordinator's RpcConnection (NotCoordinatorLeader when none is known)."""
        if self._meta.coordinator is None:
            self.refresh_metadata()
        addr = self._meta.coordinator
        if addr is None:
            raise NotCoordinatorLeader("no active coordinator is registered in ZooKeeper")
        return self._rpc(addr)

    def tablet_for(self, table_id: int, bucket: int, partition_id: int | None = None):
        """The RpcConnection of the tablet server hosting ``bucket`` of table ``table_id`` (of
        its partition ``partition_id``)."""
        info = self.table_by_id(table_id)
        return self._rpc(self._meta.tablet_address(info, bucket, partition_id)[1])

    def tablet(self, tablet_id: int):
        """The RpcConnection of one tablet server by id."""
        addr = self.tablets.get(tablet_id)
        if addr is None:
            raise NetworkError(f"tablet server {tablet_id} is not registered")
        return self._rpc(addr)

    # -- calls with retries ---------------------------------------------------------------------
    def retry(self, op: Callable[[], T], refresh: Callable[[], Any]) -> T:
        """Run ``op`` until it succeeds, retrying retriable errors with backoff.

        ``refresh`` runs before a retry whose error asks for fresh metadata. Gives up with the
        last error once ``request_timeout_s`` has passed.
        """
        def before_retry(e):
            if e.refresh_metadata:
                try:
                    refresh()
                except NetworkError:
                    pass  # nothing reachable yet; the next attempt reports it
        return retry(op, timeout_s=self.request_timeout_s, on_retry=before_retry,
                     clock=self._clock, sleep=self._sleep)

    def call_coordinator(self, request: Request[R]) -> R:
        return self.with_coordinator(lambda rpc: rpc.call(request))

    def with_coordinator(self, fn: Callable[[Any], Any]) -> Any:
        """Run ``fn(coordinator rpc)`` with retries, following a moved coordinator."""
        return self.retry(lambda: fn(self.coordinator()), self.refresh_metadata)

    def call_bucket(self, table: TableInfo, bucket: int, request: Request[R],
                    partition_id: int | None = None) -> R:
        """Send ``request`` to the tablet hosting ``bucket`` (of partition ``partition_id``),
        retrying retriable errors."""
        def op():
            return self._rpc(self._meta.tablet_address(table, bucket, partition_id)[1]).call(
                request)
        return self.retry(op, lambda: self._refresh_same_table(table))

    def call_buckets(self, table: TableInfo, buckets: Iterable[int],
                     make_request: Callable[[list[int]], Request[R]],
                     partition_id: int | None = None) -> list[tuple[list[int], R]]:
        """One call per tablet server for the buckets it hosts (of partition ``partition_id``);
        [(buckets, response)].

        A group that fails with a retriable error is regrouped after a metadata refresh and
        retried until ``request_timeout_s``.
        """
        pending = sorted(set(buckets))
        results: list[tuple[list[int], R]] = []

        def attempt():
            groups: dict[tuple[str, int], list[int]] = {}
            for b in pending:
                groups.setdefault(self._meta.tablet_address(table, b, partition_id)[1],
                                  []).append(b)
            for addr, group in groups.items():
                results.append((group, self._rpc(addr).call(make_request(group))))
                for b in group:
                    pending.remove(b)

        if pending:
            self.retry(attempt, lambda: self._refresh_same_table(table))
        return results

    def _refresh_same_table(self, table: TableInfo) -> TableInfo:
        fresh = self.refresh_table(table.name)
        if fresh.table_id != table.table_id:
            raise TableNotExist(f"table {table.name} (id {table.table_id}) was dropped; a new "
                                f"table of that name has id {fresh.table_id}")
        return fresh
