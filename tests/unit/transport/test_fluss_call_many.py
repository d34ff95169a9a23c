"""``FlussRpcConnection.call_many`` against a stub server on a real socket that, like Fluss,
answers a connection's requests in whatever order they complete: answers are matched to their
requests by id, an error answer is handed back in its request's place, an answer that fits no
request in flight (or a failed connection) fails the call and closes the socket, and a window's
answers together are bounded as one answer is."""

from __future__ import annotations

import socket
import struct
from typing import Callable

import pytest

from fluss_spark.errors import CorruptMessage, KvSnapshotNotExist, NetworkError
from fluss_spark.protocol.apache_fluss import framing
from fluss_spark.protocol.apache_fluss.messages import (ErrorResponse,
                                                         GetKvSnapshotMetadataRequest,
                                                         GetKvSnapshotMetadataResponse,
                                                         PbRemotePathAndLocalFile)
from fluss_spark.transport.apache_fluss import PIPELINE_WINDOW, FlussRpcConnection
from tests.unit.client.test_response_limits import StubServer

#: Fluss's error code for a KV snapshot that does not exist.
KV_SNAPSHOT_NOT_EXIST = 41

#: Answers to a window of request frames: (request id, body) each, in request order.
Answer = Callable[[list[tuple[int, GetKvSnapshotMetadataRequest]]], list[bytes]]


class ReorderingServer(StubServer):
    """Reads request frames as they come; once no more is waiting, answers them all with the
    frames ``answer`` makes (in the order it gives them); ``windows`` records each set's size,
    ``connections`` the sockets it was sent on."""

    def __init__(self, answer: Answer):
        self.windows: list[int] = []
        self.connections = 0
        super().__init__(answer)    # type: ignore[arg-type]

    def _handle(self, conn: socket.socket) -> None:
        self.connections += 1
        buffer = b""
        with conn:
            while True:
                try:
                    chunk = conn.recv(1 << 16)
                except OSError:
                    return
                if not chunk:
                    return
                buffer += chunk
                requests = []
                while len(buffer) >= 4 and len(buffer) >= 4 + struct.unpack(">i", buffer[:4])[0]:
                    size = struct.unpack(">i", buffer[:4])[0]
                    _, _, request_id, body = framing.decode_request(buffer[4:4 + size])
                    requests.append((request_id, GetKvSnapshotMetadataRequest.decode(body)))
                    buffer = buffer[4 + size:]
                if requests:
                    self.windows.append(len(requests))
                    try:
                        conn.sendall(b"".join(self.answer(requests)))  # type: ignore[arg-type]
                    except OSError:
                        return


def ok(request_id: int, log_offset: int) -> bytes:
    return framing.encode_response(framing.SUCCESS_RESPONSE, request_id,
                                   GetKvSnapshotMetadataResponse(log_offset=log_offset).encode())


def missing(request_id: int) -> bytes:
    return framing.encode_response(framing.ERROR_RESPONSE, request_id, ErrorResponse(
        error_code=KV_SNAPSHOT_NOT_EXIST, error_message="snapshot 7 is gone").encode())


def by_bucket_reversed(requests: list[tuple[int, GetKvSnapshotMetadataRequest]]) -> list[bytes]:
    """Bucket 3's snapshot is gone; every other answer carries its bucket as its log offset."""
    return [missing(i) if r.bucket_id == 3 else ok(i, r.bucket_id) for i, r in reversed(requests)]


@pytest.fixture
def serve():
    made: list[ReorderingServer] = []

    def make(answer: Answer) -> tuple[ReorderingServer, FlussRpcConnection]:
        made.append(ReorderingServer(answer))
        return made[-1], FlussRpcConnection("127.0.0.1", made[-1].port, timeout_s=5.0)
    yield make
    for s in made:
        s.close()


def requests_for(buckets: range) -> list[GetKvSnapshotMetadataRequest]:
    return [GetKvSnapshotMetadataRequest(table_id=1, bucket_id=b, snapshot_id=7)
            for b in buckets]


def test_answers_in_any_order_come_back_in_request_order_with_errors_in_place(serve):
    server, conn = serve(by_bucket_reversed)
    n = PIPELINE_WINDOW + 8
    answers = conn.call_many(requests_for(range(n)))
    assert len(answers) == n
    for bucket, answer in enumerate(answers):
        if bucket == 3:
            assert isinstance(answer, KvSnapshotNotExist) and "snapshot 7 is gone" in str(answer)
        else:
            assert isinstance(answer, GetKvSnapshotMetadataResponse)
            assert answer.log_offset == bucket
    # A window at a time, each sent at once: no more in flight than the window.
    assert sum(server.windows) == n and max(server.windows) <= PIPELINE_WINDOW
    assert len(server.windows) < n
    # The connection stays usable for single calls.
    assert conn.call(requests_for(range(5, 6))[0]).log_offset == 5


def test_an_answer_to_no_request_in_flight_fails_the_call_and_closes_the_socket(serve):
    stray = {"on": True}

    def answer(requests):
        if stray["on"]:
            stray["on"] = False
            return [ok(requests[0][0] + 1000, 0)]
        return by_bucket_reversed(requests)
    server, conn = serve(answer)
    with pytest.raises(NetworkError, match="answered request id"):
        conn.call_many(requests_for(range(4)))
    # The next call opens a new socket, and its answers are matched again.
    answers = conn.call_many(requests_for(range(2)))
    assert [a.log_offset for a in answers] == [0, 1]
    assert server.connections == 2


def test_a_failed_connection_fails_every_request_of_the_window(serve):
    def answer(requests):
        return [framing.encode_response(framing.SERVER_FAILURE, None, ErrorResponse(
            error_code=KV_SNAPSHOT_NOT_EXIST, error_message="connection failed").encode())]
    _, conn = serve(answer)
    with pytest.raises(KvSnapshotNotExist, match="connection failed"):
        conn.call_many(requests_for(range(3)))


def test_no_requests_make_no_round_trip(serve):
    server, conn = serve(by_bucket_reversed)
    assert conn.call_many([]) == []
    assert server.connections == 0


def test_the_answers_of_a_window_together_are_bounded_like_one_answer(serve):
    big = "x" * 3000

    def answer(requests):
        return [framing.encode_response(framing.SUCCESS_RESPONSE, i, GetKvSnapshotMetadataResponse(
            log_offset=0, snapshot_files=[PbRemotePathAndLocalFile(
                remote_path=big, local_file_name="f")]).encode()) for i, _ in requests]
    _, conn = serve(answer)
    conn.max_response_bytes = 10_000        # one answer fits, four together do not
    assert len(conn.call_many(requests_for(range(3)))) == 3
    with pytest.raises(CorruptMessage, match="together"):
        conn.call_many(requests_for(range(4)))
