"""Request and response messages of the Apache Fluss APIs this client uses (proto2 field tables).

Field numbers and labels follow Fluss 0.9.1's wire format; ``docs/apache_fluss_wire.md`` lists
them. Messages not listed here, and fields this client never reads, are skipped on decoding.
"""

from __future__ import annotations

from typing import ClassVar, Generic, TypeVar

from fluss_spark.protocol.apache_fluss.api import FlussApiKey
from fluss_spark.protocol.apache_fluss.proto import (BOOL, BYTES, INT32, INT64, MESSAGE, STRING,
                                              ProtoMessage, message, pb)

R = TypeVar("R", bound=ProtoMessage)


class FlussRequest(ProtoMessage, Generic[R]):
    """A request message: its API key and the response message it is answered with."""

    API_KEY: ClassVar[FlussApiKey]
    RESPONSE: ClassVar[type[ProtoMessage]]

    def decode_response(self, body: bytes | bytearray | memoryview) -> R:
        return self.RESPONSE.decode(body)  # type: ignore[return-value]


# -- shared parts ---------------------------------------------------------------------------------


@message
class ErrorResponse(ProtoMessage):
    """The body of an error or server-failure response."""

    error_code: int = pb(1, INT32, required=True)
    error_message: str | None = pb(2, STRING)


@message
class PbTablePath(ProtoMessage):
    """A table's database and name."""

    database_name: str = pb(1, STRING, required=True)
    table_name: str = pb(2, STRING, required=True)


@message
class PbPhysicalTablePath(ProtoMessage):
    """A table's (or one partition's) path."""

    database_name: str = pb(1, STRING, required=True)
    table_name: str = pb(2, STRING, required=True)
    partition_name: str | None = pb(3, STRING)


@message
class PbServerNode(ProtoMessage):
    """A server's id and address."""

    node_id: int = pb(1, INT32, required=True)
    host: str = pb(2, STRING, required=True)
    port: int = pb(3, INT32, required=True)
    listeners: str | None = pb(4, STRING)
    rack: str | None = pb(5, STRING)


@message
class PbTableBucket(ProtoMessage):
    """One bucket of a table (or of a partition)."""

    table_id: int = pb(1, INT64, required=True)
    partition_id: int | None = pb(2, INT64)
    bucket_id: int = pb(3, INT32, required=True)


# -- API_VERSIONS ---------------------------------------------------------------------------------


@message
class PbApiVersion(ProtoMessage):
    """The version range a server offers for one API."""

    api_key: int = pb(1, INT32, required=True)
    min_version: int = pb(2, INT32, required=True)
    max_version: int = pb(3, INT32, required=True)


@message
class ApiVersionsResponse(ProtoMessage):
    """The APIs a server offers, and whether it is a coordinator or a tablet server."""

    api_versions: list[PbApiVersion] = pb(1, MESSAGE, repeated=True, message=PbApiVersion)
    server_type: int | None = pb(2, INT32)


@message
class ApiVersionsRequest(FlussRequest[ApiVersionsResponse]):
    """Ask a server for its API versions."""

    API_KEY = FlussApiKey.API_VERSIONS
    RESPONSE = ApiVersionsResponse
    client_software_name: str = pb(1, STRING, required=True)
    client_software_version: str = pb(2, STRING, required=True)


# -- AUTHENTICATE ---------------------------------------------------------------------------------


@message
class AuthenticateResponse(ProtoMessage):
    """The server's next challenge (SASL PLAIN answers an empty one once the login succeeded)."""

    challenge: bytes | None = pb(1, BYTES)


@message
class AuthenticateRequest(FlussRequest[AuthenticateResponse]):
    """One step of a login: ``protocol`` is the SASL mechanism (``PLAIN``), ``token`` its bytes
    (for PLAIN: authzid NUL username NUL password, RFC 4616)."""

    API_KEY = FlussApiKey.AUTHENTICATE
    RESPONSE = AuthenticateResponse
    protocol: str = pb(1, STRING, required=True)
    token: bytes = pb(2, BYTES, required=True)

    def __repr__(self) -> str:
        # The token holds a password.
        return f"AuthenticateRequest(protocol={self.protocol!r}, token=<{len(self.token)} bytes>)"


# -- databases and tables -------------------------------------------------------------------------


@message
class EmptyResponse(ProtoMessage):
    """A response without fields."""


@message
class CreateDatabaseRequest(FlussRequest[EmptyResponse]):
    """Create a database (``database_json``: its descriptor; absent for none)."""

    API_KEY = FlussApiKey.CREATE_DATABASE
    RESPONSE = EmptyResponse
    database_name: str = pb(1, STRING, required=True)
    ignore_if_exists: bool = pb(2, BOOL, required=True)
    database_json: bytes | None = pb(3, BYTES)


@message
class DropDatabaseRequest(FlussRequest[EmptyResponse]):
    """Drop a database (``cascade``: with its tables)."""

    API_KEY = FlussApiKey.DROP_DATABASE
    RESPONSE = EmptyResponse
    database_name: str = pb(1, STRING, required=True)
    ignore_if_not_exists: bool = pb(2, BOOL, required=True)
    cascade: bool = pb(3, BOOL, required=True)


@message
class ListDatabasesResponse(ProtoMessage):
    """Database names."""

    database_name: list[str] = pb(1, STRING, repeated=True)


@message
class ListDatabasesRequest(FlussRequest[ListDatabasesResponse]):
    """List every database."""

    API_KEY = FlussApiKey.LIST_DATABASES
    RESPONSE = ListDatabasesResponse
    include_summary: bool | None = pb(1, BOOL)


@message
class CreateTableRequest(FlussRequest[EmptyResponse]):
    """Create a table from its descriptor JSON."""

    API_KEY = FlussApiKey.CREATE_TABLE
    RESPONSE = EmptyResponse
    table_path: PbTablePath = pb(1, MESSAGE, required=True, message=PbTablePath)
    table_json: bytes = pb(2, BYTES, required=True)
    ignore_if_exists: bool = pb(3, BOOL, required=True)


@message
class DropTableRequest(FlussRequest[EmptyResponse]):
    """Drop a table."""

    API_KEY = FlussApiKey.DROP_TABLE
    RESPONSE = EmptyResponse
    table_path: PbTablePath = pb(1, MESSAGE, required=True, message=PbTablePath)
    ignore_if_not_exists: bool = pb(2, BOOL, required=True)


@message
class GetTableInfoResponse(ProtoMessage):
    """A table's id, current schema id and descriptor JSON."""

    table_id: int = pb(1, INT64, required=True)
    schema_id: int = pb(2, INT32, required=True)
    table_json: bytes = pb(3, BYTES, required=True)
    created_time: int = pb(4, INT64, required=True)
    modified_time: int = pb(5, INT64, required=True)


@message
class GetTableInfoRequest(FlussRequest[GetTableInfoResponse]):
    """Describe one table."""

    API_KEY = FlussApiKey.GET_TABLE_INFO
    RESPONSE = GetTableInfoResponse
    table_path: PbTablePath = pb(1, MESSAGE, required=True, message=PbTablePath)


@message
class ListTablesResponse(ProtoMessage):
    """Table names of one database."""

    table_name: list[str] = pb(1, STRING, repeated=True)


@message
class ListTablesRequest(FlussRequest[ListTablesResponse]):
    """List the tables of a database."""

    API_KEY = FlussApiKey.LIST_TABLES
    RESPONSE = ListTablesResponse
    database_name: str = pb(1, STRING, required=True)


@message
class GetTableSchemaResponse(ProtoMessage):
    """One schema version of a table, as schema JSON."""

    schema_id: int = pb(1, INT32, required=True)
    schema_json: bytes = pb(2, BYTES, required=True)


@message
class GetTableSchemaRequest(FlussRequest[GetTableSchemaResponse]):
    """A table's schema ``schema_id`` (absent: the latest)."""

    API_KEY = FlussApiKey.GET_TABLE_SCHEMA
    RESPONSE = GetTableSchemaResponse
    table_path: PbTablePath = pb(1, MESSAGE, required=True, message=PbTablePath)
    schema_id: int | None = pb(2, INT32)


# -- GET_METADATA ---------------------------------------------------------------------------------


@message
class PbBucketMetadata(ProtoMessage):
    """A bucket's leader (absent while none is elected) and replicas."""

    bucket_id: int = pb(1, INT32, required=True)
    leader_id: int | None = pb(2, INT32)
    replica_id: list[int] = pb(3, INT32, repeated=True, packed=True)
    leader_epoch: int | None = pb(4, INT32)


@message
class PbTableMetadata(ProtoMessage):
    """A table's id, descriptor and bucket leaders."""

    table_path: PbTablePath = pb(1, MESSAGE, required=True, message=PbTablePath)
    table_id: int = pb(2, INT64, required=True)
    schema_id: int = pb(3, INT32, required=True)
    table_json: bytes = pb(4, BYTES, required=True)
    bucket_metadata: list[PbBucketMetadata] = pb(5, MESSAGE, repeated=True,
                                                 message=PbBucketMetadata)
    created_time: int = pb(6, INT64, required=True)
    modified_time: int = pb(7, INT64, required=True)


@message
class PbPartitionMetadata(ProtoMessage):
    """A partition's id and bucket leaders."""

    table_id: int = pb(1, INT64, required=True)
    partition_name: str = pb(2, STRING, required=True)
    partition_id: int = pb(3, INT64, required=True)
    bucket_metadata: list[PbBucketMetadata] = pb(4, MESSAGE, repeated=True,
                                                 message=PbBucketMetadata)


@message
class MetadataResponse(ProtoMessage):
    """The coordinator, the live tablet servers, and the tables asked for."""

    coordinator_server: PbServerNode | None = pb(1, MESSAGE, message=PbServerNode)
    tablet_servers: list[PbServerNode] = pb(2, MESSAGE, repeated=True, message=PbServerNode)
    table_metadata: list[PbTableMetadata] = pb(3, MESSAGE, repeated=True,
                                               message=PbTableMetadata)
    partition_metadata: list[PbPartitionMetadata] = pb(4, MESSAGE, repeated=True,
                                                       message=PbPartitionMetadata)


@message
class MetadataRequest(FlussRequest[MetadataResponse]):
    """Cluster metadata, with the named tables' bucket leaders."""

    API_KEY = FlussApiKey.GET_METADATA
    RESPONSE = MetadataResponse
    table_path: list[PbTablePath] = pb(1, MESSAGE, repeated=True, message=PbTablePath)
    partitions_path: list[PbPhysicalTablePath] = pb(2, MESSAGE, repeated=True,
                                                    message=PbPhysicalTablePath)
    partitions_id: list[int] = pb(3, INT64, repeated=True, packed=True)


# -- FETCH_LOG ------------------------------------------------------------------------------------


@message
class PbFetchLogReqForBucket(ProtoMessage):
    """Where to read one bucket from, and how much."""

    partition_id: int | None = pb(1, INT64)
    bucket_id: int = pb(2, INT32, required=True)
    fetch_offset: int = pb(3, INT64, required=True)
    max_fetch_bytes: int = pb(4, INT32, required=True)


@message
class PbFetchLogReqForTable(ProtoMessage):
    """The buckets of one table to read, and the columns (field indexes, ascending)."""

    table_id: int = pb(1, INT64, required=True)
    projection_pushdown_enabled: bool = pb(2, BOOL, required=True)
    projected_fields: list[int] = pb(3, INT32, repeated=True, packed=True)
    buckets_req: list[PbFetchLogReqForBucket] = pb(4, MESSAGE, repeated=True,
                                                   message=PbFetchLogReqForBucket)


@message
class PbRemoteLogSegment(ProtoMessage):
    """A log segment already moved to remote storage."""

    remote_log_segment_id: str = pb(1, STRING, required=True)
    remote_log_start_offset: int = pb(2, INT64, required=True)
    remote_log_end_offset: int = pb(3, INT64, required=True)
    segment_size_in_bytes: int = pb(4, INT32, required=True)
    max_timestamp: int | None = pb(5, INT64)


@message
class PbRemoteLogFetchInfo(ProtoMessage):
    """Where to read records that are only in remote storage any more."""

    remote_log_tablet_dir: str = pb(1, STRING, required=True)
    partition_name: str | None = pb(2, STRING)
    remote_log_segments: list[PbRemoteLogSegment] = pb(3, MESSAGE, repeated=True,
                                                       message=PbRemoteLogSegment)
    first_start_pos: int | None = pb(4, INT32)


@message
class PbFetchLogRespForBucket(ProtoMessage):
    """One bucket's records (record batches, concatenated) or its error."""

    partition_id: int | None = pb(1, INT64)
    bucket_id: int = pb(2, INT32, required=True)
    error_code: int | None = pb(3, INT32)
    error_message: str | None = pb(4, STRING)
    high_watermark: int | None = pb(5, INT64)
    log_start_offset: int | None = pb(6, INT64)
    remote_log_fetch_info: PbRemoteLogFetchInfo | None = pb(7, MESSAGE,
                                                            message=PbRemoteLogFetchInfo)
    records: bytes | None = pb(8, BYTES)


@message
class PbFetchLogRespForTable(ProtoMessage):
    """The buckets of one table in a fetch response."""

    table_id: int = pb(1, INT64, required=True)
    buckets_resp: list[PbFetchLogRespForBucket] = pb(2, MESSAGE, repeated=True,
                                                     message=PbFetchLogRespForBucket)


@message
class FetchLogResponse(ProtoMessage):
    """Records per table and bucket."""

    tables_resp: list[PbFetchLogRespForTable] = pb(1, MESSAGE, repeated=True,
                                                   message=PbFetchLogRespForTable)


@message
class FetchLogRequest(FlussRequest[FetchLogResponse]):
    """Read log records of buckets led by the receiving tablet server."""

    API_KEY = FlussApiKey.FETCH_LOG
    RESPONSE = FetchLogResponse
    follower_server_id: int = pb(1, INT32, required=True)
    max_bytes: int = pb(2, INT32, required=True)
    tables_req: list[PbFetchLogReqForTable] = pb(3, MESSAGE, repeated=True,
                                                 message=PbFetchLogReqForTable)
    max_wait_ms: int | None = pb(4, INT32)
    min_bytes: int | None = pb(5, INT32)


# -- LIST_OFFSETS ---------------------------------------------------------------------------------


@message
class PbListOffsetsRespForBucket(ProtoMessage):
    """One bucket's offset or its error."""

    bucket_id: int = pb(1, INT32, required=True)
    error_code: int | None = pb(2, INT32)
    error_message: str | None = pb(3, STRING)
    offset: int | None = pb(4, INT64)


@message
class ListOffsetsResponse(ProtoMessage):
    """Offsets per bucket."""

    buckets_resp: list[PbListOffsetsRespForBucket] = pb(1, MESSAGE, repeated=True,
                                                        message=PbListOffsetsRespForBucket)


@message
class ListOffsetsRequest(FlussRequest[ListOffsetsResponse]):
    """Earliest, latest or by-timestamp offsets of buckets led by the receiving tablet server."""

    API_KEY = FlussApiKey.LIST_OFFSETS
    RESPONSE = ListOffsetsResponse
    follower_server_id: int = pb(1, INT32, required=True)
    offset_type: int = pb(2, INT32, required=True)
    table_id: int = pb(3, INT64, required=True)
    partition_id: int | None = pb(4, INT64)
    bucket_id: list[int] = pb(5, INT32, repeated=True, packed=True)
    start_timestamp: int | None = pb(6, INT64)


# -- KV snapshots and leases ----------------------------------------------------------------------


@message
class PbKvSnapshot(ProtoMessage):
    """A bucket's latest KV snapshot (both absent when it has none yet)."""

    bucket_id: int = pb(1, INT32, required=True)
    snapshot_id: int | None = pb(2, INT64)
    log_offset: int | None = pb(3, INT64)


@message
class GetLatestKvSnapshotsResponse(ProtoMessage):
    """The latest KV snapshot of every bucket of a table (or partition)."""

    table_id: int = pb(1, INT64, required=True)
    partition_id: int | None = pb(2, INT64)
    latest_snapshots: list[PbKvSnapshot] = pb(3, MESSAGE, repeated=True, message=PbKvSnapshot)


@message
class GetLatestKvSnapshotsRequest(FlussRequest[GetLatestKvSnapshotsResponse]):
    """Latest KV snapshots of a primary-key table."""

    API_KEY = FlussApiKey.GET_LATEST_KV_SNAPSHOTS
    RESPONSE = GetLatestKvSnapshotsResponse
    table_path: PbTablePath = pb(1, MESSAGE, required=True, message=PbTablePath)
    partition_name: str | None = pb(2, STRING)


@message
class PbRemotePathAndLocalFile(ProtoMessage):
    """One file of a KV snapshot: where it is stored and its name in the checkpoint."""

    remote_path: str = pb(1, STRING, required=True)
    local_file_name: str = pb(2, STRING, required=True)


@message
class GetKvSnapshotMetadataResponse(ProtoMessage):
    """The log offset a KV snapshot covers and its files."""

    log_offset: int = pb(1, INT64, required=True)
    snapshot_files: list[PbRemotePathAndLocalFile] = pb(2, MESSAGE, repeated=True,
                                                        message=PbRemotePathAndLocalFile)


@message
class GetKvSnapshotMetadataRequest(FlussRequest[GetKvSnapshotMetadataResponse]):
    """Files of one KV snapshot."""

    API_KEY = FlussApiKey.GET_KV_SNAPSHOT_METADATA
    RESPONSE = GetKvSnapshotMetadataResponse
    table_id: int = pb(1, INT64, required=True)
    partition_id: int | None = pb(2, INT64)
    bucket_id: int = pb(3, INT32, required=True)
    snapshot_id: int = pb(4, INT64, required=True)


@message
class PbKvSnapshotLeaseForBucket(ProtoMessage):
    """One bucket's snapshot under a lease."""

    partition_id: int | None = pb(1, INT64)
    bucket_id: int = pb(2, INT32, required=True)
    snapshot_id: int = pb(3, INT64, required=True)


@message
class PbKvSnapshotLeaseForTable(ProtoMessage):
    """The bucket snapshots of one table under a lease."""

    table_id: int = pb(1, INT64, required=True)
    bucket_snapshots: list[PbKvSnapshotLeaseForBucket] = pb(
        2, MESSAGE, repeated=True, message=PbKvSnapshotLeaseForBucket)


@message
class AcquireKvSnapshotLeaseResponse(ProtoMessage):
    """Snapshots not leased (Fluss 0.9.1 always answers none)."""

    unavailable_snapshots: list[PbKvSnapshotLeaseForTable] = pb(
        1, MESSAGE, repeated=True, message=PbKvSnapshotLeaseForTable)


@message
class AcquireKvSnapshotLeaseRequest(FlussRequest[AcquireKvSnapshotLeaseResponse]):
    """Create or extend a lease to now + ``lease_duration_ms`` and pin snapshots under it."""

    API_KEY = FlussApiKey.ACQUIRE_KV_SNAPSHOT_LEASE
    RESPONSE = AcquireKvSnapshotLeaseResponse
    lease_id: str = pb(1, STRING, required=True)
    lease_duration_ms: int = pb(2, INT64, required=True)
    snapshots_to_lease: list[PbKvSnapshotLeaseForTable] = pb(
        3, MESSAGE, repeated=True, message=PbKvSnapshotLeaseForTable)


@message
class ReleaseKvSnapshotLeaseRequest(FlussRequest[EmptyResponse]):
    """Unpin buckets from a lease (the lease goes with its last pin)."""

    API_KEY = FlussApiKey.RELEASE_KV_SNAPSHOT_LEASE
    RESPONSE = EmptyResponse
    lease_id: str = pb(1, STRING, required=True)
    buckets_to_release: list[PbTableBucket] = pb(2, MESSAGE, repeated=True,
                                                 message=PbTableBucket)


@message
class DropKvSnapshotLeaseRequest(FlussRequest[EmptyResponse]):
    """Remove a lease and all its pins."""

    API_KEY = FlussApiKey.DROP_KV_SNAPSHOT_LEASE
    RESPONSE = EmptyResponse
    lease_id: str = pb(1, STRING, required=True)


# -- SCAN_KV (Fluss's main branch; docs/apache_fluss_scan_kv.md) ----------------------------------


@message
class PbScanReqForBucket(ProtoMessage):
    """The bucket a scan session opens on; ``limit`` caps the rows of the whole session."""

    table_id: int = pb(1, INT64, required=True)
    partition_id: int | None = pb(2, INT64)
    bucket_id: int = pb(3, INT32, required=True)
    limit: int | None = pb(4, INT64)


@message
class ScanKvResponse(ProtoMessage):
    """One batch of a scan session; errors come back here, not as an error frame."""

    error_code: int | None = pb(1, INT32)
    error_message: str | None = pb(2, STRING)
    scanner_id: bytes | None = pb(3, BYTES)
    has_more_results: bool | None = pb(4, BOOL)
    records: bytes | None = pb(5, BYTES)
    log_offset: int | None = pb(6, INT64)


@message
class ScanKvRequest(FlussRequest[ScanKvResponse]):
    """Open (``bucket_scan_req``), continue (``scanner_id`` + the next ``call_seq_id``) or close
    (``scanner_id`` + ``close_scanner``) a live scan session of one bucket."""

    API_KEY = FlussApiKey.SCAN_KV
    RESPONSE = ScanKvResponse
    scanner_id: bytes | None = pb(1, BYTES)
    bucket_scan_req: PbScanReqForBucket | None = pb(2, MESSAGE, message=PbScanReqForBucket)
    call_seq_id: int | None = pb(3, INT32)
    batch_size_bytes: int | None = pb(4, INT32)
    close_scanner: bool | None = pb(5, BOOL)
