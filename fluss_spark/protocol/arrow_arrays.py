"""Arrow arrays built straight from buffers, without ``pyarrow.array``.

Why not ``pa.array``: its first call imports pandas (pyarrow probes every input for pandas
objects), about 0.35 s in a fresh process, which a reader decoding numpy buffers never needs.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pyarrow as pa


def fixed_width(values: np.ndarray, type_: pa.DataType, validity: pa.Buffer | None = None,
                null_count: int = 0) -> pa.Array:
    """``values`` (a contiguous numpy array laid out as ``type_``'s values) as an Arrow array of
    ``type_`` sharing its memory, with ``validity`` bits when some are null."""
    return pa.Array.from_buffers(type_, len(values), [validity, pa.py_buffer(values)],
                                 null_count=null_count)


def strings(values: Sequence[str]) -> pa.Array:
    """A string array of ``values`` (no nulls)."""
    data = [v.encode() for v in values]
    offsets = np.zeros(len(data) + 1, dtype=np.int32)
    np.cumsum([len(d) for d in data], out=offsets[1:])
    return pa.Array.from_buffers(pa.string(), len(data),
                                 [None, pa.py_buffer(offsets), pa.py_buffer(b"".join(data))])


__all__ = ["fixed_width", "strings"]
