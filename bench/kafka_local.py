"""A single-node Apache Kafka broker (KRaft, broker and controller in one JVM) on loopback, and
the jars of Spark's Kafka source, both fetched from Maven Central by Maven and cached under
``kafka/`` of the cache (``fluss_spark.local.cache``: ``$FLUSS_SPARK_CACHE``, else the user's
cache directory), for the benchmarks in this folder. Unlike the package's pinned jar sets, these
resolve a dependency tree, so they need Maven.

- broker: ``org.apache.kafka:kafka_2.13`` and its runtime dependency tree, with the log binding
  Kafka's distribution ships (``slf4j-reload4j``);
- connector: ``spark-sql-kafka-0-10_2.13``, ``spark-token-provider-kafka-0-10_2.13``,
  ``kafka-clients`` and ``commons-pool2`` alone (what else they need ships with pyspark), for
  ``spark.jars``.

Maven runs with a settings file of its own whose mirror sends every repository a pom names to
Maven Central (Spark's poms name others).

The broker is a ``fluss_spark.local.processes.ManagedServer`` (role ``kafka``), started, stopped
and killed with the helpers of ``fluss_spark.local.server_process`` like the clusters' servers.

Run ``python bench/kafka_local.py`` to fetch both sets and print the jars.
"""

from __future__ import annotations

import base64
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import uuid
from pathlib import Path

from fluss_spark.local.cache import cache_root
from fluss_spark.local.ports import free_port, wait_until
from fluss_spark.local.server_process import pid_alive, signal_pid, wait_dead
from fluss_spark.local.zookeeper import java_binary

#: The broker's version; the same as the ``kafka-clients`` of the connector below.
KAFKA_VERSION = "3.9.2"
#: The newest Spark Kafka connector on Maven Central for Scala 2.13 (4.3.0 is not published
#: there); it runs inside pyspark 4.3.0.
SPARK_KAFKA_VERSION = "4.2.0"
COMMONS_POOL2_VERSION = "2.13.1"
#: Pinned, so that a fetch does the same thing on every machine.
DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1"

#: slf4j-reload4j is the log binding of Kafka's own distribution (the pom leaves it out).
BROKER = [("org.apache.kafka", "kafka_2.13", KAFKA_VERSION),
          ("org.slf4j", "slf4j-reload4j", "1.7.36")]
CONNECTOR = [("org.apache.spark", "spark-sql-kafka-0-10_2.13", SPARK_KAFKA_VERSION),
             ("org.apache.spark", "spark-token-provider-kafka-0-10_2.13", SPARK_KAFKA_VERSION),
             ("org.apache.kafka", "kafka-clients", KAFKA_VERSION),
             ("org.apache.commons", "commons-pool2", COMMONS_POOL2_VERSION)]

#: Written when every jar is in place: the requested coordinates, then one jar name a line.
_COMPLETE = ".complete"
_SETTINGS = """<settings xmlns="http://maven.apache.org/SETTINGS/1.0.0">
  <mirrors><mirror><id>central-only</id><mirrorOf>*</mirrorOf>
    <url>https://repo.maven.apache.org/maven2</url></mirror></mirrors>
</settings>
"""


def _pom(artifacts: list[tuple[str, str, str]], transitive: bool) -> str:
    excl = ("" if transitive else
            "<exclusions><exclusion><groupId>*</groupId><artifactId>*</artifactId>"
            "</exclusion></exclusions>")
    deps = "".join(f"    <dependency><groupId>{g}</groupId><artifactId>{a}</artifactId>"
                   f"<version>{v}</version>{excl}</dependency>\n" for g, a, v in artifacts)
    return ("<project xmlns=\"http://maven.apache.org/POM/4.0.0\">\n"
            "  <modelVersion>4.0.0</modelVersion>\n"
            "  <groupId>local.fluss-spark</groupId><artifactId>bench-kafka-jars</artifactId>"
            "<version>1</version><packaging>pom</packaging>\n"
            f"  <dependencies>\n{deps}  </dependencies>\n</project>\n")


def _fetch(name: str, artifacts: list[tuple[str, str, str]], transitive: bool,
           timeout_s: float = 1800.0) -> list[Path]:
    """The jars of ``artifacts`` (with their runtime dependencies when ``transitive``) in
    ``kafka/<name>/`` of the cache, fetched once with Maven (strict checksums); later calls only
    look."""
    lib = cache_root() / "kafka" / name
    done = lib / _COMPLETE
    wanted_line = " ".join(":".join(c) for c in artifacts)
    if done.exists():
        head, *names = done.read_text().splitlines() or [""]
        jars = [lib / n for n in names]
        if head == wanted_line and jars and all(j.is_file() for j in jars):
            return jars
    mvn = os.environ.get("MVN") or shutil.which("mvn")
    if not mvn:
        raise RuntimeError("Maven (mvn) was not found on PATH; it fetches the Kafka jars from "
                           "Maven Central (apt-get install -y maven openjdk-17-jre-headless)")
    lib.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="jars-", dir=lib.parent) as work:
        pom = Path(work) / "pom.xml"
        pom.write_text(_pom(artifacts, transitive))
        settings = Path(work) / "settings.xml"
        settings.write_text(_SETTINGS)
        staging = Path(work) / "lib"
        cmd = [mvn, "-B", "-q", "-C", "-s", str(settings), "-f", str(pom),
               f"{DEPENDENCY_PLUGIN}:copy-dependencies", "-DincludeScope=runtime",
               f"-DoutputDirectory={staging}"]
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s,
                             stdin=subprocess.DEVNULL)
        if res.returncode != 0:
            out = (res.stdout + res.stderr).strip().splitlines()
            raise RuntimeError(f"fetching the {name} jars failed (exit status {res.returncode}): "
                               f"{' '.join(cmd)}\n" + "\n".join(out[-30:]))
        jars = sorted(staging.glob("*.jar"))
        wanted = {f"{a}-{v}.jar" for _, a, v in artifacts}
        missing = wanted - {j.name for j in jars}
        if missing:
            raise RuntimeError(f"Maven did not produce {', '.join(sorted(missing))}")
        for old in lib.glob("*.jar"):
            old.unlink()
        for j in jars:
            os.replace(j, lib / j.name)
    done.write_text(wanted_line + "\n" + "".join(f"{j.name}\n" for j in jars))
    return [lib / j.name for j in jars]


def broker_jars() -> list[Path]:
    return _fetch(f"broker-{KAFKA_VERSION}", BROKER, transitive=True)


def connector_jars() -> list[Path]:
    return _fetch(f"spark-connector-{SPARK_KAFKA_VERSION}", CONNECTOR, transitive=False)


def _random_cluster_id() -> str:
    """A Kafka cluster id: 16 random bytes, URL-safe base64 without padding."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


class KafkaBroker:
    """One KRaft node (``process.roles=broker,controller``) in ``work_dir``; ``bootstrap`` is
    ``127.0.0.1:<port>``. New topics get ``partitions`` partitions, replication factor 1."""

    role = "kafka"
    server_id = 1

    def __init__(self, work_dir: str | Path, partitions: int = 1, heap: str = "512m"):
        self.work = Path(work_dir)
        self.partitions = partitions
        self.heap = heap
        self.host = "127.0.0.1"
        self.port: int | None = free_port(self.host)
        self.controller_port = free_port(self.host)
        self.proc: subprocess.Popen | None = None
        self.pid: int | None = None
        self.log_path = self.work / "broker.out"

    @property
    def name(self) -> str:
        return f"{self.role} {self.server_id}"

    @property
    def alive(self) -> bool:
        # The config file is on the command line, so a reused pid is never taken for the broker.
        return self.pid is not None and pid_alive(self.pid, self.proc,
                                                  str(self.work / "server.properties"))

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def _write_config(self) -> Path:
        self.work.mkdir(parents=True, exist_ok=True)
        (self.work / "logs").mkdir(exist_ok=True)
        props = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@{self.host}:{self.controller_port}",
            "listeners": f"PLAINTEXT://{self.host}:{self.port},"
                         f"CONTROLLER://{self.host}:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://{self.host}:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(self.work / "data"),
            "num.partitions": str(self.partitions),
            "auto.create.topics.enable": "true",
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            "num.network.threads": "2",
            "num.io.threads": "2",
        }
        cfg = self.work / "server.properties"
        cfg.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        log4j = self.work / "log4j.properties"
        log4j.write_text("log4j.rootLogger=WARN, out\n"
                         "log4j.appender.out=org.apache.log4j.ConsoleAppender\n"
                         "log4j.appender.out.layout=org.apache.log4j.PatternLayout\n"
                         "log4j.appender.out.layout.ConversionPattern=[%d] %p %m (%c)%n\n"
                         "log4j.logger.kafka=INFO\n")
        return cfg

    def _java(self, main: str, *args: str) -> list[str]:
        cp = os.pathsep.join(str(j) for j in broker_jars())
        return [java_binary(), f"-Xmx{self.heap}", "-XX:+UseG1GC",
                f"-Dlog4j.configuration=file:{self.work / 'log4j.properties'}",
                f"-Dkafka.logs.dir={self.work / 'logs'}", "-cp", cp, main, *args]

    def start(self, timeout_s: float = 60.0) -> "KafkaBroker":
        cfg = self._write_config()
        fmt = subprocess.run(self._java("kafka.tools.StorageTool", "format", "-t",
                                        _random_cluster_id(), "-c", str(cfg)),
                             capture_output=True, text=True, timeout=120,
                             stdin=subprocess.DEVNULL)
        if fmt.returncode != 0:
            raise RuntimeError(f"formatting the Kafka storage failed:\n{fmt.stdout}{fmt.stderr}")
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self._java("kafka.Kafka", str(cfg)), stdout=log,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     start_new_session=True)
        self.pid = self.proc.pid
        log.close()
        try:
            wait_until(self._ready, timeout_s, f"Kafka on {self.bootstrap}")
        except BaseException:  # noqa: BLE001 - stops the broker, then raises
            self.stop()
            tail = self.log_path.read_text(errors="replace")[-3000:]
            raise RuntimeError(f"Kafka did not start on {self.bootstrap}; log:\n{tail}") from None
        return self

    def _ready(self) -> bool:
        if not self.alive:
            code = self.proc.returncode if self.proc is not None else None
            raise RuntimeError(f"Kafka exited with status {code}")
        if "started (kafka.server.KafkaRaftServer)" not in self.log_path.read_text(
                errors="replace"):
            return False
        try:
            with socket.create_connection((self.host, self.port), timeout=1.0):
                return True
        except OSError:
            return False

    def stop(self, timeout_s: float = 20.0) -> None:
        """SIGTERM, then SIGKILL after ``timeout_s``; the process is gone when this returns."""
        if self.alive:
            signal_pid(self.pid, signal.SIGTERM)
            wait_dead([(self.pid, self.proc)], timeout_s)

    def kill(self) -> None:
        """kill -9 (no shutdown code runs) and wait until the process is gone."""
        if self.alive:
            signal_pid(self.pid, signal.SIGKILL)
            wait_dead([(self.pid, self.proc)], 10.0)

    def __enter__(self) -> "KafkaBroker":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


if __name__ == "__main__":
    for j in broker_jars() + connector_jars():
        print(j)
