"""LocalProcesses: ZooKeeper (embedded or external) and servers by (role, id) as local processes."""

from __future__ import annotations

import abc
import signal
import subprocess
import time
from pathlib import Path
from typing import Any, Callable, Generic, Protocol, Self, TypeVar

from fluss_spark.errors import ConfigError, FlussError
from fluss_spark.local.object_store import ObjectStore
from fluss_spark.local.ports import bind_error
from fluss_spark.local.server_process import pid_alive, signal_pid, wait_dead
from fluss_spark.local.state_files import read_state_file, write_state_file
from fluss_spark.local.zookeeper import ZooKeeperProcess, four_letter_word


#: The remote storages a local cluster can start beside itself (None: a local directory).
REMOTE_STORAGES = (None, "s3")


class ManagedServer(Protocol):
    """What a cluster needs of one of its server processes."""

    role: str
    server_id: int
    port: int | None
    pid: int | None
    proc: subprocess.Popen | None
    log_path: Path

    @property
    def name(self) -> str: ...

    @property
    def alive(self) -> bool: ...


S = TypeVar("S", bound=ManagedServer)


class LocalProcesses(abc.ABC, Generic[S]):
    """ZooKeeper, one coordinator and N tablet servers as local processes rooted at ``base_dir``.

    A subclass names its state file (``_state_file``, ``_state_version``), builds its servers
    (``_add_server``) and adds its own settings to the state file (``_state``,
    ``_merge_settings``). ``report`` receives one line as each process comes up (``fluss-spark
    cluster start`` prints them); by default nothing is reported.
    """

    _state_file: str
    _state_version: int

    def __init__(self, base_dir: str | Path, tablets: int, zookeeper: str | None, host: str,
                 startup_timeout_s: float, remote_storage: str | None = None):
        self.base_dir = Path(base_dir).absolute()
        if remote_storage not in REMOTE_STORAGES:
            raise ConfigError(f"remote storage must be one of {', '.join(REMOTE_STORAGES[1:])} "
                              f"(or none: a local directory), got {remote_storage!r}")
        #: Where remote.data.dir is: "s3" (a local object store, ``object_store``) or None (a
        #: directory of the cluster).
        self.remote_storage = remote_storage
        self._object_store: ObjectStore | None = None
        if tablets < 1:
            raise FlussError(f"a cluster needs at least one tablet server, got {tablets}")
        self.host = host
        self.startup_timeout_s = startup_timeout_s
        self._external_zk = zookeeper
        self._zk_port: int | None = None
        self._zk_pid: int | None = None
        self._zk_proc: subprocess.Popen | None = None
        self.servers: dict[tuple[str, int], S] = {}
        self.report: Callable[[str], None] = _quiet
        self._started_at = time.monotonic()
        for key in [("coordinator", 0)] + [("tablet", i) for i in range(tablets)]:
            self._add_server(*key)
        self._merge_state()

    @abc.abstractmethod
    def _add_server(self, role: str, server_id: int) -> None:
        """Create the server ``(role, server_id)`` in ``servers`` (not started)."""

    @abc.abstractmethod
    def start(self) -> LocalProcesses[S]:
        """Start what is not running and wait until the cluster serves."""

    @abc.abstractmethod
    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop every process of the cluster."""

    # -- state file -----------------------------------------------------------------------------
    @property
    def state_path(self) -> Path:
        return self.base_dir / self._state_file

    @classmethod
    def _saved(cls, base_dir: str | Path, missing: str) -> tuple[dict, dict[str, Any]]:
        """The state file of ``base_dir`` and the arguments it gives every cluster (``tablets``,
        ``zookeeper``, ``host``); FlussError ``missing`` when there is none."""
        state = read_state_file(Path(base_dir) / cls._state_file, cls._state_version)
        if state is None:
            raise FlussError(missing)
        zk = state["zookeeper"]
        tablets = sum(1 for s in state["servers"] if s["role"] == "tablet")
        return state, {"tablets": max(tablets, 1),
                       "zookeeper": zk["address"] if zk.get("external") else None,
                       "host": state.get("host", "127.0.0.1")}

    def _merge_state(self) -> None:
        state = read_state_file(self.state_path, self._state_version)
        if state is None:
            return
        self._merge_settings(state)
        self._merge_remote_storage(state)
        zk = state.get("zookeeper") or {}
        if self._external_zk is None and not zk.get("external"):
            self._zk_port, self._zk_pid = zk.get("port"), zk.get("pid")
        for s in state.get("servers") or ():
            key = (s["role"], int(s["id"]))
            if key not in self.servers:
                self._add_server(*key)   # keep servers a previous start added
            self.servers[key].port, self.servers[key].pid = s.get("port"), s.get("pid")

    def _merge_settings(self, state: dict) -> None:
        """Take the subclass's own settings from a state file written earlier."""

    def _merge_remote_storage(self, state: dict) -> None:
        """Keep the remote storage the cluster was started with (state key ``remote_storage``,
        absent: a local directory); a FlussError when another one is asked for."""
        saved = state.get("remote_storage")
        if self.remote_storage is not None and self.remote_storage != saved:
            raise FlussError(f"{self.state_path} holds a cluster whose remote storage is "
                             f"{saved or 'a local directory'}; stop it and use another "
                             "directory for another remote storage")
        self.remote_storage = saved

    # -- remote storage -------------------------------------------------------------------------
    @property
    def object_store(self) -> ObjectStore | None:
        """The local object store behind remote.data.dir (None: a local directory)."""
        if self.remote_storage is None:
            return None
        if self._object_store is None:
            self._object_store = ObjectStore(self.base_dir / "object-store", self.host)
        return self._object_store

    def _start_object_store(self) -> None:
        store = self.object_store
        if store is not None and not store.alive:
            store.start()
            self.report(f"object store up on {store.endpoint} "
                        f"({time.monotonic() - self._started_at:.1f}s)")

    def _stop_object_store(self, timeout_s: float) -> None:
        if self.object_store is not None:
            self.object_store.stop(timeout_s)

    def remote_storage_state(self) -> dict | None:
        """What ``cluster status --json`` tells of the object store (no secret in it)."""
        store = self.object_store
        return None if store is None else store.describe()

    @abc.abstractmethod
    def _state(self) -> dict:
        """What the state file holds for this cluster."""

    def _zookeeper_state(self) -> dict:
        return {"address": self.zookeeper_address, "external": self._external_zk is not None,
                "port": self._zk_port, "pid": self._zk_pid}

    def _servers_state(self) -> list[dict]:
        return [{"role": s.role, "id": s.server_id, "port": s.port, "pid": s.pid}
                for s in self.servers.values()]

    def _save_state(self) -> None:
        write_state_file(self.state_path, self._state())

    # -- SASL -----------------------------------------------------------------------------------
    @property
    @abc.abstractmethod
    def sasl(self) -> bool:
        """Whether clients must log in with SASL PLAIN."""

    @property
    def users_file(self) -> Path:
        """``username:password`` lines of a SASL cluster (mode 600)."""
        return self.base_dir / "security" / "users"

    @property
    def credentials(self) -> tuple[str, str] | None:
        """The super user's (username, password) of a SASL cluster; None for PLAINTEXT."""
        if not self.sasl:
            return None
        from fluss_spark.server.security import read_users_file
        return "admin", read_users_file(self.users_file)["admin"]

    # -- addresses ------------------------------------------------------------------------------
    @property
    def zookeeper_address(self) -> str | None:
        if self._external_zk is not None:
            return self._external_zk
        return f"{self.host}:{self._zk_port}" if self._zk_port else None

    def address(self, role: str, server_id: int) -> str:
        return f"{self.host}:{self._server(role, server_id).port}"

    @property
    def _zk_dir(self) -> Path:
        return self.base_dir / "zookeeper"

    def pin_coordinator_port(self, port: int | None) -> None:
        """Serve the coordinator on ``port`` from its next start (None: keep the port it had, or
        a free one); a FlussError when it runs on another port now."""
        if port is None:
            return
        coord = self._server("coordinator", 0)
        if coord.port not in (None, port) and coord.alive:
            raise FlussError(f"the coordinator of the cluster in {self.base_dir} runs on port "
                             f"{coord.port}; stop the cluster to move it to port {port}")
        coord.port = port

    # -- lifecycle ------------------------------------------------------------------------------
    def _begin_start(self) -> None:
        """What ``start()`` does before anything starts: the clock of its report lines, and a
        FlussError naming the port of a server to start (one not running) that another process
        listens on, rather than a server that dies starting."""
        self._started_at = time.monotonic()
        for s in self.servers.values():
            why = bind_error(self.host, s.port) if s.port and not s.alive else None
            if why is not None:
                hint = ("pass another --port, or none for a free one" if s.role == "coordinator"
                        else "free the port, or start the cluster in another directory")
                raise FlussError(f"{s.name} cannot listen on port {s.port} of {self.host}: "
                                 f"{why}; {hint}")

    def _report_up(self, s: S) -> None:
        self.report(f"{s.name} up on {self.host}:{s.port} "
                    f"({time.monotonic() - self._started_at:.1f}s)")

    def _report_running(self, servers: list[S]) -> None:
        for s in servers:
            self.report(f"{s.name} already running on {self.host}:{s.port}")

    def processes(self) -> list[dict]:
        """Every process: role, id, pid, address, alive (ZooKeeper first when embedded)."""
        rows = []
        if self._external_zk is None and self._zk_port:
            pid = self._zk_alive_pid()
            rows.append({"role": "zookeeper", "id": 0, "pid": pid or self._zk_pid,
                         "address": self.zookeeper_address, "alive": bool(pid)})
        for s in self.servers.values():
            rows.append({"role": s.role, "id": s.server_id, "pid": s.pid,
                         "address": f"{self.host}:{s.port}" if s.port else None,
                         "alive": s.alive})
        store = self.object_store
        if store is not None:
            rows.append({"role": "object-store", "id": 0, "pid": store.pid,
                         "address": store.endpoint if store.ports else None,
                         "alive": store.alive})
        return rows

    def log_tails(self, lines: int = 25) -> str:
        """The last lines of every server log, for error messages and failed tests."""
        paths = ([self._zk_dir / "zookeeper.log"] if self._external_zk is None else []) + \
            [s.log_path for s in self.servers.values()]
        out = []
        for path in paths:
            if path.exists():
                tail = path.read_text(errors="replace").splitlines()[-lines:]
                out.append(f"--- {path} ---\n" + "\n".join(tail))
        return "\n".join(out)

    def kill(self, role: str, server_id: int = 0) -> None:
        """SIGKILL one process (``zookeeper`` only when embedded) and wait until it is gone."""
        if role == "zookeeper":
            self._kill_zookeeper()
            return
        s = self._server(role, server_id)
        if s.alive:
            signal_pid(s.pid, signal.SIGKILL)
            wait_dead([(s.pid, s.proc)], 10.0)

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- internals ------------------------------------------------------------------------------
    def _server(self, role: str, server_id: int) -> S:
        s = self.servers.get((role, int(server_id)))
        if s is None:
            known = ", ".join(f"{r} {i}" for r, i in self.servers)
            raise FlussError(f"the cluster has no {role} {server_id} (it has {known})")
        return s

    def _wait_for(self, servers: list[S], done: Callable[[S], bool], what: str,
                  interval_s: float) -> None:
        """Poll ``done`` on each of ``servers`` until it holds for all, reporting each as it
        comes up; FlussError naming those that did not ``what`` within ``startup_timeout_s``."""
        deadline = time.monotonic() + self.startup_timeout_s
        pending = list(servers)
        while pending:
            still = []
            for s in pending:
                if done(s):
                    self._report_up(s)
                else:
                    still.append(s)
            pending = still
            if not pending:
                return
            if time.monotonic() > deadline:
                names = ", ".join(s.name for s in pending)
                raise FlussError(f"{names} did not {what} within {self.startup_timeout_s:.0f}s"
                                 f"\n{self.log_tails()}")
            time.sleep(interval_s)

    def _ensure_zookeeper(self) -> None:
        if self._external_zk is not None:
            self.report(f"zookeeper at {self._external_zk} (not started here)")
            return
        if self._zk_port and four_letter_word(self.host, self._zk_port) == "imok":
            self.report(f"zookeeper already running on {self.zookeeper_address}")
            return
        if self._zk_alive_pid():   # running but not answering: replace it
            signal_pid(self._zk_pid, signal.SIGKILL)
            wait_dead([(self._zk_pid, self._zk_proc)], 10.0)
        zk = ZooKeeperProcess(self._zk_dir, port=self._zk_port, host=self.host)
        zk.start(timeout_s=self.startup_timeout_s)
        assert zk.proc is not None   # start() returns only once its process serves
        self._zk_port, self._zk_pid, self._zk_proc = zk.port, zk.proc.pid, zk.proc
        self.report(f"zookeeper up on {zk.address} ({time.monotonic() - self._started_at:.1f}s)")

    def _zk_alive_pid(self) -> int | None:
        # zoo.cfg is on ZooKeeper's command line, so a reused pid is never taken for it.
        if self._zk_pid and pid_alive(self._zk_pid, self._zk_proc, str(self._zk_dir / "zoo.cfg")):
            return self._zk_pid
        return None

    def _stop_zookeeper(self, timeout_s: float) -> None:
        """SIGTERM an embedded ZooKeeper (SIGKILL after ``timeout_s``), then save the state."""
        if self._external_zk is None and self._zk_alive_pid():
            signal_pid(self._zk_pid, signal.SIGTERM)
            wait_dead([(self._zk_pid, self._zk_proc)], timeout_s)
        self._zk_pid, self._zk_proc = None, None
        if self.base_dir.exists():
            self._save_state()

    def _kill_zookeeper(self) -> None:
        if self._external_zk is not None:
            raise FlussError("the cluster uses an external ZooKeeper; it cannot kill it")
        pid = self._zk_alive_pid()
        if pid:
            signal_pid(pid, signal.SIGKILL)
            wait_dead([(pid, self._zk_proc)], 10.0)

    def _restart_zookeeper(self) -> None:
        self._kill_zookeeper()
        self._ensure_zookeeper()
        self._save_state()


def _quiet(line: str) -> None:
    """Reports nothing (the default ``report``)."""
