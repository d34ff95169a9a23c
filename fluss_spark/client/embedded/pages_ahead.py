"""PagesAhead: the continues of one snapshot scan session, asked for before they are needed.

The requests go on a connection of the scan's own (``transport.pipeline``), ``depth`` of them
in flight, so the tablet server cuts and sends the next page while this one is received and
decoded. Only snapshot scans page ahead: a lost connection loses the requests in flight with
it, and the server may by then have served one more page than the reader saw; asking again
then gets ``INVALID_SCAN_REQUEST``, which a snapshot scan survives by reopening at its next row
(a live scan could not).
"""

from __future__ import annotations

import logging
from typing import Any, Callable

from fluss_spark.errors import (InvalidScanRequest, NetworkError, ScannerExpired,
                                UnknownScannerId)
from fluss_spark.protocol.messages import ContinueScan, ScanKvResponse

log = logging.getLogger(__name__)

#: Continues in flight while a page is consumed: the server sends one while it cuts the next.
DEFAULT_DEPTH = 2


class PagesAhead:
    """The responses to ``ContinueScan`` ``first_seq``, ``first_seq + 1``, ... of one session,
    read in order from ``channel`` (a ``PipelinedConnection``, closed by ``close``). From the
    start and after each page taken, ``depth`` continues are in flight: the server sends the
    next pages while the reader consumes this one."""

    def __init__(self, channel: Any, scanner_id: str, first_seq: int, batch_size: int, *,
                 depth: int = DEFAULT_DEPTH, retries: int = 2,
                 sleep: Callable[[float], None]):
        self._channel = channel
        self.scanner_id = scanner_id
        self._batch_size = batch_size
        self._depth = depth
        self._retries = retries
        self._sleep = sleep
        self._next_seq = first_seq      # the next continue to send
        self._last = False              # a response said it was the session's last
        self._ask_ahead(first_seq)

    def take(self, seq: int) -> ScanKvResponse | None:
        """The response to continue ``seq`` (the one after the last taken); None when the
        session is lost and the scan should reopen at its next row."""
        for attempt in range(self._retries + 1):
            try:
                self._send_from(seq)
                resp = self._channel.receive()
            except NetworkError as e:
                # Every request in flight went with the connection: ask again from ``seq``.
                self._next_seq = seq
                if attempt == self._retries:
                    self._lost(seq, e)
                    return None
                self._sleep(0.05 * (attempt + 1))
                continue
            except (ScannerExpired, UnknownScannerId) as e:
                self._lost(seq, e)
                return None
            except InvalidScanRequest as e:
                if attempt == 0:
                    raise                   # not an effect of asking again: a real error
                self._lost(seq, e)          # the server served past ``seq`` before the loss
                return None
            assert isinstance(resp, ScanKvResponse)
            self._last = not resp.has_more
            self._ask_ahead(seq + 1)
            return resp
        raise AssertionError("unreachable")

    def _send_from(self, seq: int) -> None:
        """Keep ``depth`` continues in flight from ``seq`` on (none past the session's end)."""
        while not self._last and self._next_seq < seq + self._depth:
            self._channel.send(ContinueScan(scanner_id=self.scanner_id,
                                            call_seq_id=self._next_seq,
                                            batch_size_bytes=self._batch_size))
            self._next_seq += 1

    def _ask_ahead(self, seq: int) -> None:
        """``_send_from(seq)``; a connection that fails here is the next ``take``'s to retry."""
        try:
            self._send_from(seq)
        except NetworkError:
            self._next_seq = seq            # the requests in flight went with the connection

    def _lost(self, seq: int, error: Exception) -> None:
        log.info("scan session %s lost at call %d (%s: %s); reopening at the next row",
                 self.scanner_id, seq, type(error).__name__, error)

    def close(self) -> None:
        """Close the connection (responses still in flight are dropped with it)."""
        self._channel.close()
