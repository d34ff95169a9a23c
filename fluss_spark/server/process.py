"""Command-line entry of the server processes: arguments, logging, ready file, signals."""

from __future__ import annotations

import argparse
import json
import logging
import logging.handlers
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Protocol

from fluss_spark import config
from fluss_spark.config import parse_server_options
from fluss_spark.errors import ConfigError
from fluss_spark.protocol.api import API_GROUPS
from fluss_spark.server import memory
from fluss_spark.server.settings import ServerSettings


class _Server(Protocol):
    """What ``main`` needs of a coordinator or tablet server."""

    host: str
    port: int

    def start(self) -> object: ...

    def stop(self) -> None: ...


def parse_args(argv: list[str]) -> ServerSettings:
    p = argparse.ArgumentParser(prog="python -m fluss_spark.server",
                                description="Run a fluss_spark coordinator or tablet server.")
    p.add_argument("role", choices=["coordinator", "tablet"])
    p.add_argument("--id", type=int, default=0, help="server id (tablet servers: unique, stable)")
    p.add_argument("--zookeeper", required=True, help="ZooKeeper address host:port[/chroot]")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0, help="0 picks a free port")
    p.add_argument("--data-dir", required=True, help="local state directory of this server")
    p.add_argument("--remote-data-dir", required=True,
                   help="KV snapshot store: local path or pyarrow filesystem URI")
    p.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                   help="server option, e.g. kv.scanner.ttl=1min (repeatable)")
    p.add_argument("--disable-api", action="append", default=[], choices=sorted(API_GROUPS),
                   help="leave out an API group, to emulate an older server (repeatable)")
    p.add_argument("--ready-file", help="write {host, port, pid} here once serving")
    p.add_argument("--log-file", help="log here (rotated: server.log.max-file-size, "
                                      "server.log.max-backups) instead of to stderr; stdout "
                                      "and stderr go to the same file")
    a = p.parse_args(argv)
    disabled = (frozenset().union(*(API_GROUPS[g] for g in a.disable_api)) if a.disable_api
                else frozenset())
    return ServerSettings(role=a.role, server_id=a.id, zookeeper=a.zookeeper, host=a.host,
                          port=a.port, data_dir=Path(a.data_dir),
                          remote_data_dir=a.remote_data_dir,
                          options=parse_server_options(a.option), disabled_apis=disabled,
                          ready_file=Path(a.ready_file) if a.ready_file else None,
                          log_file=Path(a.log_file) if a.log_file else None)


def write_ready_file(settings: ServerSettings, host: str, port: int) -> None:
    if settings.ready_file is None:
        return
    tmp = settings.ready_file.with_suffix(".tmp")
    tmp.write_text(json.dumps({"host": host, "port": port, "pid": os.getpid(),
                               "role": settings.role, "id": settings.server_id}))
    os.replace(tmp, settings.ready_file)


class RotatingServerLog(logging.handlers.RotatingFileHandler):
    """A size-rotated log file that also receives the process's stdout and stderr (tracebacks
    of threads, faulthandler, prints): each rollover points file descriptors 1 and 2 at the new
    file, so nothing keeps writing to a rotated one."""

    def __init__(self, path: Path, max_bytes: int, backups: int):
        super().__init__(path, maxBytes=max_bytes, backupCount=backups, encoding="utf-8")
        self._redirect()

    def doRollover(self) -> None:
        super().doRollover()
        self._redirect()

    def _redirect(self) -> None:
        if self.stream is None:
            return
        os.fchmod(self.stream.fileno(), 0o600)
        for std in (sys.stdout, sys.stderr):
            try:
                std.flush()
            except (OSError, ValueError):
                pass
        for fd in (1, 2):
            os.dup2(self.stream.fileno(), fd)


def setup_logging(settings: ServerSettings) -> None:
    """Log to ``settings.log_file`` (rotated) or, without one, to stderr."""
    fmt = f"%(asctime)s {settings.role}-{settings.server_id} %(levelname)s %(name)s: %(message)s"
    handlers: list[logging.Handler] | None = None
    if settings.log_file is not None:
        def get(opt):
            return settings.options.get(opt.key, opt.default)
        handlers = [RotatingServerLog(settings.log_file, get(config.SERVER_LOG_MAX_FILE_SIZE),
                                      get(config.SERVER_LOG_MAX_BACKUPS))]
    logging.basicConfig(level=os.environ.get("FLUSS_LOG_LEVEL", "INFO"), format=fmt,
                        handlers=handlers, force=True)
    logging.getLogger("kazoo").setLevel(logging.WARNING)


def main(argv: list[str] | None = None) -> int:
    # Everything a server creates (data, KV state, snapshots, logs, ready file) is private to
    # its user: directories 0700, files 0600.
    os.umask(0o077)
    try:
        settings = parse_args(sys.argv[1:] if argv is None else argv)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    settings.data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    setup_logging(settings)
    memory.use_releasing_allocator()       # before the server allocates its first Arrow buffer
    server: _Server
    if settings.role == "coordinator":
        from fluss_spark.server.coordinator.server import CoordinatorServer
        server = CoordinatorServer(settings)
    else:
        from fluss_spark.server.tablet.server import TabletServer
        server = TabletServer(settings)
    stopped = threading.Event()

    def _on_signal(signum, frame):
        stopped.set()

    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    server.start()
    write_ready_file(settings, server.host, server.port)
    memory.start_releasing(settings.options.get(config.SERVER_MEMORY_RELEASE_INTERVAL.key,
                                                config.SERVER_MEMORY_RELEASE_INTERVAL.default)
                           / 1000, stopped)
    stopped.wait()
    server.stop()
    return 0
