"""Start and stop a standalone Apache ZooKeeper server on a loopback port.

ZooKeeper's jars come from ``ZOOKEEPER_HOME`` (an Apache binary release:
``$ZOOKEEPER_HOME/lib/*.jar``), else from the cache, fetched once from a Maven repository
(``fluss_spark.local.zookeeper_jars``): Java is all a machine needs.
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
from fluss_spark.local import zookeeper_jars
from fluss_spark.local.ports import free_port, wait_until

INSTALL_HINT = ("install Java 17 or later (e.g. sudo apt-get install -y "
                "openjdk-17-jre-headless) or set JAVA_HOME")

#: INFO to the console (the process's log file): without a configuration logback logs DEBUG.
_LOGBACK_XML = """<configuration>
  <appender name="out" class="ch.qos.logback.core.ConsoleAppender">
    <encoder><pattern>%d{ISO8601} %-5level [%thread] %logger{36} - %msg%n</pattern></encoder>
  </appender>
  <root level="INFO"><appender-ref ref="out"/></root>
</configuration>
"""


def zookeeper_classpath() -> str:
    """The classpath of ZooKeeper: ``$ZOOKEEPER_HOME``'s jars, else the pinned jars of the cache
    (fetched first if needed)."""
    home = os.environ.get("ZOOKEEPER_HOME")
    if home:
        jars = (glob.glob(os.path.join(home, "lib", "*.jar"))
                + glob.glob(os.path.join(home, "*.jar")))
        if jars:
            return os.pathsep.join(sorted(jars))
        raise FlussError(f"ZOOKEEPER_HOME={home} has no jars under lib/; point it at an Apache "
                         "ZooKeeper release, or unset it to use the jars fetched from Maven")
    return zookeeper_jars.JARS.classpath()


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
        (self.data_dir / "logback.xml").write_text(_LOGBACK_XML)
        return cfg

    def start(self, timeout_s: float = 30.0) -> "ZooKeeperProcess":
        cfg = self.write_config()
        cmd = [java_binary(), "-Xmx256m", "-Dzookeeper.jmx.log4j.disable=true",
               f"-Dlogback.configurationFile={self.data_dir / 'logback.xml'}",
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

