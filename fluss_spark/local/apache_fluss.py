"""ApacheFlussProcesses: a real Apache Fluss release (Maven Central jars) as local Java processes.

One ZooKeeper (embedded via ``ZooKeeperProcess`` unless an address is given), one coordinator
and N tablet servers, each a ``java`` process on a free loopback port with its own config dir
(``server.yaml``), data dir and log file under ``base_dir``. What a later process needs to find
the cluster again is in ``<base_dir>/apache-fluss.json``:

- version 1: ``{version, engine: "apache-fluss", fluss_version, host, heap, options,
  zookeeper: {address, external, port, pid}, servers: [{role, id, port, pid}]}``; optional
  ``sasl`` (absent: false) and ``servers[].internal_port`` (absent: none yet), written since
  SASL clusters exist; optional ``remote_storage`` (absent: none, remote.data.dir is
  ``<base_dir>/remote``; ``"s3"``: a local object store, see ``object_store``).

With ``sasl`` clients log in with SASL PLAIN on each server's ``port`` (listener ``CLIENT``);
the servers talk to each other over PLAINTEXT on ``internal_port`` (listener ``INTERNAL``).
The users are ``DIR/security/users`` (``user:password`` lines, mode 600; ``admin`` is the super
user); each start writes them into the JAAS file ``DIR/security/jaas.conf`` (mode 600), which
the servers read through ``-Djava.security.auth.login.config``: Fluss logs every line of
``server.yaml`` at start, so the passwords stay out of it.

A server counts as started when its port accepts connections and its log, since it was
spawned, shows that it registered in ZooKeeper (``End initializing coordinator context`` for
the coordinator, which it logs once it leads; ``Registered tablet server <id>`` for a tablet)
and the coordinator logged the tablet's arrival (``New tablet server callback for tablet server
<id>``). See docs/apache_fluss.md.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

from fluss_spark.config import parse_pairs
from fluss_spark.errors import FlussError
from fluss_spark.local.apache_fluss_jars import (DEFAULT_VERSION, ensure_filesystem_jars,
                                                 ensure_jars)
from fluss_spark.local.object_store import REGION
from fluss_spark.local.ports import free_port, port_open
from fluss_spark.local.processes import LocalProcesses
from fluss_spark.local.state_files import read_state_file
from fluss_spark.local.secret_files import random_password, write_secret_file
from fluss_spark.local.server_process import pid_alive, signal_pid, wait_dead
from fluss_spark.local.zookeeper import java_binary

STATE_FILE = "apache-fluss.json"
STATE_VERSION = 1
ENGINE = "apache-fluss"

_MAIN_CLASS = {"coordinator": "org.apache.fluss.server.coordinator.CoordinatorServer",
               "tablet": "org.apache.fluss.server.tablet.TabletServer"}

#: Server settings every server gets unless ``options`` overrides them.
DEFAULT_OPTIONS = {
    # A server killed with -9 leaves its ephemeral znode behind until its ZooKeeper session
    # expires, and its replacement cannot register before that (the default is 60s).
    "zookeeper.client.session-timeout": "6s",
    "default.replication.factor": "1",
}

#: Fluss's server settings of a SASL cluster (``bind.listeners`` names both listeners).
SASL_OPTIONS = {
    "internal.listener.name": "INTERNAL",
    "security.protocol.map": "CLIENT:SASL,INTERNAL:PLAINTEXT",
    "security.sasl.enabled.mechanisms": "PLAIN",
    "authorizer.enabled": "true",
    "super.users": "User:admin",
}

#: Fluss's login module for SASL PLAIN; its options ``user_<name>="<password>"`` are the users.
_PLAIN_LOGIN_MODULE = "org.apache.fluss.security.auth.sasl.plain.PlainLoginModule"

#: Arrow (inside fluss-server) reads java.nio internals. The jar is on the classpath, not the
#: module path, so ALL-UNNAMED is the module that needs the opening.
JAVA_17_FLAGS = ("--add-opens=java.base/java.nio=ALL-UNNAMED",)

_LOG4J_PROPERTIES = """\
rootLogger.level=INFO
rootLogger.appenderRef.file.ref=File
appender.file.name=File
appender.file.type=File
appender.file.append=true
appender.file.fileName=${sys:log.file}
appender.file.layout.type=PatternLayout
appender.file.layout.pattern=%d{yyyy-MM-dd HH:mm:ss,SSS} %-5p %c{1} - %m%n
"""


class JavaServer:
    """One coordinator or tablet server of an Apache Fluss release, run with ``java``."""

    def __init__(self, role: str, server_id: int, base_dir: Path, host: str):
        self.role = role
        self.server_id = server_id
        self.host = host
        self.port: int | None = None
        self.internal_port: int | None = None   # a SASL cluster's PLAINTEXT listener
        self.pid: int | None = None
        self.proc: subprocess.Popen | None = None
        self.server_dir = base_dir / f"{role}-{server_id}"
        self.log_path = base_dir / "logs" / (
            "coordinator.log" if role == "coordinator" else f"tablet-{server_id}.log")
        self.log_offset = 0   # size of the log when the process was spawned

    @property
    def name(self) -> str:
        return f"{self.role} {self.server_id}"

    @property
    def conf_dir(self) -> Path:
        return self.server_dir / "conf"

    @property
    def data_dir(self) -> Path:
        return self.server_dir / "data"

    @property
    def alive(self) -> bool:
        # The config dir is on the command line, so a reused pid is never taken for this server.
        return self.pid is not None and pid_alive(self.pid, self.proc, str(self.conf_dir))

    def write_config(self, zookeeper: str, remote_dir: str, options: dict[str, str],
                     sasl: bool = False) -> None:
        assert self.port is not None
        listeners = f"FLUSS://{self.host}:{self.port}"
        if sasl:
            listeners = (f"CLIENT://{self.host}:{self.port},"
                         f"INTERNAL://{self.host}:{self.internal_port}")
        settings = {"zookeeper.address": zookeeper,
                    "bind.listeners": listeners,
                    "data.dir": str(self.data_dir),
                    "remote.data.dir": remote_dir,
                    **(SASL_OPTIONS if sasl else {})}
        if self.role == "tablet":
            settings["tablet-server.id"] = str(self.server_id)
        settings.update(options)
        self.conf_dir.mkdir(parents=True, exist_ok=True)
        for k, v in settings.items():
            # Fluss reads server.yaml line by line as "key: value", with "#" starting a comment
            # and no quoting, so such values cannot be written at all.
            if any(c in f"{k}{v}" for c in "#\n\r") or ": " in k:
                raise FlussError(f"server option {k}={v!r} cannot be written to server.yaml")
        (self.conf_dir / "server.yaml").write_text(
            "".join(f"{k}: {v}\n" for k, v in settings.items()))
        (self.conf_dir / "log4j2.properties").write_text(_LOG4J_PROPERTIES)

    def command(self, jars: list[Path], heap: str, jaas: Path | None = None) -> list[str]:
        login = [f"-Djava.security.auth.login.config={jaas}"] if jaas is not None else []
        return [java_binary(), f"-Xmx{heap}", *JAVA_17_FLAGS, *login,
                f"-Dlog.file={self.log_path}",
                # Fluss logs its own shutdown; log4j's shutdown hook would close the log first.
                "-Dlog4j.shutdownHookEnabled=false",
                f"-Dlog4j.configurationFile=file:{self.conf_dir / 'log4j2.properties'}",
                "-cp", os.pathsep.join(str(j) for j in jars),
                _MAIN_CLASS[self.role], "--configDir", str(self.conf_dir)]

    def spawn(self, jars: list[Path], heap: str, jaas: Path | None = None) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            log.write(f"=== {time.strftime('%Y-%m-%d %H:%M:%S')} starting {self.name} on "
                      f"port {self.port} ===\n".encode())
            log.flush()
            self.log_offset = log.tell()
            # stdout/stderr (JVM warnings, a crash before log4j starts) go to the same file.
            self.proc = subprocess.Popen(self.command(jars, heap, jaas), stdout=log,
                                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         start_new_session=True, cwd=self.server_dir)
        self.pid = self.proc.pid

    def log_since_spawn(self) -> str:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(self.log_offset)
                return f.read().decode(errors="replace")
        except FileNotFoundError:
            return ""

    def log_size(self) -> int:
        try:
            return self.log_path.stat().st_size
        except FileNotFoundError:
            return 0

    def tail(self, lines: int = 30) -> str:
        if not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def registered(self) -> bool:
        """Whether the process, since it was spawned, opened its port and registered itself in
        ZooKeeper; FlussError with the log tail when it exited instead."""
        if not self.alive:
            code = self.proc.poll() if self.proc is not None else None
            raise FlussError(f"{self.name} exited (status {code}) while starting; "
                             f"log {self.log_path}:\n{self.tail()}")
        if self.port is None or not port_open(self.host, self.port, timeout_s=0.5):
            return False
        text = self.log_since_spawn()
        if self.role == "coordinator":
            # Written once it leads (after any stale leader znode expired) and loaded the
            # cluster state from ZooKeeper.
            return "End initializing coordinator context" in text
        return re.search(rf"Registered tablet server {self.server_id} at path", text) is not None


class ApacheFlussProcesses(LocalProcesses[JavaServer]):
    """Apache Fluss ``version`` (coordinator + ``tablets`` tablet servers) rooted at ``base_dir``.

    ``options`` are server settings (``{key: value}`` or ``key=value`` strings) for every server,
    on top of ``DEFAULT_OPTIONS``; ``zookeeper`` is ``host:port`` of an external ZooKeeper
    (None starts one under ``base_dir/zookeeper``); clusters sharing one ZooKeeper need
    distinct ``zookeeper.path.root`` options. ``sasl``: clients must log in with SASL PLAIN
    (see the module docstring); ``admin``, a super user, gets a random password in
    ``users_file``.
    """

    def __init__(self, base_dir: str | Path, tablets: int = 1, version: str = DEFAULT_VERSION,
                 zookeeper: str | None = None, options=None, host: str = "127.0.0.1",
                 heap: str = "512m", startup_timeout_s: float = 120.0, sasl: bool = False,
                 remote_storage: str | None = None):
        self.version = version
        self.heap = heap
        self._sasl = sasl
        self.options = dict(DEFAULT_OPTIONS)
        self.options.update(parse_options(options))
        self._jars: list[Path] | None = None
        super().__init__(base_dir, tablets, zookeeper, host, startup_timeout_s, remote_storage)

    # -- SASL -----------------------------------------------------------------------------------
    @property
    def jaas_file(self) -> Path:
        return self.base_dir / "security" / "jaas.conf"

    @property
    def sasl(self) -> bool:
        return self._sasl

    @property
    def client_properties(self) -> dict[str, str]:
        """Fluss's client options that log in to this cluster as its super user (none for
        PLAINTEXT)."""
        if self.credentials is None:
            return {}
        user, password = self.credentials
        return {"client.security.protocol": "SASL", "client.security.sasl.mechanism": "PLAIN",
                "client.security.sasl.username": user, "client.security.sasl.password": password}

    @property
    def tls_client(self) -> None:
        """Apache Fluss has no TLS listeners."""
        return None

    def _write_security(self) -> Path | None:
        """The users file (once, random ``admin`` password) and, from it, the JAAS file the
        servers read; None for a PLAINTEXT cluster."""
        if not self.sasl:
            return None
        from fluss_spark.server.security import read_users_file
        write_secret_file(self.users_file, "# principals of this cluster: username:password\n"
                                           f"admin:{random_password()}\n")
        users = read_users_file(self.users_file)
        for user, password in users.items():
            # JAAS quotes option values in double quotes, and a user name is part of a key.
            if not re.fullmatch(r"[A-Za-z0-9._@-]+", user) or any(c in password for c in '"\\'):
                raise FlussError(f"{self.users_file}: user {user!r} cannot be written to JAAS: "
                                 "use letters, digits and ._@- in names, no quote or backslash "
                                 "in passwords")
        entries = "".join(f'\n  user_{u}="{p}"' for u, p in users.items())
        write_secret_file(self.jaas_file, f"FlussServer {{\n  {_PLAIN_LOGIN_MODULE} required"
                                          f"{entries};\n}};\n", replace=True)
        return self.jaas_file

    def _add_server(self, role: str, server_id: int) -> None:
        self.servers[(role, server_id)] = JavaServer(role, server_id, self.base_dir, self.host)

    # -- state file -----------------------------------------------------------------------------
    _state_file = STATE_FILE
    _state_version = STATE_VERSION

    @classmethod
    def load(cls, base_dir: str | Path) -> "ApacheFlussProcesses":
        """Re-attach to the cluster whose state is in ``base_dir`` (FlussError when none)."""
        state, saved = cls._saved(
            base_dir, f"no Apache Fluss cluster in {base_dir} (no {STATE_FILE}); start one with "
                      "`fluss-spark cluster start --engine apache-fluss`")
        return cls(base_dir, **saved, version=state["fluss_version"],
                   options=state.get("options"), heap=state.get("heap", "512m"),
                   sasl=bool(state.get("sasl", False)))

    def _merge_settings(self, state: dict) -> None:
        if state.get("fluss_version") != self.version:
            raise FlussError(f"{self.state_path} holds Apache Fluss {state.get('fluss_version')}, "
                             f"not {self.version}; stop it and use another directory")
        if bool(state.get("sasl", False)) != self.sasl:
            raise FlussError(f"{self.state_path} holds a cluster "
                             f"{'with' if state.get('sasl') else 'without'} SASL; stop it and "
                             "use another directory")

    def _merge_state(self) -> None:
        super()._merge_state()
        state = read_state(self.base_dir) or {}
        for s in state.get("servers") or ():
            server = self.servers.get((s["role"], int(s["id"])))
            if server is not None:
                server.internal_port = s.get("internal_port")

    def _servers_state(self) -> list[dict]:
        rows = super()._servers_state()
        for row in rows:
            row["internal_port"] = self.servers[(row["role"], row["id"])].internal_port
        return rows

    def _state(self) -> dict:
        return {
            "version": STATE_VERSION, "engine": ENGINE, "fluss_version": self.version,
            "host": self.host, "heap": self.heap, "options": self.options, "sasl": self.sasl,
            "remote_storage": self.remote_storage,
            "zookeeper": self._zookeeper_state(), "servers": self._servers_state(),
        }

    # -- addresses ------------------------------------------------------------------------------
    @property
    def bootstrap_servers(self) -> str:
        """The coordinator's ``host:port`` (clients learn the tablets from it)."""
        return self.address("coordinator", 0)

    @property
    def remote_data_dir(self) -> Path:
        """The local directory that is remote.data.dir when there is no object store."""
        return self.base_dir / "remote"

    @property
    def remote_data_uri(self) -> str:
        """remote.data.dir: ``s3://...`` in the object store, else ``remote_data_dir``."""
        store = self.object_store
        return str(self.remote_data_dir) if store is None else store.uri("remote")

    def log_path(self, role: str, server_id: int = 0) -> Path:
        if role == "zookeeper":
            return self._zk_dir / "zookeeper.log"
        return self._server(role, server_id).log_path

    # -- lifecycle ------------------------------------------------------------------------------
    def start(self) -> "ApacheFlussProcesses":
        """Start whatever is not running (ZooKeeper, coordinator, tablets) and wait until the
        coordinator has seen every tablet register."""
        jars = self.jars()   # before anything starts: a failed fetch leaves nothing to undo
        self._begin_start()
        self.base_dir.mkdir(parents=True, exist_ok=True)
        self.remote_data_dir.mkdir(exist_ok=True)
        self._start_object_store()
        self._ensure_zookeeper()
        self._save_state()
        self._report_running([s for s in self.servers.values() if s.alive])
        coord = self._server("coordinator", 0)
        if not coord.alive:
            self._spawn(coord, jars)
            self._wait([coord])
        tablets = [s for s in self.servers.values() if s.role == "tablet" and not s.alive]
        since = coord.log_size()
        for s in tablets:
            self._spawn(s, jars)
        self._wait(tablets)
        self._wait_coordinator_sees(tablets, since)
        return self

    def jars(self) -> list[Path]:
        """The server classpath: the release's jars, and with an object store its S3
        filesystem (Fluss finds filesystems on the classpath as well as in plugins/) and the
        store's keys."""
        if self._jars is None:
            self._jars = ensure_jars(self.version)
            store = self.object_store
            if store is not None:
                # The store's keys reach Fluss's S3 filesystem through a core-site.xml on the
                # classpath: Fluss logs every line of server.yaml, secrets included.
                self._jars = [store.hadoop_site(self.base_dir / "security" / "hadoop"),
                              *self._jars, *ensure_filesystem_jars(self.version, "s3")]
        return self._jars

    def stop(self, timeout_s: float = 30.0) -> None:
        """SIGTERM the tablets, then the coordinator, then an embedded ZooKeeper; SIGKILL what
        still runs after ``timeout_s``."""
        for role in ("tablet", "coordinator"):
            _terminate([s for s in self.servers.values() if s.role == role and s.alive],
                       timeout_s)
            for s in self.servers.values():
                if s.role == role:
                    s.pid, s.proc = None, None
        self._stop_zookeeper(timeout_s)
        self._stop_object_store(timeout_s)

    def restart(self, role: str, server_id: int = 0) -> None:
        """Stop (if running) and start one process again on the same port and data dir; waits
        until it registered again (after a kill -9, that is once its old ZooKeeper session
        expired: ``zookeeper.client.session-timeout``)."""
        if role == "zookeeper":
            self._restart_zookeeper()
            return
        s = self._server(role, server_id)
        if s.alive:
            _terminate([s], 30.0)
        coord = self._server("coordinator", 0)
        since = coord.log_size()
        self._spawn(s, self.jars())
        self._wait([s])
        if role == "tablet":
            self._wait_coordinator_sees([s], since)

    # -- internals ------------------------------------------------------------------------------
    def _spawn(self, s: JavaServer, jars: list[Path]) -> None:
        if s.port is None:
            s.port = free_port(self.host)
        if self.sasl and s.internal_port is None:
            s.internal_port = free_port(self.host)
        assert self.zookeeper_address is not None
        store = self.object_store
        options = self.options if store is None else {
            # Path-style requests: the store is one host, with no per-bucket DNS names.
            "s3.endpoint": store.endpoint, "s3.region": REGION, "s3.path-style-access": "true",
            **self.options}
        s.write_config(self.zookeeper_address, self.remote_data_uri, options, self.sasl)
        s.spawn(jars, self.heap, self._write_security())
        self._save_state()

    def _wait(self, servers: list[JavaServer]) -> None:
        self._wait_for(servers, lambda s: s.registered(), "register", 0.1)

    def _wait_coordinator_sees(self, tablets: list[JavaServer], since: int) -> None:
        """Wait until the coordinator logged, after offset ``since`` of its log (or after its own
        start), that each of ``tablets`` arrived."""
        if not tablets:
            return
        coord = self._server("coordinator", 0)
        start = max(since, coord.log_offset)
        deadline = time.monotonic() + self.startup_timeout_s
        while True:
            try:
                with open(coord.log_path, "rb") as f:
                    f.seek(start)
                    text = f.read().decode(errors="replace")
            except FileNotFoundError:
                text = ""
            seen = {int(m) for m in re.findall(r"New tablet server callback for tablet server "
                                               r"(\d+)", text)}
            missing = [s.server_id for s in tablets if s.server_id not in seen]
            if not missing:
                return
            if not coord.alive:
                raise FlussError(f"the coordinator exited; log {coord.log_path}:\n{coord.tail()}")
            if time.monotonic() > deadline:
                raise FlussError(f"the coordinator did not see tablet servers {missing} within "
                                 f"{self.startup_timeout_s:.0f}s\n{self.log_tails()}")
            time.sleep(0.1)


def _terminate(servers: list[JavaServer], timeout_s: float) -> None:
    """SIGTERM every server at once (Fluss shuts down on it), then wait for all; SIGKILL what
    outlives ``timeout_s``."""
    for s in servers:
        signal_pid(s.pid, signal.SIGTERM)
    wait_dead([(s.pid, s.proc) for s in servers], timeout_s)


def parse_options(options) -> dict[str, str]:
    """``{key: value}`` or an iterable of ``key=value`` strings as a dict (FlussError otherwise)."""
    if not options:
        return {}
    if isinstance(options, dict):
        return {str(k): str(v) for k, v in options.items()}
    return parse_pairs(options, "server option")


def read_state(base_dir: Path) -> dict | None:
    """The Apache Fluss cluster state of ``base_dir`` (None when absent); refuses unknown
    versions."""
    return read_state_file(Path(base_dir) / STATE_FILE, STATE_VERSION)
