"""Apache Fluss error codes, and the ``fluss_spark.errors`` exception each one is raised as."""

from __future__ import annotations

from fluss_spark import errors as e

#: Fluss's error code -> its name in Fluss 0.9.1 (``Errors``); names make unknown codes readable.
FLUSS_ERROR_NAMES: dict[int, str] = {
    -1: "UNKNOWN_SERVER_ERROR", 0: "NONE", 1: "NETWORK_EXCEPTION", 2: "UNSUPPORTED_VERSION",
    3: "CORRUPT_MESSAGE", 4: "DATABASE_NOT_EXIST", 5: "DATABASE_NOT_EMPTY",
    6: "DATABASE_ALREADY_EXIST", 7: "TABLE_NOT_EXIST", 8: "TABLE_ALREADY_EXIST",
    9: "SCHEMA_NOT_EXIST", 10: "LOG_STORAGE_EXCEPTION", 11: "KV_STORAGE_EXCEPTION",
    12: "NOT_LEADER_OR_FOLLOWER", 13: "RECORD_TOO_LARGE_EXCEPTION", 14: "CORRUPT_RECORD_EXCEPTION",
    15: "INVALID_TABLE_EXCEPTION", 16: "INVALID_DATABASE_EXCEPTION",
    17: "INVALID_REPLICATION_FACTOR", 18: "INVALID_REQUIRED_ACKS",
    19: "LOG_OFFSET_OUT_OF_RANGE_EXCEPTION", 20: "NON_PRIMARY_KEY_TABLE_EXCEPTION",
    21: "UNKNOWN_TABLE_OR_BUCKET_EXCEPTION", 22: "INVALID_UPDATE_VERSION_EXCEPTION",
    23: "INVALID_COORDINATOR_EXCEPTION", 24: "FENCED_LEADER_EPOCH_EXCEPTION",
    25: "REQUEST_TIME_OUT", 26: "STORAGE_EXCEPTION", 27: "OPERATION_NOT_ATTEMPTED_EXCEPTION",
    28: "NOT_ENOUGH_REPLICAS_AFTER_APPEND_EXCEPTION", 29: "NOT_ENOUGH_REPLICAS_EXCEPTION",
    30: "SECURITY_TOKEN_EXCEPTION", 31: "OUT_OF_ORDER_SEQUENCE_EXCEPTION",
    32: "DUPLICATE_SEQUENCE_EXCEPTION", 33: "UNKNOWN_WRITER_ID_EXCEPTION",
    34: "INVALID_COLUMN_PROJECTION", 35: "INVALID_TARGET_COLUMN", 36: "PARTITION_NOT_EXISTS",
    37: "TABLE_NOT_PARTITIONED_EXCEPTION", 38: "INVALID_TIMESTAMP_EXCEPTION",
    39: "INVALID_CONFIG_EXCEPTION", 40: "LAKE_STORAGE_NOT_CONFIGURED_EXCEPTION",
    41: "KV_SNAPSHOT_NOT_EXIST", 42: "PARTITION_ALREADY_EXISTS",
    43: "PARTITION_SPEC_INVALID_EXCEPTION", 44: "LEADER_NOT_AVAILABLE_EXCEPTION",
    45: "PARTITION_MAX_NUM_EXCEPTION", 46: "AUTHENTICATE_EXCEPTION",
    47: "SECURITY_DISABLED_EXCEPTION", 48: "AUTHORIZATION_EXCEPTION",
    49: "BUCKET_MAX_NUM_EXCEPTION", 50: "FENCED_TIERING_EPOCH_EXCEPTION",
    51: "RETRIABLE_AUTHENTICATE_EXCEPTION", 52: "INVALID_SERVER_RACK_INFO_EXCEPTION",
    53: "LAKE_SNAPSHOT_NOT_EXIST", 54: "LAKE_TABLE_ALREADY_EXIST",
    55: "INELIGIBLE_REPLICA_EXCEPTION", 56: "INVALID_ALTER_TABLE_EXCEPTION",
    57: "DELETION_DISABLED_EXCEPTION", 58: "SERVER_NOT_EXIST_EXCEPTION",
    59: "SEVER_TAG_ALREADY_EXIST_EXCEPTION", 60: "SEVER_TAG_NOT_EXIST_EXCEPTION",
    61: "REBALANCE_FAILURE_EXCEPTION", 62: "NO_REBALANCE_IN_PROGRESS_EXCEPTION",
    63: "INVALID_PRODUCER_ID_EXCEPTION",
    # Fluss's main branch (after 0.9.1):
    64: "CONFIG_EXCEPTION", 65: "NOT_COORDINATOR_LEADER_EXCEPTION", 66: "SCANNER_EXPIRED",
    67: "UNKNOWN_SCANNER_ID", 68: "INVALID_SCAN_REQUEST", 69: "TOO_MANY_SCANNERS",
}

#: Fluss codes raised as this project's class for the same condition.
MAPPED: dict[int, type[e.ApiError]] = {
    -1: e.UnknownServerError, 1: e.NetworkError, 2: e.UnsupportedVersion, 3: e.CorruptMessage,
    7: e.TableNotExist, 8: e.TableAlreadyExist, 10: e.LogStorageError, 11: e.KvStorageError,
    12: e.NotLeaderOrFollower, 13: e.RecordTooLarge, 15: e.InvalidTable,
    19: e.LogOffsetOutOfRange, 20: e.NonPrimaryKeyTable, 21: e.UnknownTableOrBucket,
    25: e.RequestTimeout, 26: e.StorageError, 34: e.InvalidColumnProjection,
    36: e.PartitionNotExist, 37: e.TableNotPartitioned, 38: e.InvalidTimestamp,
    39: e.InvalidConfig, 41: e.KvSnapshotNotExist, 42: e.PartitionAlreadyExist,
    43: e.InvalidPartitionSpec, 44: e.LeaderNotAvailable, 46: e.AuthenticationFailed,
    48: e.AuthorizationFailed,
    66: e.ScannerExpired, 67: e.UnknownScannerId, 68: e.InvalidScanRequest,
    69: e.TooManyScanners,
}

#: Codes whose Fluss exception is retriable (a ``RetriableException`` in Fluss).
RETRIABLE = frozenset({1, 3, 9, 12, 14, 21, 25, 26, 28, 29, 44, 51})
#: Codes whose Fluss exception means the client's metadata is stale (``InvalidMetadataException``).
REFRESH_METADATA = frozenset({1, 12, 21, 44})


def error_name(code: int) -> str:
    return FLUSS_ERROR_NAMES.get(code, f"ERROR_{code}")


def to_exception(code: int, message: str | None) -> e.ApiError:
    """The exception for a Fluss error code.

    Codes with a counterpart in ``fluss_spark.errors`` raise that class; any other code raises
    ``UnknownServerError`` whose ``code`` is Fluss's code. ``retriable`` and
    ``refresh_metadata`` follow Fluss's own classification of the code."""
    # Fluss puts a Java stack trace into the message of unexpected errors; its first line says
    # what happened, the rest is in the server's log.
    first = (message or "no message").strip().splitlines() or ["no message"]
    text = f"{error_name(code)} ({code}): {first[0]}"
    cls = MAPPED.get(code)
    err = cls(text) if cls is not None else e.UnknownServerError(text)
    if cls is None:
        # No class of our own: keep Fluss's number so callers can still tell conditions apart.
        err.code = code
    err.retriable = code in RETRIABLE
    err.refresh_metadata = code in REFRESH_METADATA or (
        cls is not None and cls.refresh_metadata)
    return err


__all__ = ["FLUSS_ERROR_NAMES", "MAPPED", "REFRESH_METADATA", "RETRIABLE", "error_name",
           "to_exception"]
