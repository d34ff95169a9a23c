"""EmbeddedProcesses: ZooKeeper, one coordinator and N tablet servers as local processes.

Used by the tests and by ``fluss-spark cluster start|status|stop``. Everything a later process
needs to find the cluster again is in ``<base_dir>/cluster.json``:

- version 1: ``{version, host, zookeeper: {address, external, port, pid}, snapshot_dir,
  server_options, disabled_apis, servers: [{role, id, port, pid}]}``; optional
  ``remote_storage`` (absent: none; ``"s3"``: the snapshot store is in a local object store,
  see ``object_store``, and ``snapshot_dir`` is its ``s3://`` URI).

``start()`` is idempotent: on a directory whose cluster is partly down it starts only the missing
processes, on the ports they had before.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from fluss_spark.errors import FlussError, MissingExtra
from fluss_spark.local.certificates import TlsFiles
from fluss_spark.local.ports import free_port
from fluss_spark.local.processes import LocalProcesses
from fluss_spark.local.state_files import read_state_file
from fluss_spark.local.secret_files import random_password, write_secret_file
from fluss_spark.local.server_process import ServerProcess, pid_alive, stop_all
from fluss_spark.transport.tls import TlsClientConfig

log = logging.getLogger(__name__)

STATE_FILE = "cluster.json"
STATE_VERSION = 1
_ROLES = ("zookeeper", "coordinator", "tablet")

#: Tells a process of this cluster from another that took over its pid; the tests use it.
_pid_alive = pid_alive


class EmbeddedProcesses(LocalProcesses[ServerProcess]):
    """A cluster of local processes rooted at ``base_dir``.

    Parameters
    ----------
    base_dir:
        Holds ``cluster.json``, ``logs/<role>-<id>.log``, each server's data dir, the embedded
        ZooKeeper (``zookeeper/``) and the snapshot store (``snapshots/``).
    tablets:
        Number of tablet servers (ids 0..N-1).
    zookeeper:
        ``host:port[/chroot]`` of an external ZooKeeper; None starts an embedded one.
    server_options:
        ``key=value`` server options passed to every server (e.g. ``kv.scanner.ttl=2s``).
    disabled_apis:
        API groups to leave out (e.g. ``kv_snapshot_lease``), to emulate an old server.
    """

    def __init__(self, base_dir: str | Path, tablets: int = 1, zookeeper: str | None = None,
                 server_options=(), disabled_apis=(), host: str = "127.0.0.1",
                 startup_timeout_s: float = 60.0, sasl: bool = False, tls: bool = False,
                 remote_storage: str | None = None):
        """``sasl``: servers require SASL PLAIN (``security.protocol=SASL``); the principals
        ``admin`` (a super user) and ``internal`` get random passwords in ``users_file``.
        ``tls``: servers listen with TLS, with a certificate signed by a CA made for this
        cluster (``tls_files``), which its clients (``tls_client``) trust."""
        self.server_options = list(server_options)
        self.disabled_apis = list(disabled_apis)
        super().__init__(base_dir, tablets, zookeeper, host, startup_timeout_s, remote_storage)
        if sasl and not self.sasl:
            self.server_options += ["security.protocol=SASL",
                                    f"security.sasl.users-file={self.users_file}",
                                    "super.users=admin",
                                    f"zookeeper.auth.digest-file={self.zookeeper_digest_file}"]
        if tls and not self.tls:
            files = self.tls_files
            self.server_options += ["security.ssl.enabled=true",
                                    f"security.ssl.certificate-file={files.certificate_file}",
                                    f"security.ssl.key-file={files.key_file}",
                                    f"security.ssl.ca-file={files.ca_file}"]

    @property
    def zookeeper_digest_file(self) -> Path:
        return self.base_dir / "security" / "zookeeper"

    @property
    def sasl(self) -> bool:
        return "security.protocol=SASL" in self.server_options

    @property
    def tls_files(self) -> TlsFiles:
        return TlsFiles(self.base_dir / "security" / "tls")

    @property
    def tls(self) -> bool:
        return "security.ssl.enabled=true" in self.server_options

    @property
    def tls_client(self) -> TlsClientConfig | None:
        """How this cluster's clients check its certificates (None: no TLS)."""
        if not self.tls:
            return None
        return TlsClientConfig(str(self.tls_files.ca_file))

    def _ensure_users(self) -> None:
        """Write the users file and the ZooKeeper credential of a SASL cluster (mode 600),
        with random passwords, unless they exist."""
        if not self.sasl:
            return
        for path, text in ((self.users_file,
                            f"# principals of this cluster: username:password\n"
                            f"admin:{random_password()}\n"
                            f"internal:{random_password()}\n"),
                           (self.zookeeper_digest_file, f"fluss:{random_password()}\n")):
            write_secret_file(path, text)

    # -- state file -----------------------------------------------------------------------------
    _state_file = STATE_FILE
    _state_version = STATE_VERSION

    @classmethod
    def load(cls, base_dir: str | Path) -> "EmbeddedProcesses":
        """Re-attach to the cluster whose state is in ``base_dir`` (FlussError when none)."""
        state, saved = cls._saved(base_dir, f"no cluster in {base_dir} (no {STATE_FILE}); start "
                                            "one with `fluss-spark cluster start`")
        return cls(base_dir, **saved, server_options=state.get("server_options", ()),
                   disabled_apis=state.get("disabled_apis", ()))

    def _merge_settings(self, state: dict) -> None:
        if not self.server_options:
            self.server_options = list(state.get("server_options") or ())
        if not self.disabled_apis:
            self.disabled_apis = list(state.get("disabled_apis") or ())

    def _state(self) -> dict:
        return {
            "version": STATE_VERSION, "host": self.host, "zookeeper": self._zookeeper_state(),
            "snapshot_dir": self.remote_data_uri, "remote_storage": self.remote_storage,
            "server_options": self.server_options, "disabled_apis": self.disabled_apis,
            "servers": self._servers_state(),
        }

    # -- addresses ------------------------------------------------------------------------------
    @property
    def snapshot_dir(self) -> Path:
        """The local snapshot store (remote.data.dir) when there is no object store."""
        return self.base_dir / "snapshots"

    @property
    def remote_data_uri(self) -> str:
        """The servers' remote.data.dir: ``s3://...`` in the object store, else
        ``snapshot_dir``."""
        store = self.object_store
        return str(self.snapshot_dir) if store is None else store.uri("snapshots")

    @property
    def bootstrap_servers(self) -> str:
        """Addresses of the coordinator and tablets (``host:port,...``)."""
        return ",".join(f"{self.host}:{s.port}" for s in self.servers.values() if s.port)

    def log_path(self, role: str, server_id: int) -> Path:
        if role == "zookeeper":
            return self._zk_dir / "zookeeper.log"
        return self.base_dir / "logs" / f"{role}-{server_id}.log"

    def connection(self, request_timeout_s: float = 60.0):
        from fluss_spark.client import FlussConnection
        user, password = self.credentials or (None, None)
        return FlussConnection(self.bootstrap_servers, request_timeout_s=request_timeout_s,
                               username=user, password=password, tls=self.tls_client)

    # -- lifecycle ------------------------------------------------------------------------------
    def start(self) -> "EmbeddedProcesses":
        """Start whatever is not running (ZooKeeper, coordinator, tablets) and wait until the
        coordinator sees every tablet registered."""
        # The servers run this interpreter; without kazoo they would die at their first import.
        MissingExtra.check("kazoo", "the embedded servers")
        self._begin_start()
        self.base_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        (self.base_dir / "logs").mkdir(exist_ok=True, mode=0o700)
        self.snapshot_dir.mkdir(exist_ok=True, mode=0o700)
        self._start_object_store()
        self._ensure_zookeeper()
        self._ensure_users()
        if self.tls:
            self.tls_files.create(self.host)
        self._save_state()
        for s in self.servers.values():
            if s.alive and not self._serving(s):
                # Running but not answering (paused, wedged): replace it like a dead one.
                log.warning("%s %d (pid %s) does not answer on port %s; restarting it", s.role,
                            s.server_id, s.pid, s.port)
                s.kill()
        missing = [s for s in self.servers.values() if not s.alive]
        self._report_running([s for s in self.servers.values() if s not in missing])
        # The coordinator first: tablets register with it through ZooKeeper either way, but a
        # coordinator that is up early assigns buckets sooner.
        for group in ([s for s in missing if s.role == "coordinator"],
                      [s for s in missing if s.role == "tablet"]):
            for s in group:
                self._spawn(s)
            self._save_state()
            self._wait_ready(group)
        self._save_state()
        self.wait_registered()
        return self

    def _serving(self, server: ServerProcess, timeout_s: float = 5.0) -> bool:
        """Whether ``server`` answers an API_VERSIONS request within ``timeout_s``."""
        from fluss_spark.transport.client import RpcConnection
        from fluss_spark.protocol.api import ApiKey
        if server.port is None:   # never got ready, so nothing of it can answer
            return False
        rpc = RpcConnection(self.host, server.port, timeout_s=timeout_s,
                            connect_timeout_s=timeout_s, tls=self.tls_client)
        try:
            rpc.call_raw(ApiKey.API_VERSIONS)
            return True
        except FlussError:
            return False
        finally:
            rpc.close()

    def stop(self, timeout_s: float = 10.0) -> None:
        """SIGTERM every process (tablets, coordinator, then an embedded ZooKeeper), SIGKILL
        those still running after ``timeout_s``."""
        order = ([s for s in self.servers.values() if s.role == "tablet"]
                 + [s for s in self.servers.values() if s.role == "coordinator"])
        stop_all(order, timeout_s)
        for s in order:
            s.pid, s.proc = None, None
        self._stop_zookeeper(timeout_s)
        self._stop_object_store(timeout_s)

    def restart(self, role: str, server_id: int = 0) -> None:
        """Stop (if running) and start one process again on the same port and data dir."""
        if role == "zookeeper":
            self._restart_zookeeper()
            return
        s = self._server(role, server_id)
        s.stop(10.0)
        self._spawn(s)
        self._save_state()
        self._wait_ready([s])
        self._save_state()
        self.wait_registered()

    def wait_registered(self, timeout_s: float | None = None) -> None:
        """Wait until GET_METADATA lists a coordinator and every tablet server."""
        from fluss_spark.transport.client import RpcConnection
        from fluss_spark.protocol.api import ApiKey
        want = {s.server_id for s in self.servers.values() if s.role == "tablet"}
        coord = self._server("coordinator", 0)
        if coord.port is None:
            raise FlussError("the coordinator has not started (no port yet); call start()")
        rpc = RpcConnection(self.host, coord.port, timeout_s=5.0, credentials=self.credentials,
                            tls=self.tls_client)
        deadline = time.monotonic() + (timeout_s or self.startup_timeout_s)
        seen, last_error = set(), None
        try:
            while time.monotonic() < deadline:
                try:
                    md = rpc.call_raw(ApiKey.GET_METADATA, {})
                    seen = {int(t["id"]) for t in md.get("tablets") or ()}
                    if md.get("coordinator") and want <= seen:
                        return
                except FlussError as e:
                    last_error = e
                for s in self.servers.values():
                    s.check_running()
                time.sleep(0.1)
        finally:
            rpc.close()
        raise FlussError(f"tablet servers {sorted(want - seen)} did not register within "
                         f"{timeout_s or self.startup_timeout_s:.0f}s (last error: {last_error})"
                         f"\n{self.log_tails()}")

    # -- internals ------------------------------------------------------------------------------
    def _add_server(self, role: str, server_id: int) -> None:
        # ZooKeeper address and options are filled in by _spawn, when they are final.
        self.servers[(role, server_id)] = ServerProcess(
            role, None, server_id=server_id, host=self.host, port=None,
            data_dir=self.base_dir / f"{role}-{server_id}", remote_data_dir=self.snapshot_dir,
            ready_file=self.base_dir / "run" / f"{role}-{server_id}.ready",
            log_path=self.log_path(role, server_id))

    def _spawn(self, s: ServerProcess) -> None:
        if s.port is None:
            s.port = free_port(self.host)
        # Known only now: an embedded ZooKeeper's port, options merged from the state file.
        s.zk_address = self.zookeeper_address
        s.options, s.disabled_apis = list(self.server_options), list(self.disabled_apis)
        store = self.object_store
        # The servers read and write the store through pyarrow, which takes these variables.
        s.remote_data_dir, s.env = self.remote_data_uri, {} if store is None else store.env()
        s.spawn()

    def _wait_ready(self, servers: list[ServerProcess]) -> None:
        self._wait_for(servers, lambda s: s.ready(), "start", 0.05)


def read_state(base_dir: Path) -> dict | None:
    """The cluster state file of ``base_dir`` (None when absent); refuses unknown versions."""
    return read_state_file(Path(base_dir) / STATE_FILE, STATE_VERSION)
