"""Element programs of erf, erf_grad and GELU's erf form (issue 18): transcendental.erf_f64 and
erfc_f64 (fdlibm s_erf.c) and elementwise._gelu_f64 / _gelu_slope_f64 written lane by lane
through a `Tracer`, every `where` a `select`, so each interval's formula is computed and the
selects pick the spec's one. The spec's Python constants (1 - ERX, -1/sqrt 2) are the same
IEEE double operations here; zh (|x| with its low 32 bits cleared) is one `bit_and`."""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from repops_cupy import constants as C

from .step_math import exp_f64, is_nan, out32
from .step_trace import Tracer, Val

__all__ = ["ERF_FAMILIES", "erf_f64", "erfc_f64", "gelu_erf", "gelu_grad_erf"]

_HIGH_WORD = 0xFFFFFFFF00000000


def _poly(t: Tracer, z: Val, coeffs: Sequence[float]) -> Val:
    """c0 + z*(c1 + z*(... + z*cn)), innermost first (transcendental._poly)."""
    acc = t.f64_mul(z, t.c64(coeffs[-1]))
    for c in coeffs[-2:0:-1]:
        acc = t.f64_mul(z, t.f64_add(t.c64(c), acc))
    return t.f64_add(t.c64(coeffs[0]), acc)


def _one_plus_poly(t: Tracer, z: Val, coeffs: Sequence[float]) -> Val:
    """1 + z*(c1 + z*(c2 + ... + z*cn)), innermost first (transcendental._one_plus_poly)."""
    acc = t.f64_mul(z, t.c64(coeffs[-1]))
    for c in coeffs[-2::-1]:
        acc = t.f64_mul(z, t.f64_add(t.c64(c), acc))
    return t.f64_add(t.c64(1.0), acc)


def _tail_exp(t: Tracer, at: Val, split: float) -> Val:
    """exp(-zh*zh - 0.5625) * exp((zh-a)*(zh+a) + R/S) for a = at (transcendental._erf_tail_exp)."""
    s = t.f64_div(t.c64(1.0), t.f64_mul(at, at))
    first = t.f64_lt(at, t.c64(split))
    big_r = t.select(first, _poly(t, s, C.ERF_RA), _poly(t, s, C.ERF_RB))
    big_s = t.select(first, _one_plus_poly(t, s, C.ERF_SA), _one_plus_poly(t, s, C.ERF_SB))
    zh = t.bit_and(at, t.const(_HIGH_WORD))
    left = exp_f64(t, t.f64_sub(t.f64_mul(t.f64_neg(zh), zh), t.c64(0.5625)))
    right = exp_f64(t, t.f64_add(t.f64_mul(t.f64_sub(zh, at), t.f64_add(zh, at)), t.f64_div(big_r, big_s)))
    return t.f64_mul(left, right)


def _tail_argument(t: Tracer, ax: Val, big: float) -> Val:
    """|x| where MID <= |x| < big, else 2 (a harmless stand-in for the lanes the selects drop)."""
    inside = t.bit_and(t.f64_le(t.c64(C.ERF_MID), ax), t.f64_lt(ax, t.c64(big)))
    return t.select(inside, ax, t.c64(2.0))


def erf_f64(t: Tracer, x: Val) -> Val:
    nan = is_nan(t, x)
    ax = t.f64_abs(x)
    neg = t.f64_lt(x, t.c64(0.0))
    z = t.f64_mul(x, x)
    y_small = t.f64_add(x, t.f64_mul(x, t.f64_div(_poly(t, z, C.ERF_PP), _one_plus_poly(t, z, C.ERF_QQ))))
    y_tiny = t.select(t.f64_lt(ax, t.c64(C.ERF_SUBNORMAL)),
                      t.f64_div(t.f64_add(t.f64_mul(t.c64(8.0), x), t.f64_mul(t.c64(C.ERF_EFX8), x)), t.c64(8.0)),
                      t.f64_add(x, t.f64_mul(t.c64(C.ERF_EFX), x)))
    y_small = t.select(t.f64_lt(ax, t.c64(C.ERF_TINY)), y_tiny, y_small)
    s = t.f64_sub(ax, t.c64(1.0))
    mid = t.f64_add(t.c64(C.ERF_ERX), t.f64_div(_poly(t, s, C.ERF_PA), _one_plus_poly(t, s, C.ERF_QA)))
    at = _tail_argument(t, ax, C.ERF_BIG)
    tail = t.f64_sub(t.c64(1.0), t.f64_div(_tail_exp(t, at, C.ERF_SPLIT), at))
    magnitude = t.select(t.f64_lt(ax, t.c64(C.ERF_BIG)), tail, t.c64(1.0))
    magnitude = t.select(t.f64_lt(ax, t.c64(C.ERF_MID)), mid, magnitude)
    y = t.select(neg, t.f64_neg(magnitude), magnitude)
    y = t.select(t.f64_lt(ax, t.c64(C.ERF_SMALL)), y_small, y)
    return t.select(nan, x, y)


def erfc_f64(t: Tracer, x: Val) -> Val:
    nan = is_nan(t, x)
    ax = t.f64_abs(x)
    neg = t.f64_lt(x, t.c64(0.0))
    z = t.f64_mul(x, x)
    y = t.f64_div(_poly(t, z, C.ERF_PP), _one_plus_poly(t, z, C.ERF_QQ))
    xy = t.f64_mul(x, y)
    small = t.select(t.f64_lt(x, t.c64(C.ERFC_QUARTER)),
                     t.f64_sub(t.c64(1.0), t.f64_add(x, xy)),
                     t.f64_sub(t.c64(0.5), t.f64_add(xy, t.f64_sub(x, t.c64(0.5)))))
    small = t.select(t.f64_lt(ax, t.c64(C.ERFC_TINY)), t.f64_sub(t.c64(1.0), x), small)
    s = t.f64_sub(ax, t.c64(1.0))
    ratio = t.f64_div(_poly(t, s, C.ERF_PA), _one_plus_poly(t, s, C.ERF_QA))
    mid = t.select(neg, t.f64_add(t.c64(1.0), t.f64_add(t.c64(C.ERF_ERX), ratio)),
                   t.f64_sub(t.c64(1.0 - C.ERF_ERX), ratio))
    at = _tail_argument(t, ax, C.ERFC_BIG)
    q = t.f64_div(_tail_exp(t, at, C.ERFC_SPLIT), at)
    tail = t.select(neg, t.f64_sub(t.c64(2.0), q), q)
    tail = t.select(t.bit_and(neg, t.f64_le(t.c64(C.ERF_BIG), ax)), t.c64(2.0), tail)
    far = t.select(neg, t.c64(2.0), t.c64(0.0))
    y = t.select(t.f64_lt(ax, t.c64(C.ERFC_BIG)), tail, far)
    y = t.select(t.f64_lt(ax, t.c64(C.ERF_MID)), mid, y)
    y = t.select(t.f64_lt(ax, t.c64(C.ERF_SMALL)), small, y)
    return t.select(nan, x, y)


def _cdf_times_two(t: Tracer, x: Val) -> Val:
    """erfc(x * -(1/sqrt 2)) = 1 + erf(x/sqrt 2), no cancellation for x << 0."""
    return erfc_f64(t, t.f64_mul(x, t.c64(-C.INV_SQRT2)))


def gelu_erf(t: Tracer, x: Val) -> Val:
    """0.5x * erfc(x * -(1/sqrt 2)); gelu(-inf) = -0 (the limit)."""
    y = t.f64_mul(t.f64_mul(x, t.c64(0.5)), _cdf_times_two(t, x))
    return t.select(t.f64_eq(x, t.c64(float("-inf"))), t.c64(-0.0), y)


def gelu_grad_erf(t: Tracer, x: Val) -> Val:
    """erfc(x * -(1/sqrt 2)) * 0.5 + x * (exp((x*x) * -0.5) * (1/sqrt(2 pi))); 1 at +inf, 0 at -inf."""
    cdf = t.f64_mul(_cdf_times_two(t, x), t.c64(0.5))
    pdf = t.f64_mul(exp_f64(t, t.f64_mul(t.f64_mul(x, x), t.c64(-0.5))), t.c64(C.INV_SQRT_2PI))
    slope = t.f64_add(cdf, t.f64_mul(x, pdf))
    return t.select(t.f64_eq(x, t.c64(float("inf"))), t.c64(1.0),
                    t.select(t.f64_eq(x, t.c64(float("-inf"))), t.c64(0.0), slope))


def _f64(t: Tracer, view: int) -> Val:
    return t.f32_to_f64(t.input(view))


def _erf(t: Tracer, attrs: Mapping[str, Any], shapes) -> Val:
    return out32(t, erf_f64(t, _f64(t, 0)))


def _erf_grad(t: Tracer, attrs: Mapping[str, Any], shapes) -> Val:
    """g * (2/sqrt(pi) * exp(-(x*x))) in float64 (views: g, x)."""
    x = _f64(t, 1)
    density = t.f64_mul(t.c64(C.TWO_OVER_SQRTPI), exp_f64(t, t.f64_neg(t.f64_mul(x, x))))
    return out32(t, t.f64_mul(_f64(t, 0), density))


def _gelu(t: Tracer, attrs: Mapping[str, Any], shapes) -> Val:
    return out32(t, gelu_erf(t, _f64(t, 0)))


def _gelu_grad(t: Tracer, attrs: Mapping[str, Any], shapes) -> Val:
    """g * gelu'(x) in float64 (views: g, x)."""
    return out32(t, t.f64_mul(_f64(t, 0), gelu_grad_erf(t, _f64(t, 1))))


# programs only, of element-wise operators (step_programs gives them their layout; gelu's by its attribute)
ERF_FAMILIES = {"erf": _erf, "erf_grad": _erf_grad, "gelu": _gelu, "gelu_grad": _gelu_grad}
