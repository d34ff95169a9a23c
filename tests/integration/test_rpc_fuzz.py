"""Mutated valid requests never crash or wedge a server (bounded, fixed seed; real processes)."""

from __future__ import annotations

import random
import socket
import uuid

import pyarrow as pa
import pytest

from fluss_spark.protocol import codec
from fluss_spark.protocol.api import CURRENT_VERSION
from fluss_spark.transport.client import RpcConnection
from fluss_spark.protocol import framing

SEED = 20261123
MUTATIONS_PER_REQUEST = 50


@pytest.fixture
def fuzz_cluster(zookeeper, local_cluster):
    return local_cluster(tablets=1,
                         zookeeper=f"{zookeeper.address}/fluss-fuzz-{uuid.uuid4().hex[:12]}")


def record_workload(cluster, monkeypatch) -> list[tuple[str, int, bytes]]:
    """Run a small workload through the client; keep every request it sent: (host, port, frame)."""
    sent: list[tuple[str, int, bytes]] = []
    real_exchange = RpcConnection._exchange

    def exchange(self, api_key, body, timeout_s):
        sent.append((self.host, self.port,
                     codec.encode_request(api_key, CURRENT_VERSION, len(sent) + 1, body)))
        return real_exchange(self, api_key, body, timeout_s)

    monkeypatch.setattr(RpcConnection, "_exchange", exchange)
    conn = cluster.connection(request_timeout_s=20)
    admin = conn.admin()
    admin.create_table("fz.pk", "id BIGINT NOT NULL, v STRING", primary_key=["id"], num_buckets=2)
    admin.create_table("fz.log", "k BIGINT, s STRING", num_buckets=1)
    conn.writer("fz.pk").upsert(pa.table({"id": pa.array(range(50), pa.int64()),
                                          "v": [f"v{i}" for i in range(50)]}))
    conn.writer("fz.log").append(pa.table({"k": pa.array(range(20), pa.int64()), "s": ["x"] * 20}))
    snaps = admin.trigger_kv_snapshot("fz.pk")
    scanner = conn.kv_scanner("fz.pk")
    for b, snap in snaps.items():
        if snap is not None:
            scanner.scan(b, snapshot_id=snap.snapshot_id).read_all()
    conn.log_scanner("fz.log")
    tid = conn.table("fz.pk").table_id
    admin.acquire_kv_snapshot_lease("fuzz-lease", 60_000,
                                    {tid: {b: s.snapshot_id for b, s in snaps.items() if s}})
    admin.renew_kv_snapshot_lease("fuzz-lease", 60_000)
    admin.list_kv_snapshot_leases()
    admin.list_offsets("fz.log", spec="latest")
    conn.close()
    monkeypatch.setattr(RpcConnection, "_exchange", real_exchange)
    return sent


def mutate(rng: random.Random, payload: bytes) -> bytes:
    b = bytearray(payload)
    kind = rng.randrange(5)
    if kind == 0:                                   # flip a few bits
        for _ in range(rng.randint(1, 4)):
            i = rng.randrange(len(b))
            b[i] ^= 1 << rng.randrange(8)
    elif kind == 1:                                 # overwrite bytes with "interesting" ones
        for _ in range(rng.randint(1, 3)):
            b[rng.randrange(len(b))] = rng.choice([0x00, 0x7f, 0x80, 0xc0, 0xc1, 0xcf, 0xd3,
                                                   0xdc, 0xdd, 0xde, 0xdf, 0xff])
    elif kind == 2:                                 # truncate
        b = b[:rng.randrange(1, len(b))]
    elif kind == 3:                                 # duplicate a slice
        i = rng.randrange(len(b))
        b[i:i] = b[i:i + rng.randint(1, 64)]
    else:                                           # replace a slice with random bytes
        i = rng.randrange(len(b))
        b[i:i + 8] = bytes(rng.randrange(256) for _ in range(8))
    return bytes(b)


def send(addr: tuple[str, int], frame: bytes) -> None:
    with socket.create_connection(addr, timeout=10) as s:
        try:
            s.sendall(frame)
            s.shutdown(socket.SHUT_WR)
            while s.recv(65536):
                pass
        except (ConnectionError, socket.timeout, OSError):
            pass    # the server dropped the connection first: also fine


def test_mutated_requests_leave_every_server_serving(fuzz_cluster, monkeypatch):
    sent = record_workload(fuzz_cluster, monkeypatch)
    assert len({p[:2] for p in sent}) >= 2          # the coordinator and the tablet
    rng = random.Random(SEED)
    count = 0
    for host, port, payload in sent:
        for _ in range(MUTATIONS_PER_REQUEST):
            body = mutate(rng, payload)
            # Mostly a correct length around a mutated message; sometimes a mutated frame.
            frame = framing.HEADER.pack(len(body)) + body if rng.random() < 0.85 else \
                mutate(rng, framing.HEADER.pack(len(payload)) + payload)
            send((host, port), frame)
            count += 1
    assert count >= 500
    for p in fuzz_cluster.processes():
        assert p["alive"], f"{p['role']} {p['id']} died under mutated requests"
    # Everything still serves, and the state the valid workload made is intact.
    conn = fuzz_cluster.connection(request_timeout_s=20)
    try:
        offsets = conn.admin().list_offsets("fz.log", spec="latest")
        assert offsets[0] >= 20
        conn.writer("fz.log").append(pa.table({"k": pa.array([1], pa.int64()), "s": ["y"]}))
        assert conn.admin().list_offsets("fz.log", spec="latest")[0] == offsets[0] + 1
    finally:
        conn.close()
