"""Element programs of dropout and dropout_at_step (issue 18): Philox4x32-10 written in steps.

Output element j (C order) of dropout(x; p, seed, stream, counter) is kept where its uniform
u_j >= p (repops_cupy/nn.py); u_j comes from word j % 4 of Philox block counter + j // 4, keyed by
seed, with stream as the counter's upper half (repops_cupy/rng.py). The program derives that
block from the element's coordinates and runs the ten rounds: per round two 32x32 -> 64-bit
products (i64_mul, exact since both factors are below 2^32), their high and low words (i64_sar,
bit_and) and four bit_xor, 12 steps; the key schedule is constants. The keep test is in integers:
u = (w >> 8) * 2^-24 and the spec's threshold ceil(p * 2^24) * 2^-24 are exact float32 values, so
u >= threshold exactly when (w >> 8) >= ceil(p * 2^24). Kept: x * float32(1 / (1 - p)), one f32_mul;
dropped: +0. The program is a function of the shape and the attributes, never of the data.

dropout_at_step is dropout with stream 2^32 + site and counter step * 2^32 (repops_cupy/optim.py),
the step read from its int64 input.
"""
from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

from repops_cupy.nn import dropout_scale
from repops_cupy.optim import DROPOUT_STREAM_BASE, STEP_COUNTER_SHIFT
from repops_cupy.rng import PHILOX_M0, PHILOX_M1, PHILOX_ROUNDS, PHILOX_W0, PHILOX_W1

from .errors import LocalProtocolError
from .step_math import f32_bits
from .step_trace import Tracer, Val, View, elementwise_layout

__all__ = ["PHILOX_FAMILIES", "philox_block"]

Shapes = Sequence[tuple[int, ...]]
Layout = tuple[tuple[int, ...], tuple[View, ...]]
_MASK32 = 0xFFFFFFFF
_LANES = 4  # words per Philox block: element j reads lane j % 4 of block counter + j // 4


def _words(t: Tracer, v: Val) -> tuple[Val, Val]:
    """(low, high) 32-bit words of a 64-bit value (the arithmetic shift's sign copies masked off)."""
    return t.bit_and(v, t.const(_MASK32)), t.bit_and(t.i64_sar(v, t.const(32)), t.const(_MASK32))


def philox_block(t: Tracer, counter: Sequence[Val], key: tuple[int, int]) -> list[Val]:
    """Philox4x32-10 of four 32-bit counter words under key (k0, k1), as rng.philox4x32."""
    c0, c1, c2, c3 = counter
    k0, k1 = key
    for r in range(PHILOX_ROUNDS):
        if r:
            k0, k1 = (k0 + PHILOX_W0) & _MASK32, (k1 + PHILOX_W1) & _MASK32
        lo0, hi0 = _words(t, t.i64_mul(c0, t.const(PHILOX_M0)))
        lo1, hi1 = _words(t, t.i64_mul(c2, t.const(PHILOX_M1)))
        c0, c1, c2, c3 = (t.bit_xor(t.bit_xor(hi1, c1), t.const(k0)), lo1,
                          t.bit_xor(t.bit_xor(hi0, c3), t.const(k1)), lo0)
    return [c0, c1, c2, c3]


def _flat_index(t: Tracer, shape: Sequence[int]) -> Val:
    """The output element's C-order index from its coordinates."""
    if not shape:
        return t.const(0)
    j = t.coord(0)
    for d in range(1, len(shape)):
        j = t.i64_add(t.i64_mul(j, t.const(shape[d])), t.coord(d))
    return j


def _u64_attr(op: str, attrs: Mapping[str, Any], name: str, value: Any = None) -> int:
    value = attrs[name] if value is None else value
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 1 << 64:
        raise LocalProtocolError(f"{op}: {name} must be an integer in [0, 2^64), got {value!r}")
    return value


def _p(op: str, attrs: Mapping[str, Any]) -> float:
    p = float(attrs["p"])
    if not 0.0 <= p <= 1.0:
        raise LocalProtocolError(f"{op}: p must lie in [0, 1], got {p!r}")
    return p


def _dropout_element(t: Tracer, shape: Sequence[int], p: float, seed: int, stream: int, counter: Val) -> Val:
    """x_j * float32(1 / (1 - p)) where word j's top 24 bits reach ceil(p * 2^24), else +0 (view 0: x)."""
    j = _flat_index(t, shape)
    c0, c1 = _words(t, t.i64_add(counter, t.i64_sar(j, t.const(2))))
    w = philox_block(t, (c0, c1, t.const(stream & _MASK32), t.const(stream >> 32)), (seed & _MASK32, seed >> 32))
    odd, high = t.bit_and(j, t.const(1)), t.bit_and(j, t.const(2))  # the lane j % 4 in two bits
    word = t.select(high, t.select(odd, w[3], w[2]), t.select(odd, w[1], w[0]))
    dropped = t.i64_lt(t.i64_sar(word, t.const(8)), t.const(math.ceil(p * 2.0**24)))
    kept = t.f32_mul(t.input(0), t.const(f32_bits(float(dropout_scale(p)))))
    return t.f32_canon(t.select(dropped, t.const(0), kept))


def _dropout_views(attrs: Mapping[str, Any], shapes: Shapes) -> Layout:
    if len(shapes) != 1:
        raise LocalProtocolError(f"dropout: one input, got {len(shapes)}")
    return elementwise_layout(shapes)


def _dropout(t: Tracer, attrs, shapes) -> Val:
    seed, stream = _u64_attr("dropout", attrs, "seed"), _u64_attr("dropout", attrs, "stream")
    counter = _u64_attr("dropout", attrs, "counter")
    return _dropout_element(t, shapes[0], _p("dropout", attrs), seed, stream, t.const(counter))


def _dropout_at_step_views(attrs: Mapping[str, Any], shapes: Shapes) -> Layout:
    if len(shapes) != 2 or tuple(shapes[1]) != ():
        raise LocalProtocolError(f"dropout_at_step: inputs x and a step of shape (), got shapes {list(shapes)}")
    return elementwise_layout(shapes)


def _dropout_at_step(t: Tracer, attrs, shapes) -> Val:
    site = attrs["site"]
    if isinstance(site, bool) or not isinstance(site, int) or not 0 <= site < 1 << 31:
        raise LocalProtocolError(f"dropout_at_step: site must lie in [0, 2^31), got {site!r}")
    seed = _u64_attr("dropout_at_step", attrs, "seed")
    counter = t.i64_mul(t.input(1), t.const(1 << STEP_COUNTER_SHIFT))  # exact: the op refuses steps >= 2^32
    return _dropout_element(t, shapes[0], _p("dropout_at_step", attrs), seed, DROPOUT_STREAM_BASE + site, counter)


PHILOX_FAMILIES = {
    "dropout": (_dropout_views, _dropout),
    "dropout_at_step": (_dropout_at_step_views, _dropout_at_step),
}
