"""Compiled transcendentals: the float64 primitives of `transcendental`, one element at a time.

Each scalar primitive is the array code of `repops_cupy.transcendental` written per
element, every operation in the same order. Like the array code, a primitive computes
its formula on a stand-in value for the lanes a special case overrides, then selects;
where the array code selects between formulas that share a final operation (one
ldexp, one division), the operands are selected first and the operation is done once:
the same operation on the same operands. ldexp is `_ldexp`: the product by one or two
exact powers of two with a single rounding, the correctly rounded result that C's
ldexp (NumPy's) returns.

A span applies a primitive to ``x[start:stop]`` of a flat contiguous array (float32
or float64 in and out): reading a float32 element widens it exactly, storing into a
float32 array rounds once to nearest even, the public ops' float32(f(float64(x))).
`maps.unary_map` runs spans in parallel. The lane helpers (erf's tail lanes) are
shared with `gelu`.
"""
from __future__ import annotations

import math

import numpy as np

from .. import constants as C
from .compiler import function, scalar

# bit patterns of float64 fields
_HIGH_WORD = np.uint64(0xFFFFFFFF00000000)
_MANTISSA = np.uint64(0x000FFFFFFFFFFFFF)
_HALF_EXPONENT = np.uint64(0x3FE0000000000000)  # the exponent field of [0.5, 1)
_SMALLEST_NORMAL_BITS = np.uint64(0x0010000000000000)
_TWO_54 = 2.0**54


# --- exact bit-level helpers ------------------------------------------------


@scalar
def _pow2(k):
    # 2^k for integer k in [-1022, 1023], built from its bit pattern (exact)
    return np.uint64(np.int64(k + 1023) << 52).view(np.float64)


@scalar
def _ldexp(y, k):
    # y * 2^k rounded once, as C ldexp, for k in [-1991, 2046] (musl's scalbn
    # with one step): the first product is exact (or the result is 0 or inf anyway)
    k2 = 0
    if k > 1023:
        k2 = 1023
    if k < -1022:
        k2 = -969  # leaves a final factor below 2^-53: no double rounding
    return (y * _pow2(k - k2)) * _pow2(k2)


@scalar
def _high_word(a):
    # a with the low 32 bits of its float64 pattern cleared (exact)
    return np.uint64(np.float64(a).view(np.uint64) & _HIGH_WORD).view(np.float64)


@scalar
def _poly(z, coeffs):
    # c0 + z*(c1 + z*(... + z*cn)), innermost first, as transcendental._poly
    n = len(coeffs)
    acc = z * coeffs[n - 1]
    for i in range(n - 2, 0, -1):
        acc = z * (coeffs[i] + acc)
    return coeffs[0] + acc


@scalar
def _one_plus_poly(z, coeffs):
    # 1 + z*(c1 + z*(... + z*cn)) with coeffs = (c1, ..., cn), as transcendental._one_plus_poly
    n = len(coeffs)
    acc = z * coeffs[n - 1]
    for i in range(n - 2, -1, -1):
        acc = z * (coeffs[i] + acc)
    return 1.0 + acc


# --- scalar float64 primitives (the array code of `transcendental`, per element) ---


@scalar
def exp_scalar(x):
    xs = x
    if not (x >= C.U_THRESHOLD and x <= C.O_THRESHOLD):  # NaN, overflow, underflow
        xs = 0.0
    half = 0.5
    if xs < 0:
        half = -0.5
    k = np.trunc(xs * C.INVLN2 + half)
    hi = xs - k * C.LN2_HI
    lo = k * C.LN2_LO
    r = hi - lo
    t = r * r
    c = r - t * (C.EXP_P1 + t * (C.EXP_P2 + t * (C.EXP_P3 + t * (C.EXP_P4 + t * C.EXP_P5))))
    y = _ldexp(1.0 - ((lo - (r * c) / (2.0 - c)) - hi), np.int64(k))
    if x < C.U_THRESHOLD:
        y = 0.0
    if x > C.O_THRESHOLD:
        y = math.inf
    if x != x:
        y = x
    return y


@scalar
def expm1_scalar(x):
    tiny = abs(x) < C.TWO_M54
    xs = x
    if not (x >= C.EXPM1_SATURATE and x <= C.O_THRESHOLD) or tiny:
        xs = 0.0
    reduce = abs(xs) > C.HALF_LN2
    half = 0.5
    if xs < 0:
        half = -0.5
    k = np.trunc(xs * C.INVLN2 + half)
    if not reduce:
        k = 0.0
    hi = xs - k * C.LN2_HI
    lo = k * C.LN2_LO
    r = xs
    c = 0.0
    if reduce:
        r = hi - lo
        c = (hi - r) - lo
    hfx = 0.5 * r
    hxs = r * hfx
    r1 = 1.0 + hxs * (C.EXPM1_Q1 + hxs * (C.EXPM1_Q2 + hxs * (C.EXPM1_Q3 + hxs * (C.EXPM1_Q4 + hxs * C.EXPM1_Q5))))
    t = 3.0 - r1 * hfx
    e = hxs * ((r1 - t) / (6.0 - r * t))
    y_k0 = r - (r * e - hxs)
    e = (r * (e - c) - c) - hxs
    ki = np.int64(k)
    y_km1 = 0.5 * (r - e) - 0.5
    if r < -0.25:
        y_kp1 = -2.0 * (e - (r + 0.5))
    else:
        y_kp1 = 1.0 + 2.0 * (r - e)
    # far (k <= -2 or k > 56): ldexp(1 - (e - r), k) - 1; near (2 <= k < 20):
    # ldexp((1 - 2^-k) - (e - r), k); mid (20 <= k <= 56): ldexp((r - (e + 2^-k)) + 1, k)
    far = ki <= -2 or ki > 56
    two_mk = _ldexp(1.0, -ki)
    if far:
        scaled = 1.0 - (e - r)
    elif ki >= 20:
        scaled = (r - (e + two_mk)) + 1.0
    else:
        scaled = (1.0 - two_mk) - (e - r)
    y = _ldexp(scaled, ki)
    if far:
        y = y - 1.0
    if ki == 1:
        y = y_kp1
    if ki == -1:
        y = y_km1
    if ki == 0:
        y = y_k0
    if tiny:
        y = x
    if x < C.EXPM1_SATURATE:
        y = -1.0
    if x > C.O_THRESHOLD:
        y = math.inf
    if x != x:
        y = x
    return y


@scalar
def log_scalar(x):
    invalid = x != x or x < 0
    zero = x == 0
    pos_inf = x == math.inf
    xs = x
    if invalid or zero or pos_inf:
        xs = 1.0
    # frexp(xs) = (m, e), m in [0.5, 1): exact, subnormals scaled up by 2^54 first
    bits = np.float64(xs).view(np.uint64)
    subnormal = bits < _SMALLEST_NORMAL_BITS
    if subnormal:
        bits = np.float64(xs * _TWO_54).view(np.uint64)
    e = np.int64(bits >> np.uint64(52)) - 1022
    if subnormal:
        e -= 54
    m = np.uint64((bits & _MANTISSA) | _HALF_EXPONENT).view(np.float64)
    if m < C.SQRT_HALF:
        m = m * 2.0
        e -= 1
    dk = np.float64(e)
    f = m - 1.0  # exact (Sterbenz)
    hfsq = 0.5 * f * f
    s = f / (2.0 + f)
    z = s * s
    w = z * z
    t1 = w * (C.LOG_LG2 + w * (C.LOG_LG4 + w * C.LOG_LG6))
    t2 = z * (C.LOG_LG1 + w * (C.LOG_LG3 + w * (C.LOG_LG5 + w * C.LOG_LG7)))
    big_r = t2 + t1
    y = s * (hfsq + big_r) + dk * C.LN2_LO - hfsq + f + dk * C.LN2_HI
    if zero:
        y = -math.inf
    if pos_inf:
        y = math.inf
    if invalid:
        y = np.nan
    return y


@scalar
def tanh_scalar(x):
    ax = abs(x)
    ge1 = ax >= 1.0
    arg = -2.0 * ax
    if ge1:
        arg = 2.0 * ax
    if x != x or ax >= C.TANH_SATURATE:
        arg = 0.0
    t = expm1_scalar(arg)
    # ge1: 1 - 2/(t+2); else -t/(t+2)
    num = -t
    if ge1:
        num = 2.0
    q = num / (t + 2.0)
    z = q
    if ge1:
        z = 1.0 - q
    if ax >= C.TANH_SATURATE:
        z = 1.0
    y = z
    if x < 0:
        y = -z
    if ax < C.TWO_M55:
        y = x * (1.0 + x)
    if x != x:
        y = x
    return y


@scalar
def _poly_of(z, first, a, b):
    # _poly(z, a) where first, else _poly(z, b); a and b of one length
    n = len(a)
    acc = z * (a[n - 1] if first else b[n - 1])
    for i in range(n - 2, 0, -1):
        acc = z * ((a[i] if first else b[i]) + acc)
    return (a[0] if first else b[0]) + acc


@scalar
def _one_plus_poly_of(z, first, a, b):
    # _one_plus_poly(z, a) where first, else _one_plus_poly(z, b); a and b of one length
    n = len(a)
    acc = z * (a[n - 1] if first else b[n - 1])
    for i in range(n - 2, -1, -1):
        acc = z * ((a[i] if first else b[i]) + acc)
    return 1.0 + acc


# RB and SB have one coefficient fewer than RA and SA. Padded with a zero top
# coefficient they give the same Horner values: z*0 = +0 and c + 0 = c for z > 0.
_ERF_RB_PADDED = C.ERF_RB + (0.0,)
_ERF_SB_PADDED = C.ERF_SB + (0.0,)


@scalar
def _erf_tail(at, split):
    # exp(-zh*zh - 0.5625) * exp((zh-at)*(zh+at) + R/S) for at in [1.25, 28), as
    # transcendental._erf_tail_exp
    s = 1.0 / (at * at)
    first = at < split
    big_r = _poly_of(s, first, C.ERF_RA, _ERF_RB_PADDED)
    big_s = _one_plus_poly_of(s, first, C.ERF_SA, _ERF_SB_PADDED)
    zh = _high_word(at)
    return exp_scalar(-zh * zh - 0.5625) * exp_scalar((zh - at) * (zh + at) + big_r / big_s)


@scalar
def erf_scalar(x, full):
    # full=False: 0 stands in for the tail (1.25 <= |x| < 6) and its exps are not
    # computed; the span computes those lanes again with full=True
    ax = abs(x)
    # |x| < 0.84375
    z = x * x
    y_small = x + x * (_poly(z, C.ERF_PP) / _one_plus_poly(z, C.ERF_QQ))
    if ax < C.ERF_TINY:
        y_small = x + C.ERF_EFX * x
    if ax < C.ERF_SUBNORMAL:
        y_small = (8.0 * x + C.ERF_EFX8 * x) / 8.0
    # 0.84375 <= |x| < 1.25
    s = ax - 1.0
    mid = C.ERF_ERX + _poly(s, C.ERF_PA) / _one_plus_poly(s, C.ERF_QA)
    # 1.25 <= |x| < 6
    at = 2.0
    if ax >= C.ERF_MID and ax < C.ERF_BIG:
        at = ax
    tail = 1.0 - _erf_tail(at, C.ERF_SPLIT) / at if full else 0.0
    magnitude = 1.0
    if ax < C.ERF_BIG:
        magnitude = tail
    if ax < C.ERF_MID:
        magnitude = mid
    y = magnitude
    if x < 0:
        y = -magnitude
    if ax < C.ERF_SMALL:
        y = y_small
    if x != x:
        y = x
    return y


@scalar
def erfc_scalar(x, full):
    # full=False: 0 stands in for the tail (1.25 <= |x| < 28), as in erf_scalar
    ax = abs(x)
    neg = x < 0
    z = x * x
    y = _poly(z, C.ERF_PP) / _one_plus_poly(z, C.ERF_QQ)
    if x < C.ERFC_QUARTER:
        small = 1.0 - (x + x * y)
    else:
        small = 0.5 - (x * y + (x - 0.5))
    if ax < C.ERFC_TINY:
        small = 1.0 - x
    s = ax - 1.0
    ratio = _poly(s, C.ERF_PA) / _one_plus_poly(s, C.ERF_QA)
    if neg:
        mid = 1.0 + (C.ERF_ERX + ratio)
    else:
        mid = (1.0 - C.ERF_ERX) - ratio
    at = 2.0
    if ax >= C.ERF_MID and ax < C.ERFC_BIG:
        at = ax
    q = _erf_tail(at, C.ERFC_SPLIT) / at if full else 0.0
    tail = q
    if neg:
        tail = 2.0 - q
    if neg and ax >= C.ERF_BIG:
        tail = 2.0
    far = 0.0
    if neg:
        far = 2.0
    r = far
    if ax < C.ERFC_BIG:
        r = tail
    if ax < C.ERF_MID:
        r = mid
    if ax < C.ERF_SMALL:
        r = small
    if x != x:
        r = x
    return r


@scalar
def sigmoid_scalar(x):
    return 1.0 / (1.0 + exp_scalar(-x))


# --- spans over flat contiguous arrays (float32 or float64 in and out) ------------------
# Reading a float32 element widens it exactly; storing into a float32 array rounds
# once to nearest even: the public ops' float32(f(float64(x))). A span is the serial
# loop numba vectorizes; `maps.unary_map` shares spans among threads, which keeps
# numba's parallel compilation away from the large inlined bodies.


@function
def exp_span(x, out, start, stop):
    src = x[start:stop]
    dst = out[start:stop]
    for i in range(src.shape[0]):
        dst[i] = exp_scalar(np.float64(src[i]))


@function
def expm1_span(x, out, start, stop):
    src = x[start:stop]
    dst = out[start:stop]
    for i in range(src.shape[0]):
        dst[i] = expm1_scalar(np.float64(src[i]))


@function
def log_span(x, out, start, stop):
    src = x[start:stop]
    dst = out[start:stop]
    for i in range(src.shape[0]):
        dst[i] = log_scalar(np.float64(src[i]))


@function
def tanh_span(x, out, start, stop):
    src = x[start:stop]
    dst = out[start:stop]
    for i in range(src.shape[0]):
        dst[i] = tanh_scalar(np.float64(src[i]))


# erf and erfc: in a block where few lanes lie in the tail (|x| >= 1.25, two exps),
# every lane computes the cheap branches and the tail lanes are gathered and
# computed in full afterwards; a block of mostly tail lanes computes all in full.
# Either way each lane gets the value of its own branch, as with the array code.
LANES = 512


@scalar
def _in_tail(v, scale, limit):
    a = abs(np.float64(v) * scale)
    return (a >= C.ERF_MID) & (a < limit)


@function
def tail_lanes(part, scale, limit, lanes):
    # the indices i with 1.25 <= |part[i] * scale| < limit, in order, into lanes, and
    # their count; when they are more than a quarter of the block, the count alone
    count = 0
    for i in range(part.shape[0]):
        count += _in_tail(part[i], scale, limit)
    if 4 * count > part.shape[0]:
        return count
    count = 0
    for i in range(part.shape[0]):
        lanes[count] = i
        count += _in_tail(part[i], scale, limit)
    return count


@scalar
def all_lanes(part, values):
    for i in range(part.shape[0]):
        values[i] = part[i]


@scalar
def store(values, into):
    for i in range(into.shape[0]):
        into[i] = values[i]


@scalar
def gather(part, lanes, count, values):
    for j in range(count):
        values[j] = part[lanes[j]]


@scalar
def scatter(values, lanes, count, into):
    for j in range(count):
        into[lanes[j]] = values[j]


@function
def _erf_full(values, count):
    for j in range(count):
        values[j] = erf_scalar(values[j], True)


@function
def _erfc_full(values, count):
    for j in range(count):
        values[j] = erfc_scalar(values[j], True)


@function
def erf_span(x, out, start, stop):
    src = x[start:stop]
    dst = out[start:stop]
    lanes = np.empty(LANES, np.int64)
    values = np.empty(LANES, np.float64)
    for b in range(0, src.shape[0], LANES):
        part = src[b:b + LANES]
        into = dst[b:b + LANES]
        count = tail_lanes(part, 1.0, C.ERF_BIG, lanes)
        if 4 * count > part.shape[0]:  # mostly tail: every lane in full is cheaper
            all_lanes(part, values)
            _erf_full(values, part.shape[0])
            store(values, into)
            continue
        for i in range(part.shape[0]):
            into[i] = erf_scalar(np.float64(part[i]), False)
        gather(part, lanes, count, values)
        _erf_full(values, count)
        scatter(values, lanes, count, into)


@function
def erfc_span(x, out, start, stop):
    src = x[start:stop]
    dst = out[start:stop]
    lanes = np.empty(LANES, np.int64)
    values = np.empty(LANES, np.float64)
    for b in range(0, src.shape[0], LANES):
        part = src[b:b + LANES]
        into = dst[b:b + LANES]
        count = tail_lanes(part, 1.0, C.ERFC_BIG, lanes)
        if 4 * count > part.shape[0]:
            all_lanes(part, values)
            _erfc_full(values, part.shape[0])
            store(values, into)
            continue
        for i in range(part.shape[0]):
            into[i] = erfc_scalar(np.float64(part[i]), False)
        gather(part, lanes, count, values)
        _erfc_full(values, count)
        scatter(values, lanes, count, into)


@function
def sigmoid_span(x, out, start, stop):
    src = x[start:stop]
    dst = out[start:stop]
    for i in range(src.shape[0]):
        dst[i] = sigmoid_scalar(np.float64(src[i]))
