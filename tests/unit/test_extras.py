"""The base install (client, Spark source, command line) works without the extras' packages."""

from __future__ import annotations

import configparser
import importlib.machinery
import json
import re
import subprocess
import sys
from pathlib import Path

from fluss_spark.errors import EXTRAS

ROOT = Path(__file__).resolve().parents[2]
#: The parts of fluss_spark in the base install; ``local`` (processes of a local cluster) and
#: ``tiering`` are imported by the commands that need them.
BASE = ("errors", "config", "clock", "retry", "protocol", "transport", "client", "connector",
        "cli")


def _setup_cfg() -> configparser.ConfigParser:
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    return cfg


def _names(value: str) -> list[str]:
    """The distribution names of a setup.cfg requirement list."""
    lines = [ln.strip() for ln in value.splitlines()]
    return [re.match(r"[A-Za-z0-9_.-]+", ln).group(0)  # type: ignore[union-attr]
            for ln in lines if ln and not ln.startswith("#")]


def test_the_extras_map_names_what_setup_cfg_puts_in_each_extra():
    cfg = _setup_cfg()
    extras = cfg["options.extras_require"]
    declared = {(name, extra) for extra in ("server", "tiering") for name in _names(extras[extra])}
    assert declared == set(EXTRAS.items())
    base = set(_names(cfg["options"]["install_requires"]))
    assert not base & set(EXTRAS), "an extra's package is also in install_requires"
    assert "fluss-spark[server,tiering]" in extras["test"]
    # LGPL crc32c gave way to the Apache-2.0 google-crc32c.
    assert "google-crc32c" in base and "crc32c" not in base


_PROBE = r"""
import importlib, json, pkgutil, sys
# A module set to None in sys.modules cannot be imported: as if it were not installed.
for name in BLOCKED:
    sys.modules[name] = None
import fluss_spark, pyspark_fluss
imported = []
for part in BASE:
    mod = importlib.import_module(f"fluss_spark.{part}")
    imported.append(mod.__name__)
    for info in pkgutil.walk_packages(getattr(mod, "__path__", []), mod.__name__ + "."):
        if info.name.endswith(".__main__"):   # runs the command
            continue
        importlib.import_module(info.name)
        imported.append(info.name)
from fluss_spark.cli import main
try:
    main(["--version"])
except SystemExit as e:
    assert e.code == 0, e.code
codes = [main(argv) for argv in ARGVS]
print(json.dumps({"imported": imported, "codes": codes}))
"""


def test_base_modules_import_and_cli_runs_without_the_extras(tmp_path):
    (tmp_path / "lake").mkdir()
    argvs = [["cluster", "start", "--dir", str(tmp_path / "c")],
             ["tier", "status", "--lake", str(tmp_path / "lake")]]
    script = (f"BLOCKED = {sorted(EXTRAS)!r}\nBASE = {BASE!r}\nARGVS = {argvs!r}\n" + _PROBE)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    src = ROOT / "fluss_spark"
    # Modules: Python files, and the compiled decode where this install built it.
    modules = ["*.py"] + [f"*{suffix}" for suffix in importlib.machinery.EXTENSION_SUFFIXES]
    files = {p for part in BASE for p in ([src / f"{part}.py"] if (src / f"{part}.py").exists()
                                          else (q for m in modules for q in
                                                (src / part).rglob(m)))
             if p.name != "__main__.py"}
    assert len(out["imported"]) == len(files)
    assert "fluss_spark.connector.source" in out["imported"]
    assert "fluss-spark 0." in proc.stdout
    # Each command of an extra fails in one line that names the package and the extra.
    assert out["codes"] == [1, 1]
    errors = proc.stderr.strip().splitlines()
    assert errors == [
        "error: kazoo is not installed (the embedded servers need it): "
        "pip install 'fluss-spark[server]'",
        "error: pyiceberg is not installed (the tier commands need it): "
        "pip install 'fluss-spark[tiering]'",
    ]
    assert not (tmp_path / "c").exists()


def test_the_readme_lists_the_base_packages_for_a_managed_spark_runtime():
    # A runtime whose pyspark pip cannot see installs --no-deps plus this line: every base
    # requirement but pyspark, as setup.cfg states it.
    lines = _setup_cfg()["options"]["install_requires"].splitlines()
    base = [ln.strip() for ln in lines if ln.strip() and not ln.strip().startswith("#")]
    readme = (ROOT / "README.md").read_text()
    line = next(ln for ln in readme.splitlines() if ln.startswith('pip install "pyarrow'))
    assert re.findall(r'"([^"]+)"', line) == [r for r in base if not r.startswith("pyspark")]
