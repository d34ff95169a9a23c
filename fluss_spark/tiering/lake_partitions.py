"""The lake's partitioning: an identity partition spec on a Fluss table's partition keys.

A partitioned Fluss table's lake copy is partitioned by the same keys, each with Iceberg's
identity transform, so a Fluss partition is exactly one Iceberg partition: a round rewrites only
the partitions it touches, and a reader prunes by the same values it would name in Fluss.
"""

from __future__ import annotations

from typing import Any, Sequence

import pyarrow as pa

from fluss_spark.tiering.lake_catalog import LakeError

#: Iceberg's first partition field id (ids below are the schema's).
FIRST_PARTITION_FIELD_ID = 1000


def partition_spec(schema: Any, partition_keys: Sequence[str]) -> Any:
    """The identity partition spec of ``partition_keys`` over the Iceberg ``schema``
    (unpartitioned when there are none)."""
    from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC, PartitionField, PartitionSpec
    from pyiceberg.transforms import IdentityTransform
    if not partition_keys:
        return UNPARTITIONED_PARTITION_SPEC
    fields = []
    for i, key in enumerate(partition_keys):
        try:
            source = schema.find_field(key)
        except ValueError:
            raise LakeError(f"partition key {key!r} is not a column of the table "
                            f"({', '.join(f.name for f in schema.fields)})") from None
        fields.append(PartitionField(source_id=source.field_id,
                                     field_id=FIRST_PARTITION_FIELD_ID + i,
                                     transform=IdentityTransform(), name=key))
    return PartitionSpec(*fields)


def spec_columns(spec: Any, schema: Any) -> tuple[str, ...]:
    """How an Iceberg spec partitions: an identity field as its column's name, any other
    transform as ``transform(column)`` (never equal to a Fluss table's partition keys)."""
    from pyiceberg.transforms import IdentityTransform
    out = []
    for f in spec.fields:
        column = schema.find_column_name(f.source_id) or f"field {f.source_id}"
        out.append(column if isinstance(f.transform, IdentityTransform)
                   else f"{f.transform}({column})")
    return tuple(out)


def check_partitioning(lake_table: str, lake_keys: Sequence[str], fluss_table: str,
                       fluss_keys: Sequence[str]) -> None:
    """Refuse a lake table partitioned otherwise than its Fluss table (in one line)."""
    if tuple(lake_keys) != tuple(fluss_keys):
        raise LakeError(
            f"lake table {lake_table} is {_partitioning(lake_keys)} but Fluss table "
            f"{fluss_table} is {_partitioning(fluss_keys)}: drop the Iceberg table "
            f"{lake_table} (or move the lake) to tier the table again")


def _partitioning(keys: Sequence[str]) -> str:
    return f"partitioned by [{', '.join(keys)}]" if keys else "not partitioned"


def touched_partitions(touched: pa.Table, partition_keys: Sequence[str]) -> pa.Table:
    """The distinct partition values of a round's touched keys (the keys hold the partition
    keys: in Fluss they are part of the primary key)."""
    return touched.select(list(partition_keys)).group_by(list(partition_keys)).aggregate([])


__all__ = ["FIRST_PARTITION_FIELD_ID", "check_partitioning", "partition_spec", "spec_columns",
           "touched_partitions"]
