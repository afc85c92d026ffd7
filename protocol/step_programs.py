"""Element programs of the registry operators the on-chain step covers (issue 18).

Each generator is the operator's NumPy specification (repops_cupy: elementwise.py,
transcendental.py, nn.py, reduce.py) written again one element at a time through a
`Tracer`: the same IEEE operations in the same order, a `where` as a `select`, so the
last value equals the operator's output bits (tests/protocol/test_step_programs.py runs
the registry operators on random inputs and compares). No generator branches on a value,
so one program serves every element of an output.

Covered: add, sub, mul, div (with broadcasting), neg, add_scalar, mul_scalar, relu, exp,
log, tanh, sigmoid, softmax and layer_norm over the last axis, matmul (`step_matmul`), the
optimizer's adam_moment1, adam_moment2, adamw_update, beta_power_step, sum_to, and the data
movement of reshape, transpose and broadcast_to.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import numpy as np

from repops_cupy import constants as C
from repops_cupy.hashing import canonical_array

from .errors import LocalProtocolError
from .step_matmul import matmul_program, matmul_views
from .step_trace import ElementSpec, ElementTrace, Tracer, Val, View, broadcast_view, contiguous_strides

__all__ = ["COVERED", "element_spec", "trace_element"]

Shapes = Sequence[tuple[int, ...]]
Layout = tuple[tuple[int, ...], tuple[View, ...]]  # the output shape and the input views
Program = Callable[[Tracer, Mapping[str, Any], Shapes], Val]


# --- float64 functions (transcendental.py, lane by lane) -------------------------------------


def _is_nan(t: Tracer, x: Val) -> Val:
    return t.select(t.f64_eq(x, x), t.const(0), t.const(1))


def _horner(t: Tracer, z: Val, coeffs: Sequence[float]) -> Val:
    """z*(c0 + z*(c1 + ... + z*cn)) innermost first, as `c - t*(P1 + t*(...))` is written."""
    acc = t.f64_mul(z, t.c64(coeffs[-1]))
    for c in coeffs[-2::-1]:
        acc = t.f64_mul(z, t.f64_add(t.c64(c), acc))
    return acc


def exp_f64(t: Tracer, x: Val) -> Val:
    nan = _is_nan(t, x)
    over = t.f64_lt(t.c64(C.O_THRESHOLD), x)
    under = t.f64_lt(x, t.c64(C.U_THRESHOLD))
    xs = t.select(t.bit_or(t.bit_or(nan, over), under), t.c64(0.0), x)
    half = t.select(t.f64_lt(xs, t.c64(0.0)), t.c64(-0.5), t.c64(0.5))
    k = t.f64_trunc(t.f64_add(t.f64_mul(xs, t.c64(C.INVLN2)), half))
    hi = t.f64_sub(xs, t.f64_mul(k, t.c64(C.LN2_HI)))
    lo = t.f64_mul(k, t.c64(C.LN2_LO))
    r = t.f64_sub(hi, lo)
    tt = t.f64_mul(r, r)
    # c = r - t*(P1 + t*(P2 + t*(P3 + t*(P4 + t*P5))))
    inner = t.c64(C.EXP_P5)
    for p in (C.EXP_P4, C.EXP_P3, C.EXP_P2, C.EXP_P1):
        inner = t.f64_add(t.c64(p), t.f64_mul(tt, inner))
    c = t.f64_sub(r, t.f64_mul(tt, inner))
    q = t.f64_div(t.f64_mul(r, c), t.f64_sub(t.c64(2.0), c))
    y = t.f64_sub(t.c64(1.0), t.f64_sub(t.f64_sub(lo, q), hi))
    y = t.f64_ldexp(y, t.f64_to_i64(k))
    y = t.select(under, t.c64(0.0), y)
    y = t.select(over, t.c64(float("inf")), y)
    return t.select(nan, x, y)


def expm1_f64(t: Tracer, x: Val) -> Val:
    nan = _is_nan(t, x)
    over = t.f64_lt(t.c64(C.O_THRESHOLD), x)
    saturate = t.f64_lt(x, t.c64(C.EXPM1_SATURATE))
    tiny = t.f64_lt(t.f64_abs(x), t.c64(C.TWO_M54))
    xs = t.select(t.bit_or(t.bit_or(t.bit_or(nan, over), saturate), tiny), t.c64(0.0), x)
    reduce = t.f64_lt(t.c64(C.HALF_LN2), t.f64_abs(xs))
    half = t.select(t.f64_lt(xs, t.c64(0.0)), t.c64(-0.5), t.c64(0.5))
    k = t.select(reduce, t.f64_trunc(t.f64_add(t.f64_mul(xs, t.c64(C.INVLN2)), half)), t.c64(0.0))
    hi = t.f64_sub(xs, t.f64_mul(k, t.c64(C.LN2_HI)))
    lo = t.f64_mul(k, t.c64(C.LN2_LO))
    r = t.select(reduce, t.f64_sub(hi, lo), xs)
    c = t.select(reduce, t.f64_sub(t.f64_sub(hi, r), lo), t.c64(0.0))
    hfx = t.f64_mul(t.c64(0.5), r)
    hxs = t.f64_mul(r, hfx)
    inner = t.c64(C.EXPM1_Q5)
    for q in (C.EXPM1_Q4, C.EXPM1_Q3, C.EXPM1_Q2, C.EXPM1_Q1):
        inner = t.f64_add(t.c64(q), t.f64_mul(hxs, inner))
    r1 = t.f64_add(t.c64(1.0), t.f64_mul(hxs, inner))
    tt = t.f64_sub(t.c64(3.0), t.f64_mul(r1, hfx))
    e = t.f64_mul(hxs, t.f64_div(t.f64_sub(r1, tt), t.f64_sub(t.c64(6.0), t.f64_mul(r, tt))))
    y_k0 = t.f64_sub(r, t.f64_sub(t.f64_mul(r, e), hxs))
    e = t.f64_sub(t.f64_sub(t.f64_mul(r, t.f64_sub(e, c)), c), hxs)
    ki = t.f64_to_i64(k)
    y_km1 = t.f64_sub(t.f64_mul(t.c64(0.5), t.f64_sub(r, e)), t.c64(0.5))
    y_kp1 = t.select(t.f64_lt(r, t.c64(-0.25)),
                     t.f64_mul(t.c64(-2.0), t.f64_sub(e, t.f64_add(r, t.c64(0.5)))),
                     t.f64_add(t.c64(1.0), t.f64_mul(t.c64(2.0), t.f64_sub(r, e))))
    e_minus_r = t.f64_sub(e, r)
    y_far = t.f64_sub(t.f64_ldexp(t.f64_sub(t.c64(1.0), e_minus_r), ki), t.c64(1.0))
    two_mk = t.f64_ldexp(t.c64(1.0), t.i64_sub(t.const(0), ki))
    y_near = t.f64_ldexp(t.f64_sub(t.f64_sub(t.c64(1.0), two_mk), t.f64_sub(e, r)), ki)
    y_mid = t.f64_ldexp(t.f64_add(t.f64_sub(r, t.f64_add(e, two_mk)), t.c64(1.0)), ki)

    def i64(n: int) -> Val:
        return t.const(n & ((1 << 64) - 1))

    def is_k(n: int) -> Val:
        return t.bit_and(t.select(t.i64_lt(ki, i64(n)), t.const(0), t.const(1)),
                         t.select(t.i64_lt(i64(n), ki), t.const(0), t.const(1)))

    y = t.select(t.i64_lt(ki, i64(-1)), y_far,
                 t.select(t.i64_lt(i64(56), ki), y_far, t.select(t.i64_lt(ki, i64(20)), y_near, y_mid)))
    y = t.select(is_k(1), y_kp1, y)
    y = t.select(is_k(-1), y_km1, y)
    y = t.select(is_k(0), y_k0, y)
    y = t.select(tiny, x, y)
    y = t.select(saturate, t.c64(-1.0), y)
    y = t.select(over, t.c64(float("inf")), y)
    return t.select(nan, x, y)


def log_f64(t: Tracer, x: Val) -> Val:
    invalid = t.bit_or(_is_nan(t, x), t.f64_lt(x, t.c64(0.0)))
    zero = t.f64_eq(x, t.c64(0.0))
    pos_inf = t.f64_eq(x, t.c64(float("inf")))
    xs = t.select(t.bit_or(t.bit_or(invalid, zero), pos_inf), t.c64(1.0), x)
    m, e = t.f64_frexp_mantissa(xs), t.f64_frexp_exponent(xs)
    low = t.f64_lt(m, t.c64(C.SQRT_HALF))
    m = t.select(low, t.f64_mul(m, t.c64(2.0)), m)
    dk = t.i64_to_f64(t.i64_sub(e, low))
    f = t.f64_sub(m, t.c64(1.0))
    hfsq = t.f64_mul(t.f64_mul(t.c64(0.5), f), f)
    s = t.f64_div(f, t.f64_add(t.c64(2.0), f))
    z = t.f64_mul(s, s)
    w = t.f64_mul(z, z)
    t1 = t.f64_mul(w, t.f64_add(t.c64(C.LOG_LG2), t.f64_mul(w, t.f64_add(t.c64(C.LOG_LG4),
                                                                             t.f64_mul(w, t.c64(C.LOG_LG6))))))
    inner = t.f64_add(t.c64(C.LOG_LG5), t.f64_mul(w, t.c64(C.LOG_LG7)))
    inner = t.f64_add(t.c64(C.LOG_LG3), t.f64_mul(w, inner))
    t2 = t.f64_mul(z, t.f64_add(t.c64(C.LOG_LG1), t.f64_mul(w, inner)))
    big_r = t.f64_add(t2, t1)
    y = t.f64_add(t.f64_mul(s, t.f64_add(hfsq, big_r)), t.f64_mul(dk, t.c64(C.LN2_LO)))
    y = t.f64_add(t.f64_add(t.f64_sub(y, hfsq), f), t.f64_mul(dk, t.c64(C.LN2_HI)))
    y = t.select(zero, t.c64(float("-inf")), y)
    y = t.select(pos_inf, t.c64(float("inf")), y)
    return t.select(invalid, t.c64(float("nan")), y)


def tanh_f64(t: Tracer, x: Val) -> Val:
    nan = _is_nan(t, x)
    ax = t.f64_abs(x)
    ge1 = t.f64_le(t.c64(1.0), ax)
    saturate = t.f64_le(t.c64(C.TANH_SATURATE), ax)
    arg = t.select(ge1, t.f64_mul(t.c64(2.0), ax), t.f64_mul(t.c64(-2.0), ax))
    arg = t.select(t.bit_or(nan, saturate), t.c64(0.0), arg)
    tt = expm1_f64(t, arg)
    z = t.select(ge1, t.f64_sub(t.c64(1.0), t.f64_div(t.c64(2.0), t.f64_add(tt, t.c64(2.0)))),
                 t.f64_div(t.f64_neg(tt), t.f64_add(tt, t.c64(2.0))))
    z = t.select(saturate, t.c64(1.0), z)
    y = t.select(t.f64_lt(x, t.c64(0.0)), t.f64_neg(z), z)
    y = t.select(t.f64_lt(ax, t.c64(C.TWO_M55)), t.f64_mul(x, t.f64_add(t.c64(1.0), x)), y)
    return t.select(nan, x, y)


def sigmoid_f64(t: Tracer, x: Val) -> Val:
    return t.f64_div(t.c64(1.0), t.f64_add(t.c64(1.0), exp_f64(t, t.f64_neg(x))))


def tree_sum(t: Tracer, values: Sequence[Val]) -> Val:
    """reduce.py's tree: adjacent pairs level by level, an odd last element carried up."""
    level = list(values)
    if not level:
        return t.c64(0.0)
    while len(level) > 1:
        nxt = [t.f64_add(level[2 * k], level[2 * k + 1]) for k in range(len(level) // 2)]
        level = nxt + ([level[-1]] if len(level) % 2 else [])
    return level[0]


def _out32(t: Tracer, y64: Val) -> Val:
    return t.f32_canon(t.f64_to_f32(y64))


# --- programs per operator: (views, program) ---------------------------------------------------


def _f32_bits(value: float) -> int:
    return int(np.array([value], dtype=np.float32).view(np.uint32)[0])


def _binary(step: str) -> Program:
    return lambda t, attrs, shapes: t.f32_canon(t.step(step, t.input(0), t.input(1)))


def _scalar(step: str) -> Program:
    return lambda t, attrs, shapes: t.f32_canon(t.step(step, t.input(0), t.const(_f32_bits(attrs["value"]))))


def _unary64(fn: Callable[[Tracer, Val], Val]) -> Program:
    return lambda t, attrs, shapes: _out32(t, fn(t, t.f32_to_f64(t.input(0))))


def _neg(t: Tracer, attrs, shapes) -> Val:
    return _out32(t, t.f64_neg(t.f32_to_f64(t.input(0))))


def _relu(t: Tracer, attrs, shapes) -> Val:
    x = t.input(0)
    return t.f32_canon(t.select(t.f64_le(t.f32_to_f64(x), t.c64(0.0)), t.const(0), x))


def _softmax(t: Tracer, attrs, shapes) -> Val:
    """e_j / tree_sum(e), e = exp(x - (max(x) + 0)) over the row (view 0: the row, view 1: the element)."""
    n = shapes[0][-1]
    row = [t.f32_to_f64(t.input(0, k)) for k in range(n)]
    top = row[0]
    for v in row[1:]:
        top = t.f64_max(top, v)
    top = t.f64_add(top, t.c64(0.0))  # max + 0: -0 becomes +0 (exact in float32 and float64 alike)
    total = tree_sum(t, [exp_f64(t, t.f64_sub(v, top)) for v in row])
    mine = exp_f64(t, t.f64_sub(t.f32_to_f64(t.input(1)), top))
    return _out32(t, t.f64_div(mine, total))


def _layer_norm(t: Tracer, attrs, shapes) -> Val:
    """((x - mean) * rstd) * gamma + beta, rstd = 1 / sqrt(var + eps) (views: row, element, gamma, beta)."""
    n = shapes[0][-1]
    width = t.c64(float(n))
    row = [t.f32_to_f64(t.input(0, k)) for k in range(n)]
    mean = t.f64_div(tree_sum(t, row), width)
    var = t.f64_div(tree_sum(t, [t.f64_mul(c, c) for c in (t.f64_sub(v, mean) for v in row)]), width)
    rstd = t.f64_div(t.c64(1.0), t.f64_sqrt(t.f64_add(var, t.c64(float(attrs["eps"])))))
    xhat = t.f64_mul(t.f64_sub(t.f32_to_f64(t.input(1)), mean), rstd)
    y = t.f64_add(t.f64_mul(xhat, t.f32_to_f64(t.input(2))), t.f32_to_f64(t.input(3)))
    return _out32(t, y)


def _copy(t: Tracer, attrs, shapes) -> Val:
    """Data movement: the output element is one input element (any width: a select copies bits)."""
    return t.select(t.const(1), t.input(0), t.const(0))


def _adam_moment1(t: Tracer, attrs, shapes) -> Val:
    """m * beta + grad * f32(1 - beta), float32."""
    beta = attrs["beta"]
    return t.f32_canon(t.f32_add(t.f32_mul(t.input(0), t.const(_f32_bits(beta))),
                                 t.f32_mul(t.input(1), t.const(_f32_bits(1.0 - beta)))))


def _adam_moment2(t: Tracer, attrs, shapes) -> Val:
    """v * beta + (grad * grad) * f32(1 - beta), float32."""
    beta, g = attrs["beta"], t.input(1)
    return t.f32_canon(t.f32_add(t.f32_mul(t.input(0), t.const(_f32_bits(beta))),
                                 t.f32_mul(t.f32_mul(g, g), t.const(_f32_bits(1.0 - beta)))))


def _beta_power_step(t: Tracer, attrs, shapes) -> Val:
    return t.f32_canon(t.f32_mul(t.input(0), t.const(_f32_bits(attrs["beta"]))))


def _adamw_update(t: Tracer, attrs, shapes) -> Val:
    """decayed - (m / (sqrt(v) / sqrt(1 - b2^t) + eps)) * (lr / (1 - b1^t)), float32 (optim.adamw_update)."""
    one = t.const(_f32_bits(1.0))
    lr, eps, wd = attrs["lr"], attrs["eps"], attrs["weight_decay"]
    param, m, v, b1, b2 = (t.input(k) for k in range(5))
    bc1, bc2 = t.f32_sub(one, b1), t.f32_sub(one, b2)
    denom = t.f32_add(t.f32_div(t.f32_sqrt(v), t.f32_sqrt(bc2)), t.const(_f32_bits(eps)))
    step = t.f32_div(t.const(_f32_bits(lr)), bc1)
    decayed = t.f32_mul(param, t.const(_f32_bits(1.0 - lr * wd)))
    return t.f32_canon(t.f32_sub(decayed, t.f32_mul(t.f32_div(m, denom), step)))


def _sum_to(t: Tracer, attrs, shapes) -> Val:
    """float32 of the float64 tree over the summed axes, in C order (view 0 at the kept coordinates)."""
    x, out = tuple(shapes[0]), tuple(attrs["shape"])
    lead = len(x) - len(out)
    own = contiguous_strides(x)
    summed = [a for a in range(len(x)) if a < lead or (out[a - lead] == 1 and x[a] != 1)]
    offsets = [0]
    for a in summed:
        offsets = [o + c * own[a] for o in offsets for c in range(x[a])]
    return _out32(t, tree_sum(t, [t.f32_to_f64(t.input(0, o)) for o in offsets]))


def _sum_to_views(attrs: Mapping[str, Any], shapes: Shapes) -> Layout:
    x, out = tuple(shapes[0]), tuple(attrs["shape"])
    lead = len(x) - len(out)
    own = contiguous_strides(x)
    return out, (View(0, tuple(0 if (n == 1 and x[lead + d] != 1) else own[lead + d] for d, n in enumerate(out))),)


def _reshape_views(attrs: Mapping[str, Any], shapes: Shapes) -> Layout:
    size = int(np.prod(shapes[0]))
    shape = list(attrs["shape"])
    if -1 in shape:
        known = int(np.prod([n for n in shape if n != -1]))
        shape[shape.index(-1)] = size // known if known else 0
    out = tuple(shape)
    return out, (View(0, contiguous_strides(out)),)


def _transpose_views(attrs: Mapping[str, Any], shapes: Shapes) -> Layout:
    x, perm = tuple(shapes[0]), tuple(attrs["perm"])
    own = contiguous_strides(x)
    return tuple(x[p] for p in perm), (View(0, tuple(own[p] for p in perm)),)


def _broadcast_to_views(attrs: Mapping[str, Any], shapes: Shapes) -> Layout:
    out = tuple(attrs["shape"])
    return out, (broadcast_view(0, shapes[0], out),)


def _elementwise_views(attrs: Mapping[str, Any], shapes: Shapes) -> Layout:
    out = tuple(np.broadcast_shapes(*shapes))
    return out, tuple(broadcast_view(k, s, out) for k, s in enumerate(shapes))


def _row_views(attrs: Mapping[str, Any], shapes: Shapes) -> Layout:
    out = tuple(shapes[0])
    own = contiguous_strides(out)
    views = [View(0, own[:-1] + (0,)), View(0, own)]
    for k in range(1, len(shapes)):  # per-column parameters (gamma, beta): the element's column
        views.append(View(k, (0,) * (len(out) - 1) + (1,)))
    return out, tuple(views)


def _check_last_axis(op: str, attrs: Mapping[str, Any], ndim: int) -> None:
    axis = attrs.get("axis", -1)
    if axis not in (-1, ndim - 1):
        raise LocalProtocolError(f"{op}: the on-chain step covers the last axis only, got axis {axis}")


_FAMILIES: dict[str, tuple[Callable, Program]] = {
    "add": (_elementwise_views, _binary("f32_add")), "sub": (_elementwise_views, _binary("f32_sub")),
    "mul": (_elementwise_views, _binary("f32_mul")), "div": (_elementwise_views, _binary("f32_div")),
    "neg": (_elementwise_views, _neg), "relu": (_elementwise_views, _relu),
    "add_scalar": (_elementwise_views, _scalar("f32_add")), "mul_scalar": (_elementwise_views, _scalar("f32_mul")),
    "exp": (_elementwise_views, _unary64(exp_f64)), "log": (_elementwise_views, _unary64(log_f64)),
    "tanh": (_elementwise_views, _unary64(tanh_f64)), "sigmoid": (_elementwise_views, _unary64(sigmoid_f64)),
    "softmax": (_row_views, _softmax), "layer_norm": (_row_views, _layer_norm),
    "adam_moment1": (_elementwise_views, _adam_moment1), "adam_moment2": (_elementwise_views, _adam_moment2),
    "adamw_update": (_elementwise_views, _adamw_update), "beta_power_step": (_elementwise_views, _beta_power_step),
    "reshape": (_reshape_views, _copy), "transpose": (_transpose_views, _copy),
    "broadcast_to": (_broadcast_to_views, _copy), "sum_to": (_sum_to_views, _sum_to),
    "matmul": (matmul_views, matmul_program),
}
COVERED = frozenset(_FAMILIES)


def trace_element(op: str, attrs: Mapping[str, Any], inputs: Sequence[np.ndarray], element: int) -> ElementTrace:
    """The trace of output `element` of operator `op` on `inputs` (its program is `element_spec`'s)."""
    if op not in _FAMILIES:
        raise LocalProtocolError(f"no on-chain step program for operator {op!r}")
    arrays = [canonical_array(x) for x in inputs]
    shapes = [tuple(a.shape) for a in arrays]
    if op in ("softmax", "layer_norm"):
        _check_last_axis(op, attrs, len(shapes[0]))
    views_of, program = _FAMILIES[op]
    out_shape, views = views_of(attrs, shapes)
    t = Tracer(op, arrays, out_shape, views, element)
    program(t, attrs, shapes)
    return t.result()[1]


def element_spec(op: str, attrs: Mapping[str, Any], inputs: Sequence[np.ndarray]) -> ElementSpec:
    """The element program of `op` on inputs of these shapes (traced on element 0)."""
    return trace_element(op, attrs, inputs, 0).spec

