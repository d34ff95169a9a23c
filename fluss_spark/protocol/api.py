"""API keys and the declared request fields of every RPC: the wire contract in one place.

Each request and response body is a msgpack map. Field types below use msgpack terms; ``bytes``
fields that carry rows are Arrow IPC streams (see ``protocol.arrow_ipc``). Maps keyed by bucket
use integer keys. A response body is returned only when ``error_code`` is 0.

Shared, served by every server
  API_VERSIONS       {} -> {api_keys: [int], server: "coordinator"|"tablet", server_id: int}
  AUTHENTICATE       {mechanism: "PLAIN", token: bytes (b"\\0user\\0password")} -> {principal}
                     On a server with security.protocol=SASL, the only request besides
                     API_VERSIONS that an unauthenticated connection may send; a failure
                     (AUTHENTICATION_FAILED) closes the connection. PLAINTEXT servers answer
                     {principal: nil}.
  GET_METADATA       {tables?: [name]} -> {coordinator: {host, port}|nil,
                     tablets: [{id, host, port}], tables: [TableInfo]}
                     TableInfo = {table_id, name, schema: bytes (Arrow IPC schema),
                     primary_key: [col], bucket_key: [col], num_buckets, properties: {str: str},
                     created_ms, assignment: {bucket: tablet_id}}

Coordinator
  CREATE_TABLE       {name, schema, primary_key, bucket_key, num_buckets, properties,
                     ignore_if_exists} -> {table_id}
  DROP_TABLE         {name, ignore_if_not_exists} -> {}
  LIST_TABLES        {} -> {tables: [name]}
  COMMIT_KV_SNAPSHOT {table_id, bucket, snapshot_id, path, log_offset, row_count, size_bytes,
                     created_ms} -> {}                       (tablet -> coordinator)
                     path must be the snapshot's own place in the coordinator's snapshot store
                     (<remote_data_dir>/<table_id>/<bucket>/snapshot-<id>.arrow), written, and
                     the id must follow the bucket's last one; a repeat of a registered commit
                     is accepted. Anything else is InvalidRequest.
  LIST_KV_SNAPSHOTS  {table_id, bucket?, latest_only?} -> {snapshots: [SnapshotInfo]}
                     SnapshotInfo = {table_id, bucket, snapshot_id, path, log_offset, row_count,
                     size_bytes, created_ms, pinned_by: [lease_id]}
  ACQUIRE_KV_SNAPSHOT_LEASE  {lease_id, duration_ms, tables: {table_id: {bucket: snapshot_id}},
                     holder?} -> {unavailable: {table_id: {bucket: snapshot_id}}, expires_at_ms}
                     holder (same charset as lease ids): the query the pins are for; a table
                     pinned under the lease by another holder is refused (LeaseHeldByOther).
  RENEW_KV_SNAPSHOT_LEASE    {lease_id, duration_ms} -> {expires_at_ms}
  RELEASE_KV_SNAPSHOT_LEASE  {lease_id, tables: {table_id: [bucket]}} -> {remaining_pins}
  DROP_KV_SNAPSHOT_LEASE     {lease_id} -> {dropped: bool}   (false: no such lease)
  LIST_KV_SNAPSHOT_LEASES    {} -> {leases: [LeaseInfo]}
  DESCRIBE_KV_SNAPSHOT_LEASE {lease_id} -> LeaseInfo
                     LeaseInfo = {lease_id, expires_at_ms, created_ms,
                     tables: {table_id: {bucket: snapshot_id}}, pin_count,
                     holders: {table_id: holder}}
  GET_METRICS        {} -> {metrics: {name: number}, tables: {table_name: {name: number}}}

Tablet
  PRODUCE            {table_id, bucket, op: "append"|"upsert"|"delete", records: bytes}
                     -> {base_offset, end_offset}      (changelog offsets written, [base, end))
  LIST_OFFSETS       {table_id, buckets: [int], spec: "earliest"|"latest"|"timestamp",
                     timestamp_ms?} -> {offsets: {bucket: offset}}
  FETCH_LOG          {table_id, bucket, offset, end_offset?, max_bytes, max_wait_ms,
                     projection?: [col]} -> {records: bytes|nil, base_offset, next_offset,
                     high_watermark, log_start_offset}
                     records holds the table columns (projected) plus _change_type (string)
                     and _commit_timestamp (int64 ms); _log_offset is base_offset + row index.
  TRIGGER_KV_SNAPSHOT {table_id, buckets?: [int]} -> {snapshots: {bucket: SnapshotInfo|nil}}
                     (waits until the snapshots are registered; nil when a bucket is empty
                     and has never been snapshotted)
  SCAN_KV            open:     {table_id, bucket, snapshot_id?|live: true, projection?, limit?,
                               start_row?, batch_size_bytes, call_seq_id: 0}
                     continue: {scanner_id, call_seq_id, batch_size_bytes?}
                     close:    {scanner_id, close: true}
                     -> {scanner_id?, records: bytes|nil, has_more, log_offset, snapshot_id,
                        row_start, row_count}
                     An empty result is a schema-only stream and opens no session; a close
                     answers {scanner_id, records: nil, has_more: false, row_count: 0}.
  LIST_SCANNERS      {} -> {scanners: [{scanner_id, table_id, bucket, snapshot_id, live, age_ms,
                     idle_ms, rows_served, next_row}]}

Bounds (a value outside them is refused with INVALID_REQUEST, INVALID_SCAN_REQUEST or the
error named; nothing is clamped unless said; integers are msgpack's 64-bit)
  frame              at most rpc.max-request-size (32 MB by default) announced; decoded, at most
                     2,097,152 entries per array or map and 16x the frame + 16 MB of memory
  name               'database.table' of letters, digits and '_', matched in full
  lease_id, holder   [A-Za-z0-9._-]{1,128}, not "." or "..", matched in full
  num_buckets        1..1024;  bucket: 0..num_buckets-1 of its table
  duration_ms        1..31,536,000,000 (365 days)
  snapshot_id        COMMIT_KV_SNAPSHOT: greater than the bucket's last registered id
  max_bytes          FETCH_LOG: at least one record is returned whatever the value
  max_wait_ms        FETCH_LOG: 0..30,000 used (a longer wait is cut to 30 s)
  SCAN_KV integers   0..2**53; batch_size_bytes is clamped to kv.scanner.max-batch-size;
                     projection at most 10,000 columns
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
