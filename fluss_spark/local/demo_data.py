"""Deterministic demo rows for any table schema (``fluss-spark produce``, benchmarks, tests)."""

from __future__ import annotations

import datetime as dt
import decimal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

_WORDS = np.array(["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel",
                   "india", "juliet", "kilo", "lima", "mike", "november", "oscar", "papa"])
_EPOCH_DAY_2024 = (dt.date(2024, 1, 1) - dt.date(1970, 1, 1)).days


class DemoData:
    """Rows numbered 0..N-1 whose key columns derive from the row number (so keys are unique
    and known) and whose other columns are random from ``seed`` (same seed, same data)."""

    def __init__(self, schema: pa.Schema, primary_key=(), seed: int = 0):
        self.schema = schema
        self.key = tuple(primary_key)
        self.rng = np.random.default_rng(seed)

    def rows(self, start: int, end: int) -> pa.Table:
        """Rows ``start..end-1`` (inserts of keys start..end-1)."""
        idx = np.arange(start, end, dtype=np.int64)
        return self._table(idx)

    def updates(self, n: int, num_keys: int) -> pa.Table:
        """``n`` rows with random existing keys (< num_keys) and new values."""
        return self._table(self.rng.integers(0, num_keys, size=n, dtype=np.int64))

    def deletes(self, n: int, num_keys: int) -> pa.Table:
        """Key columns of ``n`` distinct random existing keys."""
        idx = np.sort(self.rng.choice(num_keys, size=min(n, num_keys),
                                      replace=False)).astype(np.int64)
        cols = [self._column(self.schema.field(k), idx, key=True) for k in self.key]
        return pa.Table.from_arrays(
            cols, schema=pa.schema([self.schema.field(k) for k in self.key]))

    def _table(self, idx: np.ndarray) -> pa.Table:
        cols = [self._column(f, idx, key=f.name in self.key) for f in self.schema]
        return pa.Table.from_arrays(cols, schema=self.schema)

    def _column(self, f: pa.Field, idx: np.ndarray, key: bool) -> pa.Array:
        t, n, rng = f.type, len(idx), self.rng
        if pa.types.is_integer(t):
            if key:
                return pa.array(idx).cast(t, safe=False)
            hi = min(np.iinfo(t.to_pandas_dtype()).max, 1_000_000)
            return pa.array(rng.integers(0, hi, size=n)).cast(t)
        if pa.types.is_floating(t):
            vals = idx.astype(np.float64) if key else np.round(rng.random(n) * 1000, 2)
            return pa.array(vals).cast(t)
        if pa.types.is_decimal(t):
            units = idx if key else rng.integers(0, 10 ** min(t.precision, 9), size=n)
            q = decimal.Decimal(1).scaleb(-t.scale)
            return pa.array([decimal.Decimal(int(v)).scaleb(-t.scale).quantize(q) for v in units],
                            type=t)
        if pa.types.is_string(t) or pa.types.is_large_string(t):
            if key:
                return pc.binary_join_element_wise("key-", pa.array(idx).cast(pa.string()), "")
            words = _WORDS[rng.integers(0, len(_WORDS), size=n)]
            nums = rng.integers(0, 1000, size=n)
            return pc.binary_join_element_wise(pa.array(words), pa.array(nums).cast(pa.string()),
                                               "-")
        if pa.types.is_binary(t):
            src = idx if key else rng.integers(0, 1 << 31, size=n)
            return pa.array([int(v).to_bytes(8, "big") for v in src], type=t)
        if pa.types.is_boolean(t):
            return pa.array((idx % 2 == 0) if key else rng.integers(0, 2, size=n).astype(bool))
        if pa.types.is_date32(t):
            days = _EPOCH_DAY_2024 + (idx if key else rng.integers(0, 730, size=n))
            return pa.array(days.astype(np.int32)).cast(t)
        if pa.types.is_timestamp(t):
            base_us = 1_704_067_200_000_000   # 2024-01-01T00:00:00Z
            off_s = idx if key else rng.integers(0, 86_400 * 365, size=n)
            us = pa.array(base_us + off_s * 1_000_000, pa.int64())
            factor = {"s": 1_000_000, "ms": 1000, "us": 1, "ns": -1000}[t.unit]
            raw = pc.multiply(us, 1000) if factor < 0 else pc.divide(us, factor)
            return raw.cast(t)
        return pa.nulls(n, type=t)
