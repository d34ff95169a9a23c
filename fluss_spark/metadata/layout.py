"""The ZooKeeper layout: every path, and the versioned msgpack record stored at it.

::

    /fluss/coordinator/election           kazoo election of the active coordinator
    /fluss/coordinator/active             CoordinatorRecord (ephemeral)
    /fluss/tablets/<id>                   TabletRecord (ephemeral)
    /fluss/counters/table_id              next table id (integer record, CAS-updated)
    /fluss/counters/partition_id          next partition id (integer record, CAS-updated)
    /fluss/tables/<db.table>              TableRecord
    /fluss/tables/<db.table>/assignment   AssignmentRecord
    /fluss/tables/<db.table>/partitions/<partition name>   PartitionRecord
    /fluss/snapshot_index/<table_id>/<page>   SnapshotIndexPage: the snapshots of buckets
                                              page*128 .. page*128+127 (layout v2)
    /fluss/snapshot_index/<table_id>/p<partition_id>/<page>   the same, for one partition
    /fluss/snapshots/<table_id>/<bucket>/<snapshot_id, 20 digits>   SnapshotRecord (layout v1,
                                              read and migrated, never written)
    /fluss/leases/kv_snapshot/<lease_id>  LeaseRecord header (see leases below)
    /fluss/leases/kv_snapshot/<lease_id>/part-<table_id>-<part>-<generation>   one lease part
    /fluss/leases/kv_snapshot/<lease_id>/part-<table_id>-p<partition_id>-<part>-<generation>
                                          one lease part of a partition's pins (v5)
    /fluss/acls/<cluster|database|table>/<name>   AclRecord: the ACLs of one resource
    /fluss/acl_changes                    empty; its znode version moves with every ACL change

Every record is a msgpack map with a ``v`` field. Version history:

- layout v1: one znode per KV snapshot; a coordinator read two znodes per snapshot to recover.
- layout v2: one index page per table and 128 buckets, holding the records of all their
  snapshots, so recovery reads O(tables + buckets/128) znodes. A coordinator moves v1 snapshot
  znodes into the pages in the background after it takes over; until then (and if that is cut
  off) both are read.
- LeaseRecord v4: pins in independently encoded parts (see ``LeaseRecord``).
- LeaseRecord v5: parts of partitions' pins (see ``LeaseRecord``); written only by a lease that
  pins partitions, so a lease without them stays v4.
- AclRecord v1: the ACLs of one resource (see ``AclRecord``).
- TableRecord v2: adds ``partition_keys``; a v1 record decodes as an unpartitioned table.
- PartitionRecord v1: a partition's id, values and bucket assignment (see ``PartitionRecord``).
- SnapshotRecord v2 and SnapshotIndexPage v2: add ``partition_id`` (None: an unpartitioned
  table's bucket); v1 records and pages decode with none.

Decoders accept every version listed here; a newer, unknown version is refused with a clear
error rather than misread. docs/zookeeper_layout.md describes the stored formats byte by byte.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field, fields

from fluss_spark.errors import ConfigError, CorruptMessage, InvalidPartitionSpec, InvalidTable
from fluss_spark.metadata import lease_codec
from fluss_spark.protocol.acl import (AclBinding, OperationType, PermissionType, Resource,
                                      ResourceType, make_resource)
from fluss_spark.protocol.codec import packb, unpackb
from fluss_spark.protocol.names import LEASE_ID_RULE, is_valid_lease_id
from fluss_spark.protocol.partitions import check_value, values_of

ROOT = "/fluss"
COORDINATOR_ELECTION = f"{ROOT}/coordinator/election"
COORDINATOR_ACTIVE = f"{ROOT}/coordinator/active"
#: The coordinator epoch: its znode version is the fencing token every coordinator write checks.
COORDINATOR_EPOCH = f"{ROOT}/coordinator/epoch"
TABLETS = f"{ROOT}/tablets"
TABLE_ID_COUNTER = f"{ROOT}/counters/table_id"
PARTITION_ID_COUNTER = f"{ROOT}/counters/partition_id"
TABLES = f"{ROOT}/tables"
SNAPSHOTS = f"{ROOT}/snapshots"
SNAPSHOT_INDEX = f"{ROOT}/snapshot_index"
LEASES = f"{ROOT}/leases/kv_snapshot"
ACLS = f"{ROOT}/acls"
#: Readers of the ACLs poll this znode's version, one cheap read, and reload when it moved.
ACL_CHANGES = f"{ROOT}/acl_changes"

TABLE_NAME = re.compile(r"^[A-Za-z0-9_]{1,100}\.[A-Za-z0-9_]{1,100}$")


def tablet_path(tablet_id: int) -> str:
    return f"{TABLETS}/{tablet_id}"


def table_path(name: str) -> str:
    check_table_name(name)
    return f"{TABLES}/{name}"


def assignment_path(name: str) -> str:
    return f"{table_path(name)}/assignment"


def partitions_path(name: str) -> str:
    return f"{table_path(name)}/partitions"


def partition_path(name: str, partition_name: str) -> str:
    return f"{partitions_path(name)}/{check_partition_name(partition_name)}"


def check_partition_name(name: object) -> str:
    """Return ``name`` or raise InvalidPartitionSpec: it becomes a znode name."""
    try:
        for value in values_of(str(name)):
            check_value(value)
    except ConfigError as e:
        raise InvalidPartitionSpec(f"invalid partition name {name!r}: {e}") from None
    return str(name)


def snapshots_path(table_id: int, bucket: int | None = None) -> str:
    base = f"{SNAPSHOTS}/{table_id}"
    return base if bucket is None else f"{base}/{bucket}"


def snapshot_path(table_id: int, bucket: int, snapshot_id: int) -> str:
    """The layout v1 znode of one snapshot (read and migrated, no longer written)."""
    return f"{snapshots_path(table_id, bucket)}/{snapshot_id:020d}"


#: Buckets per snapshot index page: a commit rewrites one page, so pages stay small (a few
#: KB), while recovery reads one page per 128 buckets instead of two znodes per snapshot.
SNAPSHOT_PAGE_BUCKETS = 128
#: Largest encoded page; ZooKeeper drops the connection on writes over ~1 MB.
SNAPSHOT_PAGE_MAX_BYTES = 900 * 1024


#: Prefix of a partition's node under its table's snapshot index node: ``p<partition id>``.
PARTITION_NODE_PREFIX = "p"


def snapshot_index_path(table_id: int, page: int | None = None,
                        partition_id: int | None = None) -> str:
    """A table's index node, a partition's (``.../p<partition_id>``), or one of their pages."""
    base = f"{SNAPSHOT_INDEX}/{table_id}"
    if partition_id is not None:
        base = f"{base}/{PARTITION_NODE_PREFIX}{partition_id}"
    return base if page is None else f"{base}/{page}"


def partition_of_node(name: str) -> int | None:
    """The partition id of a ``p<partition id>`` child of a table's index node, else None."""
    rest = name[len(PARTITION_NODE_PREFIX):]
    return int(rest) if name.startswith(PARTITION_NODE_PREFIX) and rest.isdigit() else None


def snapshot_page_of(bucket: int) -> int:
    return bucket // SNAPSHOT_PAGE_BUCKETS


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
    """A table definition.

    Versions:

    - v1: table_id, name, schema (Arrow IPC), primary_key, bucket_key, num_buckets,
      properties, created_ms.
    - v2: adds partition_keys (empty: not partitioned); a v1 record decodes with none.
    - v3: adds schema_id (the id of ``schema``; each ALTER_TABLE adds one) and
      schema_history (``[[schema_id, Arrow IPC schema], ...]``, every older schema, oldest
      first); v1 and v2 records decode as schema 1 with no history.
    """

    VERSION = 3

    table_id: int
    name: str
    schema: bytes
    primary_key: list = field(default_factory=list)
    bucket_key: list = field(default_factory=list)
    num_buckets: int = 1
    properties: dict = field(default_factory=dict)
    created_ms: int = 0
    partition_keys: list = field(default_factory=list)
    schema_id: int = 1
    schema_history: list = field(default_factory=list)

    @property
    def partitioned(self) -> bool:
        return bool(self.partition_keys)

    def schemas(self) -> dict[int, bytes]:
        """Every schema the table has had (Arrow IPC), by schema id, the current one included."""
        return {**{int(i): bytes(s) for i, s in self.schema_history}, self.schema_id: self.schema}

    @classmethod
    def _upgrade(cls, raw: dict) -> dict:
        if raw["v"] < 2:
            raw = {**raw, "partition_keys": []}
        if raw["v"] < 3:
            raw = {**raw, "schema_id": 1, "schema_history": []}
        return raw


@dataclass(frozen=True)
class PartitionRecord(_Record):
    """One partition of a partitioned table, at
    ``/fluss/tables/<db.table>/partitions/<partition name>``.

    ``buckets[i]`` is the tablet id hosting bucket i of the partition (each partition has the
    table's number of buckets, assigned on its own); ``values`` are in partition-key order and
    their ``$``-join is the znode name.

    Versions:

    - v1: table_id, partition_id, name, values, buckets, created_ms.
    """

    table_id: int
    partition_id: int
    name: str
    values: list = field(default_factory=list)
    buckets: list = field(default_factory=list)
    created_ms: int = 0


@dataclass(frozen=True)
class AssignmentRecord(_Record):
    """Which tablet server hosts each bucket. v1: buckets[i] = tablet id of bucket i."""

    buckets: list


@dataclass(frozen=True)
class SnapshotRecord(_Record):
    """A registered KV snapshot of one bucket.

    Versions:

    - v1: table_id, bucket, snapshot_id, path, exclusive log_offset, row_count, size_bytes,
      created_ms.
    - v2: adds partition_id (None: an unpartitioned table's bucket); v1 decodes with none.
    """

    VERSION = 2

    table_id: int
    bucket: int
    snapshot_id: int
    path: str
    log_offset: int
    row_count: int
    size_bytes: int = 0
    created_ms: int = 0
    partition_id: int | None = None


_PAGE_COLUMNS = ("bucket", "snapshot_id", "path", "log_offset", "row_count", "size_bytes",
                 "created_ms")


def _check_version(name: str, raw, newest: int) -> dict:
    if not isinstance(raw, dict) or "v" not in raw:
        raise CorruptMessage(f"{name} without a version field")
    if not isinstance(raw["v"], int) or raw["v"] > newest:
        raise CorruptMessage(f"{name} version {raw['v']} is newer than this software "
                             f"understands ({newest}); upgrade fluss_spark")
    return raw


@dataclass(frozen=True)
class SnapshotIndexPage:
    """The registered KV snapshots of one table's buckets ``page*128 .. page*128+127``.

    Stored at ``/fluss/snapshot_index/<table_id>/<page>`` as
    ``{v, table_id, page, z: zlib(msgpack({column: [values]}))}``, one column per
    SnapshotRecord field (bucket, snapshot_id, path, log_offset, row_count, size_bytes,
    created_ms), rows ordered by (bucket, snapshot_id). Columns and zlib keep the page a few
    KB: snapshot paths of a table differ in a few digits.

    Versions:

    - v1: the layout above (layout v2 of the snapshot registry).
    - v2: adds ``partition_id`` (nil: an unpartitioned table's page), stored at
      ``/fluss/snapshot_index/<table_id>/p<partition_id>/<page>``; its records carry it.
      A v1 page decodes as an unpartitioned one.
    """

    VERSION = 2

    table_id: int
    page: int
    records: tuple = ()
    partition_id: int | None = None

    def encode(self) -> bytes:
        import zlib
        rows = sorted(self.records, key=lambda r: (r.bucket, r.snapshot_id))
        for r in rows:
            if r.table_id != self.table_id or snapshot_page_of(r.bucket) != self.page \
                    or r.partition_id != self.partition_id:
                raise ValueError(f"snapshot {r.snapshot_id} of table {r.table_id} partition id "
                                 f"{r.partition_id} bucket {r.bucket} does not belong to page "
                                 f"{self.page} of table {self.table_id} partition id "
                                 f"{self.partition_id}")
        columns = {c: [getattr(r, c) for r in rows] for c in _PAGE_COLUMNS}
        return packb({"v": self.VERSION, "table_id": self.table_id, "page": self.page,
                      "partition_id": self.partition_id, "z": zlib.compress(packb(columns))})

    @classmethod
    def decode(cls, data: bytes) -> "SnapshotIndexPage":
        import zlib
        try:
            raw = _check_version("SnapshotIndexPage", unpackb(data), cls.VERSION)
            table_id, page = int(raw["table_id"]), int(raw["page"])
            pid = raw.get("partition_id")           # absent from v1 pages
            partition_id = None if pid is None else int(pid)
            columns = unpackb(zlib.decompress(raw["z"]))
            cols = [columns[c] for c in _PAGE_COLUMNS]
        except CorruptMessage:
            raise
        except Exception as e:  # noqa: BLE001 - msgpack, zlib and key errors on damaged data
            raise CorruptMessage(f"undecodable SnapshotIndexPage: {type(e).__name__}: {e}") \
                from None
        if len({len(c) for c in cols}) > 1:
            raise CorruptMessage(f"SnapshotIndexPage {page} of table {table_id}: columns of "
                                 "different lengths")
        records = tuple(SnapshotRecord(table_id, b, s, p, o, r, z, c, partition_id)
                        for b, s, p, o, r, z, c in zip(*cols))
        return cls(table_id=table_id, page=page, records=records, partition_id=partition_id)


def encode_int(value: int) -> bytes:
    return packb({"v": 1, "value": value})


def decode_int(data: bytes) -> int:
    if not data:
        return 0
    raw = unpackb(data)
    return int(raw["value"])


# -- KV snapshot leases (their bytes: lease_codec) ------------------------------------------
def check_lease_id(lease_id) -> str:
    """Return ``lease_id`` or raise InvalidLeaseId: it becomes a znode name."""
    from fluss_spark.errors import InvalidLeaseId
    if not is_valid_lease_id(lease_id):
        raise InvalidLeaseId(f"invalid lease id {lease_id!r}: use {LEASE_ID_RULE}")
    return lease_id


@dataclass(frozen=True)
class LeaseRecord:
    """A KV snapshot lease: its expiry and its pins, ``tables`` ``{table_id: {bucket:
    snapshot_id}}`` (unpartitioned tables) and ``partitions`` ``{table_id: {partition_id:
    {bucket: snapshot_id}}}``.

    Stored at ``/fluss/leases/kv_snapshot/<lease_id>`` as a msgpack header map. Since v4::

        {v, lease_id, created_ms, expires_at_ms, state: "ok"|"writing", holders, owner,
         generation, parts: [part bytes], refs: [[table_id, part, generation, bytes, crc32]]}

    The pins of each table are cut into parts of LEASE_PART_BUCKETS buckets, each encoded on
    its own (``lease_codec.encode_lease_part``, msgpack bytes). Small parts are inline in
    ``parts``; the others are child znodes ``part-<table_id>-<part>-<generation>`` listed in
    ``refs`` with their size and CRC32. A write creates the child znodes of changed parts under a
    new generation, then switches the header (with a version check) and deletes the replaced
    children, in one ZooKeeper multi when it fits in LEASE_MULTI_BYTES; so a one-bucket change
    of a 1,000,000-pin lease writes one part and the header, and a crash at any point leaves
    either the old or the new lease readable (children the header does not name are orphans,
    ignored and later deleted). ``state: "writing"`` marks a brand-new lease whose first
    multi-transaction write never finished; it was never acknowledged.

    Versions:

    - v1: ``pins: [entry] | nil, generation, chunks, payload_bytes, payload_crc``: the entries
      of every table (dense, sparse or packed) inline, or their msgpack list cut into child
      znodes ``chunk-<generation>-<index>``.
    - v2: adds ``holders: {table_id: holder}``, the holder (query) that pinned each table; a v1
      record decodes with no holders.
    - v3: adds ``owner``, the authenticated principal that created the lease (nil on a
      PLAINTEXT cluster); v1 and v2 records decode with no owner.
    - v4: pins in parts (``parts`` / ``refs`` above, the ``sparse`` and ``pfor`` encodings);
      a v1-v3 header still decodes, and the next write turns it into v4.
    - v5: pins of partitions. A partition's pins are their own parts: each entry adds ``p``,
      the partition id, its ref appends the partition id
      (``[table_id, part, generation, bytes, crc32, partition_id]``) and its child znode is
      ``part-<table_id>-p<partition_id>-<part>-<generation>``. Only a lease that pins
      partitions is written as v5; one that does not is still written as v4, so software
      that reads v4 reads it.
    """

    VERSION = 5
    #: The version written when a lease pins no partitions.
    TABLES_ONLY_VERSION = 4

    lease_id: str
    created_ms: int
    expires_at_ms: int
    tables: dict = field(default_factory=dict)
    holders: dict = field(default_factory=dict)
    owner: str | None = None
    partitions: dict = field(default_factory=dict)

    def pin_count(self) -> int:
        return (sum(len(p) for p in self.tables.values())
                + sum(len(p) for ps in self.partitions.values() for p in ps.values()))

    def pinned_table_ids(self) -> set[int]:
        """Tables with pins, their own or their partitions'."""
        return ({t for t, p in self.tables.items() if p}
                | {t for t, ps in self.partitions.items() if any(ps.values())})

    def groups(self) -> dict:
        """``{(table_id, partition id or lease_codec.NO_PARTITION): {bucket: snapshot_id}}``."""
        return lease_codec.pin_groups(self.tables, self.partitions)

    def header(self, generation: int, parts: list[bytes], refs: list[list[int]],
               state: str = "ok") -> bytes:
        """The header znode bytes (v5 when the lease pins partitions, else v4), with inline
        ``parts`` and child ``refs``."""
        version = self.VERSION if self.partitions else self.TABLES_ONLY_VERSION
        return packb({"v": version, "lease_id": self.lease_id,
                      "created_ms": self.created_ms, "expires_at_ms": self.expires_at_ms,
                      "state": state,
                      "holders": {int(t): h for t, h in sorted(self.holders.items())},
                      "owner": self.owner, "generation": generation, "parts": parts,
                      "refs": refs})

    def encode_all(self, generation: int) -> tuple[bytes, dict[str, bytes]]:
        """(header, {child name: bytes}) of the whole record, every part encoded afresh."""
        encoded = {lease_codec.entry_key(e): packb(e)
                   for e in lease_codec.encode_lease_pins(self.tables, self.partitions)}
        inline, children = lease_codec.place_lease_parts(encoded)
        refs, named = [], {}
        for key in children:
            data = encoded[key]
            refs.append(lease_codec.lease_ref(key, generation, data))
            named[lease_codec.ref_part_name(refs[-1])] = data
        return self.header(generation, [encoded[k] for k in inline], refs), named

    @staticmethod
    def decode_header(data: bytes) -> dict:
        """The header map of a lease znode, version-checked."""
        try:
            raw = unpackb(data)
        except Exception as e:  # noqa: BLE001 - msgpack raises several types on garbage
            raise CorruptMessage(f"undecodable LeaseRecord: {e}") from None
        return _check_version("LeaseRecord", raw, LeaseRecord.VERSION)

    @classmethod
    def decode(cls, header: bytes | dict, chunks: list[bytes] | None = None,
               parts: dict[str, bytes] | None = None) -> "LeaseRecord":
        """Rebuild a record from its header and its child znodes: ``chunks`` (v1-v3: the
        header generation's chunks in order) or ``parts`` (v4: child name -> bytes)."""
        import zlib
        raw = cls.decode_header(header) if isinstance(header, (bytes, bytearray)) else header
        if "refs" in raw:
            entries = [lease_codec.unpack_part(p, raw.get("lease_id"))
                       for p in raw.get("parts") or []]
            for ref in raw["refs"]:
                (table_id, partition, part), gen, size, crc = lease_codec.parse_lease_ref(ref)
                data = (parts or {}).get(lease_codec.ref_part_name(ref))
                if data is None or len(data) != size or zlib.crc32(data) != crc:
                    where = ("" if partition == lease_codec.NO_PARTITION
                             else f" partition id {partition}")
                    raise CorruptMessage(f"lease {raw.get('lease_id')}: part {part} of table "
                                         f"{table_id}{where} (generation {gen}) is missing or "
                                         "damaged")
                entries.append(lease_codec.unpack_part(data, raw.get("lease_id")))
        elif raw.get("chunks", 0):
            payload = b"".join(chunks or [])
            if len(payload) != raw["payload_bytes"] or zlib.crc32(payload) != raw["payload_crc"]:
                raise CorruptMessage(f"lease {raw.get('lease_id')}: chunks of generation "
                                     f"{raw.get('generation')} are missing or damaged")
            entries = unpackb(payload)
        else:
            entries = raw.get("pins") or []
        tables, partitions = lease_codec.decode_lease_groups(entries)
        return cls(lease_id=raw["lease_id"], created_ms=int(raw.get("created_ms", 0)),
                   expires_at_ms=int(raw["expires_at_ms"]), tables=tables,
                   holders={int(t): str(h) for t, h in (raw.get("holders") or {}).items()},
                   owner=raw.get("owner"), partitions=partitions)


# -- ACLs -----------------------------------------------------------------------------------
def acl_type_path(rtype: ResourceType) -> str:
    return f"{ACLS}/{rtype.value.lower()}"


def acl_path(resource: Resource) -> str:
    return f"{acl_type_path(resource.type)}/{resource.name}"


#: The resource types whose ACLs are stored (ANY only appears in filters).
ACL_RESOURCE_TYPES = (ResourceType.CLUSTER, ResourceType.DATABASE, ResourceType.TABLE)


@dataclass(frozen=True)
class AclRecord:
    """The ACLs of one resource, at ``/fluss/acls/<type>/<name>``::

        {v, resource_type, resource_name,
         entries: [{principal, host, operation, permission}]}

    with the type and operation names of ``protocol.acl`` (``TABLE``, ``READ``, ``ALLOW``).
    A resource without ACLs has no znode.

    Versions:

    - v1: the layout above.
    """

    VERSION = 1

    resource: Resource
    acls: frozenset = frozenset()

    def encode(self) -> bytes:
        entries = [{"principal": a.principal, "host": a.host, "operation": a.operation.value,
                    "permission": a.permission.value} for a in sorted(self.acls)]
        return packb({"v": self.VERSION, "resource_type": self.resource.type.value,
                      "resource_name": self.resource.name, "entries": entries})

    @classmethod
    def decode(cls, data: bytes) -> "AclRecord":
        try:
            raw = _check_version("AclRecord", unpackb(data), cls.VERSION)
            resource = make_resource(ResourceType(raw["resource_type"]), raw["resource_name"])
            acls = frozenset(
                AclBinding(resource, str(e["principal"]), OperationType(e["operation"]),
                           str(e["host"]), PermissionType(e["permission"]))
                for e in raw["entries"])
        except CorruptMessage:
            raise
        except Exception as e:  # noqa: BLE001 - msgpack, key and value errors on damaged data
            raise CorruptMessage(f"undecodable AclRecord: {type(e).__name__}: {e}") from None
        return cls(resource, acls)
