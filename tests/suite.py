"""Run the whole test suite in the least wall time on a 2-core machine (``./dev.sh test``).

Run as one pytest process the suite waited a third of its time (servers and JVMs starting,
Spark triggers, processes killed and restarted): 18 min of wall time for 24 min of CPU. So it
runs in three groups, each a pytest process of its own with its own ``--basetemp``:

1. ``alone``: the tests that bound a latency below a few seconds (``LATENCY_BOUND``); a busy
   neighbour would make them flaky, so they run first, by themselves.
2. ``jvm`` and ``python``, at the same time: ``jvm`` holds the tests that start JVMs (Spark, and
   every test on the Apache Fluss cluster: an integration file that names the ``apache_fluss``
   fixtures goes with the Spark tests, so the cluster is started once), ``python`` the unit tests
   and the rest of the integration tests, then the check of the package as a user installs it
   (``.ci/wheel_check.py``), then the Spark tests whose Spark runs in processes of their own
   (``STANDALONE``: a standalone cluster's master and workers, or spark-submit) and a few more
   that even the lanes out, which fit in the time the ``jvm`` group takes longer.

Each group's output is printed whole when it ends (``python`` first, as it ends first), with its
own slowest tests. The exit status is the first failing group's. With test paths among the
arguments, this is plain pytest (no wheel check): ``python tests/suite.py tests/unit -x``.

    python tests/suite.py -q -m "not extended"
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"
#: Test files with a latency bound of about a second (a reply under 1 s during a flood).
LATENCY_BOUND = ["tests/integration/test_rpc_probes.py"]
WHEEL_CHECK = ".ci/wheel_check.py"
#: The ``python`` lane's last: Spark tests whose Spark runs in processes of their own (a
#: standalone master and workers, or spark-submit), and, to even the lanes out, the restart
#: points' (its own SparkSession there). The examples came from the ``jvm`` lane when it ended 8
#: minutes after this one, the restart points when it still ended 6 minutes after (CI,
#: 2026-11-27).
STANDALONE = ["tests/spark/test_standalone.py", "tests/spark/test_standalone_tiering.py",
              "tests/spark/test_examples.py", "tests/spark/test_restart_points.py"]
_APACHE_FLUSS_FIXTURE = re.compile(r"\bapache_fluss(_for_faults)?\b")


def groups() -> dict[str, list[str]]:
    """Group name -> the test paths it runs (relative to the repository)."""
    integration = sorted(p.relative_to(ROOT).as_posix()
                         for p in (TESTS / "integration").glob("test_*.py"))
    alone = [p for p in LATENCY_BOUND if p in integration]
    on_jvm = [p for p in integration
              if p not in alone and _APACHE_FLUSS_FIXTURE.search((ROOT / p).read_text())]
    rest = [p for p in integration if p not in alone and p not in on_jvm]
    return {"alone": alone, "jvm": ["tests/spark", *on_jvm], "python": ["tests/unit", *rest],
            "standalone": STANDALONE}


def _pytest(args: list[str], paths: list[str], basetemp: Path, durations: int) -> list[str]:
    return [sys.executable, "-m", "pytest", f"--durations={durations}",
            f"--basetemp={basetemp}", "-p", "no:cacheprovider", *args, *paths]


def _lane(commands: list[list[str]], log: Path, results: dict[str, int], name: str) -> None:
    """Run ``commands`` one after the other into ``log``; the lane's status is the first
    failure's (pytest's 5, no test selected by -m, is none)."""
    status = 0
    with open(log, "w") as out:
        for cmd in commands:
            code = subprocess.call(cmd, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
            if code not in (0, 5) and status == 0:
                status = code
    results[name] = status


def main(argv: list[str]) -> int:
    if any(not a.startswith("-") and (ROOT / a.split("::")[0]).exists() for a in argv):
        return subprocess.call([sys.executable, "-m", "pytest", *argv], cwd=ROOT)
    base = Path(tempfile.mkdtemp(prefix="fluss-spark-suite-"))
    plan = groups()
    started = time.monotonic()
    status = subprocess.call(_pytest(argv, plan["alone"], base / "alone", 5), cwd=ROOT)
    skip_standalone = [f"--ignore={p}" for p in plan["standalone"]]
    lanes = {"python": [_pytest(argv, plan["python"], base / "python", 20),
                        [sys.executable, WHEEL_CHECK],
                        _pytest(argv, plan["standalone"], base / "standalone", 10)],
             "jvm": [_pytest([*argv, *skip_standalone], plan["jvm"], base / "jvm", 20)]}
    results: dict[str, int] = {}
    logs = {name: base / f"{name}.log" for name in lanes}
    threads = [threading.Thread(target=_lane, args=(cmds, logs[name], results, name))
               for name, cmds in lanes.items()]
    for t in threads:
        t.start()
    for t, name in zip(threads, lanes):
        t.join()
        then = (f" then {WHEEL_CHECK} then {' '.join(plan['standalone'])}"
                if name == "python" else f" but {' '.join(plan['standalone'])}")
        print(f"\n===== group {name}: {' '.join(plan[name])}{then} =====", flush=True)
        sys.stdout.write(logs[name].read_text())
        if status in (0, 5):
            status = results[name]
    print(f"\nsuite: {time.monotonic() - started:.0f} s of wall time", flush=True)
    return 0 if status == 5 else status


if __name__ == "__main__":
    os.chdir(ROOT)
    # As tests/conftest.py does for pytest: the JVMs of the wheel check compile with C1 only.
    os.environ.setdefault("JDK_JAVA_OPTIONS", "-XX:TieredStopAtLevel=1")
    sys.exit(main(sys.argv[1:]))
