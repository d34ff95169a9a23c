"""Typed messages: frozen dataclasses that encode themselves to msgpack maps and decode with checks.

A message field is declared with ``wire(kind)``; the kind says how the value looks on the wire
and which values are valid. Decoding checks every field's type and range, so a handler receives
a request it can trust, and a malformed one is refused with the message's error class naming the
field. An absent field and a nil one both decode to the field's default; ``None`` is sent as nil
unless the field is declared ``omit_none`` (then the key is left out).
"""

from __future__ import annotations

import abc
import collections
import dataclasses
import re
from typing import Any, ClassVar, Generic, TypeVar, cast

from fluss_spark.errors import ApiError, CorruptMessage, InvalidRequest
from fluss_spark.protocol.api import ApiKey

M = TypeVar("M", bound="Message")
R = TypeVar("R", bound="Message")

#: Integers above this are refused: no count, offset or id needs more, every client language
#: can send it exactly (the largest integer a double holds), and it is how hostile or corrupt
#: requests usually look.
MAX_SANE_INT = 2**53
#: A map key sent as a string of decimal digits (ASCII only: ``str.isdigit`` also accepts
#: digits ``int()`` refuses, such as superscripts); more than 20 digits never fit 64 bits.
_DIGITS = re.compile(r"-?[0-9]+")
_MAX_DIGITS = 20


class Kind(abc.ABC):
    """How one field looks on the wire, and which of its values are valid."""

    @abc.abstractmethod
    def decode(self, value: Any, name: str, error: type[ApiError]) -> Any:
        """The checked Python value of a wire value (``error`` names the field if invalid)."""

    def encode(self, value: Any) -> Any:
        return value


class Int(Kind):
    """An integer (never a bool) in ``[lo, hi]``."""

    def __init__(self, lo: int | None = 0, hi: int | None = MAX_SANE_INT, *,
                 digits_ok: bool = False):
        self.lo, self.hi, self.digits_ok = lo, hi, digits_ok

    def decode(self, value, name, error):
        if self.digits_ok and isinstance(value, str) and _DIGITS.fullmatch(value):
            # Map keys from loosely typed clients (JSON has no int keys). At most 20 ASCII
            # digits: more cannot be a valid id, and int() of thousands of digits raises
            # ValueError (Python's digit limit) instead of a named error.
            if len(value.lstrip("-")) > _MAX_DIGITS:
                raise error(f"field {name!r} is too large ({len(value)} characters of digits; "
                            f"integers on the wire fit in 64 bits)")
            value = int(value)
        if not isinstance(value, int) or isinstance(value, bool):
            raise error(f"field {name!r} must be an integer, got {type(value).__name__}")
        if self.lo is not None and value < self.lo:
            least = {0: "must not be negative", 1: "must be positive"}.get(
                self.lo, f"must be at least {self.lo}")
            raise error(f"field {name!r} {least}, got {value}")
        if self.hi is not None and value > self.hi:
            most = "2**53" if self.hi == MAX_SANE_INT else str(self.hi)
            raise error(f"field {name!r} is too large ({value} > {most})")
        return value


class Bool(Kind):
    def decode(self, value, name, error):
        if not isinstance(value, bool):
            raise error(f"field {name!r} must be true or false, got {type(value).__name__}")
        return value


class Str(Kind):
    """A string of at most ``max_len`` characters, matching ``pattern`` in full if given."""

    def __init__(self, max_len: int = 1 << 20, pattern: str | None = None, *,
                 min_len: int = 0):
        self.max_len, self.min_len = max_len, min_len
        self.pattern = re.compile(pattern) if pattern else None

    def decode(self, value, name, error):
        if not isinstance(value, str):
            raise error(f"field {name!r} must be a string, got {type(value).__name__}")
        if not self.min_len <= len(value) <= self.max_len:
            raise error(f"field {name!r} must have {self.min_len}..{self.max_len} characters, "
                        f"got {len(value)}")
        if self.pattern is not None and not self.pattern.fullmatch(value):
            raise error(f"field {name!r} must match {self.pattern.pattern}, got {value!r}")
        return value


class Bytes(Kind):
    """Binary data; ``in_place`` fields (large pages) keep a ``memoryview`` into the received
    frame instead of copying it."""

    def __init__(self, *, in_place: bool = False):
        self.in_place = in_place

    def decode(self, value, name, error):
        if isinstance(value, memoryview) and self.in_place:
            return value
        if isinstance(value, (bytearray, memoryview)):
            value = bytes(value)
        if not isinstance(value, bytes):
            raise error(f"field {name!r} must be bytes, got {type(value).__name__}")
        return value


class Choice(Str):
    """One of a fixed set of strings."""

    def __init__(self, *choices: str):
        super().__init__()
        self.choices = choices

    def decode(self, value, name, error):
        value = super().decode(value, name, error)
        if value not in self.choices:
            raise error(f"field {name!r} must be one of {', '.join(self.choices)}, got {value!r}")
        return value


class ListOf(Kind):
    """A list (a tuple in Python) of one kind, of ``min_len..max_len`` items, unique if asked."""

    def __init__(self, item: Kind, *, max_len: int | None = None, min_len: int = 0,
                 unique: bool = False):
        self.item, self.max_len, self.min_len, self.unique = item, max_len, min_len, unique

    def decode(self, value, name, error):
        if not isinstance(value, (list, tuple)):
            raise error(f"field {name!r} must be a list, got {type(value).__name__}")
        if len(value) < self.min_len:
            raise error(f"field {name!r} must be a non-empty list" if self.min_len == 1 else
                        f"field {name!r} must have at least {self.min_len} items")
        if self.max_len is not None and len(value) > self.max_len:
            raise error(f"field {name!r} has {len(value)} items; at most {self.max_len} are "
                        f"allowed")
        out = tuple(self.item.decode(v, f"{name}[{i}]", error) for i, v in enumerate(value))
        if self.unique and len(set(out)) != len(out):
            dupes = sorted(str(v) for v, n in collections.Counter(out).items() if n > 1)
            raise error(f"field {name!r} names an item twice: {', '.join(dupes)}")
        return out

    def encode(self, value):
        return [self.item.encode(v) for v in value]


class MapOf(Kind):
    """A map with keys and values of one kind each."""

    def __init__(self, key: Kind, value: Kind, *, nullable_values: bool = False):
        self.key, self.value, self.nullable_values = key, value, nullable_values

    def decode(self, value, name, error):
        if not isinstance(value, dict):
            raise error(f"field {name!r} must be a map, got {type(value).__name__}")
        out = {}
        for k, v in value.items():
            key = self.key.decode(k, f"{name} key", error)
            out[key] = None if v is None and self.nullable_values else \
                self.value.decode(v, f"{name}[{key}]", error)
        return out

    def encode(self, value):
        return {self.key.encode(k): (None if v is None else self.value.encode(v))
                for k, v in value.items()}


class Nested(Kind):
    """A message inside a message."""

    def __init__(self, cls: type["Message"]):
        self.cls = cls

    def decode(self, value, name, error):
        return self.cls.decode(value, error=error, where=name)

    def encode(self, value):
        return value.to_wire()


class Raw(Kind):
    """Any msgpack value, passed through (operator-facing maps such as metrics)."""

    def decode(self, value, name, error):
        return value


_FIELDS: dict[type, tuple[tuple[str, Kind, bool, bool], ...]] = {}


def wire(kind: Kind, default: Any = dataclasses.MISSING, *, default_factory: Any = None,
         compare: bool = True, omit_none: bool = False) -> Any:
    """Declare a message field: its wire kind and, unless required, its default;
    ``omit_none``: a None value leaves the key out instead of sending nil."""
    meta = {"wire": kind, "omit_none": omit_none}
    if default_factory is not None:
        return dataclasses.field(default_factory=default_factory, compare=compare, metadata=meta)
    return dataclasses.field(default=default, compare=compare, metadata=meta)


class Message:
    """A frozen dataclass with a wire form; subclasses declare fields with ``wire``."""

    #: The error a malformed message of this type is refused with.
    ERROR: ClassVar[type[ApiError]] = InvalidRequest

    @classmethod
    def _wire_fields(cls) -> tuple[tuple[str, Kind, bool, bool], ...]:
        """(name, kind, required, omit_none) of every field, computed once per class."""
        found = _FIELDS.get(cls)
        if found is None:
            found = _FIELDS[cls] = tuple(
                (f.name, f.metadata["wire"], f.default is dataclasses.MISSING
                 and f.default_factory is dataclasses.MISSING, f.metadata["omit_none"])
                for f in dataclasses.fields(cls))  # type: ignore[arg-type]
        return found

    def to_wire(self) -> dict:
        out = {}
        for name, kind, _, omit_none in self._wire_fields():
            value = getattr(self, name)
            if value is not None:
                out[name] = kind.encode(value)
            elif not omit_none:
                out[name] = None
        return out

    @classmethod
    def decode(cls: type[M], body: Any, *, error: type[ApiError] | None = None,
               where: str | None = None) -> M:
        """Check and convert a decoded msgpack map into this message."""
        error = error or cls.ERROR
        what = where or _label(cls)
        if not isinstance(body, dict):
            raise error(f"{what} must be a map, got {type(body).__name__}")
        values = {}
        for name, kind, required, _ in cls._wire_fields():
            value = body.get(name)
            if value is None:
                if required:
                    raise error(f"invalid {what}: missing field {name!r}")
                continue
            values[name] = kind.decode(value, name, error)
        msg = cls(**values)
        msg.check()
        return msg

    def check(self) -> None:
        """Checks across fields, after each field was checked on its own (raise ``ERROR``)."""


class Request(Message, Generic[R]):
    """A request: its API key and version, and the type of its answer."""

    API_KEY: ClassVar[ApiKey]
    API_VERSION: ClassVar[int] = 1
    RESPONSE: ClassVar[type[Message]]

    def decode_response(self, body: Any) -> R:
        """The answer's body as this request's response type (CorruptMessage if malformed)."""
        return cast(R, self.RESPONSE.decode(body, error=CorruptMessage,
                                            where=f"{self.API_KEY.name} response"))


def _label(cls: type) -> str:
    key = getattr(cls, "API_KEY", None)
    return f"{key.name} request" if key is not None else cls.__name__


@dataclasses.dataclass(frozen=True)
class Empty(Message):
    """A response without fields."""
