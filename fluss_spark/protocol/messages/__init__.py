"""The wire contract as code: one frozen dataclass per request and response, grouped by area.

Each request knows its API key, version and response type; every message encodes itself
(``to_wire``) and decodes with checks of every field (``decode``). ``REQUESTS`` maps an API key
to the type a server decodes its requests with.

The names below are imported on first use, each with its area's module only: building the
dataclasses of every area costs ~50 ms, paid by each fresh Spark Python process, and a client of
Apache Fluss needs only the records its ``Cluster`` returns (``records``).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fluss_spark.protocol.api import ApiKey
    from fluss_spark.protocol.messages.acls import (AclFilterInfo, AclInfo, CreateAclsRequest,
                                                    CreateAclsResponse, DropAclsRequest,
                                                    DropAclsResponse, ListAclsRequest,
                                                    ListAclsResponse)
    from fluss_spark.protocol.messages.base import Empty, Message, Request
    from fluss_spark.protocol.messages.leases import (AcquireLeaseRequest, AcquireLeaseResponse,
                                                      DescribeLeaseRequest, DropLeaseRequest,
                                                      DropLeaseResponse, ListLeasesRequest,
                                                      ListLeasesResponse, ReleaseLeaseRequest,
                                                      ReleaseLeaseResponse,
                                                      RenewLeaseRequest, RenewLeaseResponse)
    from fluss_spark.protocol.messages.log import (FetchLogRequest, FetchLogResponse,
                                                   ListOffsetsRequest, ListOffsetsResponse,
                                                   ProduceRequest, ProduceResponse)
    from fluss_spark.protocol.messages.meta import (ApiVersionsRequest, ApiVersionsResponse,
                                                    AuthenticateRequest, AuthenticateResponse,
                                                    GetMetadataRequest, GetMetadataResponse,
                                                    ServerAddress, TabletAddress)
    from fluss_spark.protocol.messages.partitions import (CreatePartitionRequest,
                                                          DropPartitionRequest,
                                                          ListPartitionsRequest,
                                                          ListPartitionsResponse)
    from fluss_spark.protocol.messages.records import (LeaseInfo, PartitionInfo, SnapshotInfo,
                                                       TableInfo)
    from fluss_spark.protocol.messages.scan import (CloseScan, ContinueScan, ListScannersRequest,
                                                    ListScannersResponse, OpenScan, ScanKvRequest,
                                                    ScanKvResponse, ScannerInfo)
    from fluss_spark.protocol.messages.snapshots import (CommitKvSnapshotRequest,
                                                         ListKvSnapshotsRequest,
                                                         ListKvSnapshotsResponse,
                                                         TriggerKvSnapshotRequest,
                                                         TriggerKvSnapshotResponse)
    from fluss_spark.protocol.messages.tables import (AlterTableRequest, AlterTableResponse,
                                                      CreateTableRequest, CreateTableResponse,
                                                      DropTableRequest, GetMetricsRequest,
                                                      GetMetricsResponse, ListTablesRequest,
                                                      ListTablesResponse)

    REQUESTS: dict[ApiKey, type[Request]]

#: Each area's module and the names it defines.
_AREAS = {
    "acls": ("AclFilterInfo", "AclInfo", "CreateAclsRequest", "CreateAclsResponse",
             "DropAclsRequest", "DropAclsResponse", "ListAclsRequest", "ListAclsResponse"),
    "base": ("Empty", "Message", "Request"),
    "leases": ("AcquireLeaseRequest", "AcquireLeaseResponse", "DescribeLeaseRequest",
               "DropLeaseRequest", "DropLeaseResponse", "ListLeasesRequest",
               "ListLeasesResponse", "ReleaseLeaseRequest", "ReleaseLeaseResponse",
               "RenewLeaseRequest", "RenewLeaseResponse"),
    "log": ("FetchLogRequest", "FetchLogResponse", "ListOffsetsRequest", "ListOffsetsResponse",
            "ProduceRequest", "ProduceResponse"),
    "meta": ("ApiVersionsRequest", "ApiVersionsResponse", "AuthenticateRequest",
             "AuthenticateResponse", "GetMetadataRequest", "GetMetadataResponse",
             "ServerAddress", "TabletAddress"),
    "partitions": ("CreatePartitionRequest", "DropPartitionRequest", "ListPartitionsRequest",
                   "ListPartitionsResponse"),
    "records": ("LeaseInfo", "PartitionInfo", "SnapshotInfo", "TableInfo"),
    "scan": ("CloseScan", "ContinueScan", "ListScannersRequest", "ListScannersResponse",
             "OpenScan", "ScanKvRequest", "ScanKvResponse", "ScannerInfo"),
    "snapshots": ("CommitKvSnapshotRequest", "ListKvSnapshotsRequest", "ListKvSnapshotsResponse",
                  "TriggerKvSnapshotRequest", "TriggerKvSnapshotResponse"),
    "tables": ("AlterTableRequest", "AlterTableResponse", "CreateTableRequest",
               "CreateTableResponse", "DropTableRequest", "GetMetricsRequest",
               "GetMetricsResponse", "ListTablesRequest", "ListTablesResponse"),
}
_AREA_OF = {name: area for area, names in _AREAS.items() for name in names}


def __getattr__(name: str) -> Any:
    if name == "REQUESTS":
        # The request type of every API key: each area's ``...Request`` (SCAN_KV's decodes
        # into an open, a continue or a close).
        value: Any = {cls.API_KEY: cls for cls in (__getattr__(n) for n, area in _AREA_OF.items()
                                                    if area != "base" and n.endswith("Request"))}
    else:
        try:
            area = _AREA_OF[name]
        except KeyError:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
        value = getattr(importlib.import_module(f"{__name__}.{area}"), name)
    globals()[name] = value
    return value


__all__ = ["AclFilterInfo", "AclInfo", "AcquireLeaseRequest", "AcquireLeaseResponse",
           "AlterTableRequest", "AlterTableResponse",
           "ApiVersionsRequest", "ApiVersionsResponse", "AuthenticateRequest",
           "AuthenticateResponse", "CloseScan", "CommitKvSnapshotRequest", "ContinueScan",
           "CreateAclsRequest", "CreateAclsResponse", "CreatePartitionRequest",
           "CreateTableRequest", "CreateTableResponse", "DescribeLeaseRequest", "DropAclsRequest",
           "DropAclsResponse", "DropLeaseRequest", "DropLeaseResponse", "DropPartitionRequest",
           "DropTableRequest", "Empty", "FetchLogRequest", "FetchLogResponse",
           "GetMetadataRequest", "GetMetadataResponse", "GetMetricsRequest", "GetMetricsResponse",
           "LeaseInfo", "ListAclsRequest", "ListAclsResponse", "ListKvSnapshotsRequest",
           "ListKvSnapshotsResponse", "ListLeasesRequest", "ListLeasesResponse",
           "ListOffsetsRequest", "ListOffsetsResponse", "ListPartitionsRequest",
           "ListPartitionsResponse", "ListScannersRequest", "ListScannersResponse",
           "ListTablesRequest", "ListTablesResponse", "Message", "OpenScan", "PartitionInfo",
           "ProduceRequest", "ProduceResponse", "ReleaseLeaseRequest", "ReleaseLeaseResponse",
           "RenewLeaseRequest", "RenewLeaseResponse", "Request", "ScanKvRequest", "ScanKvResponse",
           "ScannerInfo", "ServerAddress", "SnapshotInfo", "TableInfo", "TabletAddress",
           "TriggerKvSnapshotRequest", "TriggerKvSnapshotResponse", "REQUESTS"]
