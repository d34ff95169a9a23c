"""TLS for the msgpack RPC: contexts, the client's handshake and the server's non-blocking parts.

The server speaks TLS on its one listener when ``security.ssl.enabled`` is set; SASL PLAIN, when
also on, runs inside the TLS connection, so a password never crosses the network in cleartext.
A peer speaking the other protocol is told so instead of being left waiting: a TLS listener
answers a plaintext request with an error frame (``TlsHandshakeFailed``), and a plaintext
listener answers a TLS ClientHello with a TLS alert, which the client reports in one line.
"""

from __future__ import annotations

import functools
import os
import selectors
import socket
import ssl
from dataclasses import dataclass
from typing import Mapping

from fluss_spark.config import parse_bool
from fluss_spark.errors import ConfigError, NetworkError, TlsHandshakeFailed
from fluss_spark.protocol import codec, framing

#: The first byte of a TLS record that carries a handshake message (a ClientHello).
_HANDSHAKE_RECORD = 0x16
#: A fatal ``protocol_version`` alert in a TLS 1.0 record: what a plaintext listener sends to a
#: TLS client, so the client fails at once with an SSL error instead of waiting.
PROTOCOL_VERSION_ALERT = bytes([0x15, 0x03, 0x01, 0x00, 0x02, 0x02, 0x46])
#: Plaintext bytes a TLS listener reads (and drops) from a client before telling it to use TLS.
_PLAINTEXT_DRAIN_BYTES = 64 << 10
#: Bytes of a reply joined into one TLS write (one record per small part would cost a syscall
#: and a record header each).
_TLS_WRITE_BYTES = 256 << 10


@dataclass(frozen=True)
class TlsClientConfig:
    """How a client checks a server's certificate (picklable: Spark ships it to executors).

    ``ca_file``: PEM file of the CA certificates to trust (None: the system's trust store);
    ``verify_hostname``: the certificate must name the host connected to (turn off only for
    servers reached by an address their certificate does not list).
    """

    ca_file: str | None = None
    verify_hostname: bool = True

    def context(self) -> ssl.SSLContext:
        return client_context(self.ca_file, self.verify_hostname)


#: Environment variables of the command line and the tiering job (beside FLUSS_USERNAME).
ENV_TLS, ENV_CA_FILE, ENV_VERIFY_HOSTNAME = ("FLUSS_TLS", "FLUSS_TLS_CA_FILE",
                                             "FLUSS_TLS_VERIFY_HOSTNAME")


def from_environment(enabled: bool = False, ca_file: str | None = None,
                     environ: Mapping[str, str] = os.environ) -> TlsClientConfig | None:
    """The TLS settings a command was given: ``ca_file`` (``--tls-ca-file``) or
    ``FLUSS_TLS_CA_FILE`` means TLS trusting that CA; ``enabled`` (``--tls``) or
    ``FLUSS_TLS=true`` TLS with the system's trust store; ``FLUSS_TLS_VERIFY_HOSTNAME=false``
    turns hostname checks off. None: TLS was not asked for."""
    ca_file = ca_file or environ.get(ENV_CA_FILE) or None
    enabled = enabled or parse_bool(environ.get(ENV_TLS) or "false", ENV_TLS)
    verify = parse_bool(environ.get(ENV_VERIFY_HOSTNAME) or "true", ENV_VERIFY_HOSTNAME)
    if not (enabled or ca_file):
        return None
    return TlsClientConfig(ca_file, verify)


@functools.lru_cache(maxsize=16)
def client_context(ca_file: str | None, verify_hostname: bool = True) -> ssl.SSLContext:
    """A client context that verifies the server's certificate against ``ca_file``."""
    if ca_file is not None and not os.path.isfile(ca_file):
        raise ConfigError(f"the TLS CA file {ca_file} does not exist (client.security.ssl.ca-file"
                          f" or security.ssl.ca-file): give the PEM file of the CA that signed "
                          f"the servers' certificates")
    try:
        ctx = ssl.create_default_context(cafile=ca_file)
    except (ssl.SSLError, OSError) as e:
        raise ConfigError(f"cannot load the TLS CA file {ca_file}: {e}; it must hold PEM "
                          f"certificates") from None
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.check_hostname = verify_hostname
    return ctx


def server_context(certificate_file: str, key_file: str) -> ssl.SSLContext:
    """A server context presenting ``certificate_file`` (PEM chain) with ``key_file``."""
    for path, key in ((certificate_file, "security.ssl.certificate-file"),
                      (key_file, "security.ssl.key-file")):
        if not os.path.isfile(path):
            raise ConfigError(f"{key}: {path} does not exist")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_cert_chain(certificate_file, key_file)
    except (ssl.SSLError, OSError) as e:
        raise ConfigError(f"cannot load the TLS certificate {certificate_file} with the key "
                          f"{key_file}: {e} (security.ssl.certificate-file, "
                          f"security.ssl.key-file: PEM files of one certificate and its key)") \
            from None
    # No TLS 1.3 session tickets: nothing here resumes sessions, and a ticket arriving after
    # the handshake would make an idle client connection look readable (closed) between calls.
    ctx.num_tickets = 0
    return ctx


# -- the client ---------------------------------------------------------------------------------
def wrap_client(sock: socket.socket, tls: TlsClientConfig, host: str,
                address: str) -> ssl.SSLSocket:
    """Run the TLS handshake on a connected (blocking, with a timeout) socket.

    A certificate the CA file does not vouch for, or a server that does not speak TLS, is
    ``TlsHandshakeFailed`` (not retriable: trying again cannot help); a connection lost during
    the handshake is a retriable ``NetworkError``.
    """
    try:
        return tls.context().wrap_socket(sock, server_hostname=host)
    except ssl.SSLCertVerificationError as e:
        raise TlsHandshakeFailed(
            f"certificate verification failed for {address}: {e.verify_message}; "
            f"client.security.ssl.ca-file (CLI: --tls-ca-file or FLUSS_TLS_CA_FILE) must name "
            f"the CA that signed the server's certificate") from None
    except (ssl.SSLEOFError, ssl.SSLZeroReturnError, ConnectionError) as e:
        raise NetworkError(f"the TLS handshake with {address} was cut off ({e}); if the server "
                           f"does not listen with TLS, connect without TLS") from None
    except ssl.SSLError as e:
        raise TlsHandshakeFailed(
            f"TLS handshake with {address} failed ({e.reason or e}): the server does not "
            f"listen with TLS (security.ssl.enabled); connect without TLS "
            f"(client.security.ssl.enabled=false, no --tls)") from None


def still_open(sock: ssl.SSLSocket) -> bool:
    """Whether an idle TLS connection whose socket polled readable is still open: a TLS message
    that carries no data (a close_notify aside) leaves it open; data or EOF closes it."""
    if sock.pending():
        return False
    sock.setblocking(False)     # the next call sets its timeout again
    try:
        sock.recv(1)            # data between calls (out of step) or EOF: closed either way
        return False
    except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
        return True
    except (OSError, ValueError):
        return False


# -- the server ---------------------------------------------------------------------------------
def first_bytes(sock: socket.socket) -> bytes | None:
    """What a new connection sent first, left unread (empty: closed; None: nothing yet)."""
    try:
        head = sock.recv(2, socket.MSG_PEEK)
    except (BlockingIOError, InterruptedError):
        return None
    except OSError:
        return b""
    return None if head == bytes([_HANDSHAKE_RECORD]) else head     # wait for the second byte


def is_client_hello(head: bytes | bytearray) -> bool:
    """Whether a connection's first bytes start a TLS handshake record."""
    return len(head) >= 2 and head[0] == _HANDSHAKE_RECORD and head[1] == 0x03


def refuse_plaintext(sock: socket.socket, role: str) -> None:
    """Answer a plaintext client of a TLS listener with one error frame (correlation id -1: no
    request was read) before it is closed; what it sent is read first, so that closing does
    not reset the connection before the frame arrives."""
    error = TlsHandshakeFailed(f"the {role} listens with TLS only (security.ssl.enabled): "
                               f"connect with TLS (client.security.ssl.enabled=true; CLI: --tls "
                               f"or FLUSS_TLS_CA_FILE)")
    try:
        sock.recv(_PLAINTEXT_DRAIN_BYTES)
        sock.send(framing.encode_frame(codec.encode_response(-1, error=error)))
        sock.shutdown(socket.SHUT_WR)
    except OSError:
        pass


def send_alert(sock: socket.socket) -> None:
    """Tell a TLS client of a plaintext listener that it does not speak TLS (best effort)."""
    try:
        sock.send(PROTOCOL_VERSION_ALERT)
    except OSError:
        pass


def handshake_step(sock: ssl.SSLSocket) -> int:
    """Advance a non-blocking server handshake: 0 once done, else the selector event it waits
    for; ``ssl.SSLError`` (or OSError) when it failed."""
    try:
        sock.do_handshake()
        return 0
    except ssl.SSLWantReadError:
        return selectors.EVENT_READ
    except ssl.SSLWantWriteError:
        return selectors.EVENT_WRITE


def pending(sock: socket.socket) -> int:
    """Bytes already decrypted and waiting in a TLS socket (the selector cannot see them)."""
    return sock.pending() if isinstance(sock, ssl.SSLSocket) else 0


def send_views(sock: ssl.SSLSocket, views: list[memoryview]) -> int:
    """One non-blocking TLS write of the first views (small ones joined); bytes sent.

    After ``SSLWantWriteError`` the caller passes the same views again, so the write is
    retried with the same bytes, as OpenSSL requires."""
    first = views[0]
    if first.nbytes >= _TLS_WRITE_BYTES or len(views) == 1:
        return sock.send(first[:_TLS_WRITE_BYTES])
    joined = bytearray()
    for v in views:
        if len(joined) + v.nbytes > _TLS_WRITE_BYTES:
            break
        joined += v
    return sock.send(joined)

