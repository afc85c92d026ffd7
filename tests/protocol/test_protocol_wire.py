"""Canonical msgpack and strict schemas."""
from __future__ import annotations

from dataclasses import dataclass, field

import msgpack
import pytest

from protocol import LocalProtocolError, RemoteProtocolError
from protocol.wire import (
    MAX_NESTING, Bytes, Maybe, Nested, OpAttrs, SeqOf, Text, UInt, WireStruct, decode_struct, packb,
    unpackb_canonical, wire,
)


@dataclass(frozen=True)
class Inner(WireStruct):
    n: int = field(metadata=wire(UInt(0, 1000)))


@dataclass(frozen=True)
class Sample(WireStruct):
    h: bytes = field(metadata=wire(Bytes(4)))
    name: str = field(metadata=wire(Text(8, empty=False)))
    items: tuple[int, ...] = field(metadata=wire(SeqOf(UInt(), 3)))
    inner: Inner = field(metadata=wire(Nested(Inner)))
    maybe: Inner | None = field(metadata=wire(Maybe(Nested(Inner))))
    attrs: dict = field(metadata=wire(OpAttrs()))


@dataclass(frozen=True)
class Holder(WireStruct):
    h: bytes = field(metadata=wire(Bytes(4)))


GOOD = Sample(b"abcd", "x", (1, 2), Inner(5), None, {"axes": (0, 1), "eps": 1e-5, "flag": True, "mode": "a", "n": -3})


def test_struct_round_trips_through_canonical_bytes():
    data = GOOD.encode()
    assert decode_struct(Sample, data) == GOOD
    assert decode_struct(Sample, data).encode() == data
    with_inner = Sample(b"abcd", "x", (), Inner(0), Inner(7), {})
    assert decode_struct(Sample, with_inner.encode()) == with_inner


@pytest.mark.parametrize("change", [
    {"h": b"abc"}, {"h": "abcd"}, {"name": ""}, {"name": "x" * 9}, {"items": [1]}, {"items": (1, 2, 3, 4)},
    {"items": (True,)}, {"items": (-1,)}, {"inner": 5}, {"attrs": {"b": 1, "a": 2}}, {"attrs": {"x": float("nan")}},
    {"attrs": {"x": [1]}}, {"attrs": {"x": (1.5,)}}, {"attrs": {"x": None}}, {"attrs": {"x": 1 << 70}},
])
def test_invalid_values_are_local_errors_on_construction(change):
    values = {f: getattr(GOOD, f) for f in ("h", "name", "items", "inner", "maybe", "attrs")}
    values.update(change)
    with pytest.raises(LocalProtocolError):
        Sample(**values)


def test_uint_bounds_and_bool_is_not_an_int():
    for bad in (-1, 1001, True, 1.0):
        with pytest.raises(LocalProtocolError):
            Inner(bad)


def raw_good() -> dict:
    return GOOD.to_wire()


@pytest.mark.parametrize("mutate", [
    lambda r: r.pop("name"),
    lambda r: r.update(extra=1),
    lambda r: r.update(items={"0": 1}),
    lambda r: r.update(inner={"n": 1, "m": 2}),
    lambda r: r.update(maybe={}),
])
def test_field_sets_and_types_are_exact(mutate):
    raw = raw_good()
    mutate(raw)
    with pytest.raises(RemoteProtocolError):
        decode_struct(Sample, msgpack.packb(raw, use_bin_type=True))


def test_field_order_is_fixed():
    raw = raw_good()
    reordered = dict(reversed(list(raw.items())))
    with pytest.raises(RemoteProtocolError, match="in that order"):
        decode_struct(Sample, msgpack.packb(reordered, use_bin_type=True))


def test_non_canonical_spellings_are_refused():
    # 5 as a uint32 instead of a positive fixint
    wide = b"\x81\xa1n\xce\x00\x00\x00\x05"
    assert msgpack.unpackb(wide) == {"n": 5}
    with pytest.raises(RemoteProtocolError, match="canonical"):
        decode_struct(Inner, wide)
    # a float32 where the canonical encoding is float64
    f32 = msgpack.packb({"x": 1.5}, use_single_float=True)
    with pytest.raises(RemoteProtocolError, match="canonical"):
        unpackb_canonical(f32, max_size=100)
    # bytes sent as str
    as_str = msgpack.packb({"h": b"abcd"}, use_bin_type=False)
    with pytest.raises(RemoteProtocolError, match="must be bytes"):
        decode_struct(Holder, as_str)
    assert decode_struct(Holder, packb({"h": b"abcd"})) == Holder(b"abcd")
    # a duplicated key: the parser keeps one, so the bytes cannot be canonical
    dup = b"\x82\xa1n\x01\xa1n\x02"
    with pytest.raises(RemoteProtocolError):
        decode_struct(Inner, dup)


def test_limits_on_size_nesting_trailing_bytes_and_ext_types():
    with pytest.raises(RemoteProtocolError, match="exceeds"):
        unpackb_canonical(packb(b"x" * 200), max_size=100)
    nested: object = 1
    for _ in range(MAX_NESTING + 2):
        nested = [nested]
    with pytest.raises(RemoteProtocolError, match="nests"):
        unpackb_canonical(packb(nested), max_size=10_000)
    with pytest.raises(RemoteProtocolError):
        unpackb_canonical(packb(1) + b"\x00", max_size=100)
    with pytest.raises(RemoteProtocolError):
        unpackb_canonical(msgpack.packb(msgpack.ExtType(5, b"x")), max_size=100)
    with pytest.raises(RemoteProtocolError):
        unpackb_canonical(b"\xc1", max_size=100)  # never used in msgpack
    with pytest.raises(RemoteProtocolError):
        unpackb_canonical("not bytes", max_size=100)  # type: ignore[arg-type]


def test_packing_refuses_values_without_a_canonical_form():
    with pytest.raises(LocalProtocolError):
        packb({"x": object()})
    with pytest.raises(LocalProtocolError):
        packb((1, 2))  # tuples must be made lists first: strict types


def test_every_decoding_failure_is_remote():
    for data in (b"", b"\x81", packb({"n": "x"}), packb([1, 2]), packb({"n": 2000}), b"\xff" * 3):
        with pytest.raises(RemoteProtocolError):
            decode_struct(Inner, data)
