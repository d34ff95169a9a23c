"""free_port: ports outside the kernel's ephemeral range, which outgoing connections take."""

import socket

import pytest

from fluss_spark.local import ports
from fluss_spark.local.ports import free_port


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


@pytest.fixture
def table(tmp_path, monkeypatch):
    """A stand-in for the kernel's ephemeral range file, and a fresh walk."""
    path = tmp_path / "ip_local_port_range"
    path.write_text("32768\t60999\n")
    monkeypatch.setattr(ports, "_EPHEMERAL_RANGE", path)
    monkeypatch.setattr(ports, "_next", None)
    return path


def test_free_ports_are_below_the_ephemeral_range_free_and_never_repeated(table):
    drawn = [free_port() for _ in range(50)]
    assert all(ports._LOWEST <= p < 32768 for p in drawn), drawn
    assert len(set(drawn)) == len(drawn), "a process's servers may not have bound them yet"
    assert all(_bindable(p) for p in drawn)


def test_a_port_in_use_is_stepped_over(table, monkeypatch):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        busy = taken.getsockname()[1]
        taken.listen()
        table.write_text(f"{busy + 1000} 60999\n")
        monkeypatch.setattr(ports, "_LOWEST", busy - 10)
        monkeypatch.setattr(ports, "_next", (ports.os.getpid(), busy))
        port = free_port()
        assert port != busy and _bindable(port)


def test_a_forked_child_walks_from_a_start_of_its_own(table, monkeypatch):
    monkeypatch.setattr(ports, "_next", (-1, ports._LOWEST))     # another process's walk
    free_port()
    assert ports._next[0] == ports.os.getpid()


def test_without_the_kernel_table_the_kernel_picks(tmp_path, monkeypatch):
    monkeypatch.setattr(ports, "_EPHEMERAL_RANGE", tmp_path / "absent")
    assert _bindable(free_port())
