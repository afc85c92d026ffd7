"""Float64 functions of the operator specs as element programs: transcendental.py and
reduce.py's tree, one lane at a time through a `Tracer` (a `where` is a `select` step).
Shared by the operator programs in `step_programs` and `step_grads`."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from repops_cupy import constants as C

from .step_trace import Tracer, Val

__all__ = ["exp_f64", "expm1_f64", "f32_bits", "is_nan", "log_f64", "out32", "sigmoid_f64", "tanh_f64", "tree_sum"]


# --- float64 functions (transcendental.py, lane by lane) -------------------------------------


def is_nan(t: Tracer, x: Val) -> Val:
    return t.select(t.f64_eq(x, x), t.const(0), t.const(1))


def exp_f64(t: Tracer, x: Val) -> Val:
    nan = is_nan(t, x)
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
    nan = is_nan(t, x)
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
    invalid = t.bit_or(is_nan(t, x), t.f64_lt(x, t.c64(0.0)))
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
    nan = is_nan(t, x)
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


def out32(t: Tracer, y64: Val) -> Val:
    return t.f32_canon(t.f64_to_f32(y64))


def f32_bits(value: float) -> int:
    """The float32 bits of a Python float rounded to float32 (an attribute as the specs round it)."""
    return int(np.array([value], dtype=np.float32).view(np.uint32)[0])
