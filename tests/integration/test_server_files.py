"""What servers write is private to their user, and their logs rotate."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

from fluss_spark.cli import main as cli_main


def _loose(root: Path) -> list[str]:
    """Files and directories under ``root`` (itself included) that group or others may use."""
    found = []
    for path in [root, *root.rglob("*")]:
        mode = path.lstat().st_mode
        if stat.S_ISLNK(mode):
            continue
        if stat.S_IMODE(mode) & 0o077:
            found.append(f"{path.relative_to(root.parent)} {stat.S_IMODE(mode):o}")
    return found


def test_data_snapshot_and_log_files_of_servers_are_private(local_cluster, capsys):
    # Before, a server's data, snapshots and logs were created 0644/0755: readable by anyone.
    old = os.umask(0o022)                # a usual login umask: the servers must not rely on it
    try:
        c = local_cluster(tablets=1)
        for argv in (["table", "create", "db.private", "--schema", "id BIGINT, v STRING",
                      "--primary-key", "id", "--buckets", "2"],
                     ["produce", "db.private", "--rows", "100"],
                     ["snapshot", "trigger", "db.private"]):
            assert cli_main(["--bootstrap-servers", c.bootstrap_servers, *argv]) == 0, \
                capsys.readouterr().err
    finally:
        os.umask(old)
    base = c.base_dir
    roots = [base / "coordinator-0", base / "tablet-0", base / "logs", base / "snapshots",
             base / "run"]
    for root in roots:
        assert root.exists(), root
    assert any(p.is_file() for p in (base / "tablet-0").rglob("*")), "the tablet wrote data"
    assert any(p.is_file() for p in (base / "snapshots").rglob("*")), "a snapshot was written"
    assert sorted(p.name for p in (base / "logs").glob("*.log")) == \
        ["coordinator-0.log", "tablet-0.log"]
    loose = [entry for root in roots for entry in _loose(root)]
    assert not loose, f"readable by group or others: {loose}"


_LOGGING = """
import logging, sys
from pathlib import Path
from fluss_spark.config import parse_server_options
from fluss_spark.server.process import setup_logging
from fluss_spark.server.settings import ServerSettings
path = Path(sys.argv[1])
options = parse_server_options(["server.log.max-file-size=2kb", "server.log.max-backups=2"])
setup_logging(ServerSettings(role="tablet", server_id=3, zookeeper="-", host="-", port=0,
                             data_dir=path.parent, remote_data_dir="-", options=options,
                             log_file=path))
for i in range(200):
    logging.getLogger("probe").warning("line %d of the test %s", i, "x" * 40)
print("printed to stdout at the end", flush=True)
print("printed to stderr at the end", file=sys.stderr, flush=True)
"""


def test_a_server_log_rotates_and_takes_stdout_and_stderr_along(tmp_path):
    # Before, a server logged to stderr, which its parent appended to one file forever.
    log = tmp_path / "logs" / "tablet-3.log"
    log.parent.mkdir()
    subprocess.run([sys.executable, "-c", _LOGGING, str(log)], check=True, timeout=60)
    names = sorted(p.name for p in log.parent.iterdir())
    assert names == ["tablet-3.log", "tablet-3.log.1", "tablet-3.log.2"], names
    for p in log.parent.iterdir():
        assert p.stat().st_size <= 2048 + 200, (p.name, p.stat().st_size)
        assert stat.S_IMODE(p.stat().st_mode) == 0o600, p.name
    current = log.read_text()
    assert "line 199 of the test" in current
    assert "printed to stdout at the end" in current and "printed to stderr at the end" in current
