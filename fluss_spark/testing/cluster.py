"""LocalCluster: ZooKeeper, one coordinator and N tablet servers as local processes.

Used by the tests and by ``fluss-spark cluster start|status|stop``. Everything a later process
needs to find the cluster again is in ``<base_dir>/cluster.json``:

- version 1: ``{version, host, zookeeper: {address, external, port, pid}, snapshot_dir,
  server_options, disabled_apis, servers: [{role, id, port, pid}]}``

``start()`` is idempotent: on a directory whose cluster is partly down it starts only the missing
processes, on the ports they had before.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import fluss_spark
from fluss_spark.errors import FlussError
from fluss_spark.testing.ports import free_port
from fluss_spark.testing.zookeeper import ZooKeeperProcess, four_letter_word

STATE_FILE = "cluster.json"
STATE_VERSION = 1
_ROLES = ("zookeeper", "coordinator", "tablet")


@dataclass
class _Server:
    """One server process of the cluster (mutable: pid and port change on restart)."""

    role: str
    id: int
    port: int | None = None
    pid: int | None = None
    proc: subprocess.Popen | None = None


class LocalCluster:
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
                 startup_timeout_s: float = 60.0):
        self.base_dir = Path(base_dir).absolute()
        if tablets < 1:
            raise FlussError(f"a cluster needs at least one tablet server, got {tablets}")
        self.host = host
        self.server_options = list(server_options)
        self.disabled_apis = list(disabled_apis)
        self.startup_timeout_s = startup_timeout_s
        self._external_zk = zookeeper
        self._zk_port: int | None = None
        self._zk_pid: int | None = None
        self._zk_proc: subprocess.Popen | None = None
        self.servers: dict[tuple[str, int], _Server] = {("coordinator", 0): _Server("coordinator", 0)}
        for i in range(tablets):
            self.servers[("tablet", i)] = _Server("tablet", i)
        self._merge_state()

    # -- state file -----------------------------------------------------------------------------
    @property
    def state_path(self) -> Path:
        return self.base_dir / STATE_FILE

    @classmethod
    def load(cls, base_dir: str | Path) -> "LocalCluster":
        """Re-attach to the cluster whose state is in ``base_dir`` (FlussError when none)."""
        state = read_state(Path(base_dir))
        if state is None:
            raise FlussError(f"no cluster in {base_dir} (no {STATE_FILE}); start one with "
                             "`fluss-spark cluster start`")
        zk = state["zookeeper"]
        tablets = sum(1 for s in state["servers"] if s["role"] == "tablet")
        return cls(base_dir, tablets=max(tablets, 1),
                   zookeeper=zk["address"] if zk.get("external") else None,
                   server_options=state.get("server_options", ()),
                   disabled_apis=state.get("disabled_apis", ()), host=state.get("host", "127.0.0.1"))

    def _merge_state(self) -> None:
        state = read_state(self.base_dir)
        if state is None:
            return
        zk = state.get("zookeeper") or {}
        if self._external_zk is None and not zk.get("external"):
            self._zk_port, self._zk_pid = zk.get("port"), zk.get("pid")
        if not self.server_options:
            self.server_options = list(state.get("server_options") or ())
        if not self.disabled_apis:
            self.disabled_apis = list(state.get("disabled_apis") or ())
        for s in state.get("servers") or ():
            key = (s["role"], int(s["id"]))
            if key not in self.servers:
                self.servers[key] = _Server(*key)   # keep servers a previous start added
            self.servers[key].port, self.servers[key].pid = s.get("port"), s.get("pid")

    def _save_state(self) -> None:
        self.base_dir.mkdir(parents=True, exist_ok=True)
        state = {
            "version": STATE_VERSION, "host": self.host,
            "zookeeper": {"address": self.zookeeper_address, "external": self._external_zk is not None,
                          "port": self._zk_port, "pid": self._zk_pid},
            "snapshot_dir": str(self.snapshot_dir),
            "server_options": self.server_options, "disabled_apis": self.disabled_apis,
            "servers": [{"role": s.role, "id": s.id, "port": s.port, "pid": s.pid}
                        for s in self.servers.values()],
        }
        tmp = self.state_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, indent=2))
        os.replace(tmp, self.state_path)

    # -- addresses ------------------------------------------------------------------------------
    @property
    def zookeeper_address(self) -> str | None:
        if self._external_zk is not None:
            return self._external_zk
        return f"{self.host}:{self._zk_port}" if self._zk_port else None

    @property
    def snapshot_dir(self) -> Path:
        return self.base_dir / "snapshots"

    @property
    def bootstrap_servers(self) -> str:
        """Addresses of the coordinator and tablets (``host:port,...``)."""
        return ",".join(f"{self.host}:{s.port}" for s in self.servers.values() if s.port)

    def address(self, role: str, server_id: int) -> str:
        return f"{self.host}:{self._server(role, server_id).port}"

    def log_path(self, role: str, server_id: int) -> Path:
        if role == "zookeeper":
            return self.base_dir / "zookeeper" / "zookeeper.log"
        return self.base_dir / "logs" / f"{role}-{server_id}.log"

    def connection(self, request_timeout_s: float = 60.0):
        from fluss_spark.client import FlussConnection
        return FlussConnection(self.bootstrap_servers, request_timeout_s=request_timeout_s)

    # -- lifecycle ------------------------------------------------------------------------------
    def start(self) -> "LocalCluster":
        """Start whatever is not running (ZooKeeper, coordinator, tablets) and wait until the
        coordinator sees every tablet registered."""
        self.base_dir.mkdir(parents=True, exist_ok=True)
        (self.base_dir / "logs").mkdir(exist_ok=True)
        self.snapshot_dir.mkdir(exist_ok=True)
        self._ensure_zookeeper()
        self._save_state()
        missing = [s for s in self.servers.values() if not self._server_alive(s)]
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

    def stop(self, timeout_s: float = 10.0) -> None:
        """SIGTERM every process (tablets, coordinator, then an embedded ZooKeeper), SIGKILL
        those still running after ``timeout_s``."""
        order = ([s for s in self.servers.values() if s.role == "tablet"]
                 + [s for s in self.servers.values() if s.role == "coordinator"])
        live = [s for s in order if self._server_alive(s)]
        for s in live:
            _signal(s.pid, signal.SIGTERM)
        self._wait_dead([(s.pid, s.proc) for s in live], timeout_s)
        for s in order:
            s.pid, s.proc = None, None
        if self._external_zk is None and self._zk_alive_pid():
            _signal(self._zk_pid, signal.SIGTERM)
            self._wait_dead([(self._zk_pid, self._zk_proc)], timeout_s)
        self._zk_pid, self._zk_proc = None, None
        if self.base_dir.exists():
            self._save_state()

    def kill(self, role: str, server_id: int = 0) -> None:
        """SIGKILL one process (``zookeeper`` only when embedded) and wait until it is gone."""
        if role == "zookeeper":
            if self._external_zk is not None:
                raise FlussError("the cluster uses an external ZooKeeper; it cannot kill it")
            pid, proc = self._zk_alive_pid(), self._zk_proc
        else:
            s = self._server(role, server_id)
            pid, proc = (s.pid if self._server_alive(s) else None), s.proc
        if pid:
            _signal(pid, signal.SIGKILL)
            self._wait_dead([(pid, proc)], 10.0)

    def restart(self, role: str, server_id: int = 0) -> None:
        """Stop (if running) and start one process again on the same port and data dir."""
        if role == "zookeeper":
            self.kill("zookeeper")
            self._ensure_zookeeper()
            self._save_state()
            return
        s = self._server(role, server_id)
        if self._server_alive(s):
            _signal(s.pid, signal.SIGTERM)
            self._wait_dead([(s.pid, s.proc)], 10.0)
        self._spawn(s)
        self._save_state()
        self._wait_ready([s])
        self._save_state()
        self.wait_registered()

    def processes(self) -> list[dict]:
        """Every process: role, id, pid, address, alive (ZooKeeper first when embedded)."""
        rows = []
        if self._external_zk is None and self._zk_port:
            pid = self._zk_alive_pid()
            rows.append({"role": "zookeeper", "id": 0, "pid": pid or self._zk_pid,
                         "address": self.zookeeper_address, "alive": bool(pid)})
        for s in self.servers.values():
            rows.append({"role": s.role, "id": s.id, "pid": s.pid,
                         "address": f"{self.host}:{s.port}" if s.port else None,
                         "alive": self._server_alive(s)})
        return rows

    def wait_registered(self, timeout_s: float | None = None) -> None:
        """Wait until GET_METADATA lists a coordinator and every tablet server."""
        from fluss_spark.client.rpc import RpcConnection
        from fluss_spark.protocol.api import ApiKey
        want = {s.id for s in self.servers.values() if s.role == "tablet"}
        coord = self._server("coordinator", 0)
        rpc = RpcConnection(self.host, coord.port, timeout_s=5.0)
        deadline = time.monotonic() + (timeout_s or self.startup_timeout_s)
        seen, last_error = set(), None
        try:
            while time.monotonic() < deadline:
                try:
                    md = rpc.call(ApiKey.GET_METADATA, {})
                    seen = {int(t["id"]) for t in md.get("tablets") or ()}
                    if md.get("coordinator") and want <= seen:
                        return
                except FlussError as e:
                    last_error = e
                self._check_running(list(self.servers.values()))
                time.sleep(0.1)
        finally:
            rpc.close()
        raise FlussError(f"tablet servers {sorted(want - seen)} did not register within "
                         f"{timeout_s or self.startup_timeout_s:.0f}s (last error: {last_error})"
                         f"\n{self.log_tails()}")

    def log_tails(self, lines: int = 25) -> str:
        """The last lines of every server log, for error messages and failed tests."""
        out = []
        keys = [("zookeeper", 0)] if self._external_zk is None else []
        for role, sid in keys + list(self.servers):
            path = self.log_path(role, sid)
            if path.exists():
                tail = path.read_text(errors="replace").splitlines()[-lines:]
                out.append(f"--- {path} ---\n" + "\n".join(tail))
        return "\n".join(out)

    def __enter__(self) -> "LocalCluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- internals ------------------------------------------------------------------------------
    def _server(self, role: str, server_id: int) -> _Server:
        s = self.servers.get((role, int(server_id)))
        if s is None:
            known = ", ".join(f"{r} {i}" for r, i in self.servers)
            raise FlussError(f"the cluster has no {role} {server_id} (it has {known})")
        return s

    def _ensure_zookeeper(self) -> None:
        if self._external_zk is not None:
            return
        zk_dir = self.base_dir / "zookeeper"
        if self._zk_port and four_letter_word(self.host, self._zk_port) == "imok":
            return
        if self._zk_alive_pid():   # running but not answering: replace it
            _signal(self._zk_pid, signal.SIGKILL)
            self._wait_dead([(self._zk_pid, self._zk_proc)], 10.0)
        zk = ZooKeeperProcess(zk_dir, port=self._zk_port, host=self.host)
        zk.start(timeout_s=self.startup_timeout_s)
        self._zk_port, self._zk_pid, self._zk_proc = zk.port, zk.proc.pid, zk.proc

    def _zk_alive_pid(self) -> int | None:
        if self._zk_pid and _pid_alive(self._zk_pid, self._zk_proc,
                                       str(self.base_dir / "zookeeper" / "zoo.cfg")):
            return self._zk_pid
        return None

    def _data_dir(self, s: _Server) -> Path:
        return self.base_dir / f"{s.role}-{s.id}"

    def _ready_file(self, s: _Server) -> Path:
        return self.base_dir / "run" / f"{s.role}-{s.id}.ready"

    def _server_alive(self, s: _Server) -> bool:
        return bool(s.pid) and _pid_alive(s.pid, s.proc, str(self._data_dir(s)))

    def _spawn(self, s: _Server) -> None:
        if s.port is None:
            s.port = free_port(self.host)
        ready = self._ready_file(s)
        ready.parent.mkdir(parents=True, exist_ok=True)
        ready.unlink(missing_ok=True)
        cmd = [sys.executable, "-m", "fluss_spark.server", s.role, "--id", str(s.id),
               "--zookeeper", self.zookeeper_address, "--host", self.host, "--port", str(s.port),
               "--data-dir", str(self._data_dir(s)), "--remote-data-dir", str(self.snapshot_dir),
               "--ready-file", str(ready)]
        for opt in self.server_options:
            cmd += ["--option", opt]
        for api in self.disabled_apis:
            cmd += ["--disable-api", api]
        env = dict(os.environ)
        # Servers import the same package as this process, installed or not.
        src = str(Path(fluss_spark.__file__).resolve().parents[1])
        env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
        log_path = self.log_path(s.role, s.id)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "ab") as log:
            log.write(f"=== {time.strftime('%Y-%m-%d %H:%M:%S')} starting {s.role} {s.id} on "
                      f"port {s.port} ===\n".encode())
            log.flush()
            s.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                      stdin=subprocess.DEVNULL, start_new_session=True, env=env)
        s.pid = s.proc.pid

    def _wait_ready(self, servers: list[_Server]) -> None:
        deadline = time.monotonic() + self.startup_timeout_s
        pending = list(servers)
        while pending:
            self._check_running(pending)
            pending = [s for s in pending if not self._ready_file(s).exists()]
            if not pending:
                return
            if time.monotonic() > deadline:
                names = ", ".join(f"{s.role} {s.id}" for s in pending)
                raise FlussError(f"{names} did not start within {self.startup_timeout_s:.0f}s"
                                 f"\n{self.log_tails()}")
            time.sleep(0.05)

    def _check_running(self, servers: list[_Server]) -> None:
        for s in servers:
            if s.pid and not self._server_alive(s):
                code = s.proc.returncode if s.proc is not None else None
                raise FlussError(f"{s.role} {s.id} exited (status {code}) while starting; "
                                 f"log {self.log_path(s.role, s.id)}\n{self.log_tails()}")

    @staticmethod
    def _wait_dead(procs: list[tuple[int | None, subprocess.Popen | None]], timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        for pid, proc in procs:
            if not pid:
                continue
            while _pid_alive(pid, proc, None):
                if time.monotonic() > deadline:
                    _signal(pid, signal.SIGKILL)
                    deadline = time.monotonic() + 5.0
                time.sleep(0.05)


def read_state(base_dir: Path) -> dict | None:
    """The cluster state file of ``base_dir`` (None when absent); refuses unknown versions."""
    path = Path(base_dir) / STATE_FILE
    try:
        state = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise FlussError(f"cannot read {path}: {e}") from None
    version = state.get("version") if isinstance(state, dict) else None
    if version != STATE_VERSION:
        raise FlussError(f"{path} has version {version!r}; this fluss-spark reads version "
                         f"{STATE_VERSION}")
    return state


def _signal(pid: int | None, sig: int) -> None:
    if pid:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def _pid_alive(pid: int, proc: subprocess.Popen | None, marker: str | None) -> bool:
    """Whether ``pid`` runs and is still our process (its command line contains ``marker``)."""
    if proc is not None:
        return proc.poll() is None
    try:
        # Reap a child of ours that a previous call in this process started and lost track of.
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return False
    except ChildProcessError:
        pass
    proc_dir = Path(f"/proc/{pid}")
    if Path("/proc/self").exists():
        for _ in range(50):
            try:
                cmdline = (proc_dir / "cmdline").read_bytes()
                status = (proc_dir / "stat").read_text()
            except OSError:
                return False
            if ") Z" in status:
                return False
            if cmdline:
                break
            time.sleep(0.01)   # a process that has just exec'd shows no command line briefly
        else:
            return False
        # Arguments end with NUL, so ".../tablet-1" does not match ".../tablet-10".
        return marker is None or marker.encode() + b"\0" in cmdline
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
