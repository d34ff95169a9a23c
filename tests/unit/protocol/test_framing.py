"""Frame headers: lengths round-trip and absurd lengths are refused before allocation."""

import pytest

from fluss_spark.errors import CorruptMessage
from fluss_spark.protocol import framing


def test_frame_round_trip():
    frame = framing.encode_frame(b"hello")
    assert framing.decode_length(frame[:4]) == 5 and frame[4:] == b"hello"


def test_huge_length_is_refused():
    with pytest.raises(CorruptMessage, match="exceeds the limit"):
        framing.decode_length(b"\xff\xff\xff\xff")
