"""A Spark standalone cluster on loopback for tests: a master and workers, each a JVM of its own
started from the installed pyspark, each worker with its own working directory and its own
Python (the first ``python3`` on the PATH it is given), so executors run apart from the driver.

Python environments for workers: ``node_python`` makes a virtualenv with the packages of this
interpreter's site-packages (symlinks) but not this project's editable install, and optionally
installs a wheel into it; an executor on such a worker gets ``fluss_spark`` only from
that wheel, or from the ``--py-files`` zip of ``fluss-spark package``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import sysconfig
import venv
from dataclasses import dataclass, field
from pathlib import Path

from fluss_spark.local.ports import free_port, wait_until


def spark_home() -> str:
    import pyspark
    return os.path.dirname(pyspark.__file__)


def node_python(path: Path, wheel: Path | None = None, lacks: tuple[str, ...] = ()) -> Path:
    """A virtualenv at ``path`` over this interpreter's installed packages (symlinked, nothing
    copied) but not this project's editable install, nor the distributions ``lacks`` names (a
    node that lacks them); ``wheel``: installed into it. Returns its ``bin`` directory."""
    venv.EnvBuilder(with_pip=False, symlinks=True).create(path)
    site = Path(sysconfig.get_paths(vars={"base": str(path), "platbase": str(path)})["purelib"])
    skip = {"fluss_spark", *(n.replace("-", "_").lower() for n in lacks)}
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        top = entry.name.split("-")[0].split(".")[0].lower()
        if top in skip or entry.name.startswith("__editable__") or (site / entry.name).exists():
            continue
        (site / entry.name).symlink_to(entry)
    if wheel is not None:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index",
                        "--target", str(site), str(wheel)], check=True)
    return path / "bin"


@dataclass
class Worker:
    """One worker process: its directory and the ``bin`` directory its executors' Python is in."""

    directory: Path
    python_bin: Path
    proc: subprocess.Popen | None = field(default=None, repr=False)


class StandaloneSpark:
    """A master and ``workers`` (one core each) on 127.0.0.1, logs and work dirs under ``base``."""

    def __init__(self, base: Path, python_bins: list[Path], memory: str = "1g"):
        self.base = base
        self.port = free_port()
        self.memory = memory
        self.master: subprocess.Popen | None = None
        self.workers = [Worker(base / f"worker-{i}", b) for i, b in enumerate(python_bins)]

    @property
    def url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def _env(self, python_bin: Path | None = None) -> dict[str, str]:
        env = {**os.environ, "SPARK_HOME": spark_home(), "SPARK_LOCAL_IP": "127.0.0.1",
               "SPARK_NO_DAEMONIZE": "1"}
        env.pop("PYTHONPATH", None)
        if python_bin is not None:
            env["PATH"] = f"{python_bin}{os.pathsep}{env.get('PATH', '')}"
        return env

    def _spawn(self, name: str, args: list[str], env: dict[str, str]) -> subprocess.Popen:
        log = (self.base / f"{name}.log").open("w")
        return subprocess.Popen([os.path.join(spark_home(), "bin", "spark-class"), *args],
                                env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)

    def driver_env(self, py_files: Path, **conf: str) -> dict[str, str]:
        """The environment of a test driver (``fluss_spark.testing.spark_driver``) on this
        master: every Python worker runs ``python3`` from its process's PATH: the driver's
        (this interpreter's first), or the worker's (each has its own Python environment);
        ``py_files`` goes to every executor; ``conf``: more Spark settings."""
        return {"DRIVER_MASTER": self.url, "PYSPARK_PYTHON": "python3", "DRIVER_REGISTER": "1",
                "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
                "DRIVER_CONF": json.dumps({"spark.submit.pyFiles": str(py_files),
                                           "spark.executor.cores": "1",
                                           "spark.cores.max": "2", **conf})}

    def python_executors(self, apps: set[Path] | None = None) -> int:
        """How many executors of every application (or of those not in ``apps``) ran Python
        tasks, by their stderr."""
        logs = [p.read_text(errors="replace")
                for app in set(self.applications()) - (apps or set())
                for p in app.glob("*/stderr")]
        return len([t for t in logs if "Starting Python task execution" in t])

    def applications(self) -> list[Path]:
        """The work directories of the applications the workers ran."""
        return list(self.base.glob("worker-*/app-*"))

    def master_log(self) -> str:
        return (self.base / "master.log").read_text(errors="replace")

    def start(self, timeout_s: float = 120) -> "StandaloneSpark":
        self.base.mkdir(parents=True, exist_ok=True)
        self.master = self._spawn("master", [
            "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port",
            str(self.port), "--webui-port", "0"], self._env())
        wait_until(lambda: "ALIVE" in self.master_log(), timeout_s, "the Spark master")
        for i in range(len(self.workers)):
            self.start_worker(i)
        wait_until(lambda: self.master_log().count("Registering worker") >= len(self.workers),
                   timeout_s, f"{len(self.workers)} Spark workers to register")
        return self

    def start_worker(self, i: int) -> None:
        w = self.workers[i]
        w.directory.mkdir(parents=True, exist_ok=True)
        w.proc = self._spawn(f"worker-{i}", [
            "org.apache.spark.deploy.worker.Worker", self.url, "--host", "127.0.0.1",
            "--cores", "1", "--memory", self.memory, "--work-dir", str(w.directory),
            "--webui-port", "0"], self._env(w.python_bin))

    def restart_worker(self, i: int, python_bin: Path | None = None,
                       timeout_s: float = 120) -> None:
        """kill -9 worker ``i`` and start it again (with another Python if ``python_bin``)."""
        self.kill_worker(i)
        if python_bin is not None:
            self.workers[i].python_bin = python_bin
        registered = self.master_log().count("Registering worker")
        self.start_worker(i)
        wait_until(lambda: self.master_log().count("Registering worker") > registered,
                   timeout_s, f"Spark worker {i} to register again")

    def kill_worker(self, i: int) -> None:
        """kill -9 worker ``i`` and the executors it started (its process group)."""
        proc = self.workers[i].proc
        if proc is not None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait(30)

    def stop(self) -> None:
        for i in range(len(self.workers)):
            self.kill_worker(i)
        if self.master is not None:
            try:
                os.killpg(self.master.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.master.wait(30)


def main(argv: list[str] | None = None) -> int:
    """``python -m fluss_spark.testing.standalone [--dir DIR] [--workers N]``: a master and N
    workers on loopback, each worker's executors running this interpreter's Python, until
    Ctrl-C; prints the master URL and a spark-submit line to try."""
    import argparse
    import tempfile
    import threading
    p = argparse.ArgumentParser(prog="python -m fluss_spark.testing.standalone",
                                description=main.__doc__)
    p.add_argument("--dir", type=Path, default=None, help="logs and work dirs (default: a "
                   "temporary directory)")
    p.add_argument("--workers", type=int, default=2, choices=range(1, 9), metavar="N")
    args = p.parse_args(argv)
    base = args.dir or Path(tempfile.mkdtemp(prefix="spark-standalone-"))
    cluster = StandaloneSpark(base, [Path(sys.executable).parent] * args.workers).start()
    print(f"Spark master {cluster.url} with {args.workers} workers (logs in {base}); try:\n"
          f"  PYSPARK_PYTHON={sys.executable} spark-submit --master {cluster.url} "
          "examples/batch_aggregate.py --table demo.orders --group-by paid --sum amount\n"
          "Ctrl-C stops it.", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        cluster.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


__all__ = ["StandaloneSpark", "Worker", "main", "node_python", "spark_home"]
