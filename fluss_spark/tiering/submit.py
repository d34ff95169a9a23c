"""What spark-submit needs to run fluss_spark jobs: the package as a ``--py-files`` zip.

Executors import ``fluss_spark`` to read Fluss (the data source's ``read()`` runs there). Either
the package is installed in the Python that ``PYSPARK_PYTHON`` names on every node, or it is
shipped with the job: ``spark-submit --py-files fluss_spark.zip``, which puts the zip on the
``sys.path`` of the driver and of every Python worker. The zip holds only fluss_spark's own
modules; its dependencies the client needs (pyarrow, msgpack) must be installed on the nodes.
"""

from __future__ import annotations

import os
import sys
import zipfile
from pathlib import Path
from typing import Sequence

import fluss_spark

#: Parts of the package a job never imports on a Spark node (servers, ZooKeeper, test clusters).
_SERVER_ONLY = ("server", "metadata", "testing")


def package_root() -> Path:
    return Path(fluss_spark.__file__).resolve().parent


def build_pyfiles_zip(out: str | Path, include_server: bool = False) -> Path:
    """Write ``out`` (a zip with ``fluss_spark/...`` at its root) and return its path.

    Entries are written in sorted order with a fixed timestamp, so the same sources give the
    same bytes (a cache or an artifact store can key on them).
    """
    root = package_root()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    files = sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts)
    tmp = out.with_suffix(out.suffix + ".tmp")
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for p in files:
            rel = p.relative_to(root)
            if not include_server and rel.parts[0] in _SERVER_ONLY:
                continue
            info = zipfile.ZipInfo(f"fluss_spark/{rel.as_posix()}", date_time=(2020, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            zf.writestr(info, p.read_bytes())
    tmp.replace(out)
    return out


def spark_submit_command(script: str | Path, args: Sequence[str] = (), *,
                         master: str = "local[2,4]", py_files: Sequence[str | Path] = (),
                         conf: dict[str, str] | None = None,
                         spark_submit: str | Path | None = None) -> list[str]:
    """The ``spark-submit`` command line for a job script (the venv's ``spark-submit`` by
    default: pyspark installs one beside the interpreter).

    The default master retries a failed task up to 4 times, as Spark does on a cluster
    (``local[N]`` alone gives each task one attempt); the source's reads are replayable.
    """
    exe = str(spark_submit or Path(sys.executable).parent / "spark-submit")
    cmd = [exe, "--master", master]
    settings = {"spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false",
                "spark.sql.shuffle.partitions": "2", **(conf or {})}
    for k, v in settings.items():
        cmd += ["--conf", f"{k}={v}"]
    if py_files:
        cmd += ["--py-files", ",".join(str(p) for p in py_files)]
    return cmd + [str(script), *map(str, args)]


def python_env(python: str | None = None, base: dict | None = None) -> dict[str, str]:
    """An environment whose Spark driver and Python workers run ``python`` (default: this
    interpreter, which has fluss_spark installed)."""
    env = dict(os.environ if base is None else base)
    env["PYSPARK_PYTHON"] = env["PYSPARK_DRIVER_PYTHON"] = python or sys.executable
    return env


__all__ = ["build_pyfiles_zip", "package_root", "spark_submit_command", "python_env"]
