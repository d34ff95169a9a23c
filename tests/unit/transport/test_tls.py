"""TLS without SASL on an in-process RpcServer: replies of any size, one connection reused, a
handshake that never ends closed at the deadline, and each side told when the other does not
speak TLS."""

from __future__ import annotations

import socket
import time

import pytest

from fluss_spark.errors import ConfigError, TlsHandshakeFailed
from fluss_spark.local.certificates import TlsFiles
from fluss_spark.local.ports import wait_until
from fluss_spark.protocol.api import ApiKey
from fluss_spark.testing.blob_api import GetBlob, pattern, serve_blobs
from fluss_spark.transport.client import RpcConnection
from fluss_spark.transport.limits import RpcLimits
from fluss_spark.transport.server import RpcServer
from fluss_spark.transport.tls import (TlsClientConfig, client_context, from_environment,
                                       server_context)


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory) -> TlsFiles:
    return TlsFiles(tmp_path_factory.mktemp("tls") / "tls").create()


@pytest.fixture
def tls_server(tls_files):
    srv = RpcServer("127.0.0.1", 0, role="tablet", server_id=1,
                    limits=RpcLimits(handler_threads=2, auth_timeout_s=0.5),
                    tls=server_context(str(tls_files.certificate_file), str(tls_files.key_file)))
    serve_blobs(srv)
    srv.start()
    yield srv
    srv.stop()


def test_the_files_are_private_and_the_ca_key_is_gone(tls_files):
    names = sorted(p.name for p in tls_files.directory.iterdir())
    assert names == ["ca.pem", "server.key", "server.pem"]
    assert all(p.stat().st_mode & 0o777 == 0o600 for p in tls_files.directory.iterdir())
    assert tls_files.directory.stat().st_mode & 0o777 == 0o700


def test_tls_alone_carries_small_and_large_replies_on_one_connection(tls_server, tls_files):
    for host in ("127.0.0.1", "localhost"):      # both are names of the certificate
        rpc = RpcConnection(host, tls_server.port, timeout_s=10,
                            tls=TlsClientConfig(str(tls_files.ca_file)))
        try:
            assert rpc.call(GetBlob(size=256)).data == pattern(256)
            first = rpc._sock
            big = rpc.call(GetBlob(size=12 << 20)).data        # more than a socket takes at once
            assert big == pattern(12 << 20)
            assert rpc.call_raw(ApiKey.API_VERSIONS)["server"] == "tablet"
            assert rpc._sock is first                            # never reconnected
        finally:
            rpc.close()


def test_a_handshake_that_never_finishes_is_closed_at_the_authentication_deadline(tls_server):
    s = socket.create_connection(("127.0.0.1", tls_server.port))
    try:
        s.sendall(b"\x16\x03\x01\x02\x00\x01")      # the start of a ClientHello, then nothing
        s.settimeout(10)
        started = time.monotonic()
        assert s.recv(1024) == b""
        assert time.monotonic() - started < 3
    finally:
        s.close()
    wait_until(lambda: tls_server.stats["unauthenticated"] == 1, 5, "the eviction to count")


def test_a_plaintext_client_and_a_plaintext_server_each_fail_in_one_line(tls_server, tls_files):
    plain_client = RpcConnection("127.0.0.1", tls_server.port, timeout_s=30)
    started = time.monotonic()
    with pytest.raises(TlsHandshakeFailed, match=rf"127.0.0.1:{tls_server.port}: the tablet "
                                                 r"listens with TLS only .*client.security.ssl"):
        plain_client.call_raw(ApiKey.API_VERSIONS)
    plain_server = RpcServer("127.0.0.1", 0, role="tablet", server_id=2)
    plain_server.start()
    try:
        tls_client = RpcConnection("127.0.0.1", plain_server.port, timeout_s=30,
                                   tls=TlsClientConfig(str(tls_files.ca_file)))
        with pytest.raises(TlsHandshakeFailed, match=rf"TLS handshake with 127.0.0.1:"
                                                     rf"{plain_server.port} failed .* does not "
                                                     r"listen with TLS"):
            tls_client.call_raw(ApiKey.API_VERSIONS)
    finally:
        plain_server.stop()
    assert time.monotonic() - started < 5


def test_a_certificate_for_another_name_is_refused_unless_hostname_checks_are_off(
        tls_server, tls_files, tmp_path):
    # The certificate names 127.0.0.1 and localhost, not 127.0.0.2 (which reaches the server
    # only when it listens on every address): checked through the context instead.
    ctx = client_context(str(tls_files.ca_file), True)
    raw = socket.create_connection(("127.0.0.1", tls_server.port))
    with pytest.raises(Exception, match="match|mismatch"):
        ctx.wrap_socket(raw, server_hostname="fluss.example.com")
    raw.close()
    relaxed = RpcConnection("127.0.0.1", tls_server.port, timeout_s=10,
                            tls=TlsClientConfig(str(tls_files.ca_file), verify_hostname=False))
    assert relaxed.call_raw(ApiKey.API_VERSIONS)["server"] == "tablet"
    relaxed.close()


def test_bad_tls_files_are_one_line_errors_naming_the_file(tmp_path, tls_files):
    with pytest.raises(ConfigError, match=r"the TLS CA file /nope/ca.pem does not exist"):
        client_context("/nope/ca.pem")
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate\n")
    with pytest.raises(ConfigError, match=rf"cannot load the TLS CA file {junk}"):
        client_context(str(junk))
    with pytest.raises(ConfigError, match=r"security.ssl.key-file: /nope/key does not exist"):
        server_context(str(tls_files.certificate_file), "/nope/key")
    with pytest.raises(ConfigError, match=rf"cannot load the TLS certificate {junk}"):
        server_context(str(junk), str(tls_files.key_file))


def test_the_environment_asks_for_tls():
    assert from_environment(environ={}) is None
    assert from_environment(True, environ={}) == TlsClientConfig(None, True)
    assert from_environment(environ={"FLUSS_TLS_CA_FILE": "/ca.pem"}) == \
        TlsClientConfig("/ca.pem", True)
    assert from_environment(environ={"FLUSS_TLS": "true", "FLUSS_TLS_VERIFY_HOSTNAME": "false"}) \
        == TlsClientConfig(None, False)
    with pytest.raises(ConfigError, match="FLUSS_TLS: expected true or false"):
        from_environment(environ={"FLUSS_TLS": "maybe"})
