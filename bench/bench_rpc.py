"""RPC round trips: the server's event loop and handler pool against a bare blocking server.

Both servers run in a process of their own and answer the same requests with the same framing
and codec; the reference reads each request with one blocking ``recv_into`` into a buffer of the
announced size and answers from the connection's own thread (what the RPC server did before it
had limits). The ratio is what the limits cost per round trip.

    .venv/bin/python bench/bench_rpc.py --repeat 3
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time

from common import parser  # bench/common.py

SERVER = r"""
import socket, sys, threading, time
from dataclasses import dataclass
from fluss_spark.protocol import codec, framing
from fluss_spark.protocol.api import ApiKey
from fluss_spark.protocol.messages.base import Bytes, Int, Message, Request, wire
from fluss_spark.transport.frames import recv_exact

@dataclass(frozen=True)
class Uploaded(Message):
    n: int = wire(Int())

@dataclass(frozen=True)
class Upload(Request[Uploaded]):
    API_KEY, RESPONSE = ApiKey.LIST_TABLES, Uploaded
    data: bytes = wire(Bytes(), b"")

@dataclass(frozen=True)
class Downloaded(Message):
    data: bytes = wire(Bytes())

@dataclass(frozen=True)
class Download(Request[Downloaded]):
    API_KEY, RESPONSE = ApiKey.GET_METRICS, Downloaded
    size: int = wire(Int())

def upload(req):
    return Uploaded(len(req.data))

def download(req):
    return Downloaded(b"x" * req.size)

if sys.argv[1] == "rpc":
    from fluss_spark.transport.server import RpcServer
    srv = RpcServer("127.0.0.1", 0, role="tablet", server_id=1)
    srv.register(Upload, upload)
    srv.register(Download, download)
    srv.start()
    port = srv.port
else:
    # The same typed messages, decoded and answered from the connection's own thread.
    handlers = {int(ApiKey.LIST_TABLES): (Upload, upload),
                int(ApiKey.GET_METRICS): (Download, download)}
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def serve(sock):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        while True:
            head = recv_exact(sock, 4)
            if head is None:
                return
            req = codec.decode_request(recv_exact(sock, framing.decode_length(head)))
            request_type, handler = handlers[req.api_key]
            body = handler(request_type.decode(req.body)).to_wire()
            sock.sendall(framing.encode_frame(codec.encode_response(req.correlation_id, body)))

    def accept():
        while True:
            s, _ = listener.accept()
            threading.Thread(target=serve, args=(s,), daemon=True).start()
    threading.Thread(target=accept, daemon=True).start()
print(port, flush=True)
time.sleep(3600)
"""


def measure(kind: str, calls: dict[str, int]) -> dict[str, float]:
    """Microseconds per call of each workload against a server of ``kind`` (rpc|bare)."""
    from fluss_spark.transport.client import RpcConnection
    from fluss_spark.protocol.api import ApiKey
    proc = subprocess.Popen([sys.executable, "-c", SERVER, kind], stdout=subprocess.PIPE,
                            text=True, env=dict(os.environ))
    try:
        port = int(proc.stdout.readline())
        conn = RpcConnection("127.0.0.1", port)
        work = {"small request": lambda: conn.call_raw(ApiKey.LIST_TABLES, {}),
                "1 MB request": lambda: conn.call_raw(ApiKey.LIST_TABLES,
                                                      {"data": b"y" * (1 << 20)}),
                "4 MB reply": lambda: conn.call_raw(ApiKey.GET_METRICS, {"size": 4 << 20})}
        out = {}
        for name, n in calls.items():
            work[name]()
            t0 = time.perf_counter()
            for _ in range(n):
                work[name]()
            out[name] = (time.perf_counter() - t0) / n * 1e6
        conn.close()
        return out
    finally:
        proc.kill()
        proc.wait()


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__)
    p.add_argument("--repeat", type=int, default=3, help="paired runs (median is printed)")
    a = p.parse_args(argv)
    calls = {"small request": 3000, "1 MB request": 300, "4 MB reply": 200}
    runs: dict[str, dict[str, list[float]]] = {"rpc": {}, "bare": {}}
    for _ in range(a.repeat):
        for kind in ("rpc", "bare"):
            for name, us in measure(kind, calls).items():
                runs[kind].setdefault(name, []).append(us)
    print(f"{'workload':16s} {'RPC server':>12s} {'bare server':>12s} {'ratio':>7s}  (us/call, "
          f"median of {a.repeat})")
    for name in calls:
        ours, bare = (statistics.median(runs[k][name]) for k in ("rpc", "bare"))
        print(f"{name:16s} {ours:12.0f} {bare:12.0f} {ours / bare:7.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
