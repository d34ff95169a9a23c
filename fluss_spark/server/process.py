"""Command-line entry of the server processes: arguments, logging, ready file, signals."""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Protocol

from fluss_spark.config import parse_server_options
from fluss_spark.errors import ConfigError
from fluss_spark.protocol.api import API_GROUPS
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
    a = p.parse_args(argv)
    disabled = frozenset().union(*(API_GROUPS[g] for g in a.disable_api)) if a.disable_api else frozenset()
    return ServerSettings(role=a.role, server_id=a.id, zookeeper=a.zookeeper, host=a.host,
                          port=a.port, data_dir=Path(a.data_dir),
                          remote_data_dir=a.remote_data_dir,
                          options=parse_server_options(a.option), disabled_apis=disabled,
                          ready_file=Path(a.ready_file) if a.ready_file else None)


def write_ready_file(settings: ServerSettings, host: str, port: int) -> None:
    if settings.ready_file is None:
        return
    tmp = settings.ready_file.with_suffix(".tmp")
    tmp.write_text(json.dumps({"host": host, "port": port, "pid": os.getpid(),
                               "role": settings.role, "id": settings.server_id}))
    os.replace(tmp, settings.ready_file)


def main(argv: list[str] | None = None) -> int:
    try:
        settings = parse_args(sys.argv[1:] if argv is None else argv)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    logging.basicConfig(level=os.environ.get("FLUSS_LOG_LEVEL", "INFO"),
                        format=f"%(asctime)s {settings.role}-{settings.server_id} "
                               "%(levelname)s %(name)s: %(message)s")
    logging.getLogger("kazoo").setLevel(logging.WARNING)
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
    stopped.wait()
    server.stop()
    return 0
