"""Compiled CPU kernels for the transcendentals, GELU, the fixed tree sum and the nn row ops.

The NumPy array code in `transcendental`, `elementwise`, `reduce` and `nn` is the
specification; these kernels compute the same values, faster: an element goes through
its whole chain of float64 operations at once, and a row through its whole tree.
`tests/repops/test_cpu_kernels.py` compares the bits with the array code and checks
that the machine code holds no FMA instruction; `gavel selfcheck` compares them too.

One module per family, each compiled by `compiler` (numba without fastmath, cached
on disk): `transcendentals` (exp, expm1, log, tanh, erf, erfc, sigmoid), `gelu`,
`reductions` (the tree) and `row_ops` (softmax, layer norm, cross-entropy); `maps` runs
the elementwise spans in parallel. They read their numbers from `repops_cupy.constants`
and import nothing else of the project, so the array code may import this package.

Used only for NumPy arrays, when numba imports and the environment variable
REPOPS_CPU_KERNELS is not "0" (set it to force the array code, e.g. to compare).
Without numba this package imports all the same, `AVAILABLE` is False, and every
operator runs its array code. The functions below are the entry points of the
operator modules; call them only where `enabled(np)`.
"""
from __future__ import annotations

import os

import numpy as np

from .compiler import AVAILABLE

if AVAILABLE:
    from . import maps, reductions, row_ops

ENV = "REPOPS_CPU_KERNELS"


def enabled(xp) -> bool:
    """Whether the compiled path serves arrays of module `xp` now."""
    return xp is np and AVAILABLE and os.environ.get(ENV, "1") != "0"


def _chunks(rows: int, per_row: int) -> int:
    """Row groups for prange: enough to share among threads, each worth starting a thread for."""
    return max(1, min(rows, 64, rows * per_row // 8192))


def map_unary(name: str, x: np.ndarray, out_dtype) -> np.ndarray:
    """The compiled primitive `name` over every element of x (float32 or float64), C-order result."""
    flat = np.ascontiguousarray(x).reshape(-1)
    out = np.empty(flat.shape, dtype=out_dtype)
    maps.run_unary(name, flat, out, _chunks(flat.size, 1))
    return out.reshape(x.shape)


def tree_last(a: np.ndarray) -> np.ndarray:
    """The tree over the last axis of a (rows, n) float32/float64 array; float64 (rows,)."""
    a = np.ascontiguousarray(a)
    rows, n = a.shape
    if n > reductions.PIECE:
        pieces = np.empty((rows, -(-n // reductions.PIECE)), np.float64)
        reductions.tree_pieces(a, pieces)
        a, n = pieces, pieces.shape[1]
    out = np.empty(rows, np.float64)
    if rows:
        reductions.tree_rows(a, _chunks(rows, n), out)
    return out


def tree_first(a: np.ndarray) -> np.ndarray:
    """The tree over the first axis of an (n, cols) float32/float64 array; float64 (cols,)."""
    a = np.ascontiguousarray(a)
    n, cols = a.shape
    out = np.zeros(cols, np.float64)
    if n and cols:
        reductions.tree_cols(a, out)
    return out


def gelu(x: np.ndarray, approximate: str) -> np.ndarray:
    """elementwise.gelu on the compiled path (float32 in and out)."""
    flat = np.ascontiguousarray(x).reshape(-1)
    out = np.empty(flat.shape, np.float32)
    maps.run_unary("gelu_tanh" if approximate == "tanh" else "gelu_erf", flat, out, _chunks(flat.size, 1))
    return out.reshape(x.shape)


def gelu_grad(g: np.ndarray, x: np.ndarray, approximate: str) -> np.ndarray:
    """elementwise.gelu_grad on the compiled path (float32 in and out)."""
    flat_g = np.ascontiguousarray(g).reshape(-1)
    flat_x = np.ascontiguousarray(x).reshape(-1)
    out = np.empty(flat_x.shape, np.float32)
    name = "gelu_grad_tanh" if approximate == "tanh" else "gelu_grad_erf"
    maps.run_binary(name, flat_g, flat_x, out, _chunks(flat_x.size, 1))
    return out.reshape(x.shape)


def _rows(x: np.ndarray, axis: int) -> np.ndarray:
    """x with `axis` moved last, as a C-contiguous (rows, n) array (no copy when it already is)."""
    moved = np.moveaxis(x, axis, -1)
    return np.ascontiguousarray(moved).reshape(-1, moved.shape[-1])


def _unrows(out: np.ndarray, x: np.ndarray, axis: int) -> np.ndarray:
    """The inverse of `_rows` for a result shaped like x, C-contiguous."""
    moved_shape = np.moveaxis(x, axis, -1).shape
    return np.ascontiguousarray(np.moveaxis(out.reshape(moved_shape), -1, axis))


def _row_op(kernel, axis: int, first: np.ndarray, *others: np.ndarray) -> np.ndarray:
    """A float32 row kernel over `axis` of same-shaped float32 arrays."""
    rows = [_rows(a, axis) for a in (first, *others)]
    out = np.empty(rows[0].shape, np.float32)
    kernel(*rows, _chunks(*rows[0].shape), out)
    return _unrows(out, first, axis)


def softmax(x: np.ndarray, axis: int) -> np.ndarray:
    return _row_op(row_ops.softmax_rows, axis, x)


def log_softmax(x: np.ndarray, axis: int) -> np.ndarray:
    return _row_op(row_ops.log_softmax_rows, axis, x)


def softmax_grad(g: np.ndarray, y: np.ndarray, axis: int) -> np.ndarray:
    return _row_op(row_ops.softmax_grad_rows, axis, g, y)


def log_softmax_grad(g: np.ndarray, y: np.ndarray, axis: int) -> np.ndarray:
    return _row_op(row_ops.log_softmax_grad_rows, axis, g, y)


def layer_norm(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float) -> np.ndarray:
    rows = _rows(x, -1)
    out = np.empty(rows.shape, np.float32)
    row_ops.layer_norm_rows(rows, np.ascontiguousarray(gamma), np.ascontiguousarray(beta), float(eps),
                            _chunks(*rows.shape), out)
    return out.reshape(x.shape)


def layer_norm_grad_x(g: np.ndarray, x: np.ndarray, gamma: np.ndarray, eps: float) -> np.ndarray:
    rows = _rows(x, -1)
    out = np.empty(rows.shape, np.float32)
    row_ops.layer_norm_grad_x_rows(_rows(g, -1), rows, np.ascontiguousarray(gamma), float(eps),
                                   _chunks(*rows.shape), out)
    return out.reshape(x.shape)


def layer_norm_xhat_g(g: np.ndarray, x: np.ndarray, eps: float) -> np.ndarray:
    """xhat * g in float64 as (rows, D): the addends of layer_norm_grad_gamma."""
    rows = _rows(x, -1)
    out = np.empty(rows.shape, np.float64)
    row_ops.layer_norm_xhat_g_rows(_rows(g, -1), rows, float(eps), _chunks(*rows.shape), out)
    return out


def cross_entropy_picked(logits: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """log_softmax(logits)[n, targets[n]] in float64, shape (N,)."""
    rows = np.ascontiguousarray(logits)
    picked = np.empty(rows.shape[0], np.float64)
    row_ops.cross_entropy_rows(rows, targets.astype(np.int64), _chunks(*rows.shape), picked)
    return picked


def cross_entropy_grad(logits: np.ndarray, targets: np.ndarray, scale: float) -> np.ndarray:
    """(softmax(logits) - onehot(targets)) * scale, rounded to float32."""
    rows = np.ascontiguousarray(logits)
    out = np.empty(rows.shape, np.float32)
    row_ops.cross_entropy_grad_rows(rows, targets.astype(np.int64), float(scale), _chunks(*rows.shape), out)
    return out
