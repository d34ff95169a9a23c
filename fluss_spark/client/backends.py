"""Which cluster a bootstrap address names (this project's servers or Apache Fluss), and opening it.

``bootstrap.servers`` alone is enough: the first reachable server is asked an Apache Fluss
API_VERSIONS request; a Fluss server answers in Fluss's protocol, this project's servers answer
(an error) in their own msgpack frames. The answer is remembered per address for the life of the
process, so a Spark worker probes once. An explicit engine skips the probe.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from fluss_spark.client.cluster import Cluster
from fluss_spark.client.bootstrap import parse_bootstrap
from fluss_spark.errors import ConfigError, NetworkError

if TYPE_CHECKING:
    from fluss_spark.client.remote_storage import RemoteStorage
    from fluss_spark.transport.tls import TlsClientConfig

EMBEDDED, APACHE_FLUSS, AUTO = "embedded", "apache-fluss", "auto"
#: What an engine option or flag may say.
ENGINES = (AUTO, EMBEDDED, APACHE_FLUSS)
#: How messages name a cluster of each engine.
ENGINE_NAMES = {EMBEDDED: "fluss_spark's servers", APACHE_FLUSS: "Apache Fluss"}

_DETECTED: dict[str, str] = {}
_LOCK = threading.Lock()


def detect_engine(bootstrap_servers: str, timeout_s: float = 5.0) -> str:
    """``apache-fluss`` or ``embedded``: what the first reachable bootstrap server speaks."""
    with _LOCK:
        known = _DETECTED.get(bootstrap_servers)
    if known is not None:
        return known
    from fluss_spark.transport.apache_fluss import speaks_fluss
    from fluss_spark.transport.probe import reachable
    tried = []
    for host, port in parse_bootstrap(bootstrap_servers):
        tried.append(f"{host}:{port}")
        if not reachable(host, port, timeout_s=timeout_s):
            continue
        engine = APACHE_FLUSS if speaks_fluss(host, port, timeout_s) else EMBEDDED
        with _LOCK:
            _DETECTED[bootstrap_servers] = engine
        return engine
    raise NetworkError(f"cannot reach any server of {bootstrap_servers} (tried "
                       f"{', '.join(tried)}); check bootstrap.servers and that the cluster runs")


def open_cluster(bootstrap_servers: str, *, engine: str = AUTO, request_timeout_s: float = 60.0,
                 username: str | None = None, password: str | None = None,
                 tls: "TlsClientConfig | None" = None,
                 storage: "RemoteStorage | None" = None,
                 short_circuit_reads: bool = False) -> Cluster:
    """The ``Cluster`` at ``bootstrap_servers``: this project's servers (``EmbeddedCluster``) or an
    Apache Fluss cluster (``ApacheFlussWireCluster``); ``engine`` ``auto`` probes, except with
    ``tls``: only this project's servers speak TLS to this client, and a plaintext probe of a
    TLS listener would only be refused. ``storage``: how the client reads the files an Apache
    Fluss cluster points it to (this project's servers read their own files);
    ``short_circuit_reads``: snapshot scans read the files of this project's tablet servers on
    the client's host directly."""
    if engine not in ENGINES:
        raise ConfigError(f"engine must be one of {', '.join(ENGINES)}, got {engine!r}")
    if engine == AUTO and tls is not None:
        engine = EMBEDDED
    if engine == AUTO:
        engine = detect_engine(bootstrap_servers, timeout_s=min(5.0, request_timeout_s))
    if engine == APACHE_FLUSS:
        if tls is not None:
            raise ConfigError("TLS is not supported for Apache Fluss clusters (Apache Fluss has "
                              "no TLS listeners): connect without TLS")
        from fluss_spark.client.apache_fluss.cluster import ApacheFlussWireCluster
        from fluss_spark.client.remote_storage import RemoteStorage
        return ApacheFlussWireCluster.connect(bootstrap_servers,
                                              request_timeout_s=request_timeout_s,
                                              username=username, password=password,
                                              storage=storage or RemoteStorage())
    from fluss_spark.client.embedded.cluster import EmbeddedCluster
    return EmbeddedCluster.connect(bootstrap_servers, request_timeout_s=request_timeout_s,
                                   username=username, password=password, tls=tls,
                                   short_circuit_reads=short_circuit_reads)


def use_cpus(n: int | None) -> None:
    """Let a read in this process decode on up to ``n`` threads (None: on every CPU it may run
    on). A Spark task passes the CPUs it was given (``spark.task.cpus``), so the tasks sharing an
    executor's cores do not each start more decoding threads than they have cores for."""
    from fluss_spark.protocol.apache_fluss.compiled import use_threads
    use_threads(n)
