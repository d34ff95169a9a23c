"""free_port: ports outside the kernel's ephemeral range, which outgoing connections take."""

import socket

from fluss_spark.local import ports
from fluss_spark.local.ports import free_port


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def test_a_free_port_is_below_the_ephemeral_range_and_free(tmp_path, monkeypatch):
    table = tmp_path / "ip_local_port_range"
    table.write_text("32768\t60999\n")
    monkeypatch.setattr(ports, "_EPHEMERAL_RANGE", table)
    drawn = {free_port() for _ in range(20)}
    assert all(ports._LOWEST <= p < 32768 for p in drawn), drawn
    assert len(drawn) > 1, "drawn at random, so two servers started together rarely meet"
    assert all(_bindable(p) for p in drawn)


def test_a_port_in_use_is_never_handed_out(tmp_path, monkeypatch):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        busy = taken.getsockname()[1]
        taken.listen()
        table = tmp_path / "ip_local_port_range"
        # Room for one port only, and it is taken: the kernel's choice is the fallback.
        table.write_text(f"{busy + 1} 60999\n")
        monkeypatch.setattr(ports, "_LOWEST", busy)
        monkeypatch.setattr(ports, "_EPHEMERAL_RANGE", table)
        port = free_port()
        assert port != busy and _bindable(port)


def test_without_the_kernel_table_the_kernel_picks(tmp_path, monkeypatch):
    monkeypatch.setattr(ports, "_EPHEMERAL_RANGE", tmp_path / "absent")
    assert _bindable(free_port())
