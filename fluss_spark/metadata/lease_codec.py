"""Lease pins as bytes: the part encodings, part and chunk names, and the lease size limits."""

from __future__ import annotations

import array
import re
import sys
from typing import Any, Iterable, Mapping, Optional

from fluss_spark.errors import CorruptMessage
from fluss_spark.protocol.codec import packb, unpackb

#: Size of each chunk znode of a v1-v3 lease (read only: v4 writes parts, see LeaseRecord).
LEASE_CHUNK_BYTES = 900 * 1024
_LEASE_CHUNK = re.compile(r"^chunk-(\d+)-(\d+)$")
#: Buckets per lease part: a part is encoded on its own, so changing one bucket re-encodes and
#: rewrites one part of at most this many buckets, never a whole 1,000,000-pin lease.
LEASE_PART_BUCKETS = 65536
#: Parts up to this size are kept inline in the lease header, up to LEASE_INLINE_BYTES in all;
#: larger ones get a child znode each. A small lease is then one znode, one write per change.
LEASE_INLINE_PART_BYTES = 2048
LEASE_INLINE_BYTES = 64 * 1024
#: Most bytes one ZooKeeper multi of a lease write carries (its limit is ~1 MB per request).
LEASE_MULTI_BYTES = 900 * 1024
_LEASE_PART = re.compile(r"^part-(\d+)-(?:p(\d+)-)?(\d+)-(\d+)$")
#: The partition id of a pin group that is a whole (unpartitioned) table.
NO_PARTITION = -1
#: A pin group: (table_id, partition id or NO_PARTITION); a part key adds the part number.
PinGroup = tuple[int, int]
#: What a lease write changed: ``{table_id or (table_id, partition_id): buckets or None}``
#: (None: all of that table's or partition's pins).
PinChanges = Mapping[Any, Optional[Iterable[int]]]


def lease_chunk_name(generation: int, index: int) -> str:
    return f"chunk-{generation}-{index}"


def parse_lease_chunk_name(name: str) -> tuple[int, int] | None:
    """``chunk-<generation>-<index>`` -> (generation, index); None for anything else."""
    m = _LEASE_CHUNK.fullmatch(name)
    return (int(m.group(1)), int(m.group(2))) if m else None


def lease_part_name(table_id: int, part: int, generation: int,
                    partition: int = NO_PARTITION) -> str:
    """``part-<table_id>-<part>-<generation>``; a partition's part (v5) puts
    ``p<partition_id>-`` before the part number."""
    if partition == NO_PARTITION:
        return f"part-{table_id}-{part}-{generation}"
    return f"part-{table_id}-p{partition}-{part}-{generation}"


def parse_lease_part_name(name: str) -> tuple[int, int, int, int] | None:
    """A part name -> (table_id, part, generation, partition id or NO_PARTITION); None for
    anything else."""
    m = _LEASE_PART.fullmatch(name)
    if not m:
        return None
    partition = NO_PARTITION if m.group(2) is None else int(m.group(2))
    return int(m.group(1)), int(m.group(3)), int(m.group(4)), partition


def _packed_typecode(width: int) -> str:
    for code in "BHILQ":
        if array.array(code).itemsize == width:
            return code
    raise CorruptMessage(f"no {width}-byte integer type on this platform")


def _unpack(data: bytes, width: int) -> array.array:
    arr = array.array(_packed_typecode(width))
    arr.frombytes(data)
    if sys.byteorder == "big":
        arr.byteswap()
    return arr


# Bit packing for the "pfor" part encoding: value i occupies bits i*w .. i*w+w-1 of a
# little-endian bit stream (numpy's packbits with bitorder="little").
def _bitlen(v: int) -> int:
    return int(v).bit_length()


def _bitpack(values, width: int) -> bytes:
    import numpy as np
    if width == 0 or len(values) == 0:
        return b""
    u = np.asarray(values, dtype=np.uint64)
    bits = np.empty((u.size, width), dtype=np.uint8)
    for i in range(width):
        bits[:, i] = (u >> np.uint64(i)) & np.uint64(1)
    return np.packbits(bits.reshape(-1), bitorder="little").tobytes()


def _bitunpack(data: bytes, offset: int, count: int, width: int):
    """(values as uint64, offset after them)."""
    import numpy as np
    if width == 0 or count == 0:
        return np.zeros(count, dtype=np.uint64), offset
    if width > 64:
        raise CorruptMessage(f"lease part: bit width {width} is over 64")
    nbytes = (count * width + 7) // 8
    if offset + nbytes > len(data):
        raise CorruptMessage("lease part: packed values are cut short")
    raw = np.frombuffer(data, dtype=np.uint8, count=nbytes, offset=offset)
    bits = np.unpackbits(raw, count=count * width, bitorder="little").reshape(count, width)
    out = np.zeros(count, dtype=np.uint64)
    for i in range(width):
        out |= bits[:, i].astype(np.uint64) << np.uint64(i)
    return out, offset + nbytes


def _pfor_width(u) -> tuple[int, int]:
    """(bit width, exception count) that minimise the packed size of ``u`` (uint64 array)
    when values of ``width`` bits or more keep their low bits in the array and their high
    bits and position in an exception list (patched frame of reference)."""
    import numpy as np
    m = u.size
    s = np.sort(u)
    top = int(s[-1])
    wp = _bitlen(m - 1)
    best: tuple[int, int, int] | None = None
    for w in range(_bitlen(top) + 1):
        n_exc = 0 if w >= 64 else m - int(np.searchsorted(s, np.uint64(1) << np.uint64(w)))
        cost = m * w + n_exc * _bitlen(top >> w) + (min(n_exc * wp, m) if n_exc else 0)
        if best is None or cost < best[0]:
            best = (cost, w, n_exc)
    assert best is not None            # the loop runs at least once (width 0)
    return best[1], best[2]


def _pfor_payload(u, width: int, n_exc: int) -> tuple[bytes, int, int, int]:
    """(low bits + exception positions + exception high bits, position width, high width,
    1 when the positions are a bitmap of every value rather than a list)."""
    import numpy as np
    if n_exc:
        pos = np.nonzero(u >> np.uint64(width))[0] if width < 64 else np.zeros(0, np.int64)
        high = u[pos] >> np.uint64(width)
        low = u & np.uint64((1 << width) - 1)
        wp, wh = _bitlen(u.size - 1), _bitlen(int(high.max()))
        if n_exc * wp > u.size:
            # Frequent exceptions (two clusters of ids): one bit per value marks them.
            flags = np.zeros(u.size, dtype=np.uint8)
            flags[pos] = 1
            positions, wp, bitmap = np.packbits(flags, bitorder="little").tobytes(), 0, 1
        else:
            positions, bitmap = _bitpack(pos, wp), 0
        return _bitpack(low, width) + positions + _bitpack(high, wh), wp, wh, bitmap
    return _bitpack(u, width), 0, 0, 0


def encode_lease_part(table_id: int, part: int, buckets, snaps,
                      partition: int = NO_PARTITION) -> dict:
    """The entry of one lease part: the pins ``buckets[i] -> snaps[i]`` (buckets ascending,
    all in the part's range), as whichever of ``sparse`` and ``pfor`` is smaller; a
    partition's part (v5) also carries ``p``, its partition id.

    - ``sparse``: parallel msgpack int arrays ``b`` and ``s`` (a handful of pins).
    - ``pfor``: ``{lo, n, m, mode, base, w, x, wp, wh, xb, z, d}``. ``d`` (zlib-compressed
      when ``z``) is: a bitmap of ``n`` bits, bit i set when bucket ``lo + i`` is pinned
      (absent, ``n == 0``, when buckets ``lo .. lo+m-1`` are all pinned); then ``m`` values of
      ``w`` bits; then the positions of ``x`` exceptions (``wp`` bits each, or with ``xb`` a
      bitmap of ``m`` bits) and their high bits (``wh`` bits each, shifted left by ``w`` and
      or-ed into the value). With ``mode == "for"`` a pin is
      ``base + value``; with ``"delta"`` the values are zigzag-encoded differences from the
      previous pin (the first from ``base``). Whichever mode is smaller is used: ``for`` when
      pins sit in a narrow window, ``delta`` when they follow the bucket number; exceptions keep
      a few outliers from widening all the others, zlib catches repeating patterns.
    """
    entry = _encode_part(table_id, part, buckets, snaps)
    if partition != NO_PARTITION:
        entry["p"] = partition
    return entry


def _encode_part(table_id: int, part: int, buckets, snaps) -> dict:
    """The smallest entry of one part's pins (see ``encode_lease_part``)."""
    import zlib

    import numpy as np
    m = len(buckets)
    lo = part * LEASE_PART_BUCKETS
    candidates = []
    if m <= 256:
        candidates.append({"t": table_id, "e": "sparse", "b": [int(b) for b in buckets],
                           "s": [int(s) for s in snaps]})
    try:
        v = np.asarray(snaps, dtype=np.int64)
    except OverflowError:   # ids past int64: only msgpack's own integers hold them
        return {"t": table_id, "e": "sparse", "b": [int(b) for b in buckets],
                "s": [int(s) for s in snaps]}
    b = np.asarray(buckets, dtype=np.int64)
    if m and (b[0] < lo or b[-1] >= lo + LEASE_PART_BUCKETS or np.any(np.diff(b) <= 0)):
        raise ValueError(f"lease part {part} of table {table_id}: buckets must ascend inside "
                         f"{lo}..{lo + LEASE_PART_BUCKETS - 1}")
    span = int(b[-1]) - lo + 1 if m else 0
    if span == m:
        bitmap = b""
        span = 0
    else:
        flags = np.zeros(span, dtype=np.uint8)
        flags[b - lo] = 1
        bitmap = np.packbits(flags, bitorder="little").tobytes()
    base = int(v.min()) if m else 0
    modes = {"for": (v - base).view(np.uint64)}
    if m > 1:
        d = np.diff(v, prepend=np.int64(v[0]))
        modes["delta"] = ((d << np.int64(1)) ^ (d >> np.int64(63))).view(np.uint64)
    for mode, u in modes.items():
        entry_base = base if mode == "for" else (int(v[0]) if m else 0)
        width, n_exc = _pfor_width(u) if m else (0, 0)
        payload, wp, wh, xb = _pfor_payload(u, width, n_exc)
        raw = bitmap + payload
        packed = zlib.compress(raw, 6)
        z = len(packed) < len(raw)
        candidates.append({"t": table_id, "e": "pfor", "lo": lo, "n": span, "m": m,
                           "mode": mode, "base": entry_base, "w": width, "x": n_exc,
                           "wp": wp, "wh": wh, "xb": xb, "z": int(z),
                           "d": packed if z else raw})
    return min(candidates, key=lambda e: len(packb(e)))


def _decode_pfor(entry: dict):
    """(buckets, snapshot ids) of a ``pfor`` entry, as int64 numpy arrays."""
    import zlib

    import numpy as np
    try:
        lo, span, m = int(entry["lo"]), int(entry["n"]), int(entry["m"])
        mode, base, width, n_exc = entry["mode"], int(entry["base"]), int(entry["w"]), \
            int(entry["x"])
        data = zlib.decompress(entry["d"]) if entry["z"] else bytes(entry["d"])
        wp, wh, xb = int(entry["wp"]), int(entry["wh"]), int(entry.get("xb", 0))
    except (KeyError, TypeError, ValueError, zlib.error) as e:
        raise CorruptMessage(f"lease part of table {entry.get('t')}: damaged pfor entry "
                             f"({type(e).__name__}: {e})") from None
    if mode not in ("for", "delta"):
        raise CorruptMessage(f"lease part of table {entry.get('t')}: unknown mode {mode!r}; "
                             "upgrade fluss_spark")
    offset = 0
    if span:
        nbytes = (span + 7) // 8
        if nbytes > len(data):
            raise CorruptMessage(f"lease part of table {entry.get('t')}: bitmap cut short")
        flags = np.unpackbits(np.frombuffer(data, np.uint8, nbytes), count=span,
                              bitorder="little")
        buckets = np.nonzero(flags)[0].astype(np.int64) + lo
        offset = nbytes
        if buckets.size != m:
            raise CorruptMessage(f"lease part of table {entry.get('t')}: the bitmap holds "
                                 f"{buckets.size} pins, the entry says {m}")
    else:
        buckets = np.arange(lo, lo + m, dtype=np.int64)
    u, offset = _bitunpack(data, offset, m, width)
    if n_exc:
        if xb:
            nbytes = (m + 7) // 8
            if offset + nbytes > len(data):
                raise CorruptMessage(f"lease part of table {entry.get('t')}: exception bitmap "
                                     "cut short")
            flags = np.unpackbits(np.frombuffer(data, np.uint8, nbytes, offset), count=m,
                                  bitorder="little")
            pos, offset = np.nonzero(flags)[0], offset + nbytes
            if pos.size != n_exc:
                raise CorruptMessage(f"lease part of table {entry.get('t')}: the exception "
                                     f"bitmap marks {pos.size} values, the entry says {n_exc}")
        else:
            pos, offset = _bitunpack(data, offset, n_exc, wp)
        high, offset = _bitunpack(data, offset, n_exc, wh)
        if n_exc and int(pos.max()) >= m:
            raise CorruptMessage(f"lease part of table {entry.get('t')}: exception past the end")
        u[pos.astype(np.int64)] |= high << np.uint64(width)
    if offset != len(data):
        raise CorruptMessage(f"lease part of table {entry.get('t')}: {len(data) - offset} "
                             "bytes left over")
    if mode == "for":
        snaps = u.view(np.int64) + np.int64(base)
    else:
        d = (u >> np.uint64(1)).view(np.int64) ^ -(u & np.uint64(1)).view(np.int64)
        snaps = np.cumsum(d, dtype=np.int64) + np.int64(base)
    return buckets, snaps


def table_parts(pins: dict, parts=None) -> dict:
    """``{part: (buckets, snapshot ids)}`` of one table's pins (lists or int64 arrays), both
    ascending by bucket;
    ``parts`` limits it to those part numbers (every one named is in the answer, empty or not)."""
    out: dict[int, tuple[list[int], list[int]]] = {}
    if parts is not None:
        out = {k: ([], []) for k in parts}
        # A few parts of a big table: look their buckets up rather than walk every pin.
        if len(pins) > 2 * LEASE_PART_BUCKETS * len(out):
            return {k: _lookup_part(pins, k) for k in out}
    for bucket in sorted(pins):
        k = bucket // LEASE_PART_BUCKETS
        if parts is not None and k not in out:
            continue
        bs, ss = out.setdefault(k, ([], []))
        bs.append(bucket)
        ss.append(pins[bucket])
    return out


def _lookup_part(pins: dict, part: int):
    """(buckets, snapshot ids) of one part of a big table, by one lookup per bucket of the
    part; map and fromiter keep the loop in C (a 65,536-bucket part in a few ms)."""
    import itertools

    import numpy as np
    lo = part * LEASE_PART_BUCKETS
    absent = -(2 ** 63)       # no snapshot id is this; checked below all the same
    ids = np.fromiter(map(pins.get, range(lo, lo + LEASE_PART_BUCKETS),
                          itertools.repeat(absent)), dtype=np.int64, count=LEASE_PART_BUCKETS)
    present = ids != absent
    if not present.all():
        for i in np.nonzero(~present)[0].tolist():
            present[i] = (lo + i) in pins
    offsets = np.nonzero(present)[0]
    return offsets + lo, ids[offsets]


def pin_groups(tables: dict, partitions: dict | None = None) -> dict[PinGroup, dict]:
    """``{(table_id, partition id or NO_PARTITION): {bucket: snapshot_id}}`` of a lease's
    table pins ``{table_id: pins}`` and partition pins ``{table_id: {partition_id: pins}}``."""
    groups = {(t, NO_PARTITION): pins for t, pins in tables.items()}
    for t, by_partition in (partitions or {}).items():
        groups.update(((t, p), pins) for p, pins in by_partition.items())
    return groups


def encode_lease_pins(tables: dict, partitions: dict | None = None) -> list:
    """``{table_id: {bucket: snapshot_id}}`` and ``{table_id: {partition_id: {bucket:
    snapshot_id}}}`` -> one entry per pin group and part (see ``encode_lease_part``), ordered
    by table, partition (tables' own pins first), then part."""
    out = []
    groups = pin_groups(tables, partitions)
    for (table_id, partition) in sorted(groups):
        pins = groups[(table_id, partition)]
        if any(b < 0 for b in pins):
            raise ValueError(f"lease pins of table {table_id}: a bucket is negative")
        for part, (buckets, snaps) in sorted(table_parts(pins).items()):
            out.append(encode_lease_part(table_id, part, buckets, snaps, partition))
    return out


def decode_lease_pins(entries: list) -> dict:
    """The table pins ``{table_id: {bucket: snapshot_id}}`` of ``entries`` (an entry of a
    partition must not be among them: see ``decode_lease_groups``)."""
    tables, partitions = decode_lease_groups(entries)
    if partitions:
        raise CorruptMessage("lease pins: partition entries where only table pins may be")
    return tables


def decode_lease_groups(entries: list) -> tuple[dict, dict]:
    """Inverse of ``encode_lease_pins``: (table pins, partition pins); also reads the v1-v3
    encodings ``dense``, ``sparse`` and ``packed`` (see docs/zookeeper_layout.md)."""
    tables: dict = {}
    partitions: dict = {}
    for entry in entries:
        kind = entry.get("e")
        if kind == "pfor":
            buckets, snaps = _decode_pfor(entry)
            pins = dict(zip(buckets.tolist(), snaps.tolist()))
        elif kind == "dense":
            pins = {b: s for b, s in enumerate(entry["s"]) if s != -1}
        elif kind == "sparse":
            pins = dict(zip(entry["b"], entry["s"]))
        elif kind == "packed":
            offset = entry["base"] - 1
            pins = {b: v + offset for b, v in enumerate(_unpack(entry["d"], entry["w"])) if v}
        else:
            raise CorruptMessage(f"lease pins of table {entry.get('t')} have unknown encoding "
                                 f"{kind!r}; upgrade fluss_spark")
        if not pins:
            continue
        partition = entry.get("p")
        if partition is None:
            tables.setdefault(int(entry["t"]), {}).update(pins)
        else:
            partitions.setdefault(int(entry["t"]), {}).setdefault(int(partition), {}).update(pins)
    return tables, partitions


def entry_key(entry: dict) -> tuple[int, int, int]:
    """(table_id, partition id or NO_PARTITION, part) of an entry."""
    return int(entry["t"]), int(entry.get("p", NO_PARTITION)), entry_part(entry)


def entry_part(entry: dict) -> int:
    if entry["e"] == "pfor":
        return int(entry["lo"]) // LEASE_PART_BUCKETS
    return int(entry["b"][0]) // LEASE_PART_BUCKETS if entry.get("b") else 0


def unpack_part(data: bytes, lease_id) -> dict:
    try:
        entry = unpackb(data)
    except Exception as e:  # noqa: BLE001 - msgpack raises several types on garbage
        raise CorruptMessage(f"lease {lease_id}: undecodable part: {e}") from None
    if not isinstance(entry, dict) or "t" not in entry:
        raise CorruptMessage(f"lease {lease_id}: a part is not an entry map")
    return entry


def lease_ref(key: tuple[int, int, int], generation: int, data: bytes) -> list[int]:
    """The header's reference to a part stored in a child znode, ``key`` being
    (table_id, partition, part): ``[table_id, part, generation, bytes, crc32]``, and a
    partition's part (v5) appends its partition id."""
    import zlib
    ref = [key[0], key[2], generation, len(data), zlib.crc32(data)]
    return ref if key[1] == NO_PARTITION else ref + [key[1]]


def parse_lease_ref(ref) -> tuple[tuple[int, int, int], int, int, int]:
    """((table_id, partition, part), generation, bytes, crc32) of a header reference."""
    try:
        t, k, g, size, crc = (int(x) for x in ref[:5])
        partition = int(ref[5]) if len(ref) > 5 else NO_PARTITION
    except (TypeError, ValueError) as e:
        raise CorruptMessage(f"lease part reference {ref!r} is damaged ({e})") from None
    return (t, partition, k), g, size, crc


def ref_part_name(ref) -> str:
    """The child znode name a header reference points at."""
    (t, partition, k), g, _, _ = parse_lease_ref(ref)
    return lease_part_name(t, k, g, partition)


def place_lease_parts(encoded: dict[tuple[int, int, int], bytes]
                      ) -> tuple[list[tuple[int, int, int]], list[tuple[int, int, int]]]:
    """(inline keys, child-znode keys) of a lease's encoded parts, both in (table, partition,
    part) order.

    Decided from the parts' sizes alone, so a part that does not change stays where it is
    unless the inline budget ahead of it moves."""
    inline, children, used = [], [], 0
    for key in sorted(encoded):
        size = len(encoded[key])
        if size <= LEASE_INLINE_PART_BYTES and used + size <= LEASE_INLINE_BYTES:
            inline.append(key)
            used += size
        else:
            children.append(key)
    return inline, children
