"""Reductions over axes: sum, mean, max, var, and the float64 tree sum others build on.

Specification
-------------
Axes. `axis` is a tuple of ints (an int is accepted by `tree_sum_f64`); negative
values count from the end; a repeated or out-of-range axis is an OpError. The EMPTY
TUPLE MEANS ALL AXES. The reduced elements of one output position are put in one
sequence: ordered by their indices along the reduced axes, taken in increasing axis
order, the last reduced axis varying fastest (C order).

The tree. `tree_sum_f64` adds a sequence a[0..n-1] of float64 values by levels:
each level adds adjacent pairs, b[i] = a[2i] + a[2i+1] (one IEEE float64 addition)
for i < n//2, and when n is odd the last element is carried up unchanged as
b[n//2] = a[n-1]; levels repeat until one value is left. The shape of the tree
depends only on n. n = 1 gives the element itself (so -0.0 stays -0.0); n = 0 gives
+0.0. Memory layout, chunking and the backend cannot change the result.

float32 operators (float32 in, float32 out; the float64 conversion is exact):
- sum(x): tree sum in float64, rounded once to float32. Empty: +0.0.
- mean(x): (tree sum in float64) / n in float64, rounded once. Empty: OpError.
- var(x; correction): two passes in float64: m = tree_sum(x)/n, d = x - m,
  v = tree_sum(d*d) / max(n - correction, 0), rounded once. A zero denominator gives
  +inf (or NaN for 0/0) as IEEE says. Empty: OpError. correction < 0: OpError.
- max(x): exact; NaN if any reduced element is NaN; a zero maximum is +0 if any
  reduced element is +0, else -0. Empty: OpError.
Gradient operators:
- max_grad(g, x, out; axis, keepdims): the gradient is split equally among tied maxima:
  x_i gets g / count where x_i == out (so -0 ties with +0) or both are NaN, count being
  the number of such elements in its reduction; others get +0. g / count in float64,
  rounded once.
- var_grad(g, x; axis, keepdims, correction): with m and d as in var,
  grad = (d * (2.0 / max(n - correction, 0))) * g, in float64, rounded once.
Backward rules: sum emits "reshape" (when not keepdims) and "broadcast_to"; mean
emits "mul_scalar"(value=1.0/n) first; max emits "max_grad"; var emits "var_grad".
"""
from __future__ import annotations

import builtins
import math
from typing import Any, Iterable

import numpy as np

from . import cpu_kernels as _kernels
from . import registry
from ._backend import array_module
from ._nn_checks import as_array, require_float32
from .errors import OpError
from .registry import Attr

# Layout of the tree's work (never of its shape): reduced axes that are already the
# trailing axes are read in place when the rows are long or few; otherwise the reduced
# axes are moved first so every level adds long contiguous rows.
_FEW_ROWS = 16
_LONG_ROW = 64
_SHORT_ROW = 16  # compiled path: rows this short are summed as columns of the transpose


def normalize_axes(op: str, ndim: int, axis: int | Iterable[int]) -> tuple[int, ...]:
    """Sorted non-negative axes; () means all axes."""
    if isinstance(axis, (int, np.integer)) and not isinstance(axis, bool):
        axis = (int(axis),)
    axis = tuple(axis)
    if not axis:
        return tuple(range(ndim))
    out = []
    for a in axis:
        if isinstance(a, bool) or not isinstance(a, (int, np.integer)):
            raise OpError(f"{op}: axis entries must be ints, got {axis!r}")
        if not -ndim <= a < ndim:
            raise OpError(f"{op}: axis {a} out of range for an array of rank {ndim}")
        a = int(a) % ndim
        if a in out:
            raise OpError(f"{op}: axis {a} repeated in {axis!r}")
        out.append(a)
    return tuple(sorted(out))


def _kept_shape(shape: tuple[int, ...], axes: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(1 if i in axes else d for i, d in enumerate(shape))


def _out_shape(shape: tuple[int, ...], axes: tuple[int, ...], keepdims: bool) -> tuple[int, ...]:
    if keepdims:
        return _kept_shape(shape, axes)
    return tuple(d for i, d in enumerate(shape) if i not in axes)


def _reduced_length(shape: tuple[int, ...], axes: tuple[int, ...]) -> int:
    return math.prod(shape[a] for a in axes)


def _pair_add(xp: Any, left: Any, right: Any, out: Any) -> None:
    """out = left + right in float64; float32 operands are widened exactly first."""
    if left.dtype == np.float64:
        xp.add(left, right, out=out)
    elif xp is np:
        np.add(left, right, out=out, dtype=np.float64)  # the ufunc widens both operands exactly
    else:
        xp.add(left.astype(np.float64), right.astype(np.float64), out=out)


def _levels_last(xp: Any, a: Any) -> Any:
    """The tree level by level over the last axis of a (rows, n) array; float64 (rows,)."""
    n = a.shape[1]
    while n > 1:
        half = n // 2
        nxt = xp.empty((a.shape[0], n - half), dtype=np.float64)
        _pair_add(xp, a[:, 0 : 2 * half : 2], a[:, 1 : 2 * half : 2], nxt[:, :half])
        if n % 2:
            nxt[:, half] = a[:, n - 1]  # carried up unchanged (widening is exact)
        a, n = nxt, n - half
    return a[:, 0].astype(np.float64)


def _levels_first(xp: Any, a: Any) -> Any:
    """The tree level by level over the first axis of an (n, rows) array; float64 (rows,)."""
    n = a.shape[0]
    while n > 1:
        half = n // 2
        nxt = xp.empty((n - half, a.shape[1]), dtype=np.float64)
        _pair_add(xp, a[0 : 2 * half : 2], a[1 : 2 * half : 2], nxt[:half])
        if n % 2:
            nxt[half] = a[n - 1]
        a, n = nxt, n - half
    return a[0].astype(np.float64)


# On NumPy the levels run over cache-sized pieces. Pieces never change the tree: rows
# are independent, and a power-of-two count of elements starting at a multiple of that
# count is a complete subtree, whose sums then continue the same tree.
_PIECE = 1 << 16


def _tree_last(xp: Any, a: Any) -> Any:
    """Tree over the last axis of a (rows, n) float32/float64 array; returns float64 (rows,)."""
    rows, n = a.shape
    if xp is not np or rows * n <= _PIECE:
        return _levels_last(xp, a)
    if n < 2 * _PIECE:
        step = builtins.max(1, _PIECE // n)
        return np.concatenate([_levels_last(np, a[r : r + step]) for r in range(0, rows, step)])
    m, tail = divmod(n, _PIECE)
    sums = np.empty((rows, m + (tail > 0)), dtype=np.float64)
    for r in range(rows):
        for j in range(m):
            sums[r, j] = _levels_last(np, a[r : r + 1, j * _PIECE : (j + 1) * _PIECE])[0]
        if tail:
            sums[r, m] = _levels_last(np, a[r : r + 1, m * _PIECE :])[0]
    return _levels_last(np, sums)


def _tree_first(xp: Any, a: Any) -> Any:
    """Tree over the first axis of an (n, rows) float32/float64 array; returns float64 (rows,)."""
    n, rows = a.shape
    block = 1 << builtins.max(1, (_PIECE * 4 // builtins.max(rows, 1)).bit_length() - 1)
    if xp is not np or n <= block:
        return _levels_first(xp, a)
    m, tail = divmod(n, block)
    sums = np.empty((m + (tail > 0), rows), dtype=np.float64)
    for j in range(m):
        sums[j] = _levels_first(np, a[j * block : (j + 1) * block])
    if tail:
        sums[m] = _levels_first(np, a[m * block :])
    return _tree_first(np, sums)


def _tree_sum_any(xp: Any, x: Any, axes: tuple[int, ...], keepdims: bool) -> Any:
    """The tree sum of x (float32 or float64) over normalized axes, float64 out."""
    shape = tuple(x.shape)
    out_shape = _out_shape(shape, axes, keepdims)
    n = _reduced_length(shape, axes)
    if n == 0:
        return xp.zeros(out_shape, dtype=np.float64)
    kept = [i for i in range(len(shape)) if i not in axes]
    rows = math.prod(shape[i] for i in kept)
    trailing = list(axes) == list(range(len(shape) - len(axes), len(shape)))
    if _kernels.enabled(xp):
        # compiled trees (same tree): read the reduced axes in place where they are
        # trailing or leading, so that no transposed copy is made, except many short
        # rows, which the tree over the first axis sums many at a time
        leading = list(axes) == list(range(len(axes)))
        short_rows = n <= _SHORT_ROW and rows >= _FEW_ROWS
        if (trailing and not short_rows) or (not trailing and not leading and rows < _FEW_ROWS):
            total = _kernels.tree_last(x.transpose(kept + list(axes)).reshape(rows, n))
        else:
            total = _kernels.tree_first(x.transpose(list(axes) + kept).reshape(n, rows))
        return total.reshape(out_shape)
    with np.errstate(over="ignore", invalid="ignore"):  # inf and NaN sums are IEEE results
        if rows < _FEW_ROWS or (trailing and n >= _LONG_ROW):
            total = _tree_last(xp, x.transpose(kept + list(axes)).reshape(rows, n))
        else:
            total = _tree_first(xp, x.transpose(list(axes) + kept).reshape(n, rows))
    return total.reshape(out_shape)


def tree_sum_f64(x64: Any, axis: int | tuple[int, ...] = (), keepdims: bool = False) -> Any:
    """Fixed pairwise-tree sum of a float64 array over `axis` (() = all axes), float64 out.

    The tree is specified in the module docstring: adjacent pairs level by level, an odd
    last element carried up unchanged. Usable on any float64 intermediate.
    """
    xp = array_module(x64)
    if getattr(x64, "dtype", None) != np.float64:
        raise OpError(f"tree_sum_f64: expected a float64 array, got {getattr(x64, 'dtype', type(x64).__name__)}")
    axes = normalize_axes("tree_sum_f64", x64.ndim, axis)
    return as_array(xp, _tree_sum_any(xp, x64, axes, keepdims))


# --- float32 operators ------------------------------------------------------------


def _prepare(op: str, x: Any, axis: tuple[int, ...]) -> tuple[Any, tuple[int, ...], int]:
    require_float32(op, "x", x)
    xp = array_module(x)
    axes = normalize_axes(op, x.ndim, axis)
    return xp, axes, _reduced_length(tuple(x.shape), axes)


def sum(x: Any, axis: tuple[int, ...] = (), keepdims: bool = False) -> Any:  # noqa: A001 - the op's name
    """float32(tree sum in float64) over `axis` (() = all axes)."""
    xp, axes, _ = _prepare("sum", x, axis)
    total = _tree_sum_any(xp, x, axes, keepdims)
    with np.errstate(over="ignore"):  # beyond the float32 range rounds to +-inf
        return as_array(xp, total.astype(np.float32))


def mean(x: Any, axis: tuple[int, ...] = (), keepdims: bool = False) -> Any:
    """float32(tree sum in float64 / n) over `axis` (() = all axes)."""
    xp, axes, n = _prepare("mean", x, axis)
    if n == 0:
        raise OpError("mean: the mean over zero elements is undefined")
    total = _tree_sum_any(xp, x, axes, keepdims)
    with np.errstate(over="ignore"):
        return as_array(xp, (total / float(n)).astype(np.float32))


def _centered(xp: Any, x: Any, axes: tuple[int, ...], n: int) -> Any:
    """x - mean(x) in float64, the mean broadcast over the reduced axes."""
    x64 = x.astype(np.float64)
    m = _tree_sum_any(xp, x64, axes, True) / float(n)
    with np.errstate(invalid="ignore"):  # inf - inf is NaN, as IEEE says
        return x64 - m


def _var_denominator(op: str, n: int, correction: int) -> float:
    if correction < 0:
        raise OpError(f"{op}: correction must be >= 0, got {correction}")
    return float(builtins.max(n - correction, 0))


def var(x: Any, axis: tuple[int, ...] = (), keepdims: bool = False, correction: int = 0) -> Any:
    """float32(two-pass variance in float64) over `axis` (() = all axes)."""
    xp, axes, n = _prepare("var", x, axis)
    denom = _var_denominator("var", n, correction)
    if n == 0:
        raise OpError("var: the variance over zero elements is undefined")
    d = _centered(xp, x, axes, n)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):  # IEEE results
        v = _tree_sum_any(xp, d * d, axes, keepdims) / denom
        return as_array(xp, v.astype(np.float32))


def max(x: Any, axis: tuple[int, ...] = (), keepdims: bool = False) -> Any:  # noqa: A001 - the op's name
    """Largest element over `axis` (() = all axes); NaN propagates; +0 beats -0."""
    xp, axes, n = _prepare("max", x, axis)
    if n == 0:
        raise OpError("max: the maximum over zero elements is undefined")
    # exact: a maximum involves no rounding; NaN and the sign of zero are fixed below
    top = xp.max(x, axis=axes, keepdims=keepdims)
    has_nan = xp.any(xp.isnan(x), axis=axes, keepdims=keepdims)
    has_pos_zero = xp.any((x == 0) & ~xp.signbit(x), axis=axes, keepdims=keepdims)
    top = xp.where(top == 0, xp.where(has_pos_zero, np.float32(0.0), np.float32(-0.0)), top)
    top = xp.where(has_nan, np.float32(np.nan), top)
    return as_array(xp, top.astype(np.float32))


# --- gradient operators -----------------------------------------------------------


def _grad_input(op: str, g: Any, x: Any, axes: tuple[int, ...], keepdims: bool) -> Any:
    """g reshaped to keepdims form, after checking its shape against the reduction of x."""
    require_float32(op, "g", g)
    expected = _out_shape(tuple(x.shape), axes, keepdims)
    if tuple(g.shape) != expected:
        raise OpError(f"{op}: g has shape {tuple(g.shape)}, expected {expected}")
    return g.reshape(_kept_shape(tuple(x.shape), axes))


def max_grad(g: Any, x: Any, out: Any, axis: tuple[int, ...] = (), keepdims: bool = False) -> Any:
    """g / count on each tied maximum (x == out, or both NaN), +0 elsewhere."""
    require_float32("max_grad", "x", x)
    require_float32("max_grad", "out", out)
    xp = array_module(g, x, out)
    axes = normalize_axes("max_grad", x.ndim, axis)
    g_k = _grad_input("max_grad", g, x, axes, keepdims)
    if tuple(out.shape) != tuple(g.shape):
        raise OpError(f"max_grad: out has shape {tuple(out.shape)}, expected {tuple(g.shape)}")
    out_k = out.reshape(g_k.shape)
    hit = (x == out_k) | (xp.isnan(x) & xp.isnan(out_k))
    count = xp.count_nonzero(hit, axis=axes).reshape(g_k.shape)  # exact: an integer count
    share = g_k.astype(np.float64) / xp.maximum(count, 1).astype(np.float64)
    grad = xp.where(hit, share, 0.0)
    return as_array(xp, grad.astype(np.float32))


def var_grad(g: Any, x: Any, axis: tuple[int, ...] = (), keepdims: bool = False, correction: int = 0) -> Any:
    """(d * (2 / max(n - correction, 0))) * g in float64, d = x - mean(x); rounded once."""
    require_float32("var_grad", "x", x)
    xp = array_module(g, x)
    axes = normalize_axes("var_grad", x.ndim, axis)
    g_k = _grad_input("var_grad", g, x, axes, keepdims)
    n = _reduced_length(tuple(x.shape), axes)
    denom = _var_denominator("var_grad", n, correction)
    if n == 0:
        return xp.zeros(x.shape, dtype=np.float32)
    d = _centered(xp, x, axes, n)
    scale = 2.0 / denom if denom else math.inf  # 2/0 = +inf as IEEE says
    with np.errstate(invalid="ignore", over="ignore"):
        grad = (d * scale) * g_k.astype(np.float64)
    return as_array(xp, grad.astype(np.float32))


# --- backward rules ---------------------------------------------------------------


def _spread(emit, g, x_shape: tuple[int, ...], axes: tuple[int, ...], keepdims: bool):
    """g (shape of the reduction) broadcast back to the input shape."""
    if not keepdims:
        g = emit("reshape", g, shape=_kept_shape(x_shape, axes))
    return emit("broadcast_to", g, shape=x_shape)


def _sum_vjp(emit, g, inputs, out, attrs):
    shape = tuple(inputs[0].shape)
    axes = normalize_axes("sum", len(shape), attrs["axis"])
    return (_spread(emit, g, shape, axes, attrs["keepdims"]),)


def _mean_vjp(emit, g, inputs, out, attrs):
    shape = tuple(inputs[0].shape)
    axes = normalize_axes("mean", len(shape), attrs["axis"])
    n = _reduced_length(shape, axes)
    if n == 0:
        raise OpError("mean: no gradient for a mean over zero elements")
    scaled = emit("mul_scalar", g, value=1.0 / n)
    return (_spread(emit, scaled, shape, axes, attrs["keepdims"]),)


def _max_vjp(emit, g, inputs, out, attrs):
    return (emit("max_grad", g, inputs[0], out, axis=attrs["axis"], keepdims=attrs["keepdims"]),)


def _var_vjp(emit, g, inputs, out, attrs):
    return (
        emit("var_grad", g, inputs[0], axis=attrs["axis"], keepdims=attrs["keepdims"], correction=attrs["correction"]),
    )


def _register() -> None:
    axes = {"axis": Attr(tuple, ()), "keepdims": Attr(bool, False)}
    with_correction = {**axes, "correction": Attr(int, 0)}
    registry.register("sum", sum, arity=1, attrs=axes, vjp=_sum_vjp)
    registry.register("mean", mean, arity=1, attrs=axes, vjp=_mean_vjp)
    registry.register("max", max, arity=1, attrs=axes, vjp=_max_vjp)
    registry.register("var", var, arity=1, attrs=with_correction, vjp=_var_vjp)
    registry.register("max_grad", max_grad, arity=3, attrs=axes)
    registry.register("var_grad", var_grad, arity=2, attrs=with_correction)


_register()
