"""Element programs of the gradient, mask, gather, constant, square-root, SGD and reduction
operators (issue 18).

The specs are repops_cupy's (elementwise.py, nn.py, shape.py, optim.py), written one element
at a time through a `Tracer` like `step_programs`. Embedding and cross entropy read an index
from the data (a GATHER operand); the causal mask compares the element's coordinates (COORD).
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from repops_cupy.constants import GELU_TANH_3K, GELU_TANH_K, SQRT_2_OVER_PI

from .errors import LocalProtocolError
from .step_math import exp_f64, f32_bits, is_nan, log_f64, out32, tanh_f64, tree_sum
from .step_trace import Tracer, Val, View, contiguous_strides, elementwise_layout

__all__ = ["GRAD_FAMILIES"]

Shapes = Sequence[tuple[int, ...]]
Layout = tuple[tuple[int, ...], tuple[View, ...]]
_U64 = (1 << 64) - 1


def _f64(t: Tracer, view: int, offset: int = 0) -> Val:
    return t.f32_to_f64(t.input(view, offset))


def _tanh_form(op: str, attrs: Mapping[str, Any]) -> None:
    if attrs.get("approximate", "none") != "tanh":
        raise LocalProtocolError(f"{op}: the on-chain step covers the tanh form only (the erf form needs erfc)")


# --- element-wise ---------------------------------------------------------------------------


def _relu_grad(t: Tracer, attrs, shapes) -> Val:
    """g where x > 0, +0 where x <= 0, x where x is NaN."""
    g, x = t.input(0), t.input(1)
    x64 = t.f32_to_f64(x)
    masked = t.select(t.f64_lt(t.c64(0.0), x64), g, t.const(0))
    return t.f32_canon(t.select(is_nan(t, x64), x, masked))


def _gelu(t: Tracer, attrs, shapes) -> Val:
    """0.5x * (tanh(sqrt(2/pi) * (x + k * ((x*x)*x))) + 1); -inf gives -0."""
    _tanh_form("gelu", attrs)
    x = _f64(t, 0)
    half_x = t.f64_mul(x, t.c64(0.5))
    cube = t.f64_mul(t.f64_mul(x, x), x)
    inner = t.f64_add(x, t.f64_mul(cube, t.c64(GELU_TANH_K)))
    y = t.f64_mul(half_x, t.f64_add(tanh_f64(t, t.f64_mul(inner, t.c64(SQRT_2_OVER_PI))), t.c64(1.0)))
    y = t.select(t.f64_eq(x, t.c64(float("-inf"))), t.c64(-0.0), y)
    return out32(t, y)


def _gelu_grad(t: Tracer, attrs, shapes) -> Val:
    """g * gelu'(x) in float64; gelu'(+inf) = 1, gelu'(-inf) = 0."""
    _tanh_form("gelu_grad", attrs)
    g, x = _f64(t, 0), _f64(t, 1)
    square = t.f64_mul(x, x)
    inner = t.f64_add(x, t.f64_mul(t.f64_mul(square, x), t.c64(GELU_TANH_K)))
    th = tanh_f64(t, t.f64_mul(inner, t.c64(SQRT_2_OVER_PI)))
    left = t.f64_mul(t.f64_add(th, t.c64(1.0)), t.c64(0.5))
    sech2 = t.f64_sub(t.c64(1.0), t.f64_mul(th, th))
    inner_slope = t.f64_mul(t.f64_add(t.f64_mul(square, t.c64(GELU_TANH_3K)), t.c64(1.0)), t.c64(SQRT_2_OVER_PI))
    slope = t.f64_add(left, t.f64_mul(t.f64_mul(x, t.c64(0.5)), t.f64_mul(sech2, inner_slope)))
    slope = t.select(t.f64_eq(x, t.c64(float("inf"))), t.c64(1.0),
                     t.select(t.f64_eq(x, t.c64(float("-inf"))), t.c64(0.0), slope))
    return out32(t, t.f64_mul(g, slope))


def _causal_mask(t: Tracer, attrs, shapes) -> Val:
    """float32(fill) above the diagonal of the last two axes (column > row), else x."""
    above = t.i64_lt(t.coord(-2), t.coord(-1))
    return t.f32_canon(t.select(above, t.const(f32_bits(attrs.get("fill", float("-inf")))), t.input(0)))


def _step_increment(t: Tracer, attrs, shapes) -> Val:
    return t.i64_add(t.input(0), t.const(1))


def _full(t: Tracer, attrs, shapes) -> Val:
    dtype, value = attrs["dtype"], attrs["value"]
    bits = f32_bits(value) if dtype == "float32" else int(value) & (_U64 if dtype == "int64" else 0xFFFFFFFF)
    return t.select(t.const(1), t.const(bits), t.const(0))


def _full_views(attrs: Mapping[str, Any], shapes: Shapes) -> Layout:
    return tuple(attrs["shape"]), ()


def _grad64(expr):
    """float32(g * expr(out)) in float64: the gradient operators of transcendental.py (views: g, out)."""
    return lambda t, attrs, shapes: out32(t, t.f64_mul(_f64(t, 0), expr(t, _f64(t, 1))))


def _sqrt(t: Tracer, attrs, shapes) -> Val:
    return t.f32_canon(t.f32_sqrt(t.input(0)))


def _rsqrt(t: Tracer, attrs, shapes) -> Val:
    return out32(t, t.f64_div(t.c64(1.0), t.f64_sqrt(_f64(t, 0))))


def _sqrt_grad(t: Tracer, attrs, shapes) -> Val:
    """g / (out + out) in float64."""
    o = _f64(t, 1)
    return out32(t, t.f64_div(_f64(t, 0), t.f64_add(o, o)))


def _sgd_momentum(t: Tracer, attrs, shapes) -> Val:
    """buf * momentum + (grad [+ param * weight_decay]), float32 (views: buf, grad, param)."""
    d = t.input(1)
    if attrs["weight_decay"] != 0.0:
        d = t.f32_add(d, t.f32_mul(t.input(2), t.const(f32_bits(attrs["weight_decay"]))))
    return t.f32_canon(t.f32_add(t.f32_mul(t.input(0), t.const(f32_bits(attrs["momentum"]))), d))


def _sgd_update(t: Tracer, attrs, shapes) -> Val:
    return t.f32_canon(t.f32_sub(t.input(0), t.f32_mul(t.input(1), t.const(f32_bits(attrs["lr"])))))


def _reduce_layout(attrs: Mapping[str, Any], shapes: Shapes) -> tuple[tuple[int, ...], View, list[int]]:
    """sum/mean over `axis` (() = all): the output shape, the view at the kept coordinates and the
    offsets of the reduced elements in C order (axes normalized and sorted as the spec does)."""
    from .step_rows import reduction  # step_rows builds on this module's neighbours, not on it

    found = reduction("sum", shapes[0], attrs.get("axis", ()))
    keep = attrs.get("keepdims", False)
    strides = tuple(s for a, s in enumerate(found.base_strides) if keep or a not in found.axes)
    return found.out_shape(keep), View(0, strides), found.offsets


def _reduce_views(attrs: Mapping[str, Any], shapes: Shapes) -> Layout:
    out, view, _ = _reduce_layout(attrs, shapes)
    return out, (view,)


def _sum(t: Tracer, attrs, shapes) -> Val:
    _, _, offsets = _reduce_layout(attrs, shapes)
    return out32(t, tree_sum(t, [_f64(t, 0, o) for o in offsets]))


def _mean(t: Tracer, attrs, shapes) -> Val:
    _, _, offsets = _reduce_layout(attrs, shapes)
    return out32(t, t.f64_div(tree_sum(t, [_f64(t, 0, o) for o in offsets]), t.c64(float(len(offsets)))))


# --- rows ---------------------------------------------------------------------------------------


def _rows_views(attrs: Mapping[str, Any], shapes: Shapes) -> Layout:
    """Per input of the output's shape: its row (view 2k) and its element (view 2k + 1)."""
    out = tuple(shapes[0])
    own = contiguous_strides(out)
    views = []
    for k in range(len(shapes)):
        views += [View(k, own[:-1] + (0,)), View(k, own)]
    return out, tuple(views)


def _softmax_grad(t: Tracer, attrs, shapes) -> Val:
    """out * (g - tree_sum(g * out)) over the row, float64 (views: g row, g own, out row, out own)."""
    _last_axis("softmax_grad", attrs, len(shapes[0]))
    n = shapes[0][-1]
    dot = tree_sum(t, [t.f64_mul(_f64(t, 0, k), _f64(t, 2, k)) for k in range(n)])
    return out32(t, t.f64_mul(_f64(t, 3), t.f64_sub(_f64(t, 1), dot)))


def _normalized(t: Tracer, row: Sequence[Val], eps: float) -> tuple[Val, Val]:
    """(mean, rstd) of a row (nn._normalized_f64)."""
    width = t.c64(float(len(row)))
    mean = t.f64_div(tree_sum(t, row), width)
    centered = [t.f64_sub(v, mean) for v in row]
    var = t.f64_div(tree_sum(t, [t.f64_mul(c, c) for c in centered]), width)
    return mean, t.f64_div(t.c64(1.0), t.f64_sqrt(t.f64_add(var, t.c64(float(eps)))))


def _layer_norm_grad_x_views(attrs: Mapping[str, Any], shapes: Shapes) -> Layout:
    out, views = _rows_views(attrs, shapes[:2])
    d = len(out)
    return out, views + (View(2, (0,) * d), View(2, (0,) * (d - 1) + (1,)))


def _layer_norm_grad_x(t: Tracer, attrs, shapes) -> Val:
    """rstd * ((gg - tree_sum(gg)/D) - xhat * (tree_sum(gg * xhat)/D)), gg = g * gamma
    (views: g row, g own, x row, x own, gamma whole, gamma own)."""
    n = shapes[0][-1]
    width = t.c64(float(n))
    x_row = [_f64(t, 2, k) for k in range(n)]
    mean, rstd = _normalized(t, x_row, attrs.get("eps", 1e-5))
    xhat = [t.f64_mul(t.f64_sub(v, mean), rstd) for v in x_row]
    gg = [t.f64_mul(_f64(t, 0, k), _f64(t, 4, k)) for k in range(n)]
    mean_gg = t.f64_div(tree_sum(t, gg), width)
    mean_gg_xhat = t.f64_div(tree_sum(t, [t.f64_mul(a, b) for a, b in zip(gg, xhat)]), width)
    own_xhat = t.f64_mul(t.f64_sub(_f64(t, 3), mean), rstd)
    own_gg = t.f64_mul(_f64(t, 1), _f64(t, 5))
    grad = t.f64_sub(t.f64_sub(own_gg, mean_gg), t.f64_mul(own_xhat, mean_gg_xhat))
    return out32(t, t.f64_mul(grad, rstd))


def _layer_norm_grad_gamma_views(attrs: Mapping[str, Any], shapes: Shapes) -> Layout:
    width = shapes[0][-1]
    return (width,), (View(0, (1,)), View(1, (0,)), View(1, (1,)))


def _layer_norm_grad_gamma(t: Tracer, attrs, shapes) -> Val:
    """tree_sum over all rows (row-major) of g * xhat at this column (views: g column, x whole, x column)."""
    width = shapes[0][-1]
    rows = int(np.prod(shapes[0][:-1]))
    products = []
    for r in range(rows):
        mean, rstd = _normalized(t, [_f64(t, 1, r * width + k) for k in range(width)], attrs.get("eps", 1e-5))
        xhat = t.f64_mul(t.f64_sub(_f64(t, 2, r * width), mean), rstd)
        products.append(t.f64_mul(xhat, _f64(t, 0, r * width)))
    return out32(t, tree_sum(t, products))


def _last_axis(op: str, attrs: Mapping[str, Any], ndim: int) -> None:
    if attrs.get("axis", -1) not in (-1, ndim - 1):
        raise LocalProtocolError(f"{op}: the on-chain step covers the last axis only")


# --- gathers: embedding and cross entropy -----------------------------------------------------


def _embedding_views(attrs: Mapping[str, Any], shapes: Shapes) -> Layout:
    table, ids = (tuple(s) for s in shapes)
    out = ids + (table[1],)
    return out, (View(1, contiguous_strides(ids) + (0,)), View(0, (0,) * len(ids) + (1,)))


def _embedding(t: Tracer, attrs, shapes) -> Val:
    """table[ids[...], d]: the id read from the data, times the row length, indexes the table."""
    row = t.i64_mul(t.input(0), t.const(shapes[0][1]))
    return t.select(t.const(1), t.gather(1, row), t.const(0))


def _shifted_row(t: Tracer, view: int, start: int, n: int) -> tuple[list[Val], Val]:
    """The row's float64 values and its max + 0 (nn._shifted_f64)."""
    row = [_f64(t, view, start + k) for k in range(n)]
    top = row[0]
    for v in row[1:]:
        top = t.f64_max(top, v)
    return row, t.f64_add(top, t.c64(0.0))


def _cross_entropy_views(attrs: Mapping[str, Any], shapes: Shapes) -> Layout:
    return (), (View(0, ()), View(1, ()))


def _cross_entropy(t: Tracer, attrs, shapes) -> Val:
    """-(tree_sum over rows of (x[n, t_n] - max_n) - log(tree_sum(exp(x[n] - max_n)))) / N."""
    rows, classes = shapes[0]
    picked = []
    for n in range(rows):
        row, top = _shifted_row(t, 0, n * classes, classes)
        log_total = log_f64(t, tree_sum(t, [exp_f64(t, t.f64_sub(v, top)) for v in row]))
        at = t.i64_add(t.input(1, n), t.const(n * classes))
        picked.append(t.f64_sub(t.f64_sub(t.f32_to_f64(t.gather(0, at)), top), log_total))
    return out32(t, t.f64_div(t.f64_neg(tree_sum(t, picked)), t.c64(float(rows))))


def _cross_entropy_grad_views(attrs: Mapping[str, Any], shapes: Shapes) -> Layout:
    rows, classes = shapes[1]
    return (rows, classes), (View(1, (classes, 0)), View(1, (classes, 1)), View(2, (1, 0)), View(0, (0, 0)))


def _cross_entropy_grad(t: Tracer, attrs, shapes) -> Val:
    """(softmax(logits) - onehot(targets)) * (g / N) (views: logits row, logits own, target, g)."""
    rows, classes = shapes[1]
    row, top = _shifted_row(t, 0, 0, classes)
    total = tree_sum(t, [exp_f64(t, t.f64_sub(v, top)) for v in row])
    probs = t.f64_div(exp_f64(t, t.f64_sub(_f64(t, 1), top)), total)
    hit = t.select(t.i64_sub(t.input(2), t.coord(1)), t.const(0), t.const(1))
    probs = t.select(hit, t.f64_sub(probs, t.c64(1.0)), probs)
    return out32(t, t.f64_mul(probs, t.f64_div(_f64(t, 3), t.c64(float(rows)))))


def _elementwise(attrs: Mapping[str, Any], shapes: Shapes) -> Layout:
    return elementwise_layout(shapes)


GRAD_FAMILIES = {
    "relu_grad": (_elementwise, _relu_grad), "gelu": (_elementwise, _gelu), "gelu_grad": (_elementwise, _gelu_grad),
    "causal_mask": (_elementwise, _causal_mask), "step_increment": (_elementwise, _step_increment),
    "full": (_full_views, _full), "softmax_grad": (_rows_views, _softmax_grad),
    "layer_norm_grad_x": (_layer_norm_grad_x_views, _layer_norm_grad_x),
    "layer_norm_grad_gamma": (_layer_norm_grad_gamma_views, _layer_norm_grad_gamma),
    "embedding": (_embedding_views, _embedding), "cross_entropy": (_cross_entropy_views, _cross_entropy),
    "cross_entropy_grad": (_cross_entropy_grad_views, _cross_entropy_grad),
    "sqrt": (_elementwise, _sqrt), "rsqrt": (_elementwise, _rsqrt), "sqrt_grad": (_elementwise, _sqrt_grad),
    "rsqrt_grad": (_elementwise, _grad64(lambda t, o: t.f64_mul(t.c64(-0.5), t.f64_mul(t.f64_mul(o, o), o)))),
    "sigmoid_grad": (_elementwise, _grad64(lambda t, o: t.f64_mul(o, t.f64_sub(t.c64(1.0), o)))),
    "tanh_grad": (_elementwise, _grad64(lambda t, o: t.f64_sub(t.c64(1.0), t.f64_mul(o, o)))),
    "sgd_momentum": (_elementwise, _sgd_momentum), "sgd_update": (_elementwise, _sgd_update),
    "sum": (_reduce_views, _sum), "mean": (_reduce_views, _mean),
}
