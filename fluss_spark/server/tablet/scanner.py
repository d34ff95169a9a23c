"""Scan sessions: server-side cursors over a KV snapshot or a live view of one bucket."""

from __future__ import annotations


class ScannerManager:
    """Owns every open scan session of a tablet server (SCAN_KV, LIST_SCANNERS)."""

    def __init__(self, server, options: dict, clock=None):
        self.server = server
        self.options = options

    def register(self, rpc) -> None:
        """Register the SCAN_KV and LIST_SCANNERS handlers on ``rpc``."""

    def start(self) -> None:
        """Start the eviction pass."""

    def close_bucket(self, table_id: int, bucket: int) -> None:
        """Close every session of a bucket that this server no longer hosts."""

    def close_all(self) -> None:
        """Close every session (server shutdown)."""
