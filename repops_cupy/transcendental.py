"""Transcendental functions: the project's own fixed-order float64 code, rounded once.

Specification
-------------
Every public float32 operator converts its input to float64 (exact), evaluates one of
the float64 functions below, and rounds the result once to float32 (round to nearest
even). The float64 functions use only IEEE-754 +, -, *, /, sqrt, comparisons, ldexp,
frexp and trunc, each a separate correctly rounded operation (no fused multiply-add),
in exactly the order written in their code; every polynomial is evaluated by Horner's
rule as written. Their output bits are therefore a pure function of the input bits.

The algorithms and coefficients are those of fdlibm (e_exp.c, s_expm1.c, e_log.c as
restructured in musl, s_tanh.c, s_erf.c for erf and erfc), each with error below 1 float64 ulp, so
the float32 results are correctly rounded on all but a vanishing share of inputs
(see scripts/accuracy_repops.py). Differences from fdlibm, all part of this spec:

- exp_f64 and expm1_f64 use one argument reduction for every x:
  k = trunc(x * INVLN2 + (x < 0 ? -0.5 : 0.5)), hi = x - k*LN2_HI, lo = k*LN2_LO
  (fdlibm special-cases |x| < 1.5 ln2, which gives the same k except at the edges).
  Scaling by 2^k is one ldexp (one rounding, also for subnormal results).
- log_f64 reduces x = m * 2^k with m in [SQRT_HALF, 2*SQRT_HALF) via frexp (the
  boundary is the double nearest sqrt(1/2)).

Special values, as IEEE/C99 say: exp(NaN)=NaN, exp(+inf)=+inf, exp(-inf)=+0,
overflow to +inf above O_THRESHOLD, +0 below U_THRESHOLD; log(x<0)=NaN, log(+-0)=-inf,
log(+inf)=+inf; tanh(+-inf)=+-1, tanh(+-0)=+-0; erf(+-inf)=+-1, erf(+-0)=+-0;
erfc(+inf)=+0, erfc(-inf)=2;
expm1(-inf)=-1; every function maps NaN to NaN.

Public float32 operators (registered, with backward rules):
  exp, log, tanh, erf, sigmoid, sqrt, rsqrt   -- and the gradient operators
  tanh_grad(g, out), sigmoid_grad(g, out), erf_grad(g, x), sqrt_grad(g, out),
  rsqrt_grad(g, out); exp's backward emits "mul"(g, out), log's "div"(g, x).
  sigmoid(x) = 1 / (1 + exp_f64(-x)) in float64 (no cancellation for any x: for
  x << 0 the denominator is large and finite or +inf, giving +0).
  sqrt is float32 IEEE sqrt (correctly rounded). rsqrt(x) = 1 / sqrt(x) in float64,
  rounded once; rsqrt(+0)=+inf, rsqrt(-0)=-inf, rsqrt(x<0)=NaN, rsqrt(+inf)=+0.
  Gradient operators compute in float64 from float32 inputs, in the order given in
  their docstrings, and round once.

fdlibm notice (its coefficients and algorithms are used here):
  Copyright (C) 1993 by Sun Microsystems, Inc. All rights reserved.
  Developed at SunSoft, a Sun Microsystems, Inc. business.
  Permission to use, copy, modify, and distribute this software is freely granted,
  provided that this notice is preserved.
"""
from __future__ import annotations

import contextlib
import functools
from typing import Any

import numpy as np

from . import cpu_kernels as _kernels
from . import registry
from ._backend import array_module
from ._nn_checks import as_array, require_float32
# fdlibm's coefficients and thresholds live in the leaf module `constants`, which the compiled kernels read too
from .constants import (
    LN2_HI, LN2_LO, INVLN2, O_THRESHOLD, U_THRESHOLD, EXP_P1, EXP_P2, EXP_P3, EXP_P4, EXP_P5, EXPM1_Q1,
    EXPM1_Q2, EXPM1_Q3, EXPM1_Q4, EXPM1_Q5, EXPM1_SATURATE, HALF_LN2, TWO_M54, LOG_LG1, LOG_LG2, LOG_LG3,
    LOG_LG4, LOG_LG5, LOG_LG6, LOG_LG7, SQRT_HALF, TANH_SATURATE, TWO_M55, ERF_ERX, ERF_EFX, ERF_EFX8,
    ERF_PP, ERF_QQ, ERF_PA, ERF_QA, ERF_RA, ERF_SA, ERF_RB, ERF_SB, ERF_TINY, ERF_SUBNORMAL, ERF_SMALL,
    ERF_MID, ERF_BIG, ERF_SPLIT, ERFC_SPLIT, ERFC_QUARTER, ERFC_TINY, ERFC_BIG, TWO_OVER_SQRTPI,
)
from .errors import OpError


# --- helpers ------------------------------------------------------------------------


def _quiet(xp: Any):
    """Lanes that a `where` discards may overflow; NumPy should not warn about them."""
    return np.errstate(all="ignore") if xp is np else contextlib.nullcontext()


def _require_f64(op: str, x: Any) -> Any:
    xp = array_module(x)
    if getattr(x, "dtype", None) != np.float64:
        raise OpError(f"{op}: expected a float64 array, got {getattr(x, 'dtype', type(x).__name__)}")
    return xp


# NumPy evaluates a formula one operation at a time over the whole array; in pieces of
# this many elements the temporaries stay in cache (several times faster; same bits).
_CHUNK = 16384


def _in_chunks(fn):
    """Apply a float64 elementwise function to cache-sized pieces on the NumPy path.

    With the compiled CPU kernels enabled (see `cpu_kernels`), a NumPy array goes to
    the kernel of the same name instead: the same values, one element at a time.
    """
    kernel = fn.__name__.removesuffix("_f64")

    @functools.wraps(fn)
    def chunked(x: Any) -> Any:
        xp = _require_f64(fn.__name__, x)
        if _kernels.enabled(xp):
            return _kernels.map_unary(kernel, x, np.float64)
        if xp is not np or x.size <= _CHUNK:
            return fn(x)
        flat = x.reshape(-1)
        out = np.empty(flat.shape, dtype=np.float64)
        for start in range(0, flat.size, _CHUNK):
            out[start : start + _CHUNK] = fn(flat[start : start + _CHUNK])
        return out.reshape(x.shape)

    return chunked


def _poly(z: Any, coeffs: tuple[float, ...]) -> Any:
    """c0 + z*(c1 + z*(... + z*cn)) evaluated innermost first."""
    acc = z * coeffs[-1]
    for c in coeffs[-2:0:-1]:
        acc = z * (c + acc)
    return coeffs[0] + acc


def _one_plus_poly(z: Any, coeffs: tuple[float, ...]) -> Any:
    """1 + z*(c1 + z*(c2 + ... + z*cn)) evaluated innermost first; coeffs = (c1, ..., cn)."""
    acc = z * coeffs[-1]
    for c in coeffs[-2::-1]:
        acc = z * (c + acc)
    return 1.0 + acc


# --- float64 primitives -----------------------------------------------------------


@_in_chunks
def exp_f64(x: Any) -> Any:
    """e^x of a float64 array, float64 out (fdlibm method; see the module docstring).

    r = hi - lo; t = r*r; c = r - t*(P1 + t*(P2 + t*(P3 + t*(P4 + t*P5))));
    y = 1 - ((lo - (r*c)/(2 - c)) - hi); result = ldexp(y, k).
    """
    xp = _require_f64("exp_f64", x)
    with _quiet(xp):
        nan = xp.isnan(x)
        over = x > O_THRESHOLD
        under = x < U_THRESHOLD
        xs = xp.where(nan | over | under, 0.0, x)
        k = xp.trunc(xs * INVLN2 + xp.where(xs < 0, -0.5, 0.5))
        hi = xs - k * LN2_HI
        lo = k * LN2_LO
        r = hi - lo
        t = r * r
        c = r - t * (EXP_P1 + t * (EXP_P2 + t * (EXP_P3 + t * (EXP_P4 + t * EXP_P5))))
        y = 1.0 - ((lo - (r * c) / (2.0 - c)) - hi)
        y = xp.ldexp(y, k.astype(np.int32))
        y = xp.where(under, 0.0, y)
        y = xp.where(over, np.inf, y)
        return xp.where(nan, x, y)


@_in_chunks
def expm1_f64(x: Any) -> Any:
    """e^x - 1 of a float64 array, float64 out (fdlibm s_expm1.c, uniform reduction)."""
    xp = _require_f64("expm1_f64", x)
    with _quiet(xp):
        nan = xp.isnan(x)
        over = x > O_THRESHOLD
        saturate = x < EXPM1_SATURATE
        tiny = xp.abs(x) < TWO_M54
        xs = xp.where(nan | over | saturate | tiny, 0.0, x)
        reduce = xp.abs(xs) > HALF_LN2
        k = xp.where(reduce, xp.trunc(xs * INVLN2 + xp.where(xs < 0, -0.5, 0.5)), 0.0)
        hi = xs - k * LN2_HI
        lo = k * LN2_LO
        r = xp.where(reduce, hi - lo, xs)
        c = xp.where(reduce, (hi - r) - lo, 0.0)
        hfx = 0.5 * r
        hxs = r * hfx
        r1 = 1.0 + hxs * (EXPM1_Q1 + hxs * (EXPM1_Q2 + hxs * (EXPM1_Q3 + hxs * (EXPM1_Q4 + hxs * EXPM1_Q5))))
        t = 3.0 - r1 * hfx
        e = hxs * ((r1 - t) / (6.0 - r * t))
        y_k0 = r - (r * e - hxs)
        e = (r * (e - c) - c) - hxs
        ki = k.astype(np.int32)
        y_km1 = 0.5 * (r - e) - 0.5
        y_kp1 = xp.where(r < -0.25, -2.0 * (e - (r + 0.5)), 1.0 + 2.0 * (r - e))
        y_far = xp.ldexp(1.0 - (e - r), ki) - 1.0  # k <= -2 or k > 56
        two_mk = xp.ldexp(xp.ones_like(r), -ki)  # 2^-k, exact for the k it is used with
        y_near = xp.ldexp((1.0 - two_mk) - (e - r), ki)  # 2 <= k < 20: 1 - 2^-k exact
        y_mid = xp.ldexp((r - (e + two_mk)) + 1.0, ki)  # 20 <= k <= 56
        y = xp.where(ki <= -2, y_far, xp.where(ki > 56, y_far, xp.where(ki >= 20, y_mid, y_near)))
        y = xp.where(ki == 1, y_kp1, y)
        y = xp.where(ki == -1, y_km1, y)
        y = xp.where(ki == 0, y_k0, y)
        y = xp.where(tiny, x, y)
        y = xp.where(saturate, -1.0, y)
        y = xp.where(over, np.inf, y)
        return xp.where(nan, x, y)


@_in_chunks
def log_f64(x: Any) -> Any:
    """Natural log of a float64 array, float64 out (fdlibm/musl method).

    x = (1+f) * 2^k; s = f/(2+f); z = s*s; w = z*z;
    t1 = w*(Lg2 + w*(Lg4 + w*Lg6)); t2 = z*(Lg1 + w*(Lg3 + w*(Lg5 + w*Lg7)));
    R = t2 + t1; hfsq = (0.5*f)*f;
    log = ((((s*(hfsq + R)) + k*LN2_LO) - hfsq) + f) + k*LN2_HI.
    """
    xp = _require_f64("log_f64", x)
    with _quiet(xp):
        invalid = xp.isnan(x) | (x < 0)
        zero = x == 0
        pos_inf = x == np.inf
        xs = xp.where(invalid | zero | pos_inf, 1.0, x)
        m, e = xp.frexp(xs)  # xs = m * 2^e, m in [0.5, 1), exact also for subnormals
        low = m < SQRT_HALF
        m = xp.where(low, m * 2.0, m)
        dk = (e - low.astype(e.dtype)).astype(np.float64)
        f = m - 1.0  # exact (Sterbenz)
        hfsq = 0.5 * f * f
        s = f / (2.0 + f)
        z = s * s
        w = z * z
        t1 = w * (LOG_LG2 + w * (LOG_LG4 + w * LOG_LG6))
        t2 = z * (LOG_LG1 + w * (LOG_LG3 + w * (LOG_LG5 + w * LOG_LG7)))
        big_r = t2 + t1
        y = s * (hfsq + big_r) + dk * LN2_LO - hfsq + f + dk * LN2_HI
        y = xp.where(zero, -np.inf, y)
        y = xp.where(pos_inf, np.inf, y)
        return xp.where(invalid, np.nan, y)


@_in_chunks
def tanh_f64(x: Any) -> Any:
    """tanh of a float64 array, float64 out (fdlibm s_tanh.c).

    |x| >= 22: +-1; |x| < 2^-55: x*(1+x); 1 <= |x|: t = expm1(2|x|), z = 1 - 2/(t+2);
    else t = expm1(-2|x|), z = -t/(t+2); result z with the sign of x.
    """
    xp = _require_f64("tanh_f64", x)
    with _quiet(xp):
        nan = xp.isnan(x)
        ax = xp.abs(x)
        ge1 = ax >= 1.0
        arg = xp.where(ge1, 2.0 * ax, -2.0 * ax)
        arg = xp.where(nan | (ax >= TANH_SATURATE), 0.0, arg)
        t = expm1_f64(arg)
        z = xp.where(ge1, 1.0 - 2.0 / (t + 2.0), -t / (t + 2.0))
        z = xp.where(ax >= TANH_SATURATE, 1.0, z)
        y = xp.where(x < 0, -z, z)
        y = xp.where(ax < TWO_M55, x * (1.0 + x), y)
        return xp.where(nan, x, y)


@_in_chunks
def erf_f64(x: Any) -> Any:
    """erf of a float64 array, float64 out (fdlibm s_erf.c, four intervals of |x|).

    |x| < 0.84375: x + x*(P(z)/Q(z)), z = x*x (x + EFX*x below 2^-28);
    0.84375 <= |x| < 1.25: s = |x|-1, +-(ERX + PA(s)/QA(s));
    1.25 <= |x| < 6: s = 1/(x*x), R/S from RA/SA (|x| < ERF_SPLIT) or RB/SB,
      zh = |x| with the low 32 bits cleared,
      r = exp(-zh*zh - 0.5625) * exp((zh-|x|)*(zh+|x|) + R/S), +-(1 - r/|x|);
    |x| >= 6: +-1.
    """
    xp = _require_f64("erf_f64", x)
    with _quiet(xp):
        nan = xp.isnan(x)
        ax = xp.abs(x)
        neg = x < 0
        # |x| < 0.84375
        z = x * x
        y_small = x + x * (_poly(z, ERF_PP) / _one_plus_poly(z, ERF_QQ))
        y_tiny = xp.where(ax < ERF_SUBNORMAL, (8.0 * x + ERF_EFX8 * x) / 8.0, x + ERF_EFX * x)
        y_small = xp.where(ax < ERF_TINY, y_tiny, y_small)
        # 0.84375 <= |x| < 1.25
        s = ax - 1.0
        mid = ERF_ERX + _poly(s, ERF_PA) / _one_plus_poly(s, ERF_QA)
        # 1.25 <= |x| < 6 (other lanes computed on a harmless stand-in value)
        at = xp.where((ax >= ERF_MID) & (ax < ERF_BIG), ax, 2.0)
        tail = 1.0 - _erf_tail_exp(xp, at, ERF_SPLIT) / at
        magnitude = xp.where(ax < ERF_BIG, tail, 1.0)
        magnitude = xp.where(ax < ERF_MID, mid, magnitude)
        y = xp.where(neg, -magnitude, magnitude)
        y = xp.where(ax < ERF_SMALL, y_small, y)
        return xp.where(nan, x, y)


def _erf_tail_exp(xp: Any, at: Any, split: float) -> Any:
    """exp(-zh*zh - 0.5625) * exp((zh-a)*(zh+a) + R/S) for a = at in [1.25, 28): erfc(a) * a."""
    s = 1.0 / (at * at)
    first = at < split
    big_r = xp.where(first, _poly(s, ERF_RA), _poly(s, ERF_RB))
    big_s = xp.where(first, _one_plus_poly(s, ERF_SA), _one_plus_poly(s, ERF_SB))
    zh = (at.view(np.uint64) & np.uint64(0xFFFFFFFF00000000)).view(np.float64)
    return exp_f64(-zh * zh - 0.5625) * exp_f64((zh - at) * (zh + at) + big_r / big_s)


@_in_chunks
def erfc_f64(x: Any) -> Any:
    """1 - erf(x) of a float64 array without cancellation, float64 out (fdlibm s_erf.c).

    |x| < 2^-56: 1 - x; |x| < 0.84375: y = P(z)/Q(z), z = x*x, then 1 - (x + x*y) for
    x < 1/4, else 0.5 - (x*y + (x - 0.5)); 0.84375 <= |x| < 1.25: s = |x| - 1,
    (1 - ERX) - PA/QA for x > 0, 1 + (ERX + PA/QA) for x < 0; 1.25 <= |x| < 28: r as in
    erf_f64 (RA/SA below ERFC_SPLIT, else RB/SB), r/|x| for x > 0, 2 - r/|x| for x < 0,
    and 2 for x < -6; |x| >= 28: +0 for x > 0, 2 for x < 0. erfc(+inf) = +0, erfc(-inf) = 2.
    """
    xp = _require_f64("erfc_f64", x)
    with _quiet(xp):
        nan = xp.isnan(x)
        ax = xp.abs(x)
        neg = x < 0
        z = x * x
        y = _poly(z, ERF_PP) / _one_plus_poly(z, ERF_QQ)
        small = xp.where(x < ERFC_QUARTER, 1.0 - (x + x * y), 0.5 - (x * y + (x - 0.5)))
        small = xp.where(ax < ERFC_TINY, 1.0 - x, small)
        s = ax - 1.0
        ratio = _poly(s, ERF_PA) / _one_plus_poly(s, ERF_QA)
        mid = xp.where(neg, 1.0 + (ERF_ERX + ratio), (1.0 - ERF_ERX) - ratio)
        at = xp.where((ax >= ERF_MID) & (ax < ERFC_BIG), ax, 2.0)
        q = _erf_tail_exp(xp, at, ERFC_SPLIT) / at
        tail = xp.where(neg, 2.0 - q, q)
        tail = xp.where(neg & (ax >= ERF_BIG), 2.0, tail)
        far = xp.where(neg, 2.0, 0.0)
        y = xp.where(ax < ERFC_BIG, tail, far)
        y = xp.where(ax < ERF_MID, mid, y)
        y = xp.where(ax < ERF_SMALL, small, y)
        return xp.where(nan, x, y)


@_in_chunks
def sigmoid_f64(x: Any) -> Any:
    """1 / (1 + exp_f64(-x)) of a float64 array, float64 out."""
    xp = _require_f64("sigmoid_f64", x)
    with _quiet(xp):
        return 1.0 / (1.0 + exp_f64(-x))


# --- float32 operators ------------------------------------------------------------


def _unary_f32(op: str, x: Any, f64: Any) -> Any:
    require_float32(op, "x", x)
    xp = array_module(x)
    if _kernels.enabled(xp):  # widening, the float64 function and the rounding, per element
        return _kernels.map_unary(op, x, np.float32)
    with _quiet(xp):  # results beyond the float32 range round to +-inf, as IEEE says
        if xp is not np or x.size <= _CHUNK:
            return as_array(xp, f64(x.astype(np.float64)).astype(np.float32))
        flat = x.reshape(-1)
        out = np.empty(flat.shape, dtype=np.float32)
        for start in range(0, flat.size, _CHUNK):
            out[start : start + _CHUNK] = f64(flat[start : start + _CHUNK].astype(np.float64))
        return out.reshape(x.shape)


def exp(x: Any) -> Any:
    """float32(exp_f64(x))."""
    return _unary_f32("exp", x, exp_f64)


def log(x: Any) -> Any:
    """float32(log_f64(x))."""
    return _unary_f32("log", x, log_f64)


def tanh(x: Any) -> Any:
    """float32(tanh_f64(x))."""
    return _unary_f32("tanh", x, tanh_f64)


def erf(x: Any) -> Any:
    """float32(erf_f64(x))."""
    return _unary_f32("erf", x, erf_f64)


def sigmoid(x: Any) -> Any:
    """float32(1 / (1 + exp_f64(-x))), all in float64."""
    return _unary_f32("sigmoid", x, sigmoid_f64)


def sqrt(x: Any) -> Any:
    """IEEE float32 sqrt (correctly rounded); sqrt(-0) = -0, sqrt(x<0) = NaN."""
    require_float32("sqrt", "x", x)
    xp = array_module(x)
    with _quiet(xp):
        return as_array(xp, xp.sqrt(x))


def rsqrt(x: Any) -> Any:
    """float32(1 / sqrt(x)) with sqrt and / in float64."""
    require_float32("rsqrt", "x", x)
    xp = array_module(x)
    with _quiet(xp):
        return as_array(xp, (1.0 / xp.sqrt(x.astype(np.float64))).astype(np.float32))


# --- gradient operators -----------------------------------------------------------


def _grad_pair(op: str, g: Any, second: Any, name: str) -> tuple[Any, Any, Any]:
    require_float32(op, "g", g)
    require_float32(op, name, second)
    if tuple(g.shape) != tuple(second.shape):
        raise OpError(f"{op}: g shape {tuple(g.shape)} differs from {name} shape {tuple(second.shape)}")
    xp = array_module(g, second)
    return xp, g.astype(np.float64), second.astype(np.float64)


def tanh_grad(g: Any, out: Any) -> Any:
    """float32(g * (1 - out*out)), in float64."""
    xp, g64, o = _grad_pair("tanh_grad", g, out, "out")
    with _quiet(xp):
        return as_array(xp, (g64 * (1.0 - o * o)).astype(np.float32))


def sigmoid_grad(g: Any, out: Any) -> Any:
    """float32(g * (out * (1 - out))), in float64."""
    xp, g64, o = _grad_pair("sigmoid_grad", g, out, "out")
    with _quiet(xp):
        return as_array(xp, (g64 * (o * (1.0 - o))).astype(np.float32))


def erf_grad(g: Any, x: Any) -> Any:
    """float32(g * (TWO_OVER_SQRTPI * exp_f64(-(x*x)))), in float64."""
    xp, g64, x64 = _grad_pair("erf_grad", g, x, "x")
    with _quiet(xp):
        return as_array(xp, (g64 * (TWO_OVER_SQRTPI * exp_f64(-(x64 * x64)))).astype(np.float32))


def sqrt_grad(g: Any, out: Any) -> Any:
    """float32(g / (out + out)), in float64 (out = sqrt(x))."""
    xp, g64, o = _grad_pair("sqrt_grad", g, out, "out")
    with _quiet(xp):
        return as_array(xp, (g64 / (o + o)).astype(np.float32))


def rsqrt_grad(g: Any, out: Any) -> Any:
    """float32(g * (-0.5 * ((out*out)*out))), in float64 (out = rsqrt(x))."""
    xp, g64, o = _grad_pair("rsqrt_grad", g, out, "out")
    with _quiet(xp):
        return as_array(xp, (g64 * (-0.5 * ((o * o) * o))).astype(np.float32))


# --- backward rules ---------------------------------------------------------------


def _register() -> None:
    registry.register("exp", exp, arity=1, vjp=lambda emit, g, inputs, out, attrs: (emit("mul", g, out),))
    registry.register("log", log, arity=1, vjp=lambda emit, g, inputs, out, attrs: (emit("div", g, inputs[0]),))
    registry.register("tanh", tanh, arity=1, vjp=lambda emit, g, inputs, out, attrs: (emit("tanh_grad", g, out),))
    registry.register("erf", erf, arity=1, vjp=lambda emit, g, inputs, out, attrs: (emit("erf_grad", g, inputs[0]),))
    registry.register(
        "sigmoid", sigmoid, arity=1, vjp=lambda emit, g, inputs, out, attrs: (emit("sigmoid_grad", g, out),)
    )
    registry.register("sqrt", sqrt, arity=1, vjp=lambda emit, g, inputs, out, attrs: (emit("sqrt_grad", g, out),))
    registry.register("rsqrt", rsqrt, arity=1, vjp=lambda emit, g, inputs, out, attrs: (emit("rsqrt_grad", g, out),))
    registry.register("tanh_grad", tanh_grad, arity=2)
    registry.register("sigmoid_grad", sigmoid_grad, arity=2)
    registry.register("erf_grad", erf_grad, arity=2)
    registry.register("sqrt_grad", sqrt_grad, arity=2)
    registry.register("rsqrt_grad", rsqrt_grad, arity=2)


_register()
