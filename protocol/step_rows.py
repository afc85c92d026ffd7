"""Element programs of the reductions and row operators over any axes (issue 18): log_softmax and
log_softmax_grad (repops_cupy/nn.py), var, var_grad, max and max_grad (repops_cupy/reduce.py).

An element's reduction is read through one view whose strides are zero along the reduced axes
(the reduction's first element) and one offset per reduced element, in the spec's tree order: C
order over the sorted reduced axes. The gradients' output has the input's shape; their g and out
(the reduction's shape) are read through a view with zero strides along the reduced axes.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from repops_cupy.errors import OpError
from repops_cupy.reduce import normalize_axes

from .errors import LocalProtocolError
from .step_math import exp_f64, is_nan, log_f64, out32, tree_sum
from .step_trace import Tracer, Val, View, contiguous_strides

__all__ = ["ROW_FAMILIES", "Reduction", "reduction", "row_top"]

Shapes = Sequence[tuple[int, ...]]
Layout = tuple[tuple[int, ...], tuple[View, ...]]
_MAX_REDUCED = 1 << 16  # offsets are listed one by one; a longer reduction is no element program


@dataclass(frozen=True)
class Reduction:
    """The reduced axes of an input of `shape` and where one reduction's elements sit."""

    shape: tuple[int, ...]
    axes: tuple[int, ...]

    @property
    def base_strides(self) -> tuple[int, ...]:
        """The input's strides with 0 along the reduced axes: the reduction's first element."""
        own = contiguous_strides(self.shape)
        return tuple(0 if a in self.axes else own[a] for a in range(len(self.shape)))

    @property
    def offsets(self) -> list[int]:
        """The reduced elements from the first one, in C order over the reduced axes (the tree's order)."""
        own = contiguous_strides(self.shape)
        offsets = [0]
        for a in self.axes:
            offsets = [o + c * own[a] for o in offsets for c in range(self.shape[a])]
        return offsets

    def out_shape(self, keepdims: bool) -> tuple[int, ...]:
        return tuple(1 if a in self.axes else n for a, n in enumerate(self.shape) if keepdims or a not in self.axes)

    @property
    def spread_strides(self) -> tuple[int, ...]:
        """Strides over the input's shape into a tensor of the reduction's shape (keepdims or not: the
        same C-order layout), 0 along the reduced axes."""
        kept = contiguous_strides(self.out_shape(True))
        return tuple(0 if a in self.axes else kept[a] for a in range(len(self.shape)))


def reduction(op: str, shape: Sequence[int], axis: int | Sequence[int]) -> Reduction:
    """The reduction of `op` over `axis` (() = all axes) of an input of `shape`, as the spec normalizes it."""
    try:
        axes = normalize_axes(op, len(shape), axis)
    except OpError as e:
        raise LocalProtocolError(str(e)) from None
    found = Reduction(tuple(int(n) for n in shape), axes)
    if not 0 < len(found.offsets) <= _MAX_REDUCED:
        raise LocalProtocolError(f"{op}: a reduction of {len(found.offsets)} elements has no element program")
    return found


def row_top(t: Tracer, row: Sequence[Val]) -> Val:
    """max(row) + 0 in float64 (nn._shifted_f64's shift: exact, -0 becomes +0, NaN propagates)."""
    top = row[0]
    for v in row[1:]:
        top = t.f64_max(top, v)
    return t.f64_add(top, t.c64(0.0))


def _f64(t: Tracer, view: int, offset: int = 0) -> Val:
    return t.f32_to_f64(t.input(view, offset))


def _row(t: Tracer, view: int, red: Reduction) -> list[Val]:
    return [_f64(t, view, o) for o in red.offsets]


# --- layouts -------------------------------------------------------------------------------------


def _softmax_axis(attrs: Mapping[str, Any]) -> tuple[int]:
    return (attrs.get("axis", -1),)


def _reduce_axes(attrs: Mapping[str, Any]) -> tuple[int, ...]:
    return attrs.get("axis", ())


def _reduced_views(op: str):
    """var, max: the output is the reduction's shape; one view at the reduction's first element."""
    def views(attrs: Mapping[str, Any], shapes: Shapes) -> Layout:
        red = reduction(op, shapes[0], _reduce_axes(attrs))
        keep = attrs.get("keepdims", False)
        strides = tuple(s for a, s in enumerate(red.base_strides) if keep or a not in red.axes)
        return red.out_shape(keep), (View(0, strides),)
    return views


def _spread_views(op: str, axes_of, rows: Sequence[int], spread: Sequence[int], owns: Sequence[int],
                  reduce_input: int):
    """The output has the shape of input `reduce_input`; views: per input in `rows` its reduction and
    its own element, then per input in `spread` one view broadcast over the reduced axes, then per
    input in `owns` its own element."""
    def views(attrs: Mapping[str, Any], shapes: Shapes) -> Layout:
        red = reduction(op, shapes[reduce_input], axes_of(attrs))
        own = contiguous_strides(red.shape)
        found: list[View] = []
        for k in rows:
            found += [View(k, red.base_strides), View(k, own)]
        found += [View(k, red.spread_strides) for k in spread]
        found += [View(k, own) for k in owns]
        return red.shape, tuple(found)
    return views


# --- programs ------------------------------------------------------------------------------------


def _log_softmax(t: Tracer, attrs, shapes) -> Val:
    """(x - top) - log(tree_sum(exp(row - top))), top = max(row) + 0 (views: row, own)."""
    red = reduction("log_softmax", shapes[0], _softmax_axis(attrs))
    row = _row(t, 0, red)
    top = row_top(t, row)
    log_total = log_f64(t, tree_sum(t, [exp_f64(t, t.f64_sub(v, top)) for v in row]))
    return out32(t, t.f64_sub(t.f64_sub(_f64(t, 1), top), log_total))


def _log_softmax_grad(t: Tracer, attrs, shapes) -> Val:
    """g - exp(out) * tree_sum(g row) (views: g row, g own, out own)."""
    red = reduction("log_softmax_grad", shapes[0], _softmax_axis(attrs))
    total = tree_sum(t, _row(t, 0, red))
    return out32(t, t.f64_sub(_f64(t, 1), t.f64_mul(exp_f64(t, _f64(t, 2)), total)))


def _mean_of(t: Tracer, row: Sequence[Val]) -> Val:
    return t.f64_div(tree_sum(t, row), t.c64(float(len(row))))


def _denominator(op: str, n: int, attrs: Mapping[str, Any]) -> float:
    correction = attrs.get("correction", 0)
    if correction < 0:
        raise LocalProtocolError(f"{op}: correction must be >= 0, got {correction}")
    return float(max(n - correction, 0))


def _var(t: Tracer, attrs, shapes) -> Val:
    """tree_sum(d * d) / max(n - correction, 0), d = row - tree_sum(row) / n."""
    red = reduction("var", shapes[0], _reduce_axes(attrs))
    row = _row(t, 0, red)
    mean = _mean_of(t, row)
    squares = [t.f64_mul(d, d) for d in (t.f64_sub(v, mean) for v in row)]
    return out32(t, t.f64_div(tree_sum(t, squares), t.c64(_denominator("var", len(row), attrs))))


def _var_grad(t: Tracer, attrs, shapes) -> Val:
    """(d * (2 / max(n - correction, 0))) * g, d = x - mean (views: x row, x own, g spread)."""
    red = reduction("var_grad", shapes[1], _reduce_axes(attrs))
    denom = _denominator("var_grad", len(red.offsets), attrs)
    scale = 2.0 / denom if denom else float("inf")  # the spec's Python constant: 2/0 = +inf
    d = t.f64_sub(_f64(t, 1), _mean_of(t, _row(t, 0, red)))
    return out32(t, t.f64_mul(t.f64_mul(d, t.c64(scale)), _f64(t, 2)))


def _max(t: Tracer, attrs, shapes) -> Val:
    """The largest element, NaN if any; a zero maximum is +0 if the reduction holds a +0, else -0."""
    red = reduction("max", shapes[0], _reduce_axes(attrs))
    row = _row(t, 0, red)
    top = row[0]
    for v in row[1:]:
        top = t.f64_max(top, v)
    pos_zero = t.const(0)
    for v in row:  # +0 is the one float64 whose bits are all zero
        pos_zero = t.bit_or(pos_zero, t.select(v, t.const(0), t.const(1)))
    zero = t.select(pos_zero, t.c64(0.0), t.c64(-0.0))
    return out32(t, t.select(t.f64_eq(top, t.c64(0.0)), zero, top))


def _max_grad(t: Tracer, attrs, shapes) -> Val:
    """g / max(count, 1) where x == out or both are NaN, +0 elsewhere; count = the hits in the
    reduction, an exact int64 sum (views: x row, x own, g spread, out spread)."""
    red = reduction("max_grad", shapes[1], _reduce_axes(attrs))
    out = _f64(t, 3)
    out_nan = is_nan(t, out)

    def hit(v: Val) -> Val:
        return t.bit_or(t.f64_eq(v, out), t.bit_and(is_nan(t, v), out_nan))

    count = t.const(0)
    for v in _row(t, 0, red):
        count = t.i64_add(count, hit(v))
    count = t.select(t.i64_lt(count, t.const(1)), t.const(1), count)
    share = t.f64_div(_f64(t, 2), t.i64_to_f64(count))
    return out32(t, t.select(hit(_f64(t, 1)), share, t.c64(0.0)))


ROW_FAMILIES = {
    "log_softmax": (_spread_views("log_softmax", _softmax_axis, (0,), (), (), 0), _log_softmax),
    "log_softmax_grad": (_spread_views("log_softmax_grad", _softmax_axis, (0,), (), (1,), 0), _log_softmax_grad),
    "var": (_reduced_views("var"), _var),
    "var_grad": (_spread_views("var_grad", _reduce_axes, (1,), (0,), (), 1), _var_grad),
    "max": (_reduced_views("max"), _max),
    "max_grad": (_spread_views("max_grad", _reduce_axes, (1,), (0, 2), (), 1), _max_grad),
}
