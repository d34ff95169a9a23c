"""RPC round trips against two checkouts of the RPC server, paired: what a change costs per call.

Each checkout's ``RpcServer`` runs in a process of its own (``PYTHONPATH`` set to the checkout)
and serves the same typed requests as ``bench_rpc.py``; the client is this checkout's. Runs
alternate A B A B ..., and the ratio A/B is taken pair by pair (the median is printed), so drift
of the machine's speed during the run cancels out.

    git worktree add /tmp/base HEAD~1
    .venv/bin/python bench/bench_rpc_versions.py --baseline /tmp/base --repeat 7
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_rpc import SERVER  # noqa: E402  (the same server script and messages)

ROOT = Path(__file__).resolve().parents[1]


def measure(tree: Path, calls: dict[str, int]) -> dict[str, float]:
    """Microseconds per call of each workload against the RpcServer of checkout ``tree``."""
    from fluss_spark.protocol.api import ApiKey
    from fluss_spark.transport.client import RpcConnection
    proc = subprocess.Popen([sys.executable, "-c", SERVER, "rpc"], stdout=subprocess.PIPE,
                            text=True, cwd=tree, env={**os.environ, "PYTHONPATH": str(tree)})
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline())
        conn = RpcConnection("127.0.0.1", port)
        big = b"y" * (1 << 20)
        work = {"small request": lambda: conn.call_raw(ApiKey.LIST_TABLES, {}),
                "1 MB request": lambda: conn.call_raw(ApiKey.LIST_TABLES, {"data": big}),
                "4 MB reply": lambda: conn.call_raw(ApiKey.GET_METRICS, {"size": 4 << 20})}
        out = {}
        for name, n in calls.items():
            for _ in range(max(1, n // 20)):
                work[name]()            # warm up
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
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--baseline", required=True, type=Path, help="checkout to compare against (B)")
    p.add_argument("--candidate", type=Path, default=ROOT, help="checkout measured (A)")
    p.add_argument("--repeat", type=int, default=5, help="pairs of runs")
    a = p.parse_args(argv)
    calls = {"small request": 3000, "1 MB request": 200, "4 MB reply": 150}
    ratios: dict[str, list[float]] = {n: [] for n in calls}
    us: dict[str, dict[str, list[float]]] = {"A": {n: [] for n in calls},
                                             "B": {n: [] for n in calls}}
    for i in range(a.repeat):
        order = [("A", a.candidate), ("B", a.baseline)]
        if i % 2:
            order.reverse()     # neither side always runs first
        got = {side: measure(tree, calls) for side, tree in order}
        for n in calls:
            us["A"][n].append(got["A"][n])
            us["B"][n].append(got["B"][n])
            ratios[n].append(got["A"][n] / got["B"][n])
    print(f"{'workload':16s} {'A us/call':>10s} {'B us/call':>10s} {'A/B':>6s}  "
          f"(medians of {a.repeat} pairs; A/B min..max)")
    for n in calls:
        r = ratios[n]
        print(f"{n:16s} {statistics.median(us['A'][n]):10.0f} "
              f"{statistics.median(us['B'][n]):10.0f} {statistics.median(r):6.3f}  "
              f"({min(r):.3f}..{max(r):.3f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
