"""The partition a caller names, by name or spec, checked against a table's partition keys; the
partition every row of a write goes to; and the errors every backend raises for a partition that
is not named or does not exist."""

from __future__ import annotations

from typing import Iterable, Mapping, Sequence

import pyarrow as pa

from fluss_spark.errors import (ConfigError, InvalidPartitionSpec, PartitionNotExist,
                                TableNotPartitioned)
from fluss_spark.protocol.partitions import (SEPARATOR, check_value, parse_spec, partition_name,
                                             resolve, spec_text, values_of)


def name_of(table: str, keys: Sequence[str], partition: str) -> str:
    """The partition's name from its name (``2026-11-25``) or its spec (``dt=2026-11-25``)."""
    if not keys:
        raise TableNotPartitioned(f"table {table} is not partitioned; drop the partition "
                                  f"{partition!r}")
    if "=" in partition:
        return partition_name(resolve(table, keys, parse_spec(partition)))
    values = values_of(partition)
    if len(values) != len(keys):
        raise ConfigError(f"partition {partition!r} of {table}: give key=value for each of "
                          f"the partition keys ({', '.join(keys)})")
    for key, value in zip(keys, values):
        check_value(value, f"partition value of {key!r}")
    return partition


def required_name(table: str, keys: Sequence[str], partition: str | None) -> str | None:
    """The name of the partition a read addresses: None for an unpartitioned table
    (``partition`` None); a partitioned table needs one, an unpartitioned one refuses one."""
    if partition is None:
        if keys:
            raise ConfigError(f"table {table} is partitioned (by {', '.join(keys)}): name a "
                              f"partition, e.g. {keys[0]}=VALUE")
        return None
    return name_of(table, keys, partition)


def spec_name(table: str, keys: Sequence[str], spec: Mapping[str, str]) -> str:
    """The name of the partition ``spec`` (``{key: value}``) of a table to create or drop one
    in: ``TableNotPartitioned`` or ``InvalidPartitionSpec`` when it cannot be one."""
    if not keys:
        raise not_partitioned(table)
    try:
        return partition_name(resolve(table, keys, spec))
    except ConfigError as e:
        raise InvalidPartitionSpec(str(e)) from None


def not_partitioned(table: str) -> TableNotPartitioned:
    """The error of a partition created, dropped or listed in an unpartitioned table."""
    return TableNotPartitioned(f"table {table} is not partitioned; it has no partitions to "
                               "create, drop or list")


def missing(table: str, keys: Sequence[str], name: str, *, write: bool = False
            ) -> PartitionNotExist:
    """The error of a read (or with ``write``, a write) of the partition ``name`` that does not
    exist."""
    spec = spec_text(keys, values_of(name))
    also = (" before writing, or let writers create partitions "
            "(client.writer.dynamic-create-partition.enabled=true)" if write else "")
    return PartitionNotExist(f"partition {spec} of table {table} does not exist; create it "
                             f"with `fluss-spark partition create {table} {spec}`{also}")


def names_of_rows(keys: Sequence[str], rows: pa.Table) -> pa.Array:
    """The partition name of every row (its partition key values as text, joined by ``$``)."""
    # Imported by the writers that call it: a query's driver never does (~25 ms).
    import pyarrow.compute as pc
    texts = [pc.cast(rows.column(k), pa.string()) for k in keys]
    if len(texts) == 1:
        return texts[0].combine_chunks()
    return pc.binary_join_element_wise(*texts, SEPARATOR).combine_chunks()


def rows_by_partition(table: str, keys: Sequence[str], rows: pa.Table) -> dict[str, pa.Table]:
    """Rows by partition name, each partition's in their order; ConfigError naming a value that
    cannot be one (a null, or characters Fluss does not take in a partition value)."""
    import pyarrow.compute as pc
    text = names_of_rows(keys, rows)
    if text.null_count:
        raise ConfigError(f"{table}: a partition key column ({', '.join(keys)}) holds null; "
                          "partition values must be set")
    names = pc.dictionary_encode(text)
    check_names(table, keys, names.dictionary.to_pylist())
    return {name: rows.filter(pc.equal(names.indices, i))
            for i, name in enumerate(names.dictionary.to_pylist())}


def check_names(table: str, keys: Sequence[str], names: Iterable[str]) -> None:
    """ConfigError naming a value of ``names`` that no partition of ``table`` can have."""
    for name in names:
        for key, value in zip(keys, values_of(name)):
            check_value(value, f"{table}: partition value of {key!r}")


__all__ = ["check_names", "missing", "name_of", "names_of_rows", "not_partitioned", "required_name",
           "rows_by_partition", "spec_name"]
