"""A small proto2 wire codec driven by declarative field tables on dataclasses."""

from __future__ import annotations

import dataclasses
import struct
from typing import Any, ClassVar, TypeVar, dataclass_transform

from fluss_spark.errors import CorruptMessage

# Wire types of the protobuf encoding.
VARINT, FIXED64, LEN, FIXED32 = 0, 1, 2, 5

# Scalar kinds a field may have; MESSAGE fields name their message class.
INT32, INT64, UINT32, UINT64, SINT32, SINT64, BOOL = ("int32", "int64", "uint32", "uint64",
                                                      "sint32", "sint64", "bool")
FIXED32_, SFIXED32, FLOAT = "fixed32", "sfixed32", "float"
FIXED64_, SFIXED64, DOUBLE = "fixed64", "sfixed64", "double"
STRING, BYTES, MESSAGE = "string", "bytes", "message"

_VARINT_KINDS = frozenset({INT32, INT64, UINT32, UINT64, SINT32, SINT64, BOOL})
_FIXED32 = {FIXED32_: struct.Struct("<I"), SFIXED32: struct.Struct("<i"),
            FLOAT: struct.Struct("<f")}
_FIXED64 = {FIXED64_: struct.Struct("<Q"), SFIXED64: struct.Struct("<q"),
            DOUBLE: struct.Struct("<d")}
_PACKABLE = _VARINT_KINDS | set(_FIXED32) | set(_FIXED64)
_MASK64 = (1 << 64) - 1

M = TypeVar("M", bound="ProtoMessage")


@dataclasses.dataclass(frozen=True)
class FieldSpec:
    """One field of a message table: its number, kind, and proto2 label."""

    number: int
    kind: str
    required: bool = False
    repeated: bool = False
    packed: bool = False
    message: type[ProtoMessage] | None = None

    @property
    def wire_type(self) -> int:
        if self.kind in _VARINT_KINDS:
            return VARINT
        if self.kind in _FIXED32:
            return FIXED32
        if self.kind in _FIXED64:
            return FIXED64
        return LEN


def pb(number: int, kind: str, *, required: bool = False, repeated: bool = False,
       packed: bool = False, message: type[ProtoMessage] | None = None) -> Any:
    """Declare a dataclass field as protobuf field ``number`` of ``kind``.

    Optional fields default to None, repeated ones to an empty list; required fields have no
    default and must be given."""
    if kind == MESSAGE and message is None:
        raise TypeError("a message field needs its message class")
    if packed and (not repeated or kind not in _PACKABLE):
        raise TypeError("only repeated numeric fields can be packed")
    spec = FieldSpec(number, kind, required, repeated, packed, message)
    meta = {"pb": spec}
    if repeated:
        return dataclasses.field(default_factory=list, metadata=meta)
    if required:
        return dataclasses.field(metadata=meta)
    return dataclasses.field(default=None, metadata=meta)


class ProtoMessage:
    """Base of the message dataclasses; ``encode()`` and ``decode()`` read their field tables."""

    _table: ClassVar[tuple[tuple[str, FieldSpec], ...]]
    _by_number: ClassVar[dict[int, tuple[str, FieldSpec]]]

    @classmethod
    def fields_table(cls) -> tuple[tuple[str, FieldSpec], ...]:
        # Built on first use (and cached per class): the dataclass decorator runs after
        # __init_subclass__, so the fields are not known any earlier.
        table = cls.__dict__.get("_table")
        if table is None:
            pairs = sorted(((f.name, f.metadata["pb"]) for f in dataclasses.fields(cls)  # type: ignore[arg-type]
                            if "pb" in f.metadata), key=lambda p: p[1].number)
            numbers = [s.number for _, s in pairs]
            if len(set(numbers)) != len(numbers):
                raise TypeError(f"{cls.__name__} declares a field number twice")
            table = tuple(pairs)
            cls._table = table
            cls._by_number = {s.number: (n, s) for n, s in table}
        return table

    def encode(self) -> bytes:
        out = bytearray()
        _encode_into(self, out)
        return bytes(out)

    @classmethod
    def decode(cls: type[M], data: bytes | bytearray | memoryview) -> M:
        return _decode(cls, memoryview(data))

    # One equality and one repr for every message (``message`` generates neither per class).
    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return all(getattr(self, f.name) == getattr(other, f.name)
                   for f in dataclasses.fields(self))  # type: ignore[arg-type]

    __hash__ = None  # type: ignore[assignment]  # mutable, as a dataclass with eq is

    def __repr__(self) -> str:
        fields = dataclasses.fields(self)  # type: ignore[arg-type]
        return (f"{type(self).__qualname__}("
                f"{', '.join(f'{f.name}={getattr(self, f.name)!r}' for f in fields)})")


@dataclass_transform(kw_only_default=True, field_specifiers=(dataclasses.field,))
def message(cls: type[M]) -> type[M]:
    """A message class: a keyword-only dataclass whose equality and repr are ``ProtoMessage``'s.
    Generating them for each class doubled the time the message modules take to import, paid
    at the start of every query's driver-side process."""
    return dataclasses.dataclass(kw_only=True, repr=False, eq=False)(cls)


# -- encoding ------------------------------------------------------------------------------------


def encode_varint(value: int, out: bytearray) -> None:
    """Append ``value`` (taken modulo 2**64, as protobuf does for negative int32/int64)."""
    value &= _MASK64
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def zigzag(value: int) -> int:
    return (value << 1) ^ (value >> 63)


def unzigzag(value: int) -> int:
    return (value >> 1) ^ -(value & 1)


def _varint_value(kind: str, value: Any) -> int:
    if kind == BOOL:
        return 1 if value else 0
    if kind in (SINT32, SINT64):
        return zigzag(int(value))
    return int(value)


def _encode_scalar(spec: FieldSpec, value: Any, out: bytearray) -> None:
    kind = spec.kind
    if kind in _VARINT_KINDS:
        encode_varint(_varint_value(kind, value), out)
    elif kind in _FIXED32:
        out += _FIXED32[kind].pack(value)
    elif kind in _FIXED64:
        out += _FIXED64[kind].pack(value)
    else:
        if kind == STRING:
            data: bytes = value.encode("utf-8")
        elif kind == BYTES:
            data = bytes(value)
        else:
            data = value.encode()
        encode_varint(len(data), out)
        out += data


def _encode_into(msg: ProtoMessage, out: bytearray) -> None:
    for name, spec in msg.fields_table():
        value = getattr(msg, name)
        if spec.repeated:
            if not value:
                continue
            if spec.packed:
                body = bytearray()
                for item in value:
                    _encode_scalar(spec, item, body)
                encode_varint(spec.number << 3 | LEN, out)
                encode_varint(len(body), out)
                out += body
            else:
                for item in value:
                    encode_varint(spec.number << 3 | spec.wire_type, out)
                    _encode_scalar(spec, item, out)
        elif value is None:
            if spec.required:
                raise CorruptMessage(f"{type(msg).__name__}.{name} is required")
        else:
            encode_varint(spec.number << 3 | spec.wire_type, out)
            _encode_scalar(spec, value, out)


# -- decoding ------------------------------------------------------------------------------------


def read_varint(buf: memoryview, pos: int) -> tuple[int, int]:
    """The varint at ``pos`` and the position after it."""
    result = shift = 0
    while True:
        if pos >= len(buf):
            raise CorruptMessage("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result & _MASK64, pos
        shift += 7
        if shift >= 70:
            raise CorruptMessage("varint longer than 10 bytes")


def _signed(value: int, bits: int) -> int:
    value &= (1 << bits) - 1
    return value - (1 << bits) if value >> (bits - 1) else value


def _from_varint(kind: str, raw: int) -> Any:
    if kind == INT32:
        return _signed(raw, 32)
    if kind == INT64:
        return _signed(raw, 64)
    if kind == UINT32:
        return raw & 0xFFFFFFFF
    if kind == BOOL:
        return raw != 0
    if kind in (SINT32, SINT64):
        return unzigzag(raw)
    return raw


def _skip(buf: memoryview, pos: int, wire_type: int) -> int:
    if wire_type == VARINT:
        return read_varint(buf, pos)[1]
    if wire_type == FIXED64:
        end = pos + 8
    elif wire_type == FIXED32:
        end = pos + 4
    elif wire_type == LEN:
        length, pos = read_varint(buf, pos)
        end = pos + length
    else:
        raise CorruptMessage(f"unsupported wire type {wire_type}")
    if end > len(buf):
        raise CorruptMessage("truncated field")
    return end


def _read_one(spec: FieldSpec, buf: memoryview, pos: int, wire_type: int) -> tuple[Any, int]:
    kind = spec.kind
    if wire_type != spec.wire_type:
        raise CorruptMessage(f"field {spec.number} has wire type {wire_type}, "
                             f"expected {spec.wire_type}")
    if wire_type == VARINT:
        raw, pos = read_varint(buf, pos)
        return _from_varint(kind, raw), pos
    if wire_type == FIXED32:
        if pos + 4 > len(buf):
            raise CorruptMessage("truncated fixed32")
        return _FIXED32[kind].unpack_from(buf, pos)[0], pos + 4
    if wire_type == FIXED64:
        if pos + 8 > len(buf):
            raise CorruptMessage("truncated fixed64")
        return _FIXED64[kind].unpack_from(buf, pos)[0], pos + 8
    length, pos = read_varint(buf, pos)
    end = pos + length
    if end > len(buf):
        raise CorruptMessage(f"field {spec.number} runs past the end of its message")
    chunk = buf[pos:end]
    if kind == STRING:
        try:
            return str(chunk, "utf-8"), end
        except UnicodeDecodeError:
            raise CorruptMessage(f"field {spec.number} is not UTF-8") from None
    if kind == BYTES:
        return bytes(chunk), end
    assert spec.message is not None
    return _decode(spec.message, chunk), end


def _decode(cls: type[M], buf: memoryview) -> M:
    cls.fields_table()
    by_number = cls._by_number
    values: dict[str, Any] = {}
    pos, n = 0, len(buf)
    while pos < n:
        key, pos = read_varint(buf, pos)
        number, wire_type = key >> 3, key & 7
        if number == 0:
            raise CorruptMessage("field number 0")
        entry = by_number.get(number)
        if entry is None:
            pos = _skip(buf, pos, wire_type)       # a field of a newer peer: ignored
            continue
        name, spec = entry
        if spec.repeated:
            items = values.setdefault(name, [])
            if wire_type == LEN and spec.kind in _PACKABLE:
                # Packed and unpacked encodings are both accepted, as protobuf parsers must.
                length, pos = read_varint(buf, pos)
                end = pos + length
                if end > n:
                    raise CorruptMessage(f"packed field {number} runs past the end")
                packed = buf[:end]
                while pos < end:
                    item, pos = _read_one(spec, packed, pos, spec.wire_type)
                    items.append(item)
            else:
                item, pos = _read_one(spec, buf, pos, wire_type)
                items.append(item)
        else:
            values[name], pos = _read_one(spec, buf, pos, wire_type)
    for name, spec in cls._table:
        if spec.required and name not in values:
            raise CorruptMessage(f"{cls.__name__}: required field {name} ({spec.number}) missing")
    return cls(**values)


__all__ = ["BOOL", "BYTES", "DOUBLE", "FIXED32_", "FIXED64_", "FLOAT", "FieldSpec", "INT32",
           "INT64", "MESSAGE", "ProtoMessage", "SFIXED32", "SFIXED64", "SINT32", "SINT64",
           "STRING", "UINT32", "UINT64", "encode_varint", "pb", "read_varint", "unzigzag",
           "zigzag"]
