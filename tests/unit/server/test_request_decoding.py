"""A request field the typed messages cannot hold is refused by name, never a -1 with a
traceback."""

from __future__ import annotations

import logging

from fluss_spark.errors import InvalidRequest
from fluss_spark.protocol import codec, messages as m
from fluss_spark.protocol.api import CURRENT_VERSION
from fluss_spark.transport.server import RpcServer


def test_a_5000_digit_map_key_is_an_invalid_request_without_a_traceback(caplog):
    srv = RpcServer("127.0.0.1", 0, role="coordinator", server_id=1)
    try:
        srv.register(m.AcquireLeaseRequest, lambda req: m.AcquireLeaseResponse({}, 1))
        body = {"lease_id": "L", "duration_ms": 1000, "tables": {"9" * 5000: {0: 1}}}
        payload = codec.encode_request(m.AcquireLeaseRequest.API_KEY, CURRENT_VERSION, 7, body)
        with caplog.at_level(logging.DEBUG):
            parts, keep = srv.dispatcher.handle(payload)
        resp = codec.decode_response(b"".join(bytes(p) for p in parts))
        assert resp.correlation_id == 7
        assert resp.error_code == InvalidRequest.code, resp
        assert "tables key" in resp.error_message and "too large" in resp.error_message
        assert keep
        assert not [r for r in caplog.records if r.exc_info], "no traceback is logged"
    finally:
        srv._listener.close()
