"""Start and stop a standalone Apache ZooKeeper server on a loopback port.

ZooKeeper comes from Debian's ``zookeeper`` package (jars under /usr/share/java) or from
``ZOOKEEPER_HOME`` (an Apache binary release: ``$ZOOKEEPER_HOME/lib/*.jar``).
"""

from __future__ import annotations

import glob
import os
import shutil
import signal
import socket
import subprocess
from pathlib import Path

from fluss_spark.errors import FlussError
from fluss_spark.local.ports import free_port, wait_until

_DEBIAN_JAR = "/usr/share/java/zookeeper.jar"
INSTALL_HINT = ("install Java and ZooKeeper (sudo apt-get install -y openjdk-17-jre-headless "
                "zookeeper) or set ZOOKEEPER_HOME to an Apache ZooKeeper release")


def zookeeper_classpath() -> str:
    """The classpath of an installed ZooKeeper, or a FlussError saying how to install one."""
    home = os.environ.get("ZOOKEEPER_HOME")
    if home:
        jars = (glob.glob(os.path.join(home, "lib", "*.jar"))
                + glob.glob(os.path.join(home, "*.jar")))
        if jars:
            return os.pathsep.join(sorted(jars))
        raise FlussError(f"ZOOKEEPER_HOME={home} has no jars under lib/; {INSTALL_HINT}")
    if os.path.exists(_DEBIAN_JAR):
        # The Debian jar's manifest names its dependency jars.
        return _DEBIAN_JAR
    raise FlussError(f"Apache ZooKeeper was not found; {INSTALL_HINT}")


def java_binary() -> str:
    java = shutil.which("java") or (os.path.join(os.environ["JAVA_HOME"], "bin", "java")
                                    if os.environ.get("JAVA_HOME") else None)
    if not java or not os.path.exists(java):
        raise FlussError(f"java was not found on PATH; {INSTALL_HINT}")
    return java


def four_letter_word(host: str, port: int, word: str = "ruok", timeout_s: float = 1.0) -> str:
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as s:
            s.sendall(word.encode())
            chunks = []
            while True:
                data = s.recv(4096)
                if not data:
                    break
                chunks.append(data)
            return b"".join(chunks).decode(errors="replace")
    except OSError:
        return ""


class ZooKeeperProcess:
    """A standalone ZooKeeper with its own data dir; ``address`` is ``127.0.0.1:<port>``."""

    def __init__(self, data_dir: str | Path, port: int | None = None, host: str = "127.0.0.1"):
        self.data_dir = Path(data_dir)
        self.host = host
        self.port = port or free_port(host)
        self.proc: subprocess.Popen | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.data_dir / "zookeeper.log"

    def write_config(self) -> Path:
        (self.data_dir / "data").mkdir(parents=True, exist_ok=True)
        cfg = self.data_dir / "zoo.cfg"
        cfg.write_text("\n".join([
            "tickTime=500",
            "initLimit=10",
            "syncLimit=5",
            f"dataDir={self.data_dir / 'data'}",
            f"clientPort={self.port}",
            f"clientPortAddress={self.host}",
            "admin.enableServer=false",
            "4lw.commands.whitelist=ruok,srvr,mntr,stat",
            "maxSessionTimeout=60000",
            "minSessionTimeout=1000",
            "",
        ]))
        return cfg

    def start(self, timeout_s: float = 30.0) -> "ZooKeeperProcess":
        cfg = self.write_config()
        cmd = [java_binary(), "-Xmx256m", "-Dzookeeper.jmx.log4j.disable=true",
               "-cp", zookeeper_classpath(), "org.apache.zookeeper.server.ZooKeeperServerMain",
               str(cfg)]
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        log.close()
        try:
            wait_until(self._ready, timeout_s, f"ZooKeeper on {self.address}")
        except TimeoutError:
            self.stop()
            tail = (self.log_path.read_text(errors="replace")[-2000:]
                    if self.log_path.exists() else "")
            raise FlussError(f"ZooKeeper did not start on {self.address}; log:\n{tail}") from None
        return self

    def _ready(self) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            raise FlussError(f"ZooKeeper exited with status {self.proc.returncode}; "
                             f"see {self.log_path}")
        return four_letter_word(self.host, self.port) == "imok"

    def is_alive(self) -> bool:
        return four_letter_word(self.host, self.port) == "imok"

    def stop(self, timeout_s: float = 10.0) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def __enter__(self) -> "ZooKeeperProcess":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

