"""The ZooKeeper layout: every path, and the versioned msgpack record stored at it.

::

    /fluss/coordinator/election           kazoo election of the active coordinator
    /fluss/coordinator/active             CoordinatorRecord (ephemeral)
    /fluss/tablets/<id>                   TabletRecord (ephemeral)
    /fluss/counters/table_id              next table id (integer record, CAS-updated)
    /fluss/tables/<db.table>              TableRecord
    /fluss/tables/<db.table>/assignment   AssignmentRecord
    /fluss/snapshots/<table_id>/<bucket>/<snapshot_id, 20 digits>   SnapshotRecord
    /fluss/leases/kv_snapshot/<lease_id>  LeaseRecord (see leases below)

Every record is a msgpack map with a ``v`` field. Version history:

- v1: the first layout of every record.

Decoders accept every version listed here; a newer, unknown version is refused with a clear
error rather than misread.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field, fields

from fluss_spark.errors import CorruptMessage, InvalidTable
from fluss_spark.protocol.codec import packb, unpackb

ROOT = "/fluss"
COORDINATOR_ELECTION = f"{ROOT}/coordinator/election"
COORDINATOR_ACTIVE = f"{ROOT}/coordinator/active"
TABLETS = f"{ROOT}/tablets"
TABLE_ID_COUNTER = f"{ROOT}/counters/table_id"
TABLES = f"{ROOT}/tables"
SNAPSHOTS = f"{ROOT}/snapshots"
LEASES = f"{ROOT}/leases/kv_snapshot"

TABLE_NAME = re.compile(r"^[A-Za-z0-9_]{1,100}\.[A-Za-z0-9_]{1,100}$")


def tablet_path(tablet_id: int) -> str:
    return f"{TABLETS}/{tablet_id}"


def table_path(name: str) -> str:
    check_table_name(name)
    return f"{TABLES}/{name}"


def assignment_path(name: str) -> str:
    return f"{table_path(name)}/assignment"


def snapshots_path(table_id: int, bucket: int | None = None) -> str:
    base = f"{SNAPSHOTS}/{table_id}"
    return base if bucket is None else f"{base}/{bucket}"


def snapshot_path(table_id: int, bucket: int, snapshot_id: int) -> str:
    return f"{snapshots_path(table_id, bucket)}/{snapshot_id:020d}"


def lease_path(lease_id: str) -> str:
    return f"{LEASES}/{lease_id}"


def check_table_name(name: str) -> str:
    if not isinstance(name, str) or not TABLE_NAME.match(name):
        raise InvalidTable(f"invalid table name {name!r}: expected 'database.table' of letters, "
                           "digits and underscores")
    return name


@dataclass(frozen=True)
class _Record:
    """Base of versioned records: subclasses list their fields; ``VERSION`` is the newest."""

    VERSION = 1

    def encode(self) -> bytes:
        return packb({"v": self.VERSION, **asdict(self)})

    @classmethod
    def decode(cls, data: bytes):
        try:
            raw = unpackb(data)
        except Exception as e:  # noqa: BLE001
            raise CorruptMessage(f"undecodable {cls.__name__}: {e}") from None
        if not isinstance(raw, dict) or "v" not in raw:
            raise CorruptMessage(f"{cls.__name__} without a version field")
        if raw["v"] > cls.VERSION:
            raise CorruptMessage(f"{cls.__name__} version {raw['v']} is newer than this software "
                                 f"understands ({cls.VERSION}); upgrade fluss_spark")
        raw = cls._upgrade(raw)
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in raw.items() if k in names})

    @classmethod
    def _upgrade(cls, raw: dict) -> dict:
        """Turn an older version's fields into the newest's (none yet: only v1 exists)."""
        return raw


@dataclass(frozen=True)
class CoordinatorRecord(_Record):
    """Address of the active coordinator. v1: host, port, epoch."""

    host: str
    port: int
    epoch: int = 0


@dataclass(frozen=True)
class TabletRecord(_Record):
    """A live tablet server. v1: id, host, port, started_ms."""

    id: int
    host: str
    port: int
    started_ms: int = 0


@dataclass(frozen=True)
class TableRecord(_Record):
    """A table definition. v1: table_id, name, schema (Arrow IPC), keys, buckets, properties."""

    table_id: int
    name: str
    schema: bytes
    primary_key: list = field(default_factory=list)
    bucket_key: list = field(default_factory=list)
    num_buckets: int = 1
    properties: dict = field(default_factory=dict)
    created_ms: int = 0


@dataclass(frozen=True)
class AssignmentRecord(_Record):
    """Which tablet server hosts each bucket. v1: buckets[i] = tablet id of bucket i."""

    buckets: list


@dataclass(frozen=True)
class SnapshotRecord(_Record):
    """A registered KV snapshot of one bucket. v1: location, exclusive log_offset, size."""

    table_id: int
    bucket: int
    snapshot_id: int
    path: str
    log_offset: int
    row_count: int
    size_bytes: int = 0
    created_ms: int = 0


def encode_int(value: int) -> bytes:
    return packb({"v": 1, "value": value})


def decode_int(data: bytes) -> int:
    if not data:
        return 0
    raw = unpackb(data)
    return int(raw["value"])
