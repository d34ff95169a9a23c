"""The Apache Fluss API keys this client sends, and the version of each it speaks."""

from __future__ import annotations

from enum import IntEnum


class FlussApiKey(IntEnum):
    """Apache Fluss API keys (Fluss reserves 0-999 for Kafka compatibility)."""

    API_VERSIONS = 1000
    CREATE_DATABASE = 1001
    DROP_DATABASE = 1002
    LIST_DATABASES = 1003
    CREATE_TABLE = 1005
    DROP_TABLE = 1006
    GET_TABLE_INFO = 1007
    LIST_TABLES = 1008
    LIST_PARTITION_INFOS = 1009
    GET_TABLE_SCHEMA = 1011
    GET_METADATA = 1012
    FETCH_LOG = 1015
    LIST_OFFSETS = 1021
    GET_LATEST_KV_SNAPSHOTS = 1023
    GET_KV_SNAPSHOT_METADATA = 1024
    #: A SASL login on a connection; a SASL listener answers nothing else but API_VERSIONS
    #: before it succeeded.
    CREATE_PARTITION = 1036
    DROP_PARTITION = 1037
    AUTHENTICATE = 1038
    #: Table options and schema changes (Fluss 0.9.1 applies only ADD COLUMN: nullable, last).
    ALTER_TABLE = 1044
    ACQUIRE_KV_SNAPSHOT_LEASE = 1056
    RELEASE_KV_SNAPSHOT_LEASE = 1057
    DROP_KV_SNAPSHOT_LEASE = 1058
    #: On Fluss's main branch only (no release has it yet): live KV scan sessions.
    SCAN_KV = 1061


#: The version of each API this client sends; every one of them is version 0.
API_VERSION: dict[FlussApiKey, int] = {key: 0 for key in FlussApiKey}

#: Lease APIs appeared in Fluss 0.9.0; a server without them is older.
LEASE_APIS = (FlussApiKey.ACQUIRE_KV_SNAPSHOT_LEASE, FlussApiKey.RELEASE_KV_SNAPSHOT_LEASE,
              FlussApiKey.DROP_KV_SNAPSHOT_LEASE)

#: Listing, creating and dropping partitions (a coordinator offers all three).
PARTITION_APIS = (FlussApiKey.LIST_PARTITION_INFOS, FlussApiKey.CREATE_PARTITION,
                  FlussApiKey.DROP_PARTITION)

#: ``server_type`` of an API_VERSIONS response.
SERVER_TYPE_COORDINATOR, SERVER_TYPE_TABLET = 1, 2

#: ``offset_type`` of LIST_OFFSETS.
OFFSET_EARLIEST, OFFSET_LATEST, OFFSET_TIMESTAMP = 0, 1, 2

#: ``follower_server_id`` a client puts in FETCH_LOG and LIST_OFFSETS.
CLIENT_FOLLOWER_ID = -1


def api_name(key: int) -> str:
    try:
        return FlussApiKey(key).name
    except ValueError:
        return f"api {key}"
