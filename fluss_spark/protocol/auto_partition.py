"""Auto-partitioning by time, with Fluss's table properties and value formats.

``table.auto-partition.enabled`` turns it on for a partitioned table; the time key
(``table.auto-partition.key``, or the only partition key) then takes values formatted by
``table.auto-partition.time-unit``: ``yyyy`` (YEAR), ``yyyyQ`` (QUARTER), ``yyyyMM`` (MONTH),
``yyyyMMdd`` (DAY) or ``yyyyMMddHH`` (HOUR), in ``table.auto-partition.time-zone``. The
coordinator keeps the current partition and ``num-precreate - 1`` later ones, and drops those
older than ``num-retention`` units back (server/coordinator/auto_partitions.py); with several
partition keys only the dropping applies, so ``num-precreate`` must be 0. These values compare
in time order as strings, which is how retention finds the expired ones.
"""

from __future__ import annotations

import datetime
import zoneinfo
from dataclasses import dataclass
from typing import Mapping, Sequence

from fluss_spark import config
from fluss_spark.errors import ConfigError

_FORMATS = {"YEAR": "%Y", "MONTH": "%Y%m", "DAY": "%Y%m%d", "HOUR": "%Y%m%d%H"}
_LENGTHS = {"YEAR": 4, "QUARTER": 5, "MONTH": 6, "DAY": 8, "HOUR": 10}


def _shift(moment: datetime.datetime, unit: str, offset: int) -> datetime.datetime:
    if unit == "HOUR":
        return moment + datetime.timedelta(hours=offset)
    if unit == "DAY":
        return moment + datetime.timedelta(days=offset)
    months = offset * {"MONTH": 1, "QUARTER": 3, "YEAR": 12}[unit]
    index = moment.year * 12 + (moment.month - 1) + months
    # Day 1: every month has it, and only the month and year are printed.
    return moment.replace(year=index // 12, month=index % 12 + 1, day=1)


def format_time(moment: datetime.datetime, unit: str) -> str:
    if unit == "QUARTER":
        return f"{moment.year:04d}{(moment.month - 1) // 3 + 1}"
    return moment.strftime(_FORMATS[unit])


@dataclass(frozen=True)
class AutoPartition:
    """A table's auto-partition strategy, parsed and checked once from its properties."""

    enabled: bool
    key: str | None
    time_unit: str
    num_precreate: int
    num_retention: int
    time_zone: str

    @classmethod
    def of(cls, table: str, properties: Mapping[str, str],
           partition_keys: Sequence[str]) -> "AutoPartition":
        """Parse the ``table.auto-partition.*`` properties; ConfigError names a bad one."""
        keys = list(partition_keys)
        enabled = config.AUTO_PARTITION_ENABLED.get(properties)
        key = config.AUTO_PARTITION_KEY.get(properties)
        zone = config.AUTO_PARTITION_TIME_ZONE.get(properties)
        try:
            zoneinfo.ZoneInfo(zone)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError):
            raise ConfigError(f"{config.AUTO_PARTITION_TIME_ZONE.key}: unknown time zone "
                              f"{zone!r}; use an IANA name such as UTC or Europe/Berlin") from None
        strategy = cls(enabled, key, config.AUTO_PARTITION_TIME_UNIT.get(properties),
                       config.AUTO_PARTITION_NUM_PRECREATE.get(properties),
                       config.AUTO_PARTITION_NUM_RETENTION.get(properties), zone)
        if key is not None and key not in keys:
            raise ConfigError(f"table {table}: {config.AUTO_PARTITION_KEY.key} {key!r} is not a "
                              f"partition key ({', '.join(keys) or 'the table has none'})")
        if enabled and not keys:
            raise ConfigError(f"table {table}: {config.AUTO_PARTITION_ENABLED.key} needs "
                              "partition keys; add --partition-key")
        if enabled and key is None and len(keys) > 1:
            raise ConfigError(f"table {table} has several partition keys ({', '.join(keys)}); "
                              f"name the time key with {config.AUTO_PARTITION_KEY.key}")
        if enabled and len(keys) > 1 and strategy.num_precreate > 0:
            # Only the time key's values are known ahead, so nothing can be created (Fluss's rule).
            raise ConfigError(f"table {table} has several partition keys: auto-partitioning only "
                              f"drops expired partitions; set "
                              f"{config.AUTO_PARTITION_NUM_PRECREATE.key}=0 (got "
                              f"{strategy.num_precreate})")
        return strategy

    @property
    def time_key_length(self) -> int:
        return _LENGTHS[self.time_unit]

    def time_key(self, partition_keys: Sequence[str]) -> str:
        return self.key or partition_keys[0]

    def value(self, now_ms: int, offset: int = 0) -> str:
        """The time key's value ``offset`` units from the one holding ``now_ms``."""
        moment = datetime.datetime.fromtimestamp(now_ms / 1000, zoneinfo.ZoneInfo(self.time_zone))
        return format_time(_shift(moment, self.time_unit, offset), self.time_unit)

    def wanted(self, now_ms: int) -> list[str]:
        """The values to exist now: the current one and ``num_precreate - 1`` after it."""
        return [self.value(now_ms, i) for i in range(self.num_precreate)]

    def expired(self, now_ms: int, value: str) -> bool:
        """Whether a time value is older than the retention (values of another format never
        expire: they were created by hand)."""
        if len(value) != self.time_key_length or not value.isdigit():
            return False
        return value < self.value(now_ms, -self.num_retention)
