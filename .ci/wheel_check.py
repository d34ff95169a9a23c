"""CI check of the package as a user gets it: the wheel, installed into a clean virtualenv.

Builds the wheel from the checkout's files, installs it with the ``server`` extra into a new
virtualenv outside the checkout (no system site-packages; pip's cache makes it quick), then,
with no ``mvn`` on PATH and no PYTHONPATH, from a directory outside the checkout:

1. ``fluss-spark --version``;
2. ``fluss-spark cluster start --engine apache-fluss`` (ZooKeeper and Apache Fluss from jars
   fetched without Maven) and a table list through it;
3. ``fluss-spark cluster start`` (embedded), a table with rows from ``produce``, and
   ``examples/stream_pk_table.py`` under the venv's ``spark-submit`` (Spark finds
   ``format("fluss")`` in the installed wheel by itself);
4. the demo, ``examples/quickstart.py``;
5. ``pip uninstall -y fluss-spark``, after which nothing of the package may be left in
   site-packages (downloads go to the per-user cache, never there).

Run by ``./dev.sh test`` (CI) and ``./dev.sh wheel-check``; each step prints its time.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"


class CheckFailed(Exception):
    """A step did not do what a user would expect."""


def run(cmd: list, env: dict, cwd: Path, timeout: float = 300.0) -> str:
    """Run ``cmd``; its stdout, or CheckFailed with its output's tail."""
    proc = subprocess.run([str(c) for c in cmd], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        raise CheckFailed(f"{' '.join(map(str, cmd))} exited {proc.returncode}:\n"
                          + (proc.stdout + proc.stderr)[-6000:])
    return proc.stdout


def path_without_mvn(work: Path) -> str:
    """$PATH with every directory that holds ``mvn`` replaced by a copy (of links) without it."""
    dirs = []
    for n, d in enumerate(os.environ.get("PATH", "").split(os.pathsep)):
        if d and os.path.exists(os.path.join(d, "mvn")):
            shadow = work / f"path-{n}"
            shadow.mkdir()
            for entry in os.scandir(d):
                if not entry.name.startswith("mvn"):
                    (shadow / entry.name).symlink_to(entry.path)
            d = str(shadow)
        dirs.append(d)
    return os.pathsep.join(dirs)


def build_wheel(work: Path) -> Path:
    """The wheel of the checkout's files (tracked and new, not ignored), built from a copy so
    that no stale ``build/`` of the checkout can slip into it."""
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                           cwd=ROOT, capture_output=True, check=True).stdout.split(b"\0")
    src = work / "src"
    for name in filter(None, (f.decode() for f in files)):
        if (ROOT / name).is_file():
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, src / name)
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", work / "dist", src],
        dict(os.environ), work)
    (wheel,) = (work / "dist").glob("fluss_spark-*.whl")
    return wheel


#: Run in the venv: every file the installed distributions own, one absolute path a line, and
#: each one's .dist-info directory (whatever lies in it is the distribution's) after a "+".
_OWNED_FILES = ("import importlib.metadata as m\n"
                "for d in m.distributions():\n"
                "    print('+', getattr(d, '_path', ''), sep='')\n"
                "    for f in d.files or ():\n"
                "        print(d.locate_file(f).resolve())")


def _not_owned(site: Path, listing: str) -> list[str]:
    """What of ``site`` has "fluss" in its name and belongs to no installed distribution."""
    lines = [ln for ln in listing.splitlines() if ln.strip("+")]
    roots = {Path(ln[1:]) for ln in lines if ln.startswith("+")}
    files = {Path(ln) for ln in lines if not ln.startswith("+")}
    dirs = {d for f in files for d in f.parents}      # a directory holding an owned file
    left = []
    for p in site.rglob("*"):
        real = p.resolve()
        if ("fluss" in p.name.lower() and real not in files and real not in dirs
                and not any(r in real.parents or r == real for r in roots)):
            left.append(str(p.relative_to(site)))
    return sorted(left)


def main() -> int:
    started = time.monotonic()
    last = [started]

    def step(what: str) -> None:
        now = time.monotonic()
        print(f"wheel check: {what} ({now - last[0]:.1f}s)", flush=True)
        last[0] = now

    work = Path(tempfile.mkdtemp(prefix="fluss-wheel-check-"))
    venv = work / "venv"
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON",
                        "FLUSS_BOOTSTRAP_SERVERS", "FLUSS_SPARK_HOME")}
    try:
        wheel = build_wheel(work)
        step(f"built {wheel.name}")
        # The interpreter this virtualenv was made from: a clean one, without our packages.
        base_python = getattr(sys, "_base_executable", sys.executable)
        run([base_python, "-m", "venv", venv], env, work)
        py = venv / "bin" / "python"
        run([py, "-m", "pip", "install", "-q", f"{wheel}[server]"], env, work, timeout=900)
        step("installed it with [server] into a clean virtualenv")

        env.update(PATH=os.pathsep.join([str(venv / "bin"), path_without_mvn(work)]),
                   PYSPARK_PYTHON=str(py), PYSPARK_DRIVER_PYTHON=str(py),
                   FLUSS_SPARK_HOME=str(work / "cluster"))
        if shutil.which("mvn", path=env["PATH"]):
            raise CheckFailed("mvn is still on PATH")
        cli = venv / "bin" / "fluss-spark"
        version = run([cli, "--version"], env, work).strip()
        expected = re.search(r'__version__ = "([^"]+)"',
                             (ROOT / "fluss_spark" / "__init__.py").read_text())
        if expected is None or version != f"fluss-spark {expected.group(1)}":
            raise CheckFailed(f"fluss-spark --version printed {version!r}")
        step(version)

        fluss_dir = work / "apache-fluss"
        servers = run([cli, "cluster", "start", "--engine", "apache-fluss", "--dir", fluss_dir],
                      env, work, timeout=600).strip()
        try:
            tables = run([cli, "--json", "--bootstrap-servers", servers, "table", "list"],
                         env, work)
            if not isinstance(json.loads(tables), list):
                raise CheckFailed(f"table list on Apache Fluss printed {tables!r}")
        finally:
            run([cli, "cluster", "stop", "--dir", fluss_dir], env, work)
        step(f"cluster start --engine apache-fluss ({servers}) without mvn, table list, stop")

        servers = run([cli, "cluster", "start"], env, work).strip()
        try:
            run([cli, "table", "create", "demo.orders", "--schema",
                 "id BIGINT NOT NULL, amount DOUBLE", "--primary-key", "id", "--buckets", "2"],
                env, work)
            run([cli, "produce", "demo.orders", "--rows", "1000", "--updates", "200",
                 "--deletes", "50"], env, work)
            out = run([venv / "bin" / "spark-submit", "--master", "local[2]",
                       "--conf", "spark.ui.enabled=false",
                       EXAMPLES / "stream_pk_table.py", "--bootstrap-servers", servers,
                       "--table", "demo.orders", "--out", work / "orders-parquet",
                       "--checkpoint", work / "orders-ckpt", "--available-now"], env, work)
            summary = next((ln for ln in out.splitlines() if ln.startswith("parquet ")), None)
            if summary is None or json.loads(summary[len("parquet "):])["rows"] < 1000:
                raise CheckFailed(f"stream_pk_table.py wrote no summary of 1000+ rows:\n"
                                  f"{out[-3000:]}")
        finally:
            run([cli, "cluster", "stop"], env, work)
        step(f"cluster start ({servers}), produce, spark-submit examples/stream_pk_table.py")

        out = run([py, EXAMPLES / "quickstart.py", "--rows", "2000"], env, work)
        if "folded stream equals the table: True" not in out:
            raise CheckFailed(f"the demo did not end in agreement:\n{out[-3000:]}")
        step("the demo (examples/quickstart.py)")

        site = Path(run([py, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                        env, work).strip())
        run([py, "-m", "pip", "uninstall", "-y", "-q", "fluss-spark"], env, work)
        # What the other installed distributions own (pyfluss installs the module ``fluss``).
        left = _not_owned(site, run([py, "-c", _OWNED_FILES], env, work))
        if left:
            raise CheckFailed(f"pip uninstall left these in {site}: {left[:20]}")
        step("pip uninstall left nothing in site-packages")
    except (CheckFailed, subprocess.TimeoutExpired) as e:
        print(f"wheel check FAILED: {e}", file=sys.stderr)
        return 1
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"wheel check passed in {time.monotonic() - started:.0f}s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
