"""Scalar reference programs of the reductions, transcendentals and Philox: the living spec.

Two kinds of reference live here, both slow and for tests and accuracy reports only
(`tests/repops`, `scripts/accuracy_repops.py`):

1. Literal scalar programs. Python floats are IEEE float64 and CPython performs every
   +, -, *, / as its own correctly rounded operation, so a scalar loop over the
   specified tree or polynomial, branch by branch as the spec reads, must give the
   same bits as the vectorised operators. (`math.ldexp`, `math.frexp`, `math.trunc`,
   `math.sqrt` are exact or correctly rounded.)
2. High-precision values of the true functions, with Python's `decimal` at a chosen
   precision (the true value to that many significant digits, not an exact value) and
   `fractions` for sums (exact), and exact rounding of such a value to float32.
"""
from __future__ import annotations

import math
import struct
from decimal import MAX_EMAX, MIN_EMIN, Decimal, localcontext
from fractions import Fraction

import numpy as np

from . import constants as C
from . import rng as _rng

# --- 1. literal scalar programs -----------------------------------------------------


def tree_sum(values) -> float:
    """Adjacent pairs level by level, an odd last element carried up; () -> +0.0."""
    level = [float(v) for v in values]
    if not level:
        return 0.0
    while len(level) > 1:
        nxt = [level[2 * i] + level[2 * i + 1] for i in range(len(level) // 2)]
        if len(level) % 2:
            nxt.append(level[-1])
        level = nxt
    return level[0]


def _reduce(x: float) -> tuple[float, float, float, float]:
    """k, hi, lo, r = hi - lo for exp and expm1."""
    k = float(math.trunc(x * C.INVLN2 + (-0.5 if x < 0 else 0.5)))
    hi = x - k * C.LN2_HI
    lo = k * C.LN2_LO
    return k, hi, lo, hi - lo


def exp(x: float) -> float:
    if math.isnan(x):
        return x
    if x > C.O_THRESHOLD:
        return math.inf
    if x < C.U_THRESHOLD:
        return 0.0
    k, hi, lo, r = _reduce(x)
    t = r * r
    c = r - t * (C.EXP_P1 + t * (C.EXP_P2 + t * (C.EXP_P3 + t * (C.EXP_P4 + t * C.EXP_P5))))
    y = 1.0 - ((lo - (r * c) / (2.0 - c)) - hi)
    return math.ldexp(y, int(k))


def expm1(x: float) -> float:
    if math.isnan(x):
        return x
    if x > C.O_THRESHOLD:
        return math.inf
    if x < C.EXPM1_SATURATE:
        return -1.0
    if abs(x) < C.TWO_M54:
        return x
    if abs(x) > C.HALF_LN2:
        k, hi, lo, r = _reduce(x)
        c = (hi - r) - lo
    else:
        k, r, c = 0.0, x, 0.0
    hfx = 0.5 * r
    hxs = r * hfx
    r1 = 1.0 + hxs * (C.EXPM1_Q1 + hxs * (C.EXPM1_Q2 + hxs * (C.EXPM1_Q3 + hxs * (C.EXPM1_Q4 + hxs * C.EXPM1_Q5))))
    t = 3.0 - r1 * hfx
    e = hxs * ((r1 - t) / (6.0 - r * t))
    ki = int(k)
    if ki == 0:
        return r - (r * e - hxs)
    e = (r * (e - c) - c) - hxs
    if ki == -1:
        return 0.5 * (r - e) - 0.5
    if ki == 1:
        if r < -0.25:
            return -2.0 * (e - (r + 0.5))
        return 1.0 + 2.0 * (r - e)
    if ki <= -2 or ki > 56:
        return math.ldexp(1.0 - (e - r), ki) - 1.0
    if ki < 20:
        return math.ldexp((1.0 - math.ldexp(1.0, -ki)) - (e - r), ki)
    return math.ldexp((r - (e + math.ldexp(1.0, -ki))) + 1.0, ki)


def log(x: float) -> float:
    if math.isnan(x) or x < 0:
        return math.nan
    if x == 0:
        return -math.inf
    if x == math.inf:
        return math.inf
    m, k = math.frexp(x)
    if m < C.SQRT_HALF:
        m, k = m * 2.0, k - 1
    f = m - 1.0
    dk = float(k)
    hfsq = 0.5 * f * f
    s = f / (2.0 + f)
    z = s * s
    w = z * z
    t1 = w * (C.LOG_LG2 + w * (C.LOG_LG4 + w * C.LOG_LG6))
    t2 = z * (C.LOG_LG1 + w * (C.LOG_LG3 + w * (C.LOG_LG5 + w * C.LOG_LG7)))
    big_r = t2 + t1
    return s * (hfsq + big_r) + dk * C.LN2_LO - hfsq + f + dk * C.LN2_HI


def tanh(x: float) -> float:
    if math.isnan(x):
        return x
    ax = abs(x)
    if ax >= C.TANH_SATURATE:
        z = 1.0
    elif ax < C.TWO_M55:
        return x * (1.0 + x)
    elif ax >= 1.0:
        t = expm1(2.0 * ax)
        z = 1.0 - 2.0 / (t + 2.0)
    else:
        t = expm1(-2.0 * ax)
        z = -t / (t + 2.0)
    return -z if x < 0 else z


def _horner(z: float, coeffs) -> float:
    """c0 + z*(c1 + z*(... + z*cn))."""
    acc = coeffs[-1]
    for c in coeffs[-2::-1]:
        acc = c + z * acc
    return acc


def erf(x: float) -> float:
    if math.isnan(x):
        return x
    ax = abs(x)
    if ax < C.ERF_SMALL:
        if ax < C.ERF_SUBNORMAL:
            return (8.0 * x + C.ERF_EFX8 * x) / 8.0
        if ax < C.ERF_TINY:
            return x + C.ERF_EFX * x
        z = x * x
        return x + x * (_horner(z, C.ERF_PP) / _horner(z, (1.0, *C.ERF_QQ)))
    if ax < C.ERF_MID:
        s = ax - 1.0
        y = C.ERF_ERX + _horner(s, C.ERF_PA) / _horner(s, (1.0, *C.ERF_QA))
        return -y if x < 0 else y
    if ax >= C.ERF_BIG:
        return -1.0 if x < 0 else 1.0
    s = 1.0 / (ax * ax)
    if ax < C.ERF_SPLIT:
        big_r, big_s = _horner(s, C.ERF_RA), _horner(s, (1.0, *C.ERF_SA))
    else:
        big_r, big_s = _horner(s, C.ERF_RB), _horner(s, (1.0, *C.ERF_SB))
    bits = struct.unpack("<Q", struct.pack("<d", ax))[0] & 0xFFFFFFFF00000000
    zh = struct.unpack("<d", struct.pack("<Q", bits))[0]
    r = exp(-zh * zh - 0.5625) * exp((zh - ax) * (zh + ax) + big_r / big_s)
    y = 1.0 - r / ax
    return -y if x < 0 else y


def _tail(ax: float, split: float) -> float:
    s = 1.0 / (ax * ax)
    if ax < split:
        big_r, big_s = _horner(s, C.ERF_RA), _horner(s, (1.0, *C.ERF_SA))
    else:
        big_r, big_s = _horner(s, C.ERF_RB), _horner(s, (1.0, *C.ERF_SB))
    bits = struct.unpack("<Q", struct.pack("<d", ax))[0] & 0xFFFFFFFF00000000
    zh = struct.unpack("<d", struct.pack("<Q", bits))[0]
    return exp(-zh * zh - 0.5625) * exp((zh - ax) * (zh + ax) + big_r / big_s)


def erfc(x: float) -> float:
    if math.isnan(x):
        return x
    ax = abs(x)
    if ax < C.ERF_SMALL:
        if ax < C.ERFC_TINY:
            return 1.0 - x
        z = x * x
        y = _horner(z, C.ERF_PP) / _horner(z, (1.0, *C.ERF_QQ))
        if x < C.ERFC_QUARTER:
            return 1.0 - (x + x * y)
        return 0.5 - (x * y + (x - 0.5))
    if ax < C.ERF_MID:
        s = ax - 1.0
        ratio = _horner(s, C.ERF_PA) / _horner(s, (1.0, *C.ERF_QA))
        return 1.0 + (C.ERF_ERX + ratio) if x < 0 else (1.0 - C.ERF_ERX) - ratio
    if ax >= C.ERFC_BIG:
        return 2.0 if x < 0 else 0.0
    if x < 0 and ax >= C.ERF_BIG:
        return 2.0
    q = _tail(ax, C.ERFC_SPLIT) / ax
    return 2.0 - q if x < 0 else q


def sigmoid(x: float) -> float:
    e = exp(-x)
    return 1.0 / (1.0 + e)


def philox4x32(ctr, key, rounds: int = 10) -> list[int]:
    c0, c1, c2, c3 = ctr
    k0, k1 = key
    for r in range(rounds):
        if r:
            k0, k1 = (k0 + _rng.PHILOX_W0) & 0xFFFFFFFF, (k1 + _rng.PHILOX_W1) & 0xFFFFFFFF
        p0, p1 = _rng.PHILOX_M0 * c0, _rng.PHILOX_M1 * c2
        c0, c1, c2, c3 = (p1 >> 32) ^ c1 ^ k0, p1 & 0xFFFFFFFF, (p0 >> 32) ^ c3 ^ k1, p0 & 0xFFFFFFFF
    return [c0, c1, c2, c3]


# --- 2. high-precision true values and exact rounding --------------------------------

PRECISION = 40  # significant decimal digits of the Decimal references


def _context(prec: int = PRECISION):
    """A decimal context with `prec` digits and an exponent range wide enough for exp(1e8)."""
    return localcontext(prec=prec, Emax=MAX_EMAX, Emin=MIN_EMIN)


def _pi() -> Decimal:
    """pi to the current context precision (the series of the `decimal` documentation)."""
    with localcontext() as ctx:
        ctx.prec += 2
        three = Decimal(3)
        lasts, t, s, n, na, d, da = 0, three, 3, 1, 0, 0, 24
        while s != lasts:
            lasts = s
            n, na = n + na, na + 8
            d, da = d + da, da + 32
            t = (t * n) / d
            s += t
    return +s


def true_exp(x: float) -> Decimal:
    with _context():
        return Decimal(x).exp()


def true_log(x: float) -> Decimal:
    with _context():
        return Decimal(x).ln()


def _extra_digits(x: float) -> int:
    """Digits lost to cancellation in e^x - 1 for small |x|."""
    return max(0, -math.frexp(x)[1]) // 3 + 10 if x else 0


def true_tanh(x: float) -> Decimal:
    if x == 0:
        return Decimal(x)
    with _context(PRECISION + _extra_digits(x)):
        em1 = (Decimal(2) * Decimal(x)).exp() - 1
        return em1 / (em1 + 2)


def true_erf(x) -> Decimal:
    """erf of a float or Decimal by its Taylor series, with digits added for the series'
    cancellation (its terms reach e^(x^2)) and for 1 + erf(x) at negative x (erfc(x) is
    about e^(-x^2)); for |x| >= 15, +-(1 - 10^-100) (erfc(15) < 1e-99)."""
    d = Decimal(x)
    if d == 0:
        return d
    ax = d.copy_abs()
    if ax >= 15:
        value = 1 - Decimal(10) ** -100
    else:
        square_digits = int(float(ax) ** 2 / 2.302585) + 1
        with _context(PRECISION + 20 + 2 * square_digits + _extra_digits(float(ax))) as ctx:
            z = ax * ax
            term, total, n = ax, ax, 0
            while True:
                n += 1
                term = -term * z / n
                add = term / (2 * n + 1)
                if add == 0 or add.copy_abs() < total.copy_abs() * Decimal(10) ** -(ctx.prec + 2):
                    break
                total += add
            value = total * 2 / _pi().sqrt()
    return value.copy_negate() if d < 0 else value


def true_sigmoid(x: float) -> Decimal:
    with _context():
        return 1 / (1 + (-Decimal(x)).exp())


def true_rsqrt(x: float) -> Decimal:
    with _context():
        return 1 / Decimal(x).sqrt()


def true_sqrt(x: float) -> Decimal:
    with _context():
        return Decimal(x).sqrt()


F32_MAX = Fraction(float(np.finfo(np.float32).max))
F32_OVERFLOW = F32_MAX + Fraction(2) ** (127 - 24)  # max + half an ulp rounds to inf


def nearest_f32(value) -> np.float32:
    """The float32 nearest to an exact value (Fraction or Decimal), ties to even."""
    if isinstance(value, Decimal) and value.is_finite() and value != 0:
        # far outside the float32 range, skip the (huge) exact rational
        if value.copy_abs() > Decimal("1e40"):
            return np.float32(math.copysign(math.inf, value))
        if value.copy_abs() < Decimal("1e-50"):
            return np.float32(math.copysign(0.0, value))
    v = Fraction(value)
    if abs(v) >= F32_OVERFLOW:
        return np.float32(math.copysign(math.inf, v))
    guess = np.float32(float(v))
    best = None
    for c in (np.nextafter(guess, np.float32(-np.inf)), guess, np.nextafter(guess, np.float32(np.inf))):
        if not np.isfinite(c):
            continue
        err = abs(Fraction(float(c)) - v)
        key = (err, int(np.float32(c).view(np.uint32)) & 1)
        if best is None or key < best[0]:
            best = (key, c)
    return np.float32(best[1])


def ulp_error_f32(y: np.float32, value) -> float:
    """|y - value| in units of the float32 spacing at the correctly rounded value."""
    r = nearest_f32(value)
    if not np.isfinite(r) or not np.isfinite(y):
        return 0.0 if (y == r) else math.inf
    ulp = Fraction(float(np.spacing(np.abs(r)))) if r != 0 else Fraction(2) ** -149
    if r == 0 and isinstance(value, Decimal) and value.copy_abs() < Decimal("1e-50"):
        value = Decimal(0)  # below every float32 by far; the difference is immaterial
    return float(abs(Fraction(float(y)) - Fraction(value)) / ulp)
