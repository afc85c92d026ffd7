"""Canonical msgpack and the schema language every wire structure is declared in.

Encoding is deterministic, so signed bytes are well defined: maps keep the field
order their class declares, integers take their shortest msgpack form, bytes are
``bin`` and text is ``str``, floats (allowed only inside operator attributes) are
always float64. Decoding is strict: after parsing, the value must re-encode to the
exact input bytes (no second spelling of one message can exist), every map has
exactly its declared fields, and every value has its declared type, size and range.

A wire structure is a frozen dataclass deriving from `WireStruct` whose fields carry
a `Spec` (``field(metadata=wire(Bytes(32)))``). Construction validates, so a struct
built locally with a bad value raises `LocalProtocolError`; the same check run on
decoded input is turned into `RemoteProtocolError` by `decode_struct`.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, ClassVar, TypeVar

import msgpack

from .errors import LocalProtocolError, RemoteProtocolError

U64_MAX = (1 << 64) - 1
I64_MIN, I64_MAX = -(1 << 63), (1 << 63) - 1
MAX_NESTING = 24
MAX_STRUCT_SIZE = 1 << 20

T = TypeVar("T", bound="WireStruct")


def packb(obj: Any) -> bytes:
    """Canonical msgpack of plain values (dict, list, int, bytes, str, bool, float, None)."""
    try:
        return msgpack.packb(obj, use_bin_type=True, use_single_float=False, strict_types=True)
    except (TypeError, ValueError, OverflowError) as exc:
        raise LocalProtocolError(f"value has no canonical encoding: {exc}") from None


def unpackb_canonical(data: bytes, *, max_size: int) -> Any:
    """Parse msgpack that must be in canonical form and within the size and nesting limits.

    Raises only `RemoteProtocolError`.
    """
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise RemoteProtocolError(f"expected bytes, got {type(data).__name__}")
    data = bytes(data)
    if len(data) > max_size:
        raise RemoteProtocolError(f"message of {len(data)} bytes exceeds the limit of {max_size}")
    try:
        obj = msgpack.unpackb(data, raw=False, use_list=True, strict_map_key=True, ext_hook=_no_ext, timestamp=0)
    except Exception as exc:  # msgpack raises many types on bad input; all mean "malformed"
        raise RemoteProtocolError(f"malformed msgpack: {type(exc).__name__}") from None
    _check_nesting(obj)
    try:
        again = packb(obj)
    except LocalProtocolError:
        raise RemoteProtocolError("message holds a value with no canonical encoding") from None
    if again != data:
        raise RemoteProtocolError("message is not in canonical encoding")
    return obj


def _no_ext(code: int, data: bytes) -> Any:
    raise ValueError("msgpack ext types are not used by this protocol")


def _check_nesting(obj: Any) -> None:
    stack = [(obj, 0)]
    while stack:
        value, depth = stack.pop()
        if depth > MAX_NESTING:
            raise RemoteProtocolError(f"message nests deeper than {MAX_NESTING} levels")
        if isinstance(value, list):
            stack.extend((v, depth + 1) for v in value)
        elif isinstance(value, dict):
            stack.extend((v, depth + 1) for v in value.values())


# --- specs: what one field may hold -----------------------------------------------


class Spec:
    """The type of one field: checks a Python value, converts to and from the wire."""

    def check(self, value: Any, where: str) -> None:
        raise NotImplementedError

    def encode(self, value: Any) -> Any:
        return value

    def decode(self, raw: Any, where: str) -> Any:
        self.check(raw, where)
        return raw


def _fail(where: str, message: str) -> LocalProtocolError:
    return LocalProtocolError(f"{where}: {message}")


class Bytes(Spec):
    def __init__(self, size: int | None = None, *, max_size: int = MAX_STRUCT_SIZE) -> None:
        self.size = size
        self.max_size = max_size

    def check(self, value: Any, where: str) -> None:
        if type(value) is not bytes:
            raise _fail(where, f"must be bytes, got {type(value).__name__}")
        if self.size is not None and len(value) != self.size:
            raise _fail(where, f"must be {self.size} bytes, got {len(value)}")
        if len(value) > self.max_size:
            raise _fail(where, f"at most {self.max_size} bytes, got {len(value)}")


class UInt(Spec):
    def __init__(self, low: int = 0, high: int = U64_MAX) -> None:
        self.low = low
        self.high = high

    def check(self, value: Any, where: str) -> None:
        if type(value) is not int:
            raise _fail(where, f"must be an int, got {type(value).__name__}")
        if not self.low <= value <= self.high:
            raise _fail(where, f"must be in [{self.low}, {self.high}], got {value}")


class Text(Spec):
    def __init__(self, max_len: int = 256, *, choices: tuple[str, ...] | None = None, empty: bool = True) -> None:
        self.max_len = max_len
        self.choices = choices
        self.empty = empty

    def check(self, value: Any, where: str) -> None:
        if type(value) is not str:
            raise _fail(where, f"must be str, got {type(value).__name__}")
        if self.choices is not None and value not in self.choices:
            raise _fail(where, f"must be one of {self.choices}, got {value!r}")
        if len(value.encode("utf-8", "surrogatepass")) > self.max_len:
            raise _fail(where, f"at most {self.max_len} bytes of UTF-8")
        if not self.empty and not value:
            raise _fail(where, "must not be empty")


class SeqOf(Spec):
    def __init__(self, item: Spec, max_len: int, *, min_len: int = 0) -> None:
        self.item = item
        self.max_len = max_len
        self.min_len = min_len

    def check(self, value: Any, where: str) -> None:
        if type(value) is not tuple:
            raise _fail(where, f"must be a tuple, got {type(value).__name__}")
        if not self.min_len <= len(value) <= self.max_len:
            raise _fail(where, f"length must be in [{self.min_len}, {self.max_len}], got {len(value)}")
        for i, v in enumerate(value):
            self.item.check(v, f"{where}[{i}]")

    def encode(self, value: Any) -> Any:
        return [self.item.encode(v) for v in value]

    def decode(self, raw: Any, where: str) -> Any:
        if type(raw) is not list:
            raise _fail(where, f"must be an array, got {type(raw).__name__}")
        if len(raw) > self.max_len:
            raise _fail(where, f"at most {self.max_len} items")
        return tuple(self.item.decode(v, f"{where}[{i}]") for i, v in enumerate(raw))


class Nested(Spec):
    def __init__(self, cls: type[WireStruct]) -> None:
        self.cls = cls

    def check(self, value: Any, where: str) -> None:
        if type(value) is not self.cls:
            raise _fail(where, f"must be {self.cls.__name__}, got {type(value).__name__}")

    def encode(self, value: Any) -> Any:
        return value.to_wire()

    def decode(self, raw: Any, where: str) -> Any:
        return self.cls.from_wire(raw, where)


class Maybe(Spec):
    """A value or None (msgpack nil)."""

    def __init__(self, inner: Spec) -> None:
        self.inner = inner

    def check(self, value: Any, where: str) -> None:
        if value is not None:
            self.inner.check(value, where)

    def encode(self, value: Any) -> Any:
        return None if value is None else self.inner.encode(value)

    def decode(self, raw: Any, where: str) -> Any:
        return None if raw is None else self.inner.decode(raw, where)


class OpAttrs(Spec):
    """Operator attributes: str keys in sorted order; int, float, bool, str or a tuple of ints.

    The kinds `repops_cupy.registry.Attr` allows. Floats may be infinite (a mask's fill
    is -inf) but not NaN: NaN has many bit patterns but one meaning, so it has no
    canonical encoding.
    """

    MAX_ENTRIES = 64

    def check(self, value: Any, where: str) -> None:
        if type(value) is not dict:
            raise _fail(where, f"must be a dict, got {type(value).__name__}")
        keys = list(value)
        if len(keys) > self.MAX_ENTRIES:
            raise _fail(where, f"at most {self.MAX_ENTRIES} attributes")
        if keys != sorted(keys):
            raise _fail(where, "attribute names must be in sorted order")
        for key, v in value.items():
            Text(64, empty=False).check(key, f"{where} key")
            self._check_value(v, f"{where}[{key!r}]")

    @staticmethod
    def _check_value(v: Any, where: str) -> None:
        kind = type(v)
        if kind is bool or (kind is str and len(v) <= 256):
            return
        if kind is int:
            if not I64_MIN <= v <= I64_MAX:
                raise _fail(where, "integer attribute out of int64 range")
            return
        if kind is float:
            if math.isnan(v):
                raise _fail(where, "float attribute must not be NaN")
            return
        if kind is tuple and len(v) <= 32 and all(type(x) is int and I64_MIN <= x <= I64_MAX for x in v):
            return
        raise _fail(where, f"unsupported attribute value {v!r}")

    def encode(self, value: Any) -> Any:
        return {k: list(v) if type(v) is tuple else v for k, v in value.items()}

    def decode(self, raw: Any, where: str) -> Any:
        if type(raw) is not dict:
            raise _fail(where, f"must be a map, got {type(raw).__name__}")
        return {k: tuple(v) if type(v) is list else v for k, v in raw.items()}


def wire(spec: Spec) -> dict[str, Spec]:
    """Field metadata naming a field's `Spec`: ``x: int = field(metadata=wire(UInt()))``."""
    return {"wire": spec}


# --- structs --------------------------------------------------------------------------


class WireStruct:
    """Base of frozen dataclasses that travel on the wire.

    Subclasses declare every field with `wire(...)` metadata and may override
    `_validate` for checks across fields (raising `LocalProtocolError`).
    """

    _WIRE_FIELDS: ClassVar[tuple[tuple[str, Spec], ...]]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._WIRE_FIELDS = ()  # filled lazily: the dataclass decorator runs after this hook

    @classmethod
    def _fields(cls) -> tuple[tuple[str, Spec], ...]:
        if not cls._WIRE_FIELDS:
            cls._WIRE_FIELDS = tuple((f.name, f.metadata["wire"]) for f in dataclasses.fields(cls))
        return cls._WIRE_FIELDS

    def __post_init__(self) -> None:
        for name, spec in self._fields():
            spec.check(getattr(self, name), f"{type(self).__name__}.{name}")
        self._validate()

    def _validate(self) -> None:
        """Checks across fields; raise LocalProtocolError."""

    def to_wire(self) -> dict[str, Any]:
        return {name: spec.encode(getattr(self, name)) for name, spec in self._fields()}

    @classmethod
    def from_wire(cls: type[T], raw: Any, where: str = "") -> T:
        where = where or cls.__name__
        if type(raw) is not dict:
            raise _fail(where, f"must be a map, got {type(raw).__name__}")
        names = [name for name, _ in cls._fields()]
        if list(raw) != names:
            raise _fail(where, f"fields must be exactly {names} in that order, got {list(raw)}")
        return cls(**{name: spec.decode(raw[name], f"{where}.{name}") for name, spec in cls._fields()})

    def encode(self) -> bytes:
        return packb(self.to_wire())


def decode_struct(cls: type[T], data: bytes, *, max_size: int = MAX_STRUCT_SIZE) -> T:
    """Strictly decode one standalone struct; raises only `RemoteProtocolError`."""
    raw = unpackb_canonical(data, max_size=max_size)
    return remote(lambda: cls.from_wire(raw))


def remote(build: Any) -> Any:
    """Run `build()` on untrusted input: every failure becomes `RemoteProtocolError`."""
    try:
        return build()
    except RemoteProtocolError:
        raise
    except LocalProtocolError as exc:
        raise RemoteProtocolError(str(exc)) from None
    except Exception as exc:  # any other failure on untrusted input is still the peer's fault
        raise RemoteProtocolError(f"malformed input ({type(exc).__name__}: {exc})") from None
