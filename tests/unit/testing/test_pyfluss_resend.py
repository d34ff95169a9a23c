"""The pyfluss test helpers bound pyfluss's resends and resend a failed write themselves."""

from __future__ import annotations

import sys
import types

import pytest

from fluss_spark.testing import apache_fluss as af


class FakeError(Exception):
    def __init__(self, code: int):
        super().__init__(f"FlussError(code={code})")
        self.error_code = code


class FakeFluss:
    """The part of pyfluss the helpers use: each writer's flush takes the next of ``outcomes``
    (None: acknowledged; an exception: raised), and an acknowledged append moves bucket 0's log
    end offset; ``land_on_failure`` moves it on a failed flush too."""

    def __init__(self, outcomes, land_on_failure: bool = False):
        self.outcomes = list(outcomes)
        self.land_on_failure = land_on_failure
        self.configs: list[dict] = []
        self.connections: list[FakeConnection] = []
        self.sent: list[tuple[str, object]] = []
        self.end_offset = 0
        fake = self

        class Config(dict):
            def __init__(self, props):
                super().__init__(props)
                fake.configs.append(dict(props))

        class FlussConnection:
            @staticmethod
            async def create(config):
                conn = FakeConnection(fake)
                fake.connections.append(conn)
                return conn

        class OffsetSpec:
            @staticmethod
            def latest():
                return "latest"

        self.module = types.SimpleNamespace(Config=Config, FlussConnection=FlussConnection,
                                            TablePath=lambda db, t: (db, t), OffsetSpec=OffsetSpec)

    def flush(self, kind: str) -> None:
        outcome = self.outcomes.pop(0) if self.outcomes else None
        if outcome is None or self.land_on_failure:
            self.end_offset += kind == "append"
        if outcome is not None:
            raise outcome


class FakeConnection:
    def __init__(self, fake: FakeFluss):
        self.fake, self.closed = fake, False

    def get_admin(self):
        fake = self.fake

        class Admin:
            async def get_table_info(self, path):
                return types.SimpleNamespace(num_buckets=1, is_partitioned=lambda: False)

            async def list_offsets(self, path, buckets, spec):
                return {0: fake.end_offset}
        return Admin()

    async def get_table(self, path):
        fake = self.fake

        class Writer:
            def __init__(self, kind):
                self.kind = kind

            def append(self, row):
                fake.sent.append(("append", row))

            def upsert(self, row):
                fake.sent.append(("upsert", row))

            async def flush(self):
                fake.flush(self.kind)

        return types.SimpleNamespace(
            new_append=lambda: types.SimpleNamespace(create_writer=lambda: Writer("append")),
            new_upsert=lambda: types.SimpleNamespace(create_writer=lambda: Writer("upsert")))

    async def close(self):
        self.closed = True


@pytest.fixture
def pyfluss(monkeypatch):
    def make(outcomes, land_on_failure=False):
        fake = FakeFluss(outcomes, land_on_failure)
        monkeypatch.setitem(sys.modules, "fluss", fake.module)
        monkeypatch.setattr(af, "RESEND_PAUSE_S", 0.01)
        return fake
    return make


def test_writer_resends_are_bounded_unless_the_caller_sets_them(pyfluss):
    fake = pyfluss([])
    with af.PyFluss("h:1"):
        pass
    with af.PyFluss("h:1", {"client.writer.retries": "7"}):
        pass
    assert [c["writer.retries"] for c in fake.configs] == [af.WRITER_RETRIES, "7"]


def test_an_upsert_failed_retriably_is_sent_again_on_a_new_connection(pyfluss):
    fake = pyfluss([FakeError(1)])
    with af.PyFluss("h:1") as c:
        c.upsert("db.t", [(1, "a")])
    assert fake.sent == [("upsert", [1, "a"])] * 2
    assert len(fake.connections) == 2 and fake.connections[0].closed


def test_an_append_none_of_which_landed_is_sent_again(pyfluss):
    fake = pyfluss([FakeError(12)])
    with af.PyFluss("h:1") as c:
        c.append("db.t", [(1, "a")])
    assert fake.sent == [("append", [1, "a"])] * 2 and fake.end_offset == 1


def test_an_append_part_of_which_landed_is_not_sent_again(pyfluss):
    fake = pyfluss([FakeError(1)], land_on_failure=True)
    landed = r"not sent again.*\{0: 0\} -> \{0: 1\}"
    with af.PyFluss("h:1") as c, pytest.raises(RuntimeError, match=landed):
        c.append("db.t", [(1, "a")])
    assert fake.sent == [("append", [1, "a"])]


def test_a_lasting_retriable_error_ends_in_a_timeout_naming_it(pyfluss):
    fake = pyfluss([FakeError(1)] * 1000)
    with af.PyFluss("h:1") as c, pytest.raises(TimeoutError, match=r"within 1s \(last: "):
        c.upsert("db.t", [(1, "a")], timeout_s=1.0)
    assert 2 <= len(fake.sent) < 1000


def test_an_error_that_is_not_retriable_is_raised_at_once(pyfluss):
    fake = pyfluss([FakeError(8)])
    with af.PyFluss("h:1") as c, pytest.raises(FakeError):
        c.upsert("db.t", [(1, "a")])
    assert len(fake.sent) == 1 and len(fake.connections) == 1
