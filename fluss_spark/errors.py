"""The exception tree and the registry that maps wire error codes to exception classes.

::

    FlussError                      root of everything this package raises
    ├── ApiError                    carries a stable wire ``code``; one class per code
    │   ├── NetworkError            (1, retriable, refresh metadata)
    │   ├── UnsupportedVersion      (2) the server does not offer that API
    │   ├── TableNotExist           (7)
    │   ├── NotLeaderOrFollower     (12, retriable, refresh metadata)
    │   ├── KvSnapshotNotExist      (41)
    │   ├── ScannerExpired          (66) ... and the other scan-session errors
    │   ├── LeaseNotFound           (1001, project code) ...
    │   ├── LeaseHeldByOther        (1004) another query's holder pins the table under the lease
    │   ├── MetadataStoreUnavailable (1005, retriable) the coordinator lost ZooKeeper
    │   ├── AuthenticationFailed    (1006) no or wrong SASL credentials
    │   └── AuthorizationFailed     (1007) the principal may not do this
    └── ConfigError                 bad option or argument, raised before any I/O

Codes that Apache Fluss also has keep Fluss's number; codes of our own start at 1000.
Retry loops read ``retriable`` / ``refresh_metadata``; they never parse messages.
"""

from __future__ import annotations


class FlussError(Exception):
    """Root of every exception raised by fluss_spark."""


class ConfigError(FlussError, ValueError):
    """An option, argument or file is invalid; raised before anything is sent."""


class ApiError(FlussError):
    """An error with a stable wire code, raised on the server and re-raised on the client."""

    code: int = -1
    retriable: bool = False
    refresh_metadata: bool = False

    def __init__(self, message: str = ""):
        super().__init__(message or self.__class__.__name__)
        self.message = message or self.__class__.__name__


_REGISTRY: dict[int, type[ApiError]] = {}


def _register(code: int, name: str, *, retriable: bool = False, refresh_metadata: bool = False,
              doc: str) -> type[ApiError]:
    if code in _REGISTRY:
        raise RuntimeError(f"error code {code} registered twice")
    cls = type(name, (ApiError,), {
        "code": code, "retriable": retriable, "refresh_metadata": refresh_metadata,
        "__doc__": doc, "__module__": __name__,
    })
    _REGISTRY[code] = cls
    return cls


UnknownServerError = _register(-1, "UnknownServerError", doc="The server failed unexpectedly.")
NetworkError = _register(1, "NetworkError", retriable=True, refresh_metadata=True,
                         doc="The connection failed or was closed before a response arrived.")
UnsupportedVersion = _register(2, "UnsupportedVersion",
                               doc="The server does not offer this API (or this version of it).")
CorruptMessage = _register(3, "CorruptMessage", doc="A frame or message could not be decoded.")
TableNotExist = _register(7, "TableNotExist", refresh_metadata=True, doc="The table does not exist.")
TableAlreadyExist = _register(8, "TableAlreadyExist", doc="The table already exists.")
LogStorageError = _register(10, "LogStorageError", doc="The changelog store failed.")
KvStorageError = _register(11, "KvStorageError", doc="The KV store failed.")
NotLeaderOrFollower = _register(12, "NotLeaderOrFollower", retriable=True, refresh_metadata=True,
                                doc="This server does not host the bucket.")
RecordTooLarge = _register(13, "RecordTooLarge", doc="A batch is larger than the server accepts.")
InvalidTable = _register(15, "InvalidTable", doc="The table definition or table name is invalid.")
LogOffsetOutOfRange = _register(19, "LogOffsetOutOfRange",
                                doc="The offset is below the retained log start or past its end.")
NonPrimaryKeyTable = _register(20, "NonPrimaryKeyTable",
                               doc="The operation needs a primary-key table.")
UnknownTableOrBucket = _register(21, "UnknownTableOrBucket", retriable=True, refresh_metadata=True,
                                 doc="The table or bucket is not known to this server (yet).")
RequestTimeout = _register(25, "RequestTimeout", retriable=True, doc="The request timed out.")
StorageError = _register(26, "StorageError", doc="A storage operation failed.")
InvalidColumnProjection = _register(34, "InvalidColumnProjection",
                                    doc="The requested columns are not in the table.")
InvalidTimestamp = _register(38, "InvalidTimestamp", doc="The timestamp is invalid.")
InvalidConfig = _register(39, "InvalidConfig", doc="A table property or request option is invalid.")
KvSnapshotNotExist = _register(41, "KvSnapshotNotExist", doc="The KV snapshot does not exist.")
LeaderNotAvailable = _register(44, "LeaderNotAvailable", retriable=True, refresh_metadata=True,
                               doc="No live server hosts the bucket right now.")
NotCoordinatorLeader = _register(65, "NotCoordinatorLeader", retriable=True,
                                 refresh_metadata=True,
                                 doc="This coordinator is not the active one.")
ScannerExpired = _register(66, "ScannerExpired",
                           doc="The scan session expired after being idle.")
UnknownScannerId = _register(67, "UnknownScannerId", doc="The scan session id is not known.")
InvalidScanRequest = _register(68, "InvalidScanRequest", doc="The scan request is invalid.")
TooManyScanners = _register(69, "TooManyScanners", retriable=True,
                            doc="The per-bucket or per-server scan session limit is reached.")
# Codes of our own.
LeaseNotFound = _register(1001, "LeaseNotFound",
                          doc="The KV snapshot lease does not exist or has expired.")
InvalidLeaseId = _register(1002, "InvalidLeaseId",
                           doc="The lease id is not [A-Za-z0-9._-]{1,128}.")
InvalidRequest = _register(1003, "InvalidRequest",
                           doc="A request is missing a field or has a field of the wrong type.")
LeaseHeldByOther = _register(1004, "LeaseHeldByOther",
                             doc="Another holder (query) pins the table under this lease.")
MetadataStoreUnavailable = _register(1005, "MetadataStoreUnavailable", retriable=True,
                                     doc="The coordinator lost its ZooKeeper connection; retry.")
AuthenticationFailed = _register(1006, "AuthenticationFailed",
                                 doc="No or wrong credentials for a server that requires SASL.")
AuthorizationFailed = _register(1007, "AuthorizationFailed",
                                doc="The authenticated principal may not do this.")


def error_class(code: int) -> type[ApiError]:
    """Return the exception class for a wire code (UnknownServerError for an unknown code)."""
    return _REGISTRY.get(code, UnknownServerError)


def from_code(code: int, message: str) -> ApiError:
    """Build the exception for a wire code and message."""
    return error_class(code)(message)


def all_codes() -> dict[int, type[ApiError]]:
    """All registered codes (for documentation and tests)."""
    return dict(_REGISTRY)
