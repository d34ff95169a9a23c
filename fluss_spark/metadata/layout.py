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

import array
import re
import sys
from dataclasses import asdict, dataclass, field, fields

from fluss_spark.errors import CorruptMessage, InvalidTable
from fluss_spark.protocol.codec import packb, unpackb
from fluss_spark.protocol.names import LEASE_ID_RULE, is_valid_lease_id

ROOT = "/fluss"
COORDINATOR_ELECTION = f"{ROOT}/coordinator/election"
COORDINATOR_ACTIVE = f"{ROOT}/coordinator/active"
#: The coordinator epoch: its znode version is the fencing token every coordinator write checks.
COORDINATOR_EPOCH = f"{ROOT}/coordinator/epoch"
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


def check_table_name(name: object) -> str:
    if not isinstance(name, str) or not TABLE_NAME.fullmatch(name):
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


# -- KV snapshot leases ----------------------------------------------------------------------
#: Largest lease payload stored inline in the lease znode, and the size of each chunk znode.
#: ZooKeeper drops the connection on writes over ~1 MB, so this stays well below it.
LEASE_CHUNK_BYTES = 900 * 1024
_LEASE_CHUNK = re.compile(r"^chunk-(\d+)-(\d+)$")


def check_lease_id(lease_id) -> str:
    """Return ``lease_id`` or raise InvalidLeaseId: it becomes a znode name."""
    from fluss_spark.errors import InvalidLeaseId
    if not is_valid_lease_id(lease_id):
        raise InvalidLeaseId(f"invalid lease id {lease_id!r}: use {LEASE_ID_RULE}")
    return lease_id


def lease_chunk_name(generation: int, index: int) -> str:
    return f"chunk-{generation}-{index}"


def parse_lease_chunk_name(name: str) -> tuple[int, int] | None:
    """``chunk-<generation>-<index>`` -> (generation, index); None for anything else."""
    m = _LEASE_CHUNK.fullmatch(name)
    return (int(m.group(1)), int(m.group(2))) if m else None


def _msgpack_int_size(v: int) -> int:
    if -32 <= v <= 127:
        return 1
    if -128 <= v <= 255:
        return 2
    if -32768 <= v <= 65535:
        return 3
    if -(2**31) <= v <= 2**32 - 1:
        return 5
    return 9


def _packed_typecode(width: int) -> str:
    import array
    for code in "BHILQ":
        if array.array(code).itemsize == width:
            return code
    raise CorruptMessage(f"no {width}-byte integer type on this platform")


def _pack(values: list[int], width: int) -> bytes:
    arr = array.array(_packed_typecode(width), values)
    if sys.byteorder == "big":
        arr.byteswap()
    return arr.tobytes()


def _unpack(data: bytes, width: int) -> array.array:
    arr = array.array(_packed_typecode(width))
    arr.frombytes(data)
    if sys.byteorder == "big":
        arr.byteswap()
    return arr


def encode_lease_pins(tables: dict) -> list:
    """``{table_id: {bucket: snapshot_id}}`` -> the compact per-table entries of LeaseRecord.

    Each table is stored in whichever of three encodings is smallest:

    - ``dense``: ``s[bucket]`` = snapshot id, -1 = no pin (a msgpack int array);
    - ``sparse``: parallel ``b`` / ``s`` arrays (few pins spread over many buckets);
    - ``packed``: like dense, but ``d`` is raw little-endian unsigned integers of ``w`` bytes
      holding ``snapshot_id - base + 1`` (0 = no pin): a table's pinned snapshot ids are close
      together, so this is usually 1 or 2 bytes per bucket.
    """
    out = []
    for table_id in sorted(tables):
        pins = tables[table_id]
        if not pins:
            continue
        buckets = sorted(pins)
        snaps = [pins[b] for b in buckets]
        span = buckets[-1] + 1
        snap_bytes = sum(_msgpack_int_size(s) for s in snaps)
        sizes = {"sparse": snap_bytes + sum(_msgpack_int_size(b) for b in buckets)}
        if buckets[0] >= 0:
            sizes["dense"] = snap_bytes + (span - len(buckets))
            base = min(snaps)
            top = max(snaps) - base + 1
            width = next(w for w in (1, 2, 4, 8) if top < 256 ** w)
            sizes["packed"] = span * width + 16
        kind = min(sizes, key=lambda k: (sizes[k], k != "dense"))
        if kind == "dense":
            dense = [-1] * span
            for b, snap in zip(buckets, snaps):
                dense[b] = snap
            out.append({"t": table_id, "e": "dense", "s": dense})
        elif kind == "packed":
            values = [0] * span
            for b, snap in zip(buckets, snaps):
                values[b] = snap - base + 1
            out.append({"t": table_id, "e": "packed", "base": base, "w": width,
                        "d": _pack(values, width)})
        else:
            out.append({"t": table_id, "e": "sparse", "b": buckets, "s": snaps})
    return out


def decode_lease_pins(entries: list) -> dict:
    """Inverse of ``encode_lease_pins``."""
    tables: dict = {}
    for entry in entries:
        kind = entry.get("e")
        if kind == "dense":
            pins = {b: s for b, s in enumerate(entry["s"]) if s != -1}
        elif kind == "sparse":
            pins = dict(zip(entry["b"], entry["s"]))
        elif kind == "packed":
            offset = entry["base"] - 1
            pins = {b: v + offset for b, v in enumerate(_unpack(entry["d"], entry["w"])) if v}
        else:
            raise CorruptMessage(f"lease pins of table {entry.get('t')} have unknown encoding "
                                 f"{kind!r}; upgrade fluss_spark")
        if pins:
            tables.setdefault(int(entry["t"]), {}).update(pins)
    return tables


@dataclass(frozen=True)
class LeaseRecord:
    """A KV snapshot lease: its expiry and its pins ``{table_id: {bucket: snapshot_id}}``.

    Stored at ``/fluss/leases/kv_snapshot/<lease_id>`` as a msgpack header map::

        {v, lease_id, created_ms, expires_at_ms, state: "ok"|"writing",
         pins: [entry] | nil, generation, chunks, payload_bytes, payload_crc}

    ``pins`` entries come from ``encode_lease_pins`` (per table: dense, sparse or packed).
    When the packed pins would pass ``LEASE_CHUNK_BYTES`` they are not inline: the packed
    list is split into child znodes ``chunk-<generation>-<index>`` and the header names the
    generation, chunk count, total size and CRC32. A writer creates a new generation's
    chunks, then switches the header, then deletes older chunks, so a reader ignores chunks
    of any other generation (orphans of an interrupted write). ``state: "writing"`` marks a
    brand-new lease whose first chunked write never finished; it was never acknowledged.

    Versions:

    - v1: the layout above.
    - v2: adds ``holders: {table_id: holder}``, the holder (query) that pinned each table; a v1
      record decodes with no holders.
    - v3: adds ``owner``, the authenticated principal that created the lease (nil on a
      PLAINTEXT cluster); v1 and v2 records decode with no owner.
    """

    VERSION = 3

    lease_id: str
    created_ms: int
    expires_at_ms: int
    tables: dict = field(default_factory=dict)
    holders: dict = field(default_factory=dict)
    owner: str | None = None

    def pin_count(self) -> int:
        return sum(len(p) for p in self.tables.values())

    def encode_parts(self, generation: int, max_inline_bytes: int = LEASE_CHUNK_BYTES
                     ) -> tuple[bytes, list[bytes]]:
        """(header bytes, chunk bytes); chunks are empty when the pins fit inline."""
        import zlib
        entries = encode_lease_pins(self.tables)
        payload = packb(entries)
        header = {"v": self.VERSION, "lease_id": self.lease_id, "created_ms": self.created_ms,
                  "expires_at_ms": self.expires_at_ms, "state": "ok",
                  "holders": {int(t): h for t, h in sorted(self.holders.items())},
                  "owner": self.owner}
        if len(payload) <= max_inline_bytes:
            header.update(pins=entries, generation=generation, chunks=0,
                          payload_bytes=len(payload), payload_crc=zlib.crc32(payload))
            return packb(header), []
        chunks = [payload[i:i + max_inline_bytes]
                  for i in range(0, len(payload), max_inline_bytes)]
        header.update(pins=None, generation=generation, chunks=len(chunks),
                      payload_bytes=len(payload), payload_crc=zlib.crc32(payload))
        return packb(header), chunks

    @staticmethod
    def decode_header(data: bytes) -> dict:
        """The header map of a lease znode, version-checked."""
        try:
            raw = unpackb(data)
        except Exception as e:  # noqa: BLE001 - msgpack raises several types on garbage
            raise CorruptMessage(f"undecodable LeaseRecord: {e}") from None
        if not isinstance(raw, dict) or "v" not in raw:
            raise CorruptMessage("LeaseRecord without a version field")
        if raw["v"] > LeaseRecord.VERSION:
            raise CorruptMessage(f"LeaseRecord version {raw['v']} is newer than this software "
                                 f"understands ({LeaseRecord.VERSION}); upgrade fluss_spark")
        return raw

    @classmethod
    def decode(cls, header: bytes | dict, chunks: list[bytes] | None = None) -> "LeaseRecord":
        """Rebuild a record from its header and (when chunked) its generation's chunks in order."""
        import zlib
        raw = cls.decode_header(header) if isinstance(header, (bytes, bytearray)) else header
        if raw.get("chunks", 0):
            payload = b"".join(chunks or [])
            if len(payload) != raw["payload_bytes"] or zlib.crc32(payload) != raw["payload_crc"]:
                raise CorruptMessage(f"lease {raw.get('lease_id')}: chunks of generation "
                                     f"{raw.get('generation')} are missing or damaged")
            entries = unpackb(payload)
        else:
            entries = raw.get("pins") or []
        return cls(lease_id=raw["lease_id"], created_ms=int(raw.get("created_ms", 0)),
                   expires_at_ms=int(raw["expires_at_ms"]), tables=decode_lease_pins(entries),
                   holders={int(t): str(h) for t, h in (raw.get("holders") or {}).items()},
                   owner=raw.get("owner"))
