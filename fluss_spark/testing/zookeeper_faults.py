"""Fault injection for tests of the metadata store: a ZooKeeper connection that dies mid-call."""

from __future__ import annotations

from kazoo.exceptions import ConnectionLoss


class ConnectionDies:
    """Makes a real kazoo client fail its ``n``-th request and every later one with
    ConnectionLoss, the way kazoo fails requests when its connection drops (through
    ``KazooClient._call``, so requests kazoo makes inside one call count too)."""

    def __init__(self, zk, n: int):
        self.zk, self.n, self.requests = zk, n, 0
        self._real = zk._call
        zk._call = self

    def __call__(self, request, async_object):
        self.requests += 1
        if self.requests >= self.n:
            async_object.set_exception(ConnectionLoss())
            return False
        return self._real(request, async_object)

    def heal(self) -> None:
        del self.zk._call   # the instance attribute shadowed kazoo's method
