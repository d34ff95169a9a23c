"""Row and key encoding shared by client and tablet: physical values, key bytes, bucketing.

A row's *physical* form is a list of msgpack-friendly values: integers for dates (days) and
timestamps (the unit of the column), strings for decimals; everything else as Arrow gives it.
Keys are the msgpack of the physical key values, so client and server agree on key bytes and on
the bucket a key hashes to (crc32 of the key bytes, modulo the bucket count).
"""

from __future__ import annotations

import zlib

import msgpack
import pyarrow as pa
import pyarrow.compute as pc


def _physical_type(t: pa.DataType) -> pa.DataType | None:
    if pa.types.is_timestamp(t):
        return pa.int64()
    if pa.types.is_date32(t):
        return pa.int32()
    if pa.types.is_decimal(t):
        return pa.string()
    return None


def physical_columns(batch: pa.RecordBatch | pa.Table,
                     names: list[str] | None = None) -> list[list]:
    """The columns of ``batch`` (or only ``names``) as lists of physical Python values."""
    out = []
    for name in names or batch.schema.names:
        col = batch.column(name)
        target = _physical_type(col.type)
        if target is not None:
            col = col.cast(target)
        out.append(col.to_pylist())
    return out


def from_physical(columns: list[list], schema: pa.Schema) -> pa.RecordBatch:
    """Build a batch of ``schema`` from physical column lists (inverse of physical_columns)."""
    arrays = []
    for values, f in zip(columns, schema):
        target = _physical_type(f.type)
        if target is None:
            arrays.append(pa.array(values, type=f.type))
        else:
            arrays.append(pa.array(values, type=target).cast(f.type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def encode_key(values: tuple | list) -> bytes:
    return msgpack.packb(list(values), use_bin_type=True)


def key_bytes(batch: pa.RecordBatch | pa.Table, key_columns: list[str]) -> list[bytes]:
    """The encoded key of every row."""
    cols = physical_columns(batch, key_columns)
    pack = msgpack.Packer(use_bin_type=True).pack
    return [pack(list(vals)) for vals in zip(*cols)]


def bucket_of(key: bytes, num_buckets: int) -> int:
    return zlib.crc32(key) % num_buckets


def bucket_ids(batch: pa.RecordBatch | pa.Table, key_columns: list[str],
               num_buckets: int) -> pa.Array:
    """The bucket of every row, as an int32 array (for ``pc.filter`` by bucket)."""
    if num_buckets == 1:
        return pa.array([0] * batch.num_rows, type=pa.int32())
    return pa.array([zlib.crc32(k) % num_buckets for k in key_bytes(batch, key_columns)],
                    type=pa.int32())


def split_by_bucket(batch: pa.Table, key_columns: list[str],
                    num_buckets: int) -> dict[int, pa.Table]:
    """Split rows by bucket, keeping their order within each bucket."""
    if num_buckets == 1:
        return {0: batch} if batch.num_rows else {}
    ids = bucket_ids(batch, key_columns, num_buckets)
    out = {}
    for b in range(num_buckets):
        part = batch.filter(pc.equal(ids, b))
        if part.num_rows:
            out[b] = part
    return out
