"""SocketChannel's check of an idle connection, whatever state the ssl module is in."""

from __future__ import annotations

import socket
import sys
import types

import pytest

from fluss_spark.transport.channel import still_open


@pytest.fixture
def pair():
    a, b = socket.socketpair()
    yield a, b
    a.close()
    b.close()


@pytest.mark.parametrize("ssl_module", ["loaded", "absent", "half-imported"])
def test_an_idle_plain_socket_is_open_until_its_peer_closes(pair, monkeypatch, ssl_module):
    """A plaintext client never imports ssl, but another thread of the process may be importing
    it right then: a module without its classes yet must not break the check."""
    if ssl_module == "absent":
        monkeypatch.delitem(sys.modules, "ssl", raising=False)
    elif ssl_module == "half-imported":
        monkeypatch.setitem(sys.modules, "ssl", types.ModuleType("ssl"))
    ours, peer = pair
    assert still_open(ours)
    peer.close()
    assert not still_open(ours)
