"""Soak: writers, scanners and lease calls against a local cluster while faults are injected.

Faults, one at a time in a loop: kill -9 of a tablet server or the coordinator (started again),
kill -9 of ZooKeeper for 5-20 s, SIGSTOP of a tablet server past its ZooKeeper session. At the
end it counts what must all be zero: acknowledged log writes missing from the log, primary
keys whose value in the PK table's changelog is older than their last acknowledged upsert,
server processes that died without being killed, scan sessions still open after every client
closed, and file descriptors the servers hold beyond what they held after warm-up.

    .venv/bin/python bench/soak.py --duration 300
    .venv/bin/python bench/soak.py --duration 240 --sasl    # SASL PLAIN on every connection
"""

from __future__ import annotations

import os
import random
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

import pyarrow as pa

from common import parser  # bench/common.py
from fluss_spark.errors import FlussError
from fluss_spark.protocol.api import ApiKey
from fluss_spark.local.embedded import EmbeddedProcesses
from fluss_spark.local.ports import wait_until

SESSION_S = 4
KEYS = 500          # the PK table's keys; upsert i writes key i % KEYS with value i


def sockets(pid: int | None) -> int:
    """Open sockets of a process (a leaked connection shows up here; files do not count, a
    tablet opens more of them as its data grows)."""
    n = 0
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                n += os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:")
            except OSError:
                pass
    except (OSError, TypeError):
        pass
    return n


class Load:
    """The clients: their threads, what they saw acknowledged, and their error counts."""

    def __init__(self, cluster: EmbeddedProcesses):
        self.cluster = cluster
        self.stop = threading.Event()
        self.acked: list[int] = []
        #: key -> the value of its last acknowledged upsert (values only grow per key)
        self.acked_pk: dict[int, int] = {}
        self.counts = {"writes": 0, "scans": 0, "lease_calls": 0, "errors": 0}
        self.threads = [threading.Thread(target=f, daemon=True)
                        for f in (self.write, self.upsert, self.scan, self.lease)]

    def _loop(self, step) -> None:
        conn = self.cluster.connection(request_timeout_s=10)
        i = 0
        try:
            while not self.stop.is_set():
                try:
                    step(conn, i)
                except FlussError:
                    self.counts["errors"] += 1
                    time.sleep(0.2)
                i += 1
        finally:
            conn.close()

    def write(self) -> None:
        def step(conn, i):
            conn.writer("soak.log").append(pa.table({"k": pa.array([i], pa.int64())}))
            self.acked.append(i)
            self.counts["writes"] += 1
        self._loop(step)

    def upsert(self) -> None:
        def step(conn, i):
            conn.writer("soak.pk").upsert(pa.table({"id": pa.array([i % KEYS], pa.int64()),
                                                    "v": pa.array([i], pa.int64())}))
            self.acked_pk[i % KEYS] = i
            self.counts["writes"] += 1
        self._loop(step)

    def scan(self) -> None:
        def step(conn, i):
            snaps = conn.admin().latest_kv_snapshots("soak.pk")
            scanner = conn.kv_scanner("soak.pk")
            for b, s in snaps.items():
                scanner.scan(b, snapshot_id=s.snapshot_id, batch_size_bytes=4096).read_all()
            self.counts["scans"] += 1
            time.sleep(0.2)
        self._loop(step)

    def lease(self) -> None:
        def step(conn, i):
            admin = conn.admin()
            tid = conn.table("soak.pk").table_id
            pins = {tid: {b: s.snapshot_id
                          for b, s in admin.latest_kv_snapshots("soak.pk").items()}}
            admin.acquire_kv_snapshot_lease(f"soak-{i % 3}", 30_000, pins)
            admin.renew_kv_snapshot_lease(f"soak-{i % 3}", 30_000)
            admin.release_kv_snapshot_lease(f"soak-{i % 3}", {tid: list(pins[tid])})
            self.counts["lease_calls"] += 3
            time.sleep(0.1)
        self._loop(step)


def inject(cluster: EmbeddedProcesses, rng: random.Random, log) -> str:
    kind = rng.choice(["tablet", "coordinator", "zookeeper", "pause"])
    if kind == "tablet":
        sid = rng.randrange(2)
        cluster.kill("tablet", sid)
        cluster.start()
        return f"kill -9 tablet {sid}"
    if kind == "coordinator":
        cluster.kill("coordinator", 0)
        cluster.start()
        return "kill -9 coordinator"
    if kind == "zookeeper":
        down = rng.uniform(5, 20)
        cluster.kill("zookeeper")
        time.sleep(down)
        cluster.start()
        return f"kill -9 zookeeper for {down:.0f}s"
    sid = rng.randrange(2)
    pid = next(p["pid"] for p in cluster.processes() if p["role"] == "tablet" and p["id"] == sid)
    os.kill(pid, signal.SIGSTOP)
    time.sleep(SESSION_S * 1.5)
    os.kill(pid, signal.SIGCONT)
    return f"SIGSTOP tablet {sid} for {SESSION_S * 1.5:.0f}s"


def stale_keys(conn, acked: dict[int, int]) -> int:
    """Keys whose last changelog value is older than their last acknowledged upsert (a lost
    acknowledged write: an unacknowledged later one may have landed, so newer is fine)."""
    latest = conn.admin().list_offsets("soak.pk", spec="latest")
    scanner = conn.log_scanner("soak.pk")
    last: dict[int, int] = {}
    for b, end in latest.items():
        for batch in scanner.read(b, 0, end):
            last.update(zip(batch.column("id").to_pylist(), batch.column("v").to_pylist()))
    return sum(last.get(k, -1) < v for k, v in acked.items())


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__, seed=1)
    p.add_argument("--duration", type=float, default=300.0, help="seconds of faults")
    p.add_argument("--fault-every", type=float, default=15.0, help="seconds between faults")
    p.add_argument("--sasl", action="store_true",
                   help="servers require SASL PLAIN; every client and server call logs in")
    a = p.parse_args(argv)
    rng = random.Random(a.seed)
    base = Path(tempfile.mkdtemp(prefix="fluss-soak-"))
    cluster = EmbeddedProcesses(base / "c", tablets=2,
                                server_options=[f"zookeeper.client.session-timeout={SESSION_S}s",
                                                "kv.scanner.ttl=20s",
                                                "kv.scanner.expiration-interval=1s"],
                                sasl=a.sasl)
    cluster.start()
    with cluster.connection() as conn:
        conn.admin().create_table("soak.log", "k BIGINT", num_buckets=4)
        conn.admin().create_table("soak.pk", "id BIGINT NOT NULL, v BIGINT", primary_key=["id"],
                                  num_buckets=2, properties={"kv.snapshot.interval": "2s"})
        conn.writer("soak.pk").upsert(pa.table({"id": pa.array(range(KEYS), pa.int64()),
                                                "v": pa.array(range(KEYS), pa.int64())}))
        conn.admin().trigger_kv_snapshot("soak.pk")
    load = Load(cluster)
    for t in load.threads:
        t.start()
    time.sleep(5)
    faults, crashes = [], 0
    killed: set[int] = set()
    deadline = time.monotonic() + a.duration
    while time.monotonic() < deadline:
        time.sleep(a.fault_every)
        for proc in cluster.processes():
            if proc["role"] != "zookeeper" and not proc["alive"] and proc["pid"] not in killed:
                crashes += 1
                print(f"CRASH: {proc['role']} {proc['id']} (pid {proc['pid']}) died", flush=True)
        before = {p["pid"] for p in cluster.processes()}
        faults.append(inject(cluster, rng, print))
        killed |= before - {p["pid"] for p in cluster.processes()}
        print(f"{time.monotonic() - deadline + a.duration:6.0f}s  {faults[-1]}  {load.counts}",
              flush=True)
    load.stop.set()
    for t in load.threads:
        t.join(60)
    cluster.start()                                  # whatever the last fault left down
    with cluster.connection(request_timeout_s=30) as conn:
        latest = conn.admin().list_offsets("soak.log", spec="latest")
        scanner = conn.log_scanner("soak.log")
        got = {v for b, end in latest.items() for batch in scanner.read(b, 0, end)
               for v in batch.column("k").to_pylist()}
        lost = len(set(load.acked) - got)
        stale = stale_keys(conn, load.acked_pk)

        def no_sessions():
            n = 0
            for pid_row in cluster.processes():
                if pid_row["role"] == "tablet":
                    rpc = conn.tablet(pid_row["id"])
                    n += len(rpc.call_raw(ApiKey.LIST_SCANNERS, {})["scanners"])
            return n == 0
        try:
            wait_until(no_sessions, 60, "scan sessions to close")
            leaked_sessions = 0
        except TimeoutError:
            leaked_sessions = 1
    # Every client is closed: a server holds its listener, its RPC wake-up pair, its ZooKeeper
    # connection with kazoo's own wake-up pair, and the server-to-server connections (each
    # tablet keeps one to the coordinator for snapshot commits); more is a leaked connection.
    tablets = sum(p["role"] == "tablet" for p in cluster.processes())
    allowed = {"coordinator": 6 + tablets, "tablet": 7}

    def leaked() -> int:
        return sum(max(0, sockets(p["pid"]) - allowed[p["role"]])
                   for p in cluster.processes() if p["role"] in allowed)
    try:
        wait_until(lambda: leaked() == 0, 60, "server sockets to settle")
    except TimeoutError:
        print("sockets per server:", {f"{p['role']}-{p['id']}": sockets(p["pid"])
                                      for p in cluster.processes()})
    fd_growth = leaked()
    cluster.stop()
    print(f"\nsoak: {a.duration:.0f}s, {len(faults)} faults "
          f"({', '.join(sorted(set(f.split(' for ')[0] for f in faults)))})")
    print(f"load: {load.counts}")
    print(f"cluster: {'SASL PLAIN' if a.sasl else 'PLAINTEXT'}, 2 tablets")
    print(f"acknowledged log writes: {len(load.acked)}, lost: {lost}")
    print(f"PK keys with an acknowledged upsert: {len(load.acked_pk)}, "
          f"older in the table than acknowledged: {stale}")
    print(f"server crashes: {crashes}; scan sessions left open: {leaked_sessions}; "
          f"sockets left open by servers after every client closed: {fd_growth}")
    ok = lost == 0 and stale == 0 and crashes == 0 and leaked_sessions == 0 and fd_growth == 0
    print("RESULT", "PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
