"""Neural-network operators: softmax, log-softmax, layer norm, cross entropy, embedding, dropout.

Every op here widens its float32 inputs to float64, follows the sequence of IEEE
float64 operations written next to it (sums by the fixed pairwise tree
`reduce.tree_sum_f64`, exp/log by the project's float64 `transcendental` code), and
rounds once to float32 at the end.

Row maxima (softmax, log_softmax, cross_entropy) are taken in float32 with the
library max, which is exact whatever order it scans in; -0 is then turned into +0
so that a row holding both zeros gives one answer. Where a row holds a NaN its
denominator is NaN and every output of the row is NaN; a row of all -inf (or one
holding +inf) gives NaN the same way, through (-inf) - (-inf) and inf - inf.
"""
from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

from . import cpu_kernels as _kernels
from . import gpu_kernels as _gpu
from . import registry
from ._backend import array_module
from ._nn_checks import (
    as_array,
    float32_attr,
    ieee_quiet,
    normalize_axis,
    require_float32,
    require_index,
    require_range,
)
from .errors import OpError
from .reduce import tree_sum_f64
from .registry import Attr
from .rng import uniform_f32
from .transcendental import exp_f64, log_f64


def _ieee(fn):
    """inf - inf, 0/0 and exp overflow are IEEE results here, not mistakes: NumPy need not warn."""

    @functools.wraps(fn)
    def quiet(*args, **kwargs):
        with np.errstate(all="ignore"):
            return fn(*args, **kwargs)

    return quiet


def _tree_sum_keepdims(xp: Any, x64: Any, axis: int) -> Any:
    return tree_sum_f64(x64, axis, keepdims=True)


def _shifted_f64(xp: Any, x: Any, axis: int) -> Any:
    """x - max(x along axis), in float64 (the max as +0 where it is a zero)."""
    if x.shape[axis] == 0:
        raise OpError(f"softmax family: axis {axis} of shape {tuple(x.shape)} is empty")
    top = xp.max(x, axis=axis, keepdims=True)  # exact: a max is the same in any scan order
    top = top + np.float32(0.0)  # -0 + 0 = +0; NaN and +-inf unchanged
    shifted = x.astype(np.float64)
    return xp.subtract(shifted, top.astype(np.float64), out=shifted)


def _check_same_shape(op: str, a: Any, b: Any, names: str) -> None:
    if a.shape != b.shape:
        first, second = names.split(",")
        raise OpError(f"{op}: {first} shape {tuple(a.shape)} differs from {second} shape {tuple(b.shape)}")


# --- softmax family ---------------------------------------------------------------


@_ieee
def softmax(x: Any, axis: int = -1) -> Any:
    """e / tree_sum(e) with e = exp(x - max), float64 inside, one rounding."""
    require_float32("softmax", "x", x)
    xp = array_module(x)
    axis = normalize_axis("softmax", axis, x.ndim)
    if _kernels.enabled(xp) and x.shape[axis]:  # the same sequence, one row at a time
        return _kernels.softmax(x, axis)
    if _gpu.enabled(xp) and axis == x.ndim - 1 and x.shape[axis]:  # the same, fused on the GPU
        return _gpu.softmax(xp, x)
    e = exp_f64(_shifted_f64(xp, x, axis))
    # in place where a temporary would only be copied: the same IEEE operations
    probs = xp.divide(e, _tree_sum_keepdims(xp, e, axis), out=e)
    return as_array(xp, probs.astype(np.float32))


@_ieee
def softmax_grad(g: Any, out: Any, axis: int = -1) -> Any:
    """out * (g - tree_sum(g * out)), float64 inside (g * out is exact there), one rounding."""
    require_float32("softmax_grad", "g", g)
    require_float32("softmax_grad", "out", out)
    _check_same_shape("softmax_grad", g, out, "g,out")
    xp = array_module(g, out)
    axis = normalize_axis("softmax_grad", axis, g.ndim)
    if _kernels.enabled(xp) and g.size:
        return _kernels.softmax_grad(g, out, axis)
    g64 = g.astype(np.float64)
    out64 = out.astype(np.float64)
    dot = _tree_sum_keepdims(xp, g64 * out64, axis)
    grad = xp.multiply(out64, xp.subtract(g64, dot, out=g64), out=out64)
    return as_array(xp, grad.astype(np.float32))


@_ieee
def log_softmax(x: Any, axis: int = -1) -> Any:
    """(x - max) - log(tree_sum(exp(x - max))), float64 inside, one rounding."""
    require_float32("log_softmax", "x", x)
    xp = array_module(x)
    axis = normalize_axis("log_softmax", axis, x.ndim)
    if _kernels.enabled(xp) and x.shape[axis]:
        return _kernels.log_softmax(x, axis)
    z = _shifted_f64(xp, x, axis)
    log_total = log_f64(_tree_sum_keepdims(xp, exp_f64(z), axis))
    return as_array(xp, xp.subtract(z, log_total, out=z).astype(np.float32))


@_ieee
def log_softmax_grad(g: Any, out: Any, axis: int = -1) -> Any:
    """g - exp(out) * tree_sum(g), float64 inside, one rounding."""
    require_float32("log_softmax_grad", "g", g)
    require_float32("log_softmax_grad", "out", out)
    _check_same_shape("log_softmax_grad", g, out, "g,out")
    xp = array_module(g, out)
    axis = normalize_axis("log_softmax_grad", axis, g.ndim)
    if _kernels.enabled(xp) and g.size:
        return _kernels.log_softmax_grad(g, out, axis)
    g64 = g.astype(np.float64)
    total = _tree_sum_keepdims(xp, g64, axis)
    scaled = xp.multiply(exp_f64(out.astype(np.float64)), total)
    return as_array(xp, xp.subtract(g64, scaled, out=scaled).astype(np.float32))


# --- layer norm ---------------------------------------------------------------------


def _check_layer_norm(op: str, x: Any, eps: float, *params: tuple[str, Any]) -> int:
    require_float32(op, "x", x)
    if x.ndim < 1 or x.shape[-1] == 0:
        raise OpError(f"{op}: x must have a non-empty last axis, got shape {tuple(x.shape)}")
    if not (eps >= 0.0 and np.isfinite(eps)):
        raise OpError(f"{op}: eps must be finite and >= 0, got {eps!r}")
    width = x.shape[-1]
    for name, p in params:
        require_float32(op, name, p)
        if tuple(p.shape) != (width,):
            raise OpError(f"{op}: {name} must have shape ({width},), got {tuple(p.shape)}")
    return width


def _normalized_f64(x: Any, eps: float) -> tuple[Any, Any]:
    """(xhat, rstd) in float64: mean and variance by the fixed tree over the last axis."""
    xp = array_module(x)
    width = x.shape[-1]
    x64 = x.astype(np.float64)
    centered = xp.subtract(x64, _tree_sum_keepdims(xp, x64, -1) / width, out=x64)
    var = _tree_sum_keepdims(xp, centered * centered, -1) / width
    rstd = 1.0 / xp.sqrt(var + eps)
    return xp.multiply(centered, rstd, out=centered), rstd


@_ieee
def layer_norm(x: Any, gamma: Any, beta: Any, eps: float = 1e-5) -> Any:
    """((x - mean) * rstd) * gamma + beta over the last axis, rstd = 1 / sqrt(var + eps); float64 inside."""
    _check_layer_norm("layer_norm", x, eps, ("gamma", gamma), ("beta", beta))
    xp = array_module(x, gamma, beta)
    if _kernels.enabled(xp):
        return _kernels.layer_norm(x, gamma, beta, eps)
    if _gpu.enabled(xp):
        return _gpu.layer_norm(xp, x, gamma, beta, eps)
    xhat, _ = _normalized_f64(x, eps)
    y = xp.multiply(xhat, gamma.astype(np.float64), out=xhat)
    y = xp.add(y, beta.astype(np.float64), out=y)
    return as_array(xp, y.astype(np.float32))


@_ieee
def layer_norm_grad_x(g: Any, x: Any, gamma: Any, eps: float = 1e-5) -> Any:
    """rstd * ((gg - tree_sum(gg)/D) - xhat * (tree_sum(gg * xhat)/D)) with gg = g * gamma; float64 inside."""
    width = _check_layer_norm("layer_norm_grad_x", x, eps, ("gamma", gamma))
    require_float32("layer_norm_grad_x", "g", g)
    _check_same_shape("layer_norm_grad_x", g, x, "g,x")
    xp = array_module(g, x, gamma)
    if _kernels.enabled(xp):
        return _kernels.layer_norm_grad_x(g, x, gamma, eps)
    xhat, rstd = _normalized_f64(x, eps)
    gg = g.astype(np.float64)
    gg = xp.multiply(gg, gamma.astype(np.float64), out=gg)
    mean_gg = _tree_sum_keepdims(xp, gg, -1) / width
    mean_gg_xhat = _tree_sum_keepdims(xp, gg * xhat, -1) / width
    # rstd * ((gg - mean_gg) - xhat * mean_gg_xhat), in place (x*y == y*x in IEEE)
    grad = xp.subtract(gg, mean_gg, out=gg)
    grad = xp.subtract(grad, xp.multiply(xhat, mean_gg_xhat, out=xhat), out=grad)
    grad = xp.multiply(grad, rstd, out=grad)
    return as_array(xp, grad.astype(np.float32))


@_ieee
def layer_norm_grad_gamma(g: Any, x: Any, eps: float = 1e-5) -> Any:
    """tree_sum over all rows (row-major) of g * xhat, float64 inside; shape (D,)."""
    width = _check_layer_norm("layer_norm_grad_gamma", x, eps)
    require_float32("layer_norm_grad_gamma", "g", g)
    _check_same_shape("layer_norm_grad_gamma", g, x, "g,x")
    xp = array_module(g, x)
    if _kernels.enabled(xp):
        products = _kernels.layer_norm_xhat_g(g, x, eps)
    else:
        xhat, _ = _normalized_f64(x, eps)
        products = xp.multiply(xhat, g.astype(np.float64), out=xhat).reshape(-1, width)
    return as_array(xp, tree_sum_f64(products, 0).astype(np.float32))


# --- cross entropy ----------------------------------------------------------------


def _check_cross_entropy(op: str, logits: Any, targets: Any) -> tuple[Any, int, int]:
    require_float32(op, "logits", logits)
    require_index(op, "targets", targets)
    if logits.ndim != 2 or targets.ndim != 1 or targets.shape[0] != logits.shape[0]:
        raise OpError(
            f"{op}: logits must be (N, C) and targets (N,), got {tuple(logits.shape)} and {tuple(targets.shape)}"
        )
    rows, classes = logits.shape
    if rows == 0 or classes == 0:
        raise OpError(f"{op}: logits of shape {tuple(logits.shape)} have no rows or no classes")
    xp = array_module(logits, targets)
    require_range(op, "targets", targets, xp, classes)
    return xp, rows, classes


@_ieee
def cross_entropy(logits: Any, targets: Any) -> Any:
    """-(tree_sum over rows of log_softmax(logits)[n, targets[n]]) / N in float64, one rounding; shape ()."""
    xp, rows, _ = _check_cross_entropy("cross_entropy", logits, targets)
    if _kernels.enabled(xp):
        picked = _kernels.cross_entropy_picked(logits, targets)
    else:
        z = _shifted_f64(xp, logits, 1)
        log_total = log_f64(tree_sum_f64(exp_f64(z), 1))
        picked = z[xp.arange(rows), targets] - log_total
    return as_array(xp, (-tree_sum_f64(picked, 0) / rows).astype(np.float32))


@_ieee
def cross_entropy_grad(g: Any, logits: Any, targets: Any) -> Any:
    """(softmax(logits) - onehot(targets)) * (g / N), float64 inside, one rounding."""
    xp, rows, _ = _check_cross_entropy("cross_entropy_grad", logits, targets)
    require_float32("cross_entropy_grad", "g", g)
    if g.shape != ():
        raise OpError(f"cross_entropy_grad: g must have shape (), got {tuple(g.shape)}")
    if _kernels.enabled(xp):
        return _kernels.cross_entropy_grad(logits, targets, float(g.astype(np.float64) / rows))
    e = exp_f64(_shifted_f64(xp, logits, 1))
    probs = e / _tree_sum_keepdims(xp, e, 1)
    row_index = xp.arange(rows)
    probs[row_index, targets] -= 1.0
    return as_array(xp, (probs * (g.astype(np.float64) / rows)).astype(np.float32))


# --- embedding ----------------------------------------------------------------------


def embedding(table: Any, ids: Any) -> Any:
    """table[ids]: rows gathered (exact); shape ids.shape + (D,)."""
    require_float32("embedding", "table", table)
    require_index("embedding", "ids", ids)
    if table.ndim != 2:
        raise OpError(f"embedding: table must be (V, D), got shape {tuple(table.shape)}")
    xp = array_module(table, ids)
    require_range("embedding", "ids", ids, xp, table.shape[0])
    return as_array(xp, xp.take(table, ids, axis=0))


def _embedding_grad_rows(xp: Any, g: Any, ids: Any, num_embeddings: int) -> Any:
    """The (V, D) float32 rows of embedding_grad: one float64 tree per id, rounded once.

    Positions are ordered by the integer key id * P + position, which is unique, so
    any sort gives the same order: by id, then by position. Ids that occur the same
    number of times L are summed together as one (count, L, D) block with the tree
    along its middle axis; ids that never occur get +0.
    """
    width = g.shape[-1]
    positions = ids.size
    flat_ids = ids.reshape(-1).astype(np.int64)
    rows = g.reshape(positions, width)
    order = xp.argsort(flat_ids * positions + xp.arange(positions, dtype=np.int64))
    counts = xp.bincount(flat_ids, minlength=num_embeddings)  # integer counts, no weights
    starts = xp.cumsum(counts) - counts  # exact: integer prefix sum
    total = xp.zeros((num_embeddings, width), dtype=np.float32)
    for length in sorted(int(n) for n in xp.unique(counts).tolist() if n > 0):
        members = xp.nonzero(counts == length)[0]
        slots = starts[members][:, None] + xp.arange(length)[None, :]
        block = rows[order[slots]].astype(np.float64)
        total[members] = tree_sum_f64(block, 1).astype(np.float32)
    return total


@_ieee
def embedding_grad(g: Any, ids: Any, num_embeddings: int) -> Any:
    """Row v = tree_sum over the positions p with ids[p] == v, ascending p, of g[p]; float64 inside."""
    require_float32("embedding_grad", "g", g)
    require_index("embedding_grad", "ids", ids)
    if num_embeddings < 0:
        raise OpError(f"embedding_grad: num_embeddings must be >= 0, got {num_embeddings}")
    if g.ndim != ids.ndim + 1 or tuple(g.shape[:-1]) != tuple(ids.shape):
        raise OpError(f"embedding_grad: g must have shape ids.shape + (D,), got {tuple(g.shape)} for ids {tuple(ids.shape)}")
    xp = array_module(g, ids)
    require_range("embedding_grad", "ids", ids, xp, num_embeddings)
    return as_array(xp, _embedding_grad_rows(xp, g, ids, num_embeddings))


# --- dropout --------------------------------------------------------------------------


def dropout_scale(p: float) -> np.float32:
    """The factor applied to kept values: float32(1 / (1 - p)), the quotient in float64; 0 for p = 1."""
    return float32_attr(1.0 / (1.0 - p)) if p < 1.0 else np.float32(0.0)


def dropout(x: Any, p: float, seed: int, stream: int, counter: int) -> Any:
    """Element j (C order) kept where u_j >= p, u = rng.uniform_f32(seed, stream, x.shape, counter).

    Kept: x * float32(1/(1-p)), one float32 multiply; dropped: +0 (whatever x holds).
    """
    require_float32("dropout", "x", x)
    if not 0.0 <= p <= 1.0:
        raise OpError(f"dropout: p must lie in [0, 1], got {p!r}")
    xp = array_module(x)
    u = uniform_f32(seed, stream, x.shape, counter, xp)
    # u is a multiple of 2^-24, so u >= p exactly when u >= ceil(p * 2^24) * 2^-24,
    # a float32 value (p * 2^24 scales by a power of two: exact)
    threshold = np.float32(math.ceil(p * 2.0**24) * 2.0**-24)
    with ieee_quiet(xp):
        scaled = x * dropout_scale(p)
    return as_array(xp, xp.where(u >= threshold, scaled, np.float32(0.0)))


# --- backward rules ---------------------------------------------------------------


def _softmax_vjp(emit, g, inputs, out, attrs):
    return (emit("softmax_grad", g, out, axis=attrs["axis"]),)


def _log_softmax_vjp(emit, g, inputs, out, attrs):
    return (emit("log_softmax_grad", g, out, axis=attrs["axis"]),)


def _layer_norm_vjp(emit, g, inputs, out, attrs):
    x, gamma, beta = inputs
    eps = attrs["eps"]
    return (
        emit("layer_norm_grad_x", g, x, gamma, eps=eps),
        emit("layer_norm_grad_gamma", g, x, eps=eps),
        emit("sum_to", g, shape=tuple(beta.shape)),
    )


def _cross_entropy_vjp(emit, g, inputs, out, attrs):
    logits, targets = inputs
    return (emit("cross_entropy_grad", g, logits, targets), None)


def _embedding_vjp(emit, g, inputs, out, attrs):
    table, ids = inputs
    return (emit("embedding_grad", g, ids, num_embeddings=int(table.shape[0])), None)


def _dropout_vjp(emit, g, inputs, out, attrs):
    return (emit("dropout", g, **attrs),)


def _register() -> None:
    axis = {"axis": Attr(int, -1)}
    eps = {"eps": Attr(float, 1e-5)}
    registry.register("softmax", softmax, arity=1, attrs=axis, vjp=_softmax_vjp)
    registry.register("softmax_grad", softmax_grad, arity=2, attrs=axis)
    registry.register("log_softmax", log_softmax, arity=1, attrs=axis, vjp=_log_softmax_vjp)
    registry.register("log_softmax_grad", log_softmax_grad, arity=2, attrs=axis)
    registry.register("layer_norm", layer_norm, arity=3, attrs=eps, vjp=_layer_norm_vjp)
    registry.register("layer_norm_grad_x", layer_norm_grad_x, arity=3, attrs=eps)
    registry.register("layer_norm_grad_gamma", layer_norm_grad_gamma, arity=2, attrs=eps)
    registry.register("cross_entropy", cross_entropy, arity=2, vjp=_cross_entropy_vjp)
    registry.register("cross_entropy_grad", cross_entropy_grad, arity=3)
    registry.register("embedding", embedding, arity=2, vjp=_embedding_vjp)
    registry.register("embedding_grad", embedding_grad, arity=2, attrs={"num_embeddings": Attr(int)})
    registry.register(
        "dropout",
        dropout,
        arity=1,
        attrs={"p": Attr(float), "seed": Attr(int), "stream": Attr(int), "counter": Attr(int)},
        vjp=_dropout_vjp,
    )


_register()
