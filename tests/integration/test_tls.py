"""A cluster that listens with TLS and requires SASL inside it (real processes): clients that
trust its CA work, the password never crosses the network in cleartext, and clients that do not
speak TLS or do not trust the certificate are refused at once in one line."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
import uuid

import pyarrow as pa
import pytest

from fluss_spark.client import FlussConnection, TlsClientConfig
from fluss_spark.connector.options import parse_options
from fluss_spark.errors import TlsHandshakeFailed
from fluss_spark.local.certificates import TlsFiles


@pytest.fixture(scope="module")
def tls_cluster(zookeeper, tmp_path_factory):
    """An EmbeddedProcesses (coordinator + 1 tablet) with TLS and SASL, as `cluster start --sasl
    --tls` makes it."""
    from fluss_spark.local.embedded import EmbeddedProcesses
    local = EmbeddedProcesses(tmp_path_factory.mktemp("tls") / "c", tablets=1, sasl=True, tls=True,
                              zookeeper=f"{zookeeper.address}/fluss-tls-{uuid.uuid4().hex[:12]}")
    local.start()
    yield local
    local.stop()


class Relay:
    """A TCP relay to one server that keeps every byte the client sent (what a network sees)."""

    def __init__(self, target: tuple[str, int]):
        self.target = target
        self.sent = bytearray()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.target)
            threading.Thread(target=self._pump, args=(client, server, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, False), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, record: bool) -> None:
        try:
            while data := src.recv(65536):
                if record:
                    self.sent += data
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self._listener.close()


def coordinator_address(cluster) -> tuple[str, int]:
    coord = next(s for s in cluster.servers.values() if s.role == "coordinator")
    return cluster.host, coord.port


def test_a_client_over_tls_with_sasl_writes_and_scans_and_no_password_is_on_the_wire(
        tls_cluster):
    user, password = tls_cluster.credentials
    relay = Relay(coordinator_address(tls_cluster))
    try:
        with FlussConnection(f"127.0.0.1:{relay.port}", request_timeout_s=20, username=user,
                             password=password, tls=tls_cluster.tls_client) as conn:
            admin = conn.admin()
            admin.create_table("t.pk", "id BIGINT NOT NULL, v STRING", primary_key=["id"],
                               num_buckets=1)
            conn.writer("t.pk").upsert(pa.table({"id": pa.array(range(5), pa.int64()),
                                                 "v": [f"v{i}" for i in range(5)]}))
            # The tablet commits the snapshot to the coordinator as the internal principal,
            # over TLS as well.
            snap = admin.trigger_kv_snapshot("t.pk")[0]
            rows = conn.kv_scanner("t.pk").scan(0, snapshot_id=snap.snapshot_id).read_all()
            assert sorted(rows.column("v").to_pylist()) == [f"v{i}" for i in range(5)]
            assert "t.pk" in admin.list_tables()
    finally:
        relay.close()
    assert len(relay.sent) > 500 and relay.sent[:2] == b"\x16\x03"    # a TLS handshake went by
    assert password.encode() not in relay.sent
    assert user.encode() not in relay.sent and b"t.pk" not in relay.sent


def test_a_plaintext_client_is_refused_at_once_with_what_to_set(tls_cluster):
    user, password = tls_cluster.credentials
    host, port = coordinator_address(tls_cluster)
    started = time.monotonic()
    with pytest.raises(TlsHandshakeFailed) as err:
        with FlussConnection(f"{host}:{port}", request_timeout_s=30, username=user,
                             password=password) as conn:
            conn.admin().list_tables()
    assert time.monotonic() - started < 5
    message = str(err.value)
    assert f"{host}:{port}" in message and "client.security.ssl.enabled=true" in message
    assert len(message.splitlines()) == 1 and password not in message


def test_a_client_that_does_not_trust_the_certificate_is_refused(tls_cluster, tmp_path):
    other_ca = TlsFiles(tmp_path / "other").create().ca_file
    host, port = coordinator_address(tls_cluster)
    user, password = tls_cluster.credentials
    with pytest.raises(TlsHandshakeFailed,
                       match=f"certificate verification failed for {host}:{port}"):
        with FlussConnection(f"{host}:{port}", request_timeout_s=30, username=user,
                             password=password, tls=TlsClientConfig(str(other_ca))) as conn:
            conn.admin().list_tables()


def test_the_source_options_and_the_cli_connect_with_tls(tls_cluster):
    user, password = tls_cluster.credentials
    options = parse_options({"bootstrap.servers": tls_cluster.bootstrap_servers, "table": "x.y",
                             "client.security.sasl.username": user,
                             "client.security.sasl.password": password,
                             "client.security.ssl.enabled": "true",
                             "client.security.ssl.ca-file": str(tls_cluster.tls_files.ca_file)})
    cluster = options.connect()
    try:
        cluster.create_table("t.opts", pa.schema([("k", pa.int64())]))
        assert "t.opts" in cluster.list_tables()
    finally:
        cluster.close()
    # The command line finds the local cluster's CA (and super user) in its directory.
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLUSS_")}
    env.update(FLUSS_SPARK_HOME=str(tls_cluster.base_dir),
               FLUSS_BOOTSTRAP_SERVERS=tls_cluster.bootstrap_servers)
    done = subprocess.run([sys.executable, "-m", "fluss_spark.cli", "--json", "table", "list"],
                          env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "t.opts" in done.stdout
