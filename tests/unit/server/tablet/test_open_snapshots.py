"""OpenSnapshots: sessions of one snapshot share its open file; an unused one is closed later."""

from __future__ import annotations

from fluss_spark.server.tablet.open_snapshots import OpenSnapshots


class File:
    def __init__(self, path):
        self.path, self.closed, self.num_rows = path, False, 7

    def close(self):
        self.closed = True


def test_sessions_share_a_file_which_is_closed_only_after_it_went_unused_for_a_while():
    now = [0.0]
    opened = []

    def opener(path):
        opened.append(File(path))
        return opened[-1]
    files = OpenSnapshots(opener, keep_ms=1000, clock=lambda: now[0])
    a, b = files.acquire("s1"), files.acquire("s1")
    other = files.acquire("s2")
    assert [f.path for f in opened] == ["s1", "s2"] and a.num_rows == 7
    a.close()
    a.close()                                    # a second close releases nothing more
    now[0] = 5000.0
    assert files.expire() == 0                   # b still reads s1; s2 is in use
    b.close()
    other.close()
    now[0] = 5500.0
    assert files.expire() == 0 and not opened[0].closed
    now[0] = 6000.0
    assert files.expire() == 2 and all(f.closed for f in opened) and len(files) == 0
    files.acquire("s1").close()                  # opened anew, closed at once when told
    assert len(opened) == 3 and files.expire(everything=True) == 1 and opened[2].closed
