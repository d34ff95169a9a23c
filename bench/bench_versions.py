"""A bench script of this repository run against two checkouts, paired: what a change costs.

Runs ``bench/bench_write_fetch.py`` or ``bench/bench_scan.py`` (small sizes, one repeat per run)
alternately in this checkout and in ``--baseline`` (A B B A A B ...), each with its own code on
``PYTHONPATH``: client and servers alike. Every run's rates are read from its output; for each
workload the ratio this/baseline is taken round by round (neighbouring runs, so drift of the
machine's speed cancels out) and its median printed. The bench scripts check their own rows.

    git worktree add /tmp/base <commit before the change>
    .venv/bin/python bench/bench_versions.py --baseline /tmp/base --bench write_fetch --rounds 6
    .venv/bin/python bench/bench_versions.py --baseline /tmp/base --bench scan --rounds 8
    .venv/bin/python bench/bench_versions.py --baseline /tmp/base --bench scan_cpu --rounds 4
    .venv/bin/python bench/bench_versions.py --baseline /tmp/base --bench apache_fluss_snapshot \
        --rounds 2

``scan_cpu`` compares CPU time, which a machine busy with other work disturbs far less than
wall time.
"""

from __future__ import annotations

import os
import re
import statistics
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import parser  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

#: name -> (script, arguments, pattern of one rate line: workload, value in rows/s)
BENCHES = {
    "write_fetch": ("bench/bench_write_fetch.py", ["--rows", "200000", "--repeat", "1"],
                    re.compile(r"^\s*repeat \d+ (?P<name>.+?)\s{2,}(?P<path>raw|client)\s+"
                               r"(?P<rate>[\d,]+) rows/s", re.M)),
    "scan": ("bench/bench_scan.py", ["--rows", "1500000", "--repeat", "1"],
             re.compile(r"^(?P<name>\d+ sessions? \d+MB|direct file)\s+(?P<rate>[\d.]+)\s", re.M)),
    # Rows per CPU-second (reader + tablet) and per wall second; this checkout's copy of the
    # script runs against both trees (it uses only APIs both have).
    "scan_cpu": ("bench/bench_scan_cpu.py", ["--rows", "1500000", "--scans", "10"],
                 re.compile(r"^(?P<name>scan \d+MB)\s+wall\s+(?P<wall>[\d,]+) rows/s\s+"
                            r"cpu\s+(?P<rate>[\d,]+) rows/cpu-s", re.M)),
    # Apache Fluss's rows/s by reader (Spark wall, Spark micro-batches, client read), and its
    # paired ratios to the ceiling (each run's own), as "rates" to compare between the trees.
    "apache_fluss_snapshot": (
        "bench/bench_apache_fluss_snapshot.py", ["--rows", "1000000", "--repeat", "3"],
        re.compile(r"^(?:apache-fluss\s+(?P<name>spark \(batches\)|spark|client)\s+[\d,]+\s+"
                   r"[\d.]+\s+(?P<rate>[\d,]+)|paired (?P<pair>apache-fluss / \S+, [a-z() ]+): "
                   r"min/median/max [\d.]+/(?P<ratio>[\d.]+)/)", re.M)),
}
#: Benches whose script is taken from this checkout for both trees.
OWN_SCRIPT = {"scan_cpu", "apache_fluss_snapshot"}


def run(tree: Path, script: str, args: list[str], pattern: re.Pattern[str]) -> dict[str, float]:
    """One run of the bench in checkout ``tree`` (``script`` relative to it, or absolute):
    workload -> rows/s."""
    out = subprocess.run([sys.executable, script, *args], cwd=tree, capture_output=True,
                         text=True, timeout=900,
                         env={**os.environ, "PYTHONPATH": str(tree)})
    if out.returncode != 0:
        sys.exit(f"{script} failed in {tree}:\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}")
    rates = {}
    for m in pattern.finditer(out.stdout):
        if m.groupdict().get("pair"):
            rates[f"{m['pair']} (ratio)"] = float(m["ratio"])
            continue
        name = m["name"] + (f" ({m['path']})" if m.groupdict().get("path") else "")
        rates[name] = float(m["rate"].replace(",", ""))
        if "wall" in m.groupdict():
            rates[name + " (wall)"] = float(m["wall"].replace(",", ""))
    if not rates:
        sys.exit(f"no rates found in the output of {script} in {tree}:\n{out.stdout[-2000:]}")
    return rates


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__, rounds=6)       # pairs of runs, one of each checkout
    p.add_argument("--baseline", type=Path, required=True, help="checkout to compare against")
    p.add_argument("--bench", choices=sorted(BENCHES), default="write_fetch")
    a = p.parse_args(argv)
    script, args, pattern = BENCHES[a.bench]
    if a.bench in OWN_SCRIPT:
        script = str(ROOT / script)
    ratios: dict[str, list[float]] = defaultdict(list)
    for r in range(a.rounds):
        order = [ROOT, a.baseline] if r % 2 == 0 else [a.baseline, ROOT]
        results = {tree: run(tree, script, args, pattern) for tree in order}
        new, base = results[ROOT], results[a.baseline]
        for name in new.keys() & base.keys():
            ratios[name].append(new[name] / base[name])
        print(f"round {r + 1}/{a.rounds} done", flush=True)
    print(f"\n{script}: this checkout / {a.baseline}, rows/s ratio per round "
          f"({a.rounds} rounds, order alternating)")
    print(f"{'workload':<50} {'min':>6} {'median':>7} {'max':>6}")
    for name in sorted(ratios):
        v = ratios[name]
        print(f"{name:<50} {min(v):6.2f} {statistics.median(v):7.2f} {max(v):6.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
