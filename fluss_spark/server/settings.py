"""ServerSettings: everything a server process is started with."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fluss_spark.config import ZOOKEEPER_DIGEST_FILE, ZOOKEEPER_SESSION_TIMEOUT
from fluss_spark.errors import ConfigError


@dataclass(frozen=True)
class ServerSettings:
    """Everything a server process is started with."""

    role: str                       # "coordinator" or "tablet"
    server_id: int
    zookeeper: str                  # host:port[/chroot]
    host: str
    port: int
    data_dir: Path                  # local state (changelog, KV) of this process
    remote_data_dir: str            # snapshot store: a pyarrow filesystem URI or a local path
    options: dict[str, Any] = field(default_factory=dict)   # parsed SERVER_OPTIONS
    disabled_apis: frozenset[int] = frozenset()
    ready_file: Path | None = None
    log_file: Path | None = None    # rotated log (stdout and stderr too); None: stderr

    @property
    def zk_session_timeout_s(self) -> float:
        opt = ZOOKEEPER_SESSION_TIMEOUT
        return self.options.get(opt.key, opt.default) / 1000.0

    @property
    def zk_digest(self) -> str | None:
        """``username:password`` from ``zookeeper.auth.digest-file`` (None: no ZooKeeper auth)."""
        path = self.options.get(ZOOKEEPER_DIGEST_FILE.key)
        if not path:
            return None
        try:
            digest = Path(path).read_text().strip()
        except OSError as e:
            raise ConfigError(f"cannot read zookeeper.auth.digest-file {path}: "
                              f"{e.strerror}") from None
        if ":" not in digest:
            raise ConfigError(f"{path} must hold username:password")
        return digest
