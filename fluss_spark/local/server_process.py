"""ServerProcess: one ``python -m fluss_spark.server coordinator|tablet`` child process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import fluss_spark
from fluss_spark.errors import FlussError
from fluss_spark.local.ports import wait_until


class ServerProcess:
    """A coordinator or tablet server run as a process in its own session, logging to a file.

    ``port`` 0 lets the server pick one; after the first start the port it reported in its ready
    file is kept, so ``restart`` (and a later ``start``) reuse the same port and data dir. A
    process known only by ``pid`` (e.g. one started by an earlier program) is recognised by its
    data dir on its command line, so a reused pid is never taken for it.
    """

    def __init__(self, role: str, zk_address: str | None, *, data_dir: str | Path,
                 remote_data_dir: str | Path, ready_file: str | Path, log_path: str | Path,
                 server_id: int = 0, host: str = "127.0.0.1", port: int | None = 0,
                 options=(), disabled_apis=(), env: dict[str, str] | None = None):
        self.role = role
        self.server_id = server_id
        self.zk_address = zk_address
        self.host = host
        self.port = port
        self.data_dir = Path(data_dir)
        self.remote_data_dir = str(remote_data_dir)
        self.ready_file = Path(ready_file)
        self.log_path = Path(log_path)
        self.options = list(options)
        self.disabled_apis = list(disabled_apis)
        #: Variables added to the process's environment (e.g. how to reach remote storage).
        self.env = dict(env or {})
        self.proc: subprocess.Popen | None = None
        self.pid: int | None = None

    @property
    def name(self) -> str:
        return f"{self.role} {self.server_id}"

    def command(self) -> list[str]:
        cmd = [sys.executable, "-m", "fluss_spark.server", self.role, "--id", str(self.server_id),
               "--zookeeper", str(self.zk_address), "--host", self.host,
               "--port", str(self.port or 0), "--data-dir", str(self.data_dir),
               "--remote-data-dir", self.remote_data_dir, "--ready-file", str(self.ready_file),
               "--log-file", str(self.log_path)]
        for opt in self.options:
            cmd += ["--option", opt]
        for api in self.disabled_apis:
            cmd += ["--disable-api", api]
        return cmd

    # -- lifecycle ------------------------------------------------------------------------------
    def spawn(self) -> None:
        """Start the process without waiting for it to serve (see ``ready``)."""
        # The server rotates its log and keeps what it writes private (umask 077); what is made
        # here before it starts is private too.
        self.ready_file.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.ready_file.unlink(missing_ok=True)
        self.log_path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        env = {**os.environ, **self.env}
        # Servers import the same package as this process, installed or not.
        src = str(Path(fluss_spark.__file__).resolve().parents[1])
        env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
        fd = os.open(self.log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "ab") as log:
            log.write(f"=== {time.strftime('%Y-%m-%d %H:%M:%S')} starting {self.name} on "
                      f"port {self.port or 'any'} ===\n".encode())
            log.flush()
            self.proc = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True, env=env)
        self.pid = self.proc.pid

    def ready(self) -> bool:
        """Whether the server is serving (its ready file exists; host and port are read from
        it); raises FlussError with the log tail when the process has exited instead."""
        self.check_running()
        try:
            info = json.loads(self.ready_file.read_text())
        except FileNotFoundError:
            return False
        self.host, self.port = info["host"], info["port"]
        return True

    def wait_ready(self, timeout_s: float) -> None:
        wait_until(self.ready, timeout_s, f"{self.name}'s ready file", interval_s=0.05)

    def start(self, timeout_s: float = 60.0) -> "ServerProcess":
        self.spawn()
        self.wait_ready(timeout_s)
        return self

    def check_running(self) -> None:
        """Raise FlussError naming the exit status and showing the log when a started process
        has exited."""
        if self.pid and not self.alive:
            code = self.proc.returncode if self.proc is not None else None
            raise FlussError(f"{self.name} exited (status {code}) while starting; "
                             f"log {self.log_path}:\n{self.log()}")

    @property
    def alive(self) -> bool:
        pid = self.pid
        if not pid:
            return False
        return pid_alive(pid, self.proc, str(self.data_dir))

    def kill(self) -> None:
        """kill -9 (no shutdown code runs) and wait until the process is gone."""
        if self.alive:
            signal_pid(self.pid, signal.SIGKILL)
            wait_dead([(self.pid, self.proc)], 10.0)

    def stop(self, timeout_s: float = 15.0) -> None:
        """SIGTERM, then SIGKILL if still running after ``timeout_s``."""
        stop_all([self], timeout_s)

    def restart(self, timeout_s: float = 60.0) -> "ServerProcess":
        """Stop (if running) and start again on the same port and data dir."""
        self.stop()
        return self.start(timeout_s)

    def log(self, last_chars: int = 6000) -> str:
        return (self.log_path.read_text(errors="replace")[-last_chars:]
                if self.log_path.exists() else "")


def stop_all(servers: list[ServerProcess], timeout_s: float) -> None:
    """SIGTERM every running server at once, then wait for all; SIGKILL what outlives
    ``timeout_s``."""
    live = [s for s in servers if s.alive]
    for s in live:
        signal_pid(s.pid, signal.SIGTERM)
    wait_dead([(s.pid, s.proc) for s in live], timeout_s)


def signal_pid(pid: int | None, sig: int) -> None:
    if pid:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def wait_dead(procs: list[tuple[int | None, subprocess.Popen | None]], timeout_s: float) -> None:
    """Wait until every ``(pid, Popen or None)`` is gone, SIGKILLing those alive past the
    deadline."""
    deadline = time.monotonic() + timeout_s
    for pid, proc in procs:
        if not pid:
            continue
        while pid_alive(pid, proc, None):
            if time.monotonic() > deadline:
                signal_pid(pid, signal.SIGKILL)
                deadline = time.monotonic() + 5.0
            time.sleep(0.05)


def pid_alive(pid: int, proc: subprocess.Popen | None, marker: str | None) -> bool:
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
