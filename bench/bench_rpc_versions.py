"""RPC round trips against two checkouts of the RPC server, paired: what a change costs per call.

Each checkout's ``RpcServer`` runs in a process of its own (``PYTHONPATH`` set to the checkout)
and serves the same typed requests as ``bench_rpc.py``; the client is this checkout's. Both
servers run at once; blocks of calls alternate A B B A A B ..., and the ratio A/B is taken
block pair by block pair (the median is printed), so drift of the machine's speed cancels out.

    git worktree add /tmp/base HEAD~1
    .venv/bin/python bench/bench_rpc_versions.py --baseline /tmp/base --rounds 15
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_rpc import SERVER  # noqa: E402  (the same server script and messages)
from common import parser  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


class Server:
    """The RpcServer of checkout ``tree`` in a process of its own, and a connection to it."""

    def __init__(self, tree: Path):
        from fluss_spark.transport.client import RpcConnection
        self.proc = subprocess.Popen([sys.executable, "-c", SERVER, "rpc"], stdout=subprocess.PIPE,
                                     text=True, cwd=tree,
                                     env={**os.environ, "PYTHONPATH": str(tree)})
        assert self.proc.stdout is not None
        self.conn = RpcConnection("127.0.0.1", int(self.proc.stdout.readline()))

    def close(self) -> None:
        self.conn.close()
        self.proc.kill()
        self.proc.wait()


def workloads(conn) -> dict:
    from fluss_spark.protocol.api import ApiKey
    big = b"y" * (1 << 20)
    return {"small request": lambda: conn.call_raw(ApiKey.LIST_TABLES, {}),
            "1 MB request": lambda: conn.call_raw(ApiKey.LIST_TABLES, {"data": big}),
            "4 MB reply": lambda: conn.call_raw(ApiKey.GET_METRICS, {"size": 4 << 20})}


def timed(call, n: int) -> float:
    """Microseconds per call over ``n`` calls."""
    t0 = time.perf_counter()
    for _ in range(n):
        call()
    return (time.perf_counter() - t0) / n * 1e6


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__)
    p.add_argument("--baseline", required=True, type=Path, help="checkout to compare against (B)")
    p.add_argument("--candidate", type=Path, default=ROOT, help="checkout measured (A)")
    p.add_argument("--rounds", type=int, default=15, help="pairs of timed blocks per workload")
    a = p.parse_args(argv)
    block = {"small request": 300, "1 MB request": 30, "4 MB reply": 15}   # calls per block
    servers = {"A": Server(a.candidate), "B": Server(a.baseline)}
    try:
        work = {side: workloads(srv.conn) for side, srv in servers.items()}
        print(f"{'workload':16s} {'A us/call':>10s} {'B us/call':>10s} {'A/B':>6s}  "
              f"(medians of {a.rounds} paired blocks; A/B quartiles)")
        for name, n in block.items():
            for side in "AB":
                timed(work[side][name], max(1, n // 3))      # warm up
            us: dict[str, list[float]] = {"A": [], "B": []}
            ratios = []
            for r in range(a.rounds):
                got = {}
                for side in ("AB" if r % 2 == 0 else "BA"):   # neither always first
                    got[side] = timed(work[side][name], n)
                    us[side].append(got[side])
                ratios.append(got["A"] / got["B"])
            q = statistics.quantiles(ratios, n=4)
            print(f"{name:16s} {statistics.median(us['A']):10.0f} "
                  f"{statistics.median(us['B']):10.0f} {statistics.median(ratios):6.3f}  "
                  f"({q[0]:.3f}..{q[2]:.3f})")
    finally:
        for srv in servers.values():
            srv.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
