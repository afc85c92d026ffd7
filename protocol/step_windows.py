"""Element programs of unfold2d and unfold2d_grad (issue 18): image windows, copies of bits
(repops_cupy/conv.py).

An output element's source depends on its coordinates only, never on the data: the window
entry k = i * KW + j splits by one exact float64 division (k < 2^53), the pixel's row and column
come from COORD operands, and the copy is a GATHER at the (n, c) plane's base plus an offset
computed in int64. Where the spec gives +0.0 (padding, or no window at that entry) the program
gathers the plane's first element instead, which is always inside the tensor, and selects 0.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from repops_cupy.conv import out_size
from repops_cupy.errors import OpError

from .errors import LocalProtocolError
from .step_trace import Tracer, Val, View

__all__ = ["WINDOW_FAMILIES"]

Shapes = Sequence[tuple[int, ...]]
Layout = tuple[tuple[int, ...], tuple[View, ...]]


def _pair(op: str, attrs: Mapping[str, Any], name: str, default: tuple[int, int], low: int) -> tuple[int, int]:
    value = tuple(attrs.get(name, default))
    if len(value) != 2 or any(int(v) < low for v in value):
        raise LocalProtocolError(f"{op}: {name} must be two integers of at least {low}, got {value}")
    return int(value[0]), int(value[1])


def _geometry(op: str, attrs: Mapping[str, Any], h: int, w: int):
    """((KH, KW), (SH, SW), (PH, PW), (OH, OW)) as conv._geometry checks them."""
    kh, kw = _pair(op, attrs, "kernel", (0, 0), 1)
    sh, sw = _pair(op, attrs, "stride", (1, 1), 1)
    ph, pw = _pair(op, attrs, "padding", (0, 0), 0)
    try:
        return (kh, kw), (sh, sw), (ph, pw), (out_size(op, h, kh, sh, ph), out_size(op, w, kw, sw, pw))
    except OpError as e:
        raise LocalProtocolError(str(e)) from None


def _rank(op: str, shape: Sequence[int], n: int) -> tuple[int, ...]:
    if len(shape) != n:
        raise LocalProtocolError(f"{op}: expected a rank-{n} input, got shape {tuple(shape)}")
    return tuple(int(d) for d in shape)


def _int(t: Tracer, n: int) -> Val:
    return t.const(n & ((1 << 64) - 1))


def _window_entry(t: Tracer, kw: int) -> tuple[Val, Val]:
    """(i, j) of the element's window entry k = i * KW + j (the last coordinate)."""
    k = t.coord(-1)
    i = t.f64_to_i64(t.f64_div(t.i64_to_f64(k), t.c64(float(kw))))  # exact: the quotient truncates
    return i, t.i64_sub(k, t.i64_mul(i, _int(t, kw)))


def _inside(t: Tracer, v: Val, n: int) -> Val:
    """0 <= v < n, as 1 or 0."""
    return t.select(t.i64_lt(v, _int(t, 0)), _int(t, 0), t.i64_lt(v, _int(t, n)))


def _copy_or_zero(t: Tracer, valid: Val, offset: Val) -> Val:
    """The element at the plane's base + offset where valid, else +0.0 (reading the base instead)."""
    picked = t.gather(0, t.select(valid, offset, _int(t, 0)))
    return t.select(valid, picked, t.const(0))


def _unfold2d_views(attrs: Mapping[str, Any], shapes: Shapes) -> Layout:
    n, c, h, w = _rank("unfold2d", shapes[0], 4)
    (kh, kw), _, _, (oh, ow) = _geometry("unfold2d", attrs, h, w)
    return (n, c, oh, ow, kh * kw), (View(0, (c * h * w, h * w, 0, 0, 0)),)


def _unfold2d(t: Tracer, attrs, shapes) -> Val:
    """padded[n, c, oh * SH + i, ow * SW + j]: a pixel of the image or +0.0 in the padding."""
    _, _, h, w = shapes[0]
    (_, kw), (sh, sw), (ph, pw), _ = _geometry("unfold2d", attrs, h, w)
    i, j = _window_entry(t, kw)
    row = t.i64_add(t.i64_mul(t.coord(2), _int(t, sh)), t.i64_sub(i, _int(t, ph)))
    col = t.i64_add(t.i64_mul(t.coord(3), _int(t, sw)), t.i64_sub(j, _int(t, pw)))
    valid = t.bit_and(_inside(t, row, h), _inside(t, col, w))
    return _copy_or_zero(t, valid, t.i64_add(t.i64_mul(row, _int(t, w)), col))


def _unfold2d_grad_views(attrs: Mapping[str, Any], shapes: Shapes) -> Layout:
    n, c, oh, ow, kk = _rank("unfold2d_grad", shapes[0], 5)
    h, w = _pair("unfold2d_grad", attrs, "input_hw", (1, 1), 1)
    (kh, kw), _, _, (want_h, want_w) = _geometry("unfold2d_grad", attrs, h, w)
    if (oh, ow, kk) != (want_h, want_w, kh * kw):
        raise LocalProtocolError(f"unfold2d_grad: g must be (N, C, {want_h}, {want_w}, {kh * kw}), got {shapes[0]}")
    return (n, c, h, w, kk), (View(0, (c * oh * ow * kk, oh * ow * kk, 0, 0, 1)),)


def _window_of(t: Tracer, coord: int, entry: Val, stride: int, pad: int, n_out: int) -> tuple[Val, Val]:
    """(o, valid): o = (pixel + pad - entry) / stride where that is a whole number in [0, n_out)."""
    num = t.i64_sub(t.i64_add(t.coord(coord), _int(t, pad)), entry)
    o = t.f64_to_i64(t.f64_div(t.i64_to_f64(num), t.c64(float(stride))))  # whole when valid: checked below
    whole = t.select(t.i64_sub(t.i64_mul(o, _int(t, stride)), num), _int(t, 0), _int(t, 1))
    return o, t.bit_and(whole, _inside(t, o, n_out))


def _unfold2d_grad(t: Tracer, attrs, shapes) -> Val:
    """g[n, c, oh, ow, k] for the window (oh, ow) whose entry k read this pixel, or +0.0 if none.
    A negative numerator truncates toward zero; it is refused by the whole-number check or, when
    it truncates to 0, by o * stride != numerator (numerator in (-stride, 0))."""
    _, _, oh_n, ow_n, kk = shapes[0]
    h, w = _pair("unfold2d_grad", attrs, "input_hw", (1, 1), 1)
    (_, kw), (sh, sw), (ph, pw), _ = _geometry("unfold2d_grad", attrs, h, w)
    i, j = _window_entry(t, kw)
    oh, ok_h = _window_of(t, 2, i, sh, ph, oh_n)
    ow, ok_w = _window_of(t, 3, j, sw, pw, ow_n)
    window = t.i64_add(t.i64_mul(oh, _int(t, ow_n)), ow)
    return _copy_or_zero(t, t.bit_and(ok_h, ok_w), t.i64_mul(window, _int(t, kk)))


WINDOW_FAMILIES = {
    "unfold2d": (_unfold2d_views, _unfold2d),
    "unfold2d_grad": (_unfold2d_grad_views, _unfold2d_grad),
}
