"""Image windows: unfold2d (im2col) and its adjoint gather; convolution is built from them.

Specification
-------------
Neither operator does arithmetic: each output element is a copy of one input element's
bits or +0.0. A convolution is ``unfold2d`` followed by the exact matrix product
(``matmul``), a max-pool is ``unfold2d`` followed by ``max`` over the window axis, and
the gradient of ``unfold2d`` is ``unfold2d_grad`` followed by ``sum`` over the window
axis (one fixed float64 tree, rounded once). So no new rounding enters a step.

- unfold2d(x; kernel=(KH, KW), stride=(SH, SW), padding=(PH, PW)): x is float32
  (N, C, H, W); it is padded with +0.0 by PH rows above and below and PW columns left
  and right; OH = (H + 2 PH - KH) // SH + 1 and OW likewise (both at least 1). Output
  (N, C, OH, OW, KH * KW): out[n, c, oh, ow, i * KW + j] = padded[n, c, oh * SH + i,
  ow * SW + j].
- unfold2d_grad(g; kernel, stride, padding, input_hw=(H, W)): g is float32
  (N, C, OH, OW, KH * KW); output (N, C, H, W, KH * KW): out[n, c, h, w, i * KW + j] =
  g[n, c, oh, ow, i * KW + j] where oh = (h + PH - i) / SH and ow = (w + PW - j) / SW
  are whole numbers inside [0, OH) and [0, OW), else +0.0. Each input pixel receives
  at most one value per window position, so summing the last axis adds every window's
  gradient that read the pixel: the adjoint of unfold2d.

Both run one code path over NumPy and CuPy: the index tables are built on the host
from the shapes alone and moved to the array's device.
"""
from __future__ import annotations

import functools
from typing import Any

import numpy as np

from . import registry
from ._backend import array_module
from ._nn_checks import as_array, require_float32
from .errors import OpError
from .registry import Attr


def _pair(op: str, name: str, value: tuple[int, ...], low: int) -> tuple[int, int]:
    if len(value) != 2 or any(v < low for v in value):
        raise OpError(f"{op}: {name} must be two integers of at least {low}, got {tuple(value)}")
    return int(value[0]), int(value[1])


def out_size(op: str, size: int, kernel: int, stride: int, padding: int) -> int:
    """Windows along one axis: (size + 2 padding - kernel) // stride + 1; an OpError if none fit."""
    span = size + 2 * padding - kernel
    if span < 0:
        raise OpError(f"{op}: a kernel of {kernel} does not fit {size} + 2*{padding} positions")
    return span // stride + 1


def _geometry(op: str, h: int, w: int, kernel, stride, padding):
    kh, kw = _pair(op, "kernel", kernel, 1)
    sh, sw = _pair(op, "stride", stride, 1)
    ph, pw = _pair(op, "padding", padding, 0)
    return (kh, kw), (sh, sw), (ph, pw), (out_size(op, h, kh, sh, ph), out_size(op, w, kw, sw, pw))


@functools.lru_cache(maxsize=64)
def _unfold_index(oh: int, ow: int, kh: int, kw: int, sh: int, sw: int) -> tuple[np.ndarray, np.ndarray]:
    """Row and column indices into the padded image: (OH, 1, KH, 1) and (1, OW, 1, KW)."""
    rows = (np.arange(oh, dtype=np.int64) * sh)[:, None] + np.arange(kh, dtype=np.int64)[None, :]
    cols = (np.arange(ow, dtype=np.int64) * sw)[:, None] + np.arange(kw, dtype=np.int64)[None, :]
    return rows[:, None, :, None], cols[None, :, None, :]


@functools.lru_cache(maxsize=64)
def _fold_index(h: int, w: int, kh: int, kw: int, sh: int, sw: int, ph: int, pw: int,
                oh: int, ow: int) -> np.ndarray:
    """(H, W, KH*KW) flat indices into g's (OH*OW*KH*KW) window entries; OH*OW*KH*KW means +0.0."""
    def along(size: int, k: int, s: int, p: int, n_out: int) -> tuple[np.ndarray, np.ndarray]:
        num = np.arange(size, dtype=np.int64)[:, None] + p - np.arange(k, dtype=np.int64)[None, :]
        o = num // s
        return o, (num >= 0) & (num % s == 0) & (o < n_out)

    o_h, ok_h = along(h, kh, sh, ph, oh)  # (H, KH)
    o_w, ok_w = along(w, kw, sw, pw, ow)  # (W, KW)
    kk = kh * kw
    window = (np.arange(kh, dtype=np.int64)[:, None] * kw + np.arange(kw, dtype=np.int64)[None, :])
    flat = (o_h[:, None, :, None] * ow + o_w[None, :, None, :]) * kk + window[None, None, :, :]
    valid = ok_h[:, None, :, None] & ok_w[None, :, None, :]
    return np.where(valid, flat, oh * ow * kk).reshape(h, w, kk)


def _require_4d(op: str, x: Any) -> None:
    require_float32(op, "x", x)
    if x.ndim != 4:
        raise OpError(f"{op}: x must be (N, C, H, W), got shape {tuple(x.shape)}")


def unfold2d(x: Any, kernel: tuple[int, ...], stride: tuple[int, ...] = (1, 1),
             padding: tuple[int, ...] = (0, 0)) -> Any:
    """Every KH x KW window of the zero-padded image, as the last axis (im2col; copies bits only)."""
    _require_4d("unfold2d", x)
    xp = array_module(x)
    n, c, h, w = (int(d) for d in x.shape)
    (kh, kw), (sh, sw), (ph, pw), (oh, ow) = _geometry("unfold2d", h, w, kernel, stride, padding)
    if ph or pw:
        padded = xp.zeros((n, c, h + 2 * ph, w + 2 * pw), dtype=np.float32)
        padded[:, :, ph:ph + h, pw:pw + w] = x
    else:
        padded = x
    rows, cols = _unfold_index(oh, ow, kh, kw, sh, sw)
    out = padded[:, :, xp.asarray(rows), xp.asarray(cols)]  # (N, C, OH, OW, KH, KW)
    return as_array(xp, out.reshape(n, c, oh, ow, kh * kw))


def unfold2d_grad(g: Any, kernel: tuple[int, ...], stride: tuple[int, ...] = (1, 1),
                  padding: tuple[int, ...] = (0, 0), input_hw: tuple[int, ...] = (1, 1)) -> Any:
    """Window gradients laid on the input pixels they came from, +0.0 where none (copies bits only)."""
    require_float32("unfold2d_grad", "g", g)
    xp = array_module(g)
    h, w = _pair("unfold2d_grad", "input_hw", input_hw, 1)
    (kh, kw), (sh, sw), (ph, pw), (oh, ow) = _geometry("unfold2d_grad", h, w, kernel, stride, padding)
    if g.ndim != 5 or tuple(g.shape[2:]) != (oh, ow, kh * kw):
        raise OpError(f"unfold2d_grad: g must be (N, C, {oh}, {ow}, {kh * kw}), got shape {tuple(g.shape)}")
    n, c = int(g.shape[0]), int(g.shape[1])
    entries = oh * ow * kh * kw
    flat = xp.concatenate([g.reshape(n, c, entries), xp.zeros((n, c, 1), dtype=np.float32)], axis=2)
    index = _fold_index(h, w, kh, kw, sh, sw, ph, pw, oh, ow)
    return as_array(xp, flat[:, :, xp.asarray(index)])


# --- backward rules ---------------------------------------------------------------


def _unfold2d_vjp(emit, g, inputs, out, attrs):
    spread = emit("unfold2d_grad", g, input_hw=tuple(inputs[0].shape[2:]), **attrs)
    return (emit("sum", spread, axis=(4,)),)


def _register() -> None:
    window = {"kernel": Attr(tuple), "stride": Attr(tuple, (1, 1)), "padding": Attr(tuple, (0, 0))}
    registry.register("unfold2d", unfold2d, arity=1, attrs=window, vjp=_unfold2d_vjp)
    registry.register("unfold2d_grad", unfold2d_grad, arity=1, attrs={**window, "input_hw": Attr(tuple)})


_register()
