"""Typed results of the client API that are not wire messages: log batches."""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa


@dataclass(frozen=True)
class LogBatch:
    """One FETCH_LOG answer: the records read and where the next read starts."""

    records: pa.Table
    next_offset: int
    high_watermark: int
    log_start_offset: int

    @property
    def num_rows(self) -> int:
        return self.records.num_rows
