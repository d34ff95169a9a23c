"""The exception tree and the registry that maps wire error codes to exception classes.

::

    FlussError                      root of everything this package raises
    ├── ApiError                    carries a stable wire ``code``; one class per code
    │   ├── NetworkError            (1, retriable, refresh metadata)
    │   ├── UnsupportedVersion      (2) the server does not offer that API
    │   ├── TableNotExist           (7)
    │   ├── NotLeaderOrFollower     (12, retriable, refresh metadata)
    │   ├── RecordTooLarge          (13) an Arrow payload decodes past a size or row limit
    │   ├── PartitionNotExist       (36, refresh metadata) ... and the other partition errors
    │   ├── KvSnapshotNotExist      (41)
    │   ├── ScannerExpired          (66) ... and the other scan-session errors
    │   ├── LeaseNotFound           (1001, project code) ...
    │   ├── LeaseHeldByOther        (1004) another query's holder pins the table under the lease
    │   ├── MetadataStoreUnavailable (1005, retriable) the coordinator lost ZooKeeper
    │   ├── AuthenticationFailed    (1006) no or wrong SASL credentials
    │   ├── AuthorizationFailed     (1007) the principal may not do this
    │   ├── TlsHandshakeFailed      (1008) certificate not trusted, or TLS on one end only
    │   ├── ConnectionRefused       (1009, a NetworkError) nothing listens at the address
    │   └── ClusterUnreachable      (1010) every server refused connections: cluster down
    └── ConfigError                 bad option or argument, raised before any I/O
        └── MissingExtra            an optional dependency is not installed

Codes that Apache Fluss also has keep Fluss's number; codes of our own start at 1000.
Retry loops read ``retriable`` / ``refresh_metadata``; they never parse messages.
"""

from __future__ import annotations

import importlib.util

_REGISTRY: dict[int, type[ApiError]] = {}


class FlussError(Exception):
    """Root of every exception raised by fluss_spark."""


class ConfigError(FlussError, ValueError):
    """An option, argument or file is invalid; raised before anything is sent."""


#: Import names of the optional dependencies -> the extra of setup.cfg that installs them
#: (tests/unit/test_extras.py checks it against setup.cfg).
EXTRAS = {"kazoo": "server", "pyiceberg": "tiering"}


class MissingExtra(ConfigError):
    """An optional dependency is not installed; the message names the extra that installs it."""

    def __init__(self, module: str, needed_by: str):
        self.module = module.split(".")[0]
        self.extra = EXTRAS.get(self.module)
        how = (f"pip install 'fluss-spark[{self.extra}]'" if self.extra
               else f"pip install {self.module}")
        super().__init__(f"{self.module} is not installed ({needed_by} need it): {how}")

    @classmethod
    def check(cls, module: str, needed_by: str) -> None:
        """Raise when ``module`` cannot be imported."""
        if importlib.util.find_spec(module) is None:
            raise cls(module, needed_by)


class LiveScanLost(FlussError):
    """A live KV scan lost its server-side session; its point-in-time view cannot be reopened."""


class ApiError(FlussError):
    """An error with a stable wire code, raised on the server and re-raised on the client."""

    code: int = -1
    retriable: bool = False
    refresh_metadata: bool = False

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        # Each subclass owns one wire code; an inherited code would let two classes claim it and
        # make the decoding on the client depend on definition order.
        if "code" not in cls.__dict__:
            raise TypeError(f"{cls.__name__} must set its own wire code")
        if cls.code in _REGISTRY:
            raise TypeError(f"error code {cls.code} registered twice "
                            f"({_REGISTRY[cls.code].__name__} and {cls.__name__})")
        _REGISTRY[cls.code] = cls

    def __init__(self, message: str = ""):
        super().__init__(message or self.__class__.__name__)
        self.message = message or self.__class__.__name__


class UnknownServerError(ApiError):
    """The server failed unexpectedly."""

    code = -1
    retriable = False
    refresh_metadata = False


class NetworkError(ApiError):
    """The connection failed or was closed before a response arrived."""

    code = 1
    retriable = True
    refresh_metadata = True


class ConnectionRefused(NetworkError):
    """Nothing listens at the address: the server is down, restarting, or the address is wrong
    (client-side; retried like any network error)."""

    code = 1009
    retriable = True
    refresh_metadata = True


class ClusterUnreachable(ApiError):
    """Every known server of the cluster refused connections for a while: the cluster is down,
    or bootstrap.servers names the wrong addresses (client-side; not retried)."""

    code = 1010
    retriable = False
    refresh_metadata = False


class UnsupportedVersion(ApiError):
    """The server does not offer this API (or this version of it)."""

    code = 2
    retriable = False
    refresh_metadata = False


class CorruptMessage(ApiError):
    """A frame or message could not be decoded."""

    code = 3
    retriable = False
    refresh_metadata = False


class TableNotExist(ApiError):
    """The table does not exist."""

    code = 7
    retriable = False
    refresh_metadata = True


class TableAlreadyExist(ApiError):
    """The table already exists."""

    code = 8
    retriable = False
    refresh_metadata = False


class LogStorageError(ApiError):
    """The changelog store failed."""

    code = 10
    retriable = False
    refresh_metadata = False


class KvStorageError(ApiError):
    """The KV store failed."""

    code = 11
    retriable = False
    refresh_metadata = False


class NotLeaderOrFollower(ApiError):
    """This server does not host the bucket."""

    code = 12
    retriable = True
    refresh_metadata = True


class RecordTooLarge(ApiError):
    """A batch or a request is larger than the receiver accepts: bytes, decoded bytes or rows
    (Fluss's RECORD_TOO_LARGE_EXCEPTION)."""

    code = 13
    retriable = False
    refresh_metadata = False


class InvalidTable(ApiError):
    """The table definition or table name is invalid."""

    code = 15
    retriable = False
    refresh_metadata = False


class LogOffsetOutOfRange(ApiError):
    """The offset is below the retained log start or past its end."""

    code = 19
    retriable = False
    refresh_metadata = False


class NonPrimaryKeyTable(ApiError):
    """The operation needs a primary-key table."""

    code = 20
    retriable = False
    refresh_metadata = False


class UnknownTableOrBucket(ApiError):
    """The table or bucket is not known to this server (yet)."""

    code = 21
    retriable = True
    refresh_metadata = True


class RequestTimeout(ApiError):
    """The request timed out."""

    code = 25
    retriable = True
    refresh_metadata = False


class StorageError(ApiError):
    """A storage operation failed."""

    code = 26
    retriable = False
    refresh_metadata = False


class InvalidColumnProjection(ApiError):
    """The requested columns are not in the table."""

    code = 34
    retriable = False
    refresh_metadata = False


class PartitionNotExist(ApiError):
    """The partition does not exist (dropped, expired by retention, or never created)."""

    code = 36
    retriable = False
    refresh_metadata = True


class TableNotPartitioned(ApiError):
    """A partition was named for a table that has no partition keys."""

    code = 37
    retriable = False
    refresh_metadata = False


class InvalidTimestamp(ApiError):
    """The timestamp is invalid."""

    code = 38
    retriable = False
    refresh_metadata = False


class InvalidConfig(ApiError):
    """A table property or request option is invalid."""

    code = 39
    retriable = False
    refresh_metadata = False


class KvSnapshotNotExist(ApiError):
    """The KV snapshot does not exist."""

    code = 41
    retriable = False
    refresh_metadata = False


class PartitionAlreadyExist(ApiError):
    """The partition exists already."""

    code = 42
    retriable = False
    refresh_metadata = False


class InvalidPartitionSpec(ApiError):
    """A partition spec does not match the table's partition keys, or a value is invalid."""

    code = 43
    retriable = False
    refresh_metadata = False


class LeaderNotAvailable(ApiError):
    """No live server hosts the bucket right now."""

    code = 44
    retriable = True
    refresh_metadata = True


class NotCoordinatorLeader(ApiError):
    """This coordinator is not the active one."""

    code = 65
    retriable = True
    refresh_metadata = True


class ScannerExpired(ApiError):
    """The scan session expired after being idle."""

    code = 66
    retriable = False
    refresh_metadata = False


class UnknownScannerId(ApiError):
    """The scan session id is not known."""

    code = 67
    retriable = False
    refresh_metadata = False


class InvalidScanRequest(ApiError):
    """The scan request is invalid."""

    code = 68
    retriable = False
    refresh_metadata = False


class TooManyScanners(ApiError):
    """The per-bucket or per-server scan session limit is reached."""

    code = 69
    retriable = True
    refresh_metadata = False


# Codes of our own.


class LeaseNotFound(ApiError):
    """The KV snapshot lease does not exist or has expired."""

    code = 1001
    retriable = False
    refresh_metadata = False


class InvalidLeaseId(ApiError):
    """The lease id is not [A-Za-z0-9._-]{1,128}."""

    code = 1002
    retriable = False
    refresh_metadata = False


class InvalidRequest(ApiError):
    """A request is missing a field or has a field of the wrong type."""

    code = 1003
    retriable = False
    refresh_metadata = False


class LeaseHeldByOther(ApiError):
    """Another holder (query) pins the table under this lease."""

    code = 1004
    retriable = False
    refresh_metadata = False


class MetadataStoreUnavailable(ApiError):
    """The coordinator lost its ZooKeeper connection; retry."""

    code = 1005
    retriable = True
    refresh_metadata = False


class AuthenticationFailed(ApiError):
    """No or wrong credentials for a server that requires SASL."""

    code = 1006
    retriable = False
    refresh_metadata = False


class AuthorizationFailed(ApiError):
    """The authenticated principal may not do this."""

    code = 1007
    retriable = False
    refresh_metadata = False


class TlsHandshakeFailed(ApiError):
    """TLS could not be set up: the server's certificate is not trusted, or only one end
    speaks TLS."""

    code = 1008
    retriable = False
    refresh_metadata = False


def error_class(code: int) -> type[ApiError]:
    """Return the exception class for a wire code (UnknownServerError for an unknown code)."""
    return _REGISTRY.get(code, UnknownServerError)


def from_code(code: int, message: str) -> ApiError:
    """Build the exception for a wire code and message."""
    return error_class(code)(message)


def all_codes() -> dict[int, type[ApiError]]:
    """All registered codes (for documentation and tests)."""
    return dict(_REGISTRY)
