"""API keys: the stable number of every RPC. Their messages are ``protocol/messages/``.

Each request and response body is a msgpack map, declared by one frozen dataclass per request
and response in ``protocol/messages/`` (grouped by area: meta, tables, snapshots, leases, log,
scan, acls, partitions), with the type and bounds of every field; ``bytes`` fields that carry
rows are Arrow IPC streams (``protocol.arrow_ipc``). A response body is returned only when
``error_code`` is 0. Decoding refuses a malformed request with INVALID_REQUEST
(INVALID_SCAN_REQUEST for SCAN_KV) naming the field; nothing is clamped unless its message
says so.

Frame bounds (before any message is decoded): at most ``rpc.max-request-size`` (32 MB by
default) announced; decoded, at most 2,097,152 entries per array or map and 16x the frame +
16 MB of memory. Arrow IPC payloads are decoded under ``protocol.ipc_limits`` (rows and
decoded bytes, checked from their headers before anything is decompressed). On a server with
``security.protocol=SASL``, AUTHENTICATE and API_VERSIONS are the only requests an
unauthenticated connection may send; a failed AUTHENTICATE closes the connection.
"""

from __future__ import annotations

import enum


class ApiKey(enum.IntEnum):
    """Stable numbers of every RPC."""

    API_VERSIONS = 0
    GET_METADATA = 1
    AUTHENTICATE = 2
    CREATE_TABLE = 10
    DROP_TABLE = 11
    LIST_TABLES = 12
    COMMIT_KV_SNAPSHOT = 13
    LIST_KV_SNAPSHOTS = 14
    LIST_PARTITIONS = 15
    CREATE_PARTITION = 16
    DROP_PARTITION = 17
    ALTER_TABLE = 18
    ACQUIRE_KV_SNAPSHOT_LEASE = 20
    RENEW_KV_SNAPSHOT_LEASE = 21
    RELEASE_KV_SNAPSHOT_LEASE = 22
    DROP_KV_SNAPSHOT_LEASE = 23
    LIST_KV_SNAPSHOT_LEASES = 24
    DESCRIBE_KV_SNAPSHOT_LEASE = 25
    GET_METRICS = 26
    PRODUCE = 30
    LIST_OFFSETS = 31
    FETCH_LOG = 32
    TRIGGER_KV_SNAPSHOT = 33
    SCAN_KV = 34
    LIST_SCANNERS = 35
    CREATE_ACLS = 40
    LIST_ACLS = 41
    DROP_ACLS = 42


#: The lease APIs, which a server started with ``--disable-api kv_snapshot_lease`` omits.
LEASE_APIS = frozenset({
    ApiKey.ACQUIRE_KV_SNAPSHOT_LEASE, ApiKey.RENEW_KV_SNAPSHOT_LEASE,
    ApiKey.RELEASE_KV_SNAPSHOT_LEASE, ApiKey.DROP_KV_SNAPSHOT_LEASE,
    ApiKey.LIST_KV_SNAPSHOT_LEASES, ApiKey.DESCRIBE_KV_SNAPSHOT_LEASE,
})

#: API groups that a server flag can switch off, by the name used on the command line.
API_GROUPS = {"kv_snapshot_lease": LEASE_APIS, "scan_kv": frozenset({ApiKey.SCAN_KV})}

#: The only api_version so far; a request with another version gets UNSUPPORTED_VERSION.
CURRENT_VERSION = 1


def api_name(key: int) -> str:
    """The name of an api key for messages (``api 999`` for a key this version does not know)."""
    try:
        return ApiKey(key).name
    except ValueError:
        return f"api {key}"
