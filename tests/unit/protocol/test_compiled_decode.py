"""The compiled decode of KV snapshots against the numpy one, on valid and on damaged input.

Whatever the bytes, both must agree: the same rows and values, or the same error (a damaged row
or file the compiled code does not take is handed to the numpy code, which names the fault).
"""

from __future__ import annotations

import os
import random
import shutil

import numpy as np
import pyarrow as pa
import pytest

from fluss_spark.errors import CorruptMessage, UnsupportedVersion
from fluss_spark.protocol.apache_fluss import compiled
from fluss_spark.protocol.apache_fluss.compacted_row import decode_kv_ranges
from fluss_spark.protocol.apache_fluss.rocksdb_sst import open_stream, read_live_values
from rocksdict import ChecksumType
from tests.unit.protocol.test_apache_fluss_compacted_row import (ALL_TYPES, kv_value,
                                                                 random_rows)
from tests.unit.protocol.test_apache_fluss_rocksdb_sst import (fluss_options, sst_files,
                                                               write_rounds)

#: The types the compiled decode builds itself (the others go to numpy whole).
COMPILED_TYPES = pa.schema([f for f in ALL_TYPES
                            if f.name not in ("fixed", "dec_big", "dec_38_0")])


def test_the_compiled_decode_is_built_where_cargo_is():
    """CI and any machine with a Rust toolchain build it with the package; it is what the
    Apache Fluss snapshot read uses there (without one, the package decodes in numpy)."""
    if os.environ.get("CI") == "true" or shutil.which("cargo"):
        assert compiled.native() is not None, "pip install built no compiled decode (native/)"
    else:
        assert compiled.native() is None


class Spy:
    """The compiled module, counting the calls that returned (not refused) since made."""

    def __init__(self, module):
        self.module, self.returned = module, 0

    def __getattr__(self, name):
        fn = getattr(self.module, name)

        def call(*args, **kwargs):
            out = fn(*args, **kwargs)
            self.returned += 1
            return out
        return call


def both_ways(decode, compiled_must_decode=False):
    """(compiled outcome, numpy outcome): a result, or the error's type and message. With
    ``compiled_must_decode``, the compiled run must have been the compiled code's own (where
    the install has it: test_the_compiled_decode_is_built_where_cargo_is says where)."""
    out = []
    real = compiled.native()
    for enabled in (True, False):
        compiled.enabled = enabled
        spy = Spy(real)
        compiled._module = spy if real is not None else None
        try:
            out.append(decode())
        except (CorruptMessage, UnsupportedVersion) as e:
            out.append((type(e), str(e)))
        finally:
            compiled.enabled, compiled._module = True, real
        if enabled and compiled_must_decode and real is not None:
            assert spy.returned, "the compiled decode refused valid input"
    return out


def values_of(buffer: np.ndarray, rows: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    ends = np.cumsum([len(r) for r in rows])
    return ends - np.array([len(r) for r in rows]), ends


@pytest.mark.parametrize("seed", range(3))
def test_rows_decode_alike_whole_or_damaged(seed):
    rng = random.Random(seed)
    rows = [kv_value(3, COMPILED_TYPES, r) for r in random_rows(rng, COMPILED_TYPES, 60)]
    data = np.frombuffer(b"".join(rows), dtype=np.uint8)
    begins, ends = values_of(data, rows)
    compiled_out, numpy_out = both_ways(
        lambda: decode_kv_ranges(data, begins, ends, lambda _: COMPILED_TYPES, COMPILED_TYPES),
        compiled_must_decode=True)
    assert compiled_out.equals(numpy_out)
    # Damage: bytes flipped, rows cut short or run together, a second schema id.
    for trial in range(120):
        damaged = data.copy()
        b, e = begins.copy(), ends.copy()
        what = trial % 3
        if what == 0:
            for at in rng.sample(range(len(damaged)), 3):
                damaged[at] = rng.randrange(256)
        elif what == 1:
            r = rng.randrange(len(rows))
            e[r] = rng.randrange(b[r], e[r])
        else:
            r = rng.randrange(len(rows))
            damaged[b[r]] = 4
        got = both_ways(lambda: decode_kv_ranges(damaged, b, e, lambda _: COMPILED_TYPES,
                                                 COMPILED_TYPES))
        if isinstance(got[0], pa.RecordBatch):
            assert isinstance(got[1], pa.RecordBatch) and got[0].equals(got[1]), trial
        else:
            assert got[0] == got[1], trial


def test_strings_and_keys_of_every_short_length_decode_as_numpy_does():
    """Strings of 0 to 40 bytes (the compiled decode moves those of up to 32 bytes in a few
    fixed-size moves, longer ones by copy) and keys of one to four varint bytes, with and
    without nulls around them: the numpy decode's batch."""
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("s", pa.string()),
                        ("b", pa.binary()), ("n", pa.int32())])
    rng = random.Random(11)
    rows = []
    for r in range(2000):
        length = r % 41
        text = "".join(rng.choice("aé€𝄞") for _ in range(length))[:length]
        rows.append(kv_value(1, schema, [rng.choice((r, 200 + r, 20_000 + r, 3_000_000 + r)),
                                         None if r % 7 == 3 else text,
                                         None if r % 5 == 1 else rng.randbytes(length),
                                         None if r % 3 == 2 else r]))
    data = np.frombuffer(b"".join(rows), dtype=np.uint8)
    begins, ends = values_of(data, rows)
    compiled_out, numpy_out = both_ways(lambda: decode_kv_ranges(
        data, begins, ends, lambda _: schema, schema), compiled_must_decode=True)
    assert compiled_out.equals(numpy_out) and compiled_out.column("s").null_count > 0


def test_value_ranges_outside_their_buffer_are_refused_alike():
    """A value range before, past or across the end of its buffer, or ending before it begins,
    is the same CorruptMessage whichever decode meets it (the compiled one checks every range
    itself, the numpy one before it reads)."""
    rows = [kv_value(3, COMPILED_TYPES, r) for r in random_rows(random.Random(5),
                                                                COMPILED_TYPES, 20)]
    data = np.frombuffer(b"".join(rows), dtype=np.uint8)
    begins, ends = values_of(data, rows)
    for row, begin, end in ((0, -1, None), (7, None, len(data) + 1), (19, len(data) + 4, None),
                            (3, None, int(begins[3]) - 1)):
        b, e = begins.copy(), ends.copy()
        b[row] = b[row] if begin is None else begin
        e[row] = e[row] if end is None else end
        got = both_ways(lambda: decode_kv_ranges(data, b, e, lambda _: COMPILED_TYPES,
                                                 COMPILED_TYPES))
        assert got[0] == got[1] == (CorruptMessage, "a KV value range lies outside its buffer "
                                                    f"of {len(data)} bytes"), row


def test_strings_that_split_a_character_are_not_utf8():
    """Two strings that are valid UTF-8 only when joined: the compiled check of the whole
    column must still see each string on its own."""
    schema = pa.schema([("s", pa.string())])
    euro = "€".encode()
    # Hand-made: a string of the character's first byte, then one of the other two.
    rows = [b"\x00\x00\x00" + bytes([1]) + euro[:1], b"\x00\x00\x00" + bytes([2]) + euro[1:]]
    data = np.frombuffer(b"".join(rows), dtype=np.uint8)
    begins, ends = values_of(data, rows)
    got = both_ways(lambda: decode_kv_ranges(data, begins, ends, lambda _: schema, schema))
    assert got[0] == got[1] and got[0][0] is CorruptMessage and "UTF-8" in got[0][1]


def test_a_byte_that_is_not_ascii_is_seen_at_any_place_of_a_short_string():
    """The compiled decode takes a column of ASCII strings as UTF-8 from the bytes' high bits,
    gathered as each string is moved: a stray byte (not UTF-8) at any place of a string of 1
    to 40 bytes, among ASCII strings, is refused as numpy refuses it."""
    schema = pa.schema([("s", pa.string())])
    for length in range(1, 41):
        for at in range(length):
            text = bytearray(b"a" * length)
            text[at] = 0xFF
            rows = [kv_value(1, schema, ["plain"]), b"\x01\x00\x00" + bytes([length]) + text]
            data = np.frombuffer(b"".join(rows), dtype=np.uint8)
            begins, ends = values_of(data, rows)
            got = both_ways(lambda: decode_kv_ranges(data, begins, ends, lambda _: schema,
                                                     schema))
            assert got[0] == got[1] and got[0][0] is CorruptMessage, (length, at)


@pytest.mark.parametrize("seed", range(2))
def test_sst_files_read_alike_whole_or_damaged(tmp_path, seed):
    """Files without block checksums, so that damage reaches the block walk itself."""
    rng = random.Random(seed)
    rounds: list[dict[bytes, bytes | None]] = [
        {rng.randbytes(rng.choice((3, 8, 20))): rng.randbytes(rng.randrange(40))
         for _ in range(300)} for _ in range(3)]
    rounds.append(dict.fromkeys(list(rounds[0])[:50]))
    write_rounds(tmp_path, fluss_options(checksum=ChecksumType.no_checksum), rounds)
    files = sst_files(tmp_path)

    def values(files=files):
        buffer, begin, end = read_live_values(files)
        return [buffer[b:e].tobytes() for b, e in zip(begin.tolist(), end.tolist())]

    compiled_out, numpy_out = both_ways(values, compiled_must_decode=True)
    assert compiled_out == numpy_out and len(compiled_out) == 850
    for trial in range(150):
        damaged = [f.copy() for f in files]
        f = rng.randrange(len(damaged))
        for at in rng.sample(range(len(damaged[f]) - 60), 2):     # not the footer
            damaged[f][at] = rng.randrange(256)
        compiled_out, numpy_out = both_ways(lambda: values(damaged))
        assert compiled_out == numpy_out, trial


@pytest.fixture(params=[2, 1], ids=["two threads", "one thread"])
def threads(request):
    """The compiled calls' thread budget (``compiled.use_threads``), restored after."""
    before = compiled.threads
    compiled.use_threads(request.param)
    yield request.param
    compiled.threads = before


def test_the_thread_budget_defaults_to_the_cpus_of_the_process():
    before = compiled.threads
    try:
        compiled.use_threads(0)
        assert compiled.threads == 1
        compiled.use_threads(None)
        assert compiled.threads == len(os.sched_getaffinity(0))
    finally:
        compiled.threads = before


def test_a_large_batch_decoded_on_two_threads_is_the_same(threads):
    """Past 32k rows the compiled decode splits the rows between two threads (where it may use
    two) and joins the halves' buffers: bitmaps, offsets and values must come out as one
    decode's."""
    rng = random.Random(5)
    schema = pa.schema([pa.field("key", pa.int64(), nullable=False), ("flag", pa.bool_()),
                        ("s", pa.string()), ("b", pa.binary()), ("ts", pa.timestamp("us")),
                        ("d", pa.float64())])
    rows = [kv_value(1, schema, r) for r in random_rows(rng, schema, 4000)] * 9
    data = np.frombuffer(b"".join(rows), dtype=np.uint8)
    begins, ends = values_of(data, rows)
    for n in (len(rows), len(rows) - 3):     # halves of a multiple of 8 rows and not
        compiled_out, numpy_out = both_ways(lambda: decode_kv_ranges(
            data, begins[:n], ends[:n], lambda _: schema, schema), compiled_must_decode=True)
        assert compiled_out.num_rows == n and compiled_out.equals(numpy_out)


@pytest.mark.parametrize("key_bytes, prefix", [(4, b""), (12, b""), (4, b"samepref")],
                         ids=["short keys", "long keys", "long keys of one 8-byte prefix"])
def test_a_stream_read_by_pages_and_skips_is_the_numpy_read(tmp_path, key_bytes, prefix):
    """The compiled stream, a page of at most ~64 KiB at a time and from after any number of
    skipped values: every key's newest version in key order, deletions included, as numpy
    reads the files whole; ``done`` once the last value is read. Keys that share their first
    8 bytes are told apart by the rest (the merge orders most keys by those 8 alone)."""
    rng = random.Random(key_bytes + len(prefix))
    keys = sorted({prefix + rng.randbytes(key_bytes) for _ in range(40_000)})
    rounds: list[dict[bytes, bytes | None]] = [
        {k: rng.randbytes(rng.randrange(100, 160)) for k in keys[i::3]} for i in range(3)]
    rounds.append({k: None if rng.random() < 0.5 else b"newest" for k in rng.sample(keys, 2000)})
    write_rounds(tmp_path, fluss_options(), rounds)
    files = sst_files(tmp_path)
    compiled.enabled = False
    try:
        buffer, begin, end = read_live_values(files)
    finally:
        compiled.enabled = True
    want = [buffer[b:e].tobytes() for b, e in zip(begin.tolist(), end.tolist())]
    assert b"newest" in want and len(want) < len(keys)

    def page(stream, max_rows, max_bytes, overhead=16):
        data, b, e = (np.frombuffer(m, dtype=dtype) for m, dtype in
                      zip(stream.page(max_rows, max_bytes, overhead)[:3],
                          (np.uint8, np.int64, np.int64)))
        return [data[x:y].tobytes() for x, y in zip(b.tolist(), e.tolist())], len(data)

    stream = open_stream(files)
    got, pages = [], 0
    while not stream.done:
        values, size = page(stream, 1 << 20, 64 << 10)
        # A page stops at the first value that takes it (with 16 bytes a value) to the bound.
        assert size - len(values[-1]) + 16 * (len(values) - 1) < 64 << 10
        assert size + 16 * len(values) >= 64 << 10 or stream.done
        got += values
        pages += 1
    assert got == want and pages > 50 and page(stream, 10, 1 << 20) == ([], 0)
    for start in (0, 1, 12_345, len(want) - 1, len(want), len(want) + 5):
        stream = open_stream(files)
        assert stream.skip(start) == min(start, len(want))
        assert page(stream, 100, 1 << 30)[0] == want[start:start + 100]
    # Ranges of the keys walked on threads of their own, from the first key or from where the
    # stream stands, taken in odd numbers of values (pages handed over in parts): the same
    # values in the same order, ``done`` after the last.
    for start, workers in ((0, 2), (0, 3), (7_777, 2), (len(want) - 3, 2)):
        stream = open_stream(files)
        assert stream.skip(start) == start
        stream.parallel(workers, 64 << 10, 16)
        got, taken = [], 0
        while not stream.done:
            values, _ = page(stream, 999 if taken % 2 else 1 << 20, 64 << 10)
            got, taken = got + values, taken + 1
        assert got == want[start:] and (taken > 50 or start > len(want) // 2)
        assert page(stream, 10, 1 << 20) == ([], 0)
    stream = open_stream(files)
    stream.parallel(2, 64 << 10, 16)
    assert stream.skip(20_000) == 20_000 and page(stream, 5, 1 << 20)[0] == want[20_000:20_005]
    del stream      # its threads, each waiting to hand over a page, end with it


@pytest.mark.parametrize("workers", [2, 3])
def test_key_ranges_hold_about_as_many_values_and_end_together(tmp_path, workers):
    """The key ranges a stream's threads walk hold about as many values each, though the
    files' keys interleave (each range is cut by an estimate over every file); when the threads
    would not take as many ranges each, the last ``workers`` ranges' values are cut in halves,
    so that the threads, each taking the next range as it finishes one, end together. (Nine
    ranges here: halves for two threads, none for three.) With a page larger than any range,
    each range is one page."""
    rng = random.Random(3)
    keys = sorted({rng.randbytes(4) for _ in range(60_000)})
    write_rounds(tmp_path, fluss_options(),
                 [{k: rng.randbytes(rng.randrange(100, 160)) for k in keys[i::3]}
                  for i in range(3)])
    stream = open_stream(sst_files(tmp_path))
    stream.parallel(workers, 1 << 20, 0)
    sizes = []
    while not stream.done:
        sizes.append(len(np.frombuffer(stream.page(1 << 30, 1 << 30, 0)[1], dtype=np.int64)))
    assert sum(sizes) == len(keys)
    whole = [n for n in sizes if n > 0.75 * max(sizes)]
    halves = sizes[len(whole):]
    assert sizes[:len(whole)] == whole, sizes          # the halves come last
    mean = sum(whole) / len(whole)
    assert all(abs(n - mean) < 0.05 * mean for n in whole), sizes
    assert all(abs(n - mean / 2) < 0.05 * mean for n in halves), sizes
    units = len(whole) + len(halves) // 2
    assert units >= 6 and len(halves) == (0 if units % workers == 0 else 2 * workers), sizes


def test_a_damaged_block_met_mid_stream_is_an_error_naming_the_fault(tmp_path):
    """Block checksums are verified as the stream reaches each block: pages before the damage
    come out, then the read fails."""
    rng = random.Random(3)
    write_rounds(tmp_path, fluss_options(), [{rng.randbytes(12): rng.randbytes(100)
                                              for _ in range(5000)}])
    files = sst_files(tmp_path)
    damaged = files[0].copy()
    damaged[len(damaged) // 2] ^= 0xFF      # inside a data block in the file's middle
    stream = open_stream([damaged])
    assert len(stream.page(10, 1 << 20, 0)[1]) == 80     # ten values, int64 offsets each
    with pytest.raises(ValueError, match="does not match its checksum"):
        while not stream.done:
            stream.page(1000, 1 << 20, 0)
    # The same when ranges of the keys are walked on threads of their own, whether a block
    # read to cut the ranges is the damaged one or not.
    for page_bytes in (32 << 10, 4 << 10):
        stream = open_stream([damaged])
        stream.parallel(2, page_bytes, 0)
        assert len(stream.page(10, 1 << 20, 0)[1]) == 80
        with pytest.raises(ValueError, match="does not match its checksum"):
            while not stream.done:
                stream.page(1000, 1 << 20, 0)
