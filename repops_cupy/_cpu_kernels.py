"""Compiled CPU kernels for the transcendentals, the fixed tree sum and the nn row ops.

The NumPy array code in `transcendental`, `reduce` and `nn` is the specification;
these kernels compute the same values, faster: an element goes through its whole
chain of float64 operations at once, and a row through its whole tree. numba compiles
without fastmath, so every float operation is the IEEE operation that the array code
performs, in the same order: no contraction into FMA, no reassociation.
`tests/repops/test_cpu_kernels.py` compares the bits with the array code and checks
that the machine code holds no FMA instruction.

Conventions that keep the loops vectorizable and the bits unchanged:
- error_model="numpy": x/0 is the IEEE inf or NaN, as in NumPy (numba's default
  would raise ZeroDivisionError, and its check blocks SIMD).
- Like the array code, a primitive computes its formula on a stand-in value for the
  lanes a special case overrides, then selects; where the array code selects between
  formulas that share a final operation (one ldexp, one division), the operands are
  selected first and the operation is done once: the same operation on the same
  operands.
- ldexp is `_ldexp`: the product by one or two exact powers of two with a single
  rounding, the correctly rounded result that C's ldexp (NumPy's) returns.

Elementwise results and per-row trees do not depend on how rows or elements are
shared among threads, so the kernels run under numba's `prange` on all cores.

Used only for NumPy arrays, when numba imports and the environment variable
REPOPS_CPU_KERNELS is not "0" (set it to force the array code, e.g. to compare).
"""
from __future__ import annotations

import hashlib
import math
import os

import numpy as np

from . import transcendental as T

ENV = "REPOPS_CPU_KERNELS"

# Layout of the tree's work (never its shape). Rows are summed in blocks of _BLOCK
# elements (complete subtrees: a power of two starting at a multiple of itself), and
# a row longer than _PIECE is cut into pieces summed in parallel, each a complete
# subtree too; their sums continue the same tree (see reduce.py).
_BLOCK = 256
_PIECE = 1 << 16
_COL_TILE = 128  # columns summed together by the tree over the first axis
_STACK = 64  # one partial sum per bit of a length

try:
    from numba import njit, prange
except ImportError:  # pragma: no cover - exercised only where numba is absent
    AVAILABLE = False
else:
    AVAILABLE = True


def enabled(xp) -> bool:
    """Whether the compiled path serves arrays of module `xp` now."""
    return xp is np and AVAILABLE and os.environ.get(ENV, "1") != "0"


def _spec_fingerprint() -> str:
    """The values of the specification's constants that the kernels compile in."""
    constants = sorted((name, value) for name, value in vars(T).items()
                       if name.isupper() and isinstance(value, (float, int, tuple)))
    return hashlib.sha256(repr(constants).encode()).hexdigest()


if AVAILABLE:
    try:
        from numba.core.caching import FunctionCache
    except ImportError:  # pragma: no cover - a numba without this class keeps its own cache keys
        FunctionCache = None

    if FunctionCache is not None:

        class _SpecKeyedCache(FunctionCache):
            """numba's on-disk cache, its entries also keyed by the constants of `transcendental`.

            numba keys an entry by this file and the function's bytecode only; the
            constants read from another module are frozen into the machine code, so a
            change there must not find the old entry.
            """

            fingerprint = _spec_fingerprint()

            def _index_key(self, sig, codegen):
                return (*super()._index_key(sig, codegen), self.fingerprint)

    def _compile(**options):
        """njit with an on-disk cache (reused by later processes), without one where no cache dir is writable."""

        def decorate(fn):
            try:
                dispatcher = njit(cache=True, nogil=True, error_model="numpy", **options)(fn)
            except RuntimeError:  # numba found no writable cache location
                return njit(cache=False, nogil=True, error_model="numpy", **options)(fn)
            if FunctionCache is not None and type(dispatcher._cache) is FunctionCache:
                dispatcher._cache = _SpecKeyedCache(fn)
            return dispatcher

        return decorate

    # Elementwise helpers are inlined into the loops that call them (LLVM would leave
    # the larger ones as calls, and a call keeps a loop from being vectorized); the
    # tree, a loop itself, stays one function (much less to compile).
    _scalar = _compile(inline="always")
    _function = _compile()
    _kernel = _compile(parallel=True)

    # The constants of `transcendental` are read as T.NAME when a kernel is first
    # compiled (so the two modules may import each other) and become constants.
    _HIGH_WORD = np.uint64(0xFFFFFFFF00000000)
    _MANTISSA = np.uint64(0x000FFFFFFFFFFFFF)
    _HALF_EXPONENT = np.uint64(0x3FE0000000000000)  # the exponent field of [0.5, 1)
    _SMALLEST_NORMAL_BITS = np.uint64(0x0010000000000000)
    _TWO_54 = 2.0**54

    # --- exact bit-level helpers ------------------------------------------------

    @_scalar
    def _pow2(k):
        # 2^k for integer k in [-1022, 1023], built from its bit pattern (exact)
        return np.uint64(np.int64(k + 1023) << 52).view(np.float64)

    @_scalar
    def _ldexp(y, k):
        # y * 2^k rounded once, as C ldexp, for k in [-1991, 2046] (musl's scalbn
        # with one step): the first product is exact (or the result is 0 or inf anyway)
        k2 = 0
        if k > 1023:
            k2 = 1023
        if k < -1022:
            k2 = -969  # leaves a final factor below 2^-53: no double rounding
        return (y * _pow2(k - k2)) * _pow2(k2)

    @_scalar
    def _high_word(a):
        # a with the low 32 bits of its float64 pattern cleared (exact)
        return np.uint64(np.float64(a).view(np.uint64) & _HIGH_WORD).view(np.float64)

    @_scalar
    def _poly(z, coeffs):
        # c0 + z*(c1 + z*(... + z*cn)), innermost first, as transcendental._poly
        n = len(coeffs)
        acc = z * coeffs[n - 1]
        for i in range(n - 2, 0, -1):
            acc = z * (coeffs[i] + acc)
        return coeffs[0] + acc

    @_scalar
    def _one_plus_poly(z, coeffs):
        # 1 + z*(c1 + z*(... + z*cn)) with coeffs = (c1, ..., cn), as transcendental._one_plus_poly
        n = len(coeffs)
        acc = z * coeffs[n - 1]
        for i in range(n - 2, -1, -1):
            acc = z * (coeffs[i] + acc)
        return 1.0 + acc

    # --- scalar float64 primitives (the array code of `transcendental`, per element) ---

    @_scalar
    def exp_scalar(x):
        xs = x
        if not (x >= T.U_THRESHOLD and x <= T.O_THRESHOLD):  # NaN, overflow, underflow
            xs = 0.0
        half = 0.5
        if xs < 0:
            half = -0.5
        k = np.trunc(xs * T.INVLN2 + half)
        hi = xs - k * T.LN2_HI
        lo = k * T.LN2_LO
        r = hi - lo
        t = r * r
        c = r - t * (T.EXP_P1 + t * (T.EXP_P2 + t * (T.EXP_P3 + t * (T.EXP_P4 + t * T.EXP_P5))))
        y = _ldexp(1.0 - ((lo - (r * c) / (2.0 - c)) - hi), np.int64(k))
        if x < T.U_THRESHOLD:
            y = 0.0
        if x > T.O_THRESHOLD:
            y = math.inf
        if x != x:
            y = x
        return y

    @_scalar
    def expm1_scalar(x):
        tiny = abs(x) < T.TWO_M54
        xs = x
        if not (x >= T.EXPM1_SATURATE and x <= T.O_THRESHOLD) or tiny:
            xs = 0.0
        reduce = abs(xs) > T.HALF_LN2
        half = 0.5
        if xs < 0:
            half = -0.5
        k = np.trunc(xs * T.INVLN2 + half)
        if not reduce:
            k = 0.0
        hi = xs - k * T.LN2_HI
        lo = k * T.LN2_LO
        r = xs
        c = 0.0
        if reduce:
            r = hi - lo
            c = (hi - r) - lo
        hfx = 0.5 * r
        hxs = r * hfx
        r1 = 1.0 + hxs * (T.EXPM1_Q1 + hxs * (T.EXPM1_Q2 + hxs * (T.EXPM1_Q3 + hxs * (T.EXPM1_Q4 + hxs * T.EXPM1_Q5))))
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
        if x < T.EXPM1_SATURATE:
            y = -1.0
        if x > T.O_THRESHOLD:
            y = math.inf
        if x != x:
            y = x
        return y

    @_scalar
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
        if m < T.SQRT_HALF:
            m = m * 2.0
            e -= 1
        dk = np.float64(e)
        f = m - 1.0  # exact (Sterbenz)
        hfsq = 0.5 * f * f
        s = f / (2.0 + f)
        z = s * s
        w = z * z
        t1 = w * (T.LOG_LG2 + w * (T.LOG_LG4 + w * T.LOG_LG6))
        t2 = z * (T.LOG_LG1 + w * (T.LOG_LG3 + w * (T.LOG_LG5 + w * T.LOG_LG7)))
        big_r = t2 + t1
        y = s * (hfsq + big_r) + dk * T.LN2_LO - hfsq + f + dk * T.LN2_HI
        if zero:
            y = -math.inf
        if pos_inf:
            y = math.inf
        if invalid:
            y = np.nan
        return y

    @_scalar
    def tanh_scalar(x):
        ax = abs(x)
        ge1 = ax >= 1.0
        arg = -2.0 * ax
        if ge1:
            arg = 2.0 * ax
        if x != x or ax >= T.TANH_SATURATE:
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
        if ax >= T.TANH_SATURATE:
            z = 1.0
        y = z
        if x < 0:
            y = -z
        if ax < T.TWO_M55:
            y = x * (1.0 + x)
        if x != x:
            y = x
        return y

    @_scalar
    def _poly_of(z, first, a, b):
        # _poly(z, a) where first, else _poly(z, b); a and b of one length
        n = len(a)
        acc = z * (a[n - 1] if first else b[n - 1])
        for i in range(n - 2, 0, -1):
            acc = z * ((a[i] if first else b[i]) + acc)
        return (a[0] if first else b[0]) + acc

    @_scalar
    def _one_plus_poly_of(z, first, a, b):
        # _one_plus_poly(z, a) where first, else _one_plus_poly(z, b); a and b of one length
        n = len(a)
        acc = z * (a[n - 1] if first else b[n - 1])
        for i in range(n - 2, -1, -1):
            acc = z * ((a[i] if first else b[i]) + acc)
        return 1.0 + acc

    # RB and SB have one coefficient fewer than RA and SA. Padded with a zero top
    # coefficient they give the same Horner values: z*0 = +0 and c + 0 = c for z > 0.
    _ERF_RB_PADDED = T.ERF_RB + (0.0,)
    _ERF_SB_PADDED = T.ERF_SB + (0.0,)

    @_scalar
    def _erf_tail(at, split):
        # exp(-zh*zh - 0.5625) * exp((zh-at)*(zh+at) + R/S) for at in [1.25, 28), as
        # transcendental._erf_tail_exp
        s = 1.0 / (at * at)
        first = at < split
        big_r = _poly_of(s, first, T.ERF_RA, _ERF_RB_PADDED)
        big_s = _one_plus_poly_of(s, first, T.ERF_SA, _ERF_SB_PADDED)
        zh = _high_word(at)
        return exp_scalar(-zh * zh - 0.5625) * exp_scalar((zh - at) * (zh + at) + big_r / big_s)

    @_scalar
    def erf_scalar(x, full):
        # full=False: 0 stands in for the tail (1.25 <= |x| < 6) and its exps are not
        # computed; the span computes those lanes again with full=True
        ax = abs(x)
        # |x| < 0.84375
        z = x * x
        y_small = x + x * (_poly(z, T.ERF_PP) / _one_plus_poly(z, T.ERF_QQ))
        if ax < T.ERF_TINY:
            y_small = x + T.ERF_EFX * x
        if ax < T.ERF_SUBNORMAL:
            y_small = (8.0 * x + T.ERF_EFX8 * x) / 8.0
        # 0.84375 <= |x| < 1.25
        s = ax - 1.0
        mid = T.ERF_ERX + _poly(s, T.ERF_PA) / _one_plus_poly(s, T.ERF_QA)
        # 1.25 <= |x| < 6
        at = 2.0
        if ax >= T.ERF_MID and ax < T.ERF_BIG:
            at = ax
        tail = 1.0 - _erf_tail(at, T.ERF_SPLIT) / at if full else 0.0
        magnitude = 1.0
        if ax < T.ERF_BIG:
            magnitude = tail
        if ax < T.ERF_MID:
            magnitude = mid
        y = magnitude
        if x < 0:
            y = -magnitude
        if ax < T.ERF_SMALL:
            y = y_small
        if x != x:
            y = x
        return y

    @_scalar
    def erfc_scalar(x, full):
        # full=False: 0 stands in for the tail (1.25 <= |x| < 28), as in erf_scalar
        ax = abs(x)
        neg = x < 0
        z = x * x
        y = _poly(z, T.ERF_PP) / _one_plus_poly(z, T.ERF_QQ)
        if x < T.ERFC_QUARTER:
            small = 1.0 - (x + x * y)
        else:
            small = 0.5 - (x * y + (x - 0.5))
        if ax < T.ERFC_TINY:
            small = 1.0 - x
        s = ax - 1.0
        ratio = _poly(s, T.ERF_PA) / _one_plus_poly(s, T.ERF_QA)
        if neg:
            mid = 1.0 + (T.ERF_ERX + ratio)
        else:
            mid = (1.0 - T.ERF_ERX) - ratio
        at = 2.0
        if ax >= T.ERF_MID and ax < T.ERFC_BIG:
            at = ax
        q = _erf_tail(at, T.ERFC_SPLIT) / at if full else 0.0
        tail = q
        if neg:
            tail = 2.0 - q
        if neg and ax >= T.ERF_BIG:
            tail = 2.0
        far = 0.0
        if neg:
            far = 2.0
        r = far
        if ax < T.ERFC_BIG:
            r = tail
        if ax < T.ERF_MID:
            r = mid
        if ax < T.ERF_SMALL:
            r = small
        if x != x:
            r = x
        return r

    @_scalar
    def sigmoid_scalar(x):
        return 1.0 / (1.0 + exp_scalar(-x))

    # --- elementwise maps over flat contiguous arrays (float32 or float64 in and out) ---
    # Reading a float32 element widens it exactly; storing into a float32 array rounds
    # once to nearest even: the public ops' float32(f(float64(x))). Each map is a
    # serial span (the loop numba vectorizes) and a parallel driver over spans, which
    # keeps numba's parallel compilation away from the large inlined bodies.

    @_function
    def _exp_span(x, out, start, stop):
        src = x[start:stop]
        dst = out[start:stop]
        for i in range(src.shape[0]):
            dst[i] = exp_scalar(np.float64(src[i]))

    @_function
    def _expm1_span(x, out, start, stop):
        src = x[start:stop]
        dst = out[start:stop]
        for i in range(src.shape[0]):
            dst[i] = expm1_scalar(np.float64(src[i]))

    @_function
    def _log_span(x, out, start, stop):
        src = x[start:stop]
        dst = out[start:stop]
        for i in range(src.shape[0]):
            dst[i] = log_scalar(np.float64(src[i]))

    @_function
    def _tanh_span(x, out, start, stop):
        src = x[start:stop]
        dst = out[start:stop]
        for i in range(src.shape[0]):
            dst[i] = tanh_scalar(np.float64(src[i]))

    # erf and erfc: in a block where few lanes lie in the tail (|x| >= 1.25, two exps),
    # every lane computes the cheap branches and the tail lanes are gathered and
    # computed in full afterwards; a block of mostly tail lanes computes all in full.
    # Either way each lane gets the value of its own branch, as with the array code.
    _LANES = 512

    @_scalar
    def _in_tail(v, scale, limit):
        a = abs(np.float64(v) * scale)
        return (a >= T.ERF_MID) & (a < limit)

    @_function
    def _tail_lanes(part, scale, limit, lanes):
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

    @_scalar
    def _all_lanes(part, values):
        for i in range(part.shape[0]):
            values[i] = part[i]

    @_scalar
    def _store(values, into):
        for i in range(into.shape[0]):
            into[i] = values[i]

    @_scalar
    def _gather(part, lanes, count, values):
        for j in range(count):
            values[j] = part[lanes[j]]

    @_scalar
    def _scatter(values, lanes, count, into):
        for j in range(count):
            into[lanes[j]] = values[j]

    @_function
    def _erf_full(values, count):
        for j in range(count):
            values[j] = erf_scalar(values[j], True)

    @_function
    def _erfc_full(values, count):
        for j in range(count):
            values[j] = erfc_scalar(values[j], True)

    @_function
    def _erf_span(x, out, start, stop):
        src = x[start:stop]
        dst = out[start:stop]
        lanes = np.empty(_LANES, np.int64)
        values = np.empty(_LANES, np.float64)
        for b in range(0, src.shape[0], _LANES):
            part = src[b:b + _LANES]
            into = dst[b:b + _LANES]
            count = _tail_lanes(part, 1.0, T.ERF_BIG, lanes)
            if 4 * count > part.shape[0]:  # mostly tail: every lane in full is cheaper
                _all_lanes(part, values)
                _erf_full(values, part.shape[0])
                _store(values, into)
                continue
            for i in range(part.shape[0]):
                into[i] = erf_scalar(np.float64(part[i]), False)
            _gather(part, lanes, count, values)
            _erf_full(values, count)
            _scatter(values, lanes, count, into)

    @_function
    def _erfc_span(x, out, start, stop):
        src = x[start:stop]
        dst = out[start:stop]
        lanes = np.empty(_LANES, np.int64)
        values = np.empty(_LANES, np.float64)
        for b in range(0, src.shape[0], _LANES):
            part = src[b:b + _LANES]
            into = dst[b:b + _LANES]
            count = _tail_lanes(part, 1.0, T.ERFC_BIG, lanes)
            if 4 * count > part.shape[0]:
                _all_lanes(part, values)
                _erfc_full(values, part.shape[0])
                _store(values, into)
                continue
            for i in range(part.shape[0]):
                into[i] = erfc_scalar(np.float64(part[i]), False)
            _gather(part, lanes, count, values)
            _erfc_full(values, count)
            _scatter(values, lanes, count, into)

    @_function
    def _sigmoid_span(x, out, start, stop):
        src = x[start:stop]
        dst = out[start:stop]
        for i in range(src.shape[0]):
            dst[i] = sigmoid_scalar(np.float64(src[i]))

    @_kernel
    def exp_map(x, out, chunks):
        n = x.shape[0]
        for c in prange(chunks):
            _exp_span(x, out, c * n // chunks, (c + 1) * n // chunks)

    @_kernel
    def expm1_map(x, out, chunks):
        n = x.shape[0]
        for c in prange(chunks):
            _expm1_span(x, out, c * n // chunks, (c + 1) * n // chunks)

    @_kernel
    def log_map(x, out, chunks):
        n = x.shape[0]
        for c in prange(chunks):
            _log_span(x, out, c * n // chunks, (c + 1) * n // chunks)

    @_kernel
    def tanh_map(x, out, chunks):
        n = x.shape[0]
        for c in prange(chunks):
            _tanh_span(x, out, c * n // chunks, (c + 1) * n // chunks)

    @_kernel
    def erf_map(x, out, chunks):
        n = x.shape[0]
        for c in prange(chunks):
            _erf_span(x, out, c * n // chunks, (c + 1) * n // chunks)

    @_kernel
    def erfc_map(x, out, chunks):
        n = x.shape[0]
        for c in prange(chunks):
            _erfc_span(x, out, c * n // chunks, (c + 1) * n // chunks)

    @_kernel
    def sigmoid_map(x, out, chunks):
        n = x.shape[0]
        for c in prange(chunks):
            _sigmoid_span(x, out, c * n // chunks, (c + 1) * n // chunks)

    MAPS = {
        "exp": exp_map, "expm1": expm1_map, "log": log_map, "tanh": tanh_map,
        "erf": erf_map, "erfc": erfc_map, "sigmoid": sigmoid_map,
    }
    SPANS = {
        "exp": _exp_span, "expm1": _expm1_span, "log": _log_span, "tanh": _tanh_span,
        "erf": _erf_span, "erfc": _erfc_span, "sigmoid": _sigmoid_span,
    }

    # --- GELU (the float64 sequences of elementwise.py; c holds its constants) ----------

    @_scalar
    def _gelu_tanh(x, c):
        # c = (INV_SQRT2, INV_SQRT_2PI, SQRT_2_OVER_PI, GELU_TANH_K, GELU_TANH_3K)
        cube = (x * x) * x
        inner = x + cube * c[3]
        y = (x * 0.5) * (tanh_scalar(inner * c[2]) + 1.0)
        if x == -math.inf:
            y = -0.0
        return y

    @_scalar
    def _gelu_erf(x, c, full):
        y = (x * 0.5) * erfc_scalar(x * -c[0], full)
        if x == -math.inf:
            y = -0.0
        return y

    @_scalar
    def _gelu_tanh_slope(x, c):
        square = x * x
        inner = x + (square * x) * c[3]
        t = tanh_scalar(inner * c[2])
        left = (t + 1.0) * 0.5
        sech2 = 1.0 - t * t
        inner_slope = (square * c[4] + 1.0) * c[2]
        slope = left + (x * 0.5) * (sech2 * inner_slope)
        if x == math.inf:
            slope = 1.0
        if x == -math.inf:
            slope = 0.0
        return slope

    @_scalar
    def _gelu_erf_slope(x, c, full):
        cdf = erfc_scalar(x * -c[0], full) * 0.5
        pdf = exp_scalar((x * x) * -0.5) * c[1]
        slope = cdf + x * pdf
        if x == math.inf:
            slope = 1.0
        if x == -math.inf:
            slope = 0.0
        return slope

    @_function
    def _gelu_tanh_span(x, out, c, start, stop):
        src = x[start:stop]
        dst = out[start:stop]
        for i in range(src.shape[0]):
            dst[i] = _gelu_tanh(np.float64(src[i]), c)

    @_function
    def _gelu_erf_full(values, count, c):
        for j in range(count):
            values[j] = _gelu_erf(values[j], c, True)

    @_function
    def _gelu_erf_slope_full(values, count, c):
        for j in range(count):
            values[j] = _gelu_erf_slope(values[j], c, True)

    @_function
    def _gelu_erf_span(x, out, c, start, stop):
        # as _erfc_span: the lanes whose erfc argument lies in the tail are done again in full
        src = x[start:stop]
        dst = out[start:stop]
        lanes = np.empty(_LANES, np.int64)
        values = np.empty(_LANES, np.float64)
        for b in range(0, src.shape[0], _LANES):
            part = src[b:b + _LANES]
            into = dst[b:b + _LANES]
            count = _tail_lanes(part, -c[0], T.ERFC_BIG, lanes)
            if 4 * count > part.shape[0]:
                _all_lanes(part, values)
                _gelu_erf_full(values, part.shape[0], c)
                _store(values, into)
                continue
            for i in range(part.shape[0]):
                into[i] = _gelu_erf(np.float64(part[i]), c, False)
            _gather(part, lanes, count, values)
            _gelu_erf_full(values, count, c)
            _scatter(values, lanes, count, into)

    @_function
    def _gelu_grad_tanh_span(g, x, out, c, start, stop):
        grad = g[start:stop]
        src = x[start:stop]
        dst = out[start:stop]
        for i in range(src.shape[0]):
            dst[i] = np.float64(grad[i]) * _gelu_tanh_slope(np.float64(src[i]), c)

    @_function
    def _gelu_grad_erf_span(g, x, out, c, start, stop):
        # as _gelu_erf_span; the slope is multiplied by g after
        grad = g[start:stop]
        src = x[start:stop]
        dst = out[start:stop]
        lanes = np.empty(_LANES, np.int64)
        values = np.empty(_LANES, np.float64)
        for b in range(0, src.shape[0], _LANES):
            part = src[b:b + _LANES]
            part_g = grad[b:b + _LANES]
            into = dst[b:b + _LANES]
            count = _tail_lanes(part, -c[0], T.ERFC_BIG, lanes)
            if 4 * count > part.shape[0]:
                _all_lanes(part, values)
                _gelu_erf_slope_full(values, part.shape[0], c)
                for i in range(part.shape[0]):
                    into[i] = np.float64(part_g[i]) * values[i]
                continue
            for i in range(part.shape[0]):
                into[i] = np.float64(part_g[i]) * _gelu_erf_slope(np.float64(part[i]), c, False)
            _gather(part, lanes, count, values)
            _gelu_erf_slope_full(values, count, c)
            for j in range(count):
                into[lanes[j]] = np.float64(part_g[lanes[j]]) * values[j]

    @_kernel
    def gelu_tanh_map(x, out, c, chunks):
        n = x.shape[0]
        for k in prange(chunks):
            _gelu_tanh_span(x, out, c, k * n // chunks, (k + 1) * n // chunks)

    @_kernel
    def gelu_erf_map(x, out, c, chunks):
        n = x.shape[0]
        for k in prange(chunks):
            _gelu_erf_span(x, out, c, k * n // chunks, (k + 1) * n // chunks)

    @_kernel
    def gelu_grad_tanh_map(g, x, out, c, chunks):
        n = x.shape[0]
        for k in prange(chunks):
            _gelu_grad_tanh_span(g, x, out, c, k * n // chunks, (k + 1) * n // chunks)

    @_kernel
    def gelu_grad_erf_map(g, x, out, c, chunks):
        n = x.shape[0]
        for k in prange(chunks):
            _gelu_grad_erf_span(g, x, out, c, k * n // chunks, (k + 1) * n // chunks)

    # --- the fixed tree ---------------------------------------------------------------
    # A length n = 2^b1 + 2^b2 + ... (b1 > b2 > ...) splits into complete subtrees of
    # 2^b1, 2^b2, ... consecutive elements, and the tree of reduce.py is
    # C1 + (C2 + (... + Cj)), each C a complete pairwise tree: the levels give that
    # shape (a node at level L covers [i 2^L, min((i+1) 2^L, n))).

    @_scalar
    def _complete_block(src, start, buf, size):
        # the complete subtree of src[start:start+size], size a power of two known when
        # compiling (the kernels pass literals): no odd carries, trip counts LLVM can
        # unroll and vectorize; in place (level[i] is written after 2i and 2i+1 are read)
        part = src[start:start + size]
        level = buf[0]
        for i in range(size // 2):
            level[i] = np.float64(part[2 * i]) + np.float64(part[2 * i + 1])
        n = size // 2
        while n > 1:
            n //= 2
            for i in range(n):
                level[i] = level[2 * i] + level[2 * i + 1]
        return level[0]

    @_scalar
    def _padded_tree(row, start, n, buf):
        # the tree of row[start:start+n], 1 <= n <= _BLOCK, as the complete subtree of
        # 16, 64 or _BLOCK slots with -0.0 after the elements: x + (-0.0) is x for
        # every x (also +-0, inf, NaN), so a pad adds exactly what a carry keeps
        pad = buf[1]
        src = row[start:start + n]
        for i in range(n):
            pad[i] = np.float64(src[i])
        if n <= 16:
            pad[n:16] = -0.0
            return _complete_block(pad, 0, buf, 16)
        if n <= 64:
            pad[n:64] = -0.0
            return _complete_block(pad, 0, buf, 64)
        pad[n:_BLOCK] = -0.0
        return _complete_block(pad, 0, buf, _BLOCK)

    @_function
    def tree_row(row, start, n, buf, stack):
        """The tree of row[start:start+n] in float64 (buf: (2, _BLOCK) float64 scratch).

        Complete blocks of _BLOCK elements join by a binary counter: after j blocks,
        stack[L] holds the complete subtree of 2^L blocks for each bit L set in j, and
        a new block merges with them (left + right) while the bits are set; the rest
        of the row is one more subtree, and the stack folds onto it from the right.
        """
        if n == 0:
            return 0.0
        blocks = n // _BLOCK
        for j in range(blocks):
            s = _complete_block(row, start + j * _BLOCK, buf, _BLOCK)
            level = 0
            done = j
            while done & 1:
                s = stack[level] + s
                done >>= 1
                level += 1
            stack[level] = s
        rest = n - blocks * _BLOCK
        have = rest > 0
        acc = 0.0
        if have:
            acc = _padded_tree(row, start + blocks * _BLOCK, rest, buf)
        level = 0
        while blocks:
            if blocks & 1:
                acc = stack[level] + acc if have else stack[level]
                have = True
            blocks >>= 1
            level += 1
        return acc

    @_function
    def _tree_rows_span(a, out, first, stop):
        n = a.shape[1]
        buf = np.empty((2, _BLOCK), np.float64)
        stack = np.empty(_STACK, np.float64)
        for r in range(first, stop):
            out[r] = tree_row(a[r], 0, n, buf, stack)

    @_kernel
    def tree_rows(a, chunks, out):
        """out[r] = the tree of a[r, :] for a (rows, n) C-contiguous float32/float64 array."""
        rows = a.shape[0]
        for c in prange(chunks):
            _tree_rows_span(a, out, c * rows // chunks, (c + 1) * rows // chunks)

    @_kernel
    def tree_pieces(a, pieces):
        """pieces[r, p] = the tree of a[r, p*_PIECE:(p+1)*_PIECE] (the last piece may be shorter)."""
        rows, n = a.shape
        count = pieces.shape[1]
        for q in prange(rows * count):
            r = q // count
            p = q % count
            buf = np.empty((2, _BLOCK), np.float64)
            stack = np.empty(_STACK, np.float64)
            start = p * _PIECE
            pieces[r, p] = tree_row(a[r], start, min(_PIECE, n - start), buf, stack)

    @_function
    def _tree_cols_tile(a, out, c0, width):
        # Rows enter a binary counter: after j rows, stack[L] holds the complete subtree
        # of 2^L consecutive rows for each bit L set in j; a new row merges with them
        # from level 0 up (left + right) while the bits are set. At the end the
        # subtrees of the bits of n fold from the right.
        n = a.shape[0]
        stack = np.empty((_STACK, width), np.float64)
        s = np.empty(width, np.float64)
        for j in range(n):
            row = a[j, c0:c0 + width]
            if j & 1 == 0:
                bottom = stack[0]
                for w in range(width):
                    bottom[w] = np.float64(row[w])
                continue
            left = stack[0]
            for w in range(width):
                s[w] = left[w] + np.float64(row[w])
            level = 1
            done = j >> 1
            while done & 1:
                left = stack[level]
                for w in range(width):
                    s[w] = left[w] + s[w]
                done >>= 1
                level += 1
            dst = stack[level]
            for w in range(width):
                dst[w] = s[w]
        have = False
        level = 0
        while n >> level:
            if (n >> level) & 1:
                part = stack[level]
                for w in range(width):
                    s[w] = part[w] + s[w] if have else part[w]
                have = True
            level += 1
        for w in range(width):
            out[c0 + w] = s[w]

    @_kernel
    def tree_cols(a, out):
        """out[c] = the tree of a[:, c] for a (n, cols) C-contiguous float32/float64 array, n >= 1."""
        cols = a.shape[1]
        tiles = (cols + _COL_TILE - 1) // _COL_TILE
        for tile in prange(tiles):
            c0 = tile * _COL_TILE
            _tree_cols_tile(a, out, c0, min(_COL_TILE, cols - c0))

    # --- nn rows (the sequences of nn.py, one row at a time) ----------------------------

    @_scalar
    def _shift_of(row, n):
        # float64(max(row) + 0f): NaN if any element is NaN, the zero maximum as +0.
        # The maximum is taken over integer keys that order like the float32 values
        # (negative patterns with their magnitude bits flipped): an exact integer max
        # that vectorizes, where a float max with NaN checks would not.
        bits = row[:n].view(np.int32)
        top = np.int64(-(1 << 31))
        nan = False
        for i in range(n):
            b = np.int64(bits[i])
            top = max(top, b ^ ((b >> 31) & 0x7FFFFFFF))
            nan |= (b & 0x7FFFFFFF) > 0x7F800000
        if nan:
            return np.nan
        value = np.int32(top ^ ((top >> 31) & 0x7FFFFFFF)).view(np.float32)
        return np.float64(value + np.float32(0.0))

    @_function
    def _softmax_span(x, out, first, stop):
        n = x.shape[1]
        e = np.empty(n, np.float64)
        buf = np.empty((2, _BLOCK), np.float64)
        stack = np.empty(_STACK, np.float64)
        for r in range(first, stop):
            row = x[r]
            top = _shift_of(row, n)
            for i in range(n):
                e[i] = exp_scalar(np.float64(row[i]) - top)
            total = tree_row(e, 0, n, buf, stack)
            dst = out[r]
            for i in range(n):
                dst[i] = e[i] / total

    @_kernel
    def softmax_rows(x, chunks, out):
        """out = e / tree(e), e = exp(x - max), per row of a (rows, n) float32 array."""
        rows = x.shape[0]
        for c in prange(chunks):
            _softmax_span(x, out, c * rows // chunks, (c + 1) * rows // chunks)

    @_function
    def _log_softmax_span(x, out, first, stop):
        n = x.shape[1]
        e = np.empty(n, np.float64)
        buf = np.empty((2, _BLOCK), np.float64)
        stack = np.empty(_STACK, np.float64)
        for r in range(first, stop):
            row = x[r]
            top = _shift_of(row, n)
            for i in range(n):
                e[i] = exp_scalar(np.float64(row[i]) - top)
            log_total = log_scalar(tree_row(e, 0, n, buf, stack))
            dst = out[r]
            for i in range(n):
                dst[i] = (np.float64(row[i]) - top) - log_total

    @_kernel
    def log_softmax_rows(x, chunks, out):
        """out = (x - max) - log(tree(exp(x - max))), per row of a (rows, n) float32 array."""
        rows = x.shape[0]
        for c in prange(chunks):
            _log_softmax_span(x, out, c * rows // chunks, (c + 1) * rows // chunks)

    @_function
    def _softmax_grad_span(g, y, out, first, stop):
        n = g.shape[1]
        prod = np.empty(n, np.float64)
        buf = np.empty((2, _BLOCK), np.float64)
        stack = np.empty(_STACK, np.float64)
        for r in range(first, stop):
            gr = g[r]
            yr = y[r]
            for i in range(n):
                prod[i] = np.float64(gr[i]) * np.float64(yr[i])
            dot = tree_row(prod, 0, n, buf, stack)
            dst = out[r]
            for i in range(n):
                dst[i] = np.float64(yr[i]) * (np.float64(gr[i]) - dot)

    @_kernel
    def softmax_grad_rows(g, y, chunks, out):
        """out = y * (g - tree(g * y)), per row; g, y (rows, n) float32."""
        rows = g.shape[0]
        for c in prange(chunks):
            _softmax_grad_span(g, y, out, c * rows // chunks, (c + 1) * rows // chunks)

    @_function
    def _log_softmax_grad_span(g, y, out, first, stop):
        n = g.shape[1]
        buf = np.empty((2, _BLOCK), np.float64)
        stack = np.empty(_STACK, np.float64)
        for r in range(first, stop):
            gr = g[r]
            yr = y[r]
            total = tree_row(gr, 0, n, buf, stack)
            dst = out[r]
            for i in range(n):
                dst[i] = np.float64(gr[i]) - exp_scalar(np.float64(yr[i])) * total

    @_kernel
    def log_softmax_grad_rows(g, y, chunks, out):
        """out = g - exp(y) * tree(g), per row; g, y (rows, n) float32."""
        rows = g.shape[0]
        for c in prange(chunks):
            _log_softmax_grad_span(g, y, out, c * rows // chunks, (c + 1) * rows // chunks)

    @_function
    def _layer_norm_span(x, gamma, beta, eps, out, first, stop):
        n = x.shape[1]
        d = np.empty(n, np.float64)
        sq = np.empty(n, np.float64)
        buf = np.empty((2, _BLOCK), np.float64)
        stack = np.empty(_STACK, np.float64)
        for r in range(first, stop):
            row = x[r]
            mean = tree_row(row, 0, n, buf, stack) / n
            for i in range(n):
                v = np.float64(row[i]) - mean
                d[i] = v
                sq[i] = v * v
            rstd = 1.0 / math.sqrt(tree_row(sq, 0, n, buf, stack) / n + eps)
            dst = out[r]
            for i in range(n):
                dst[i] = ((d[i] * rstd) * np.float64(gamma[i])) + np.float64(beta[i])

    @_kernel
    def layer_norm_rows(x, gamma, beta, eps, chunks, out):
        """out = ((x - mean) * rstd) * gamma + beta per row of a (rows, n) float32 array."""
        rows = x.shape[0]
        for c in prange(chunks):
            _layer_norm_span(x, gamma, beta, eps, out, c * rows // chunks, (c + 1) * rows // chunks)

    @_function
    def _layer_norm_grad_x_span(g, x, gamma, eps, out, first, stop):
        n = x.shape[1]
        xhat = np.empty(n, np.float64)
        gg = np.empty(n, np.float64)
        tmp = np.empty(n, np.float64)
        buf = np.empty((2, _BLOCK), np.float64)
        stack = np.empty(_STACK, np.float64)
        for r in range(first, stop):
            row = x[r]
            mean = tree_row(row, 0, n, buf, stack) / n
            for i in range(n):
                v = np.float64(row[i]) - mean
                xhat[i] = v
                tmp[i] = v * v
            rstd = 1.0 / math.sqrt(tree_row(tmp, 0, n, buf, stack) / n + eps)
            gr = g[r]
            for i in range(n):
                xhat[i] = xhat[i] * rstd
                gg[i] = np.float64(gr[i]) * np.float64(gamma[i])
                tmp[i] = gg[i] * xhat[i]
            mean_gg = tree_row(gg, 0, n, buf, stack) / n
            mean_gg_xhat = tree_row(tmp, 0, n, buf, stack) / n
            dst = out[r]
            for i in range(n):
                dst[i] = ((gg[i] - mean_gg) - xhat[i] * mean_gg_xhat) * rstd

    @_kernel
    def layer_norm_grad_x_rows(g, x, gamma, eps, chunks, out):
        """out = rstd * ((gg - tree(gg)/n) - xhat * (tree(gg * xhat)/n)), gg = g * gamma, per row."""
        rows = x.shape[0]
        for c in prange(chunks):
            _layer_norm_grad_x_span(g, x, gamma, eps, out, c * rows // chunks, (c + 1) * rows // chunks)

    @_function
    def _layer_norm_xhat_g_span(g, x, eps, out, first, stop):
        n = x.shape[1]
        sq = np.empty(n, np.float64)
        buf = np.empty((2, _BLOCK), np.float64)
        stack = np.empty(_STACK, np.float64)
        for r in range(first, stop):
            row = x[r]
            dst = out[r]
            mean = tree_row(row, 0, n, buf, stack) / n
            for i in range(n):
                v = np.float64(row[i]) - mean
                dst[i] = v
                sq[i] = v * v
            rstd = 1.0 / math.sqrt(tree_row(sq, 0, n, buf, stack) / n + eps)
            gr = g[r]
            for i in range(n):
                dst[i] = (dst[i] * rstd) * np.float64(gr[i])

    @_kernel
    def layer_norm_xhat_g_rows(g, x, eps, chunks, out):
        """out (float64) = xhat * g per row: the addends of layer_norm_grad_gamma."""
        rows = x.shape[0]
        for c in prange(chunks):
            _layer_norm_xhat_g_span(g, x, eps, out, c * rows // chunks, (c + 1) * rows // chunks)

    @_function
    def _cross_entropy_span(x, targets, picked, first, stop):
        n = x.shape[1]
        e = np.empty(n, np.float64)
        buf = np.empty((2, _BLOCK), np.float64)
        stack = np.empty(_STACK, np.float64)
        for r in range(first, stop):
            row = x[r]
            top = _shift_of(row, n)
            for i in range(n):
                e[i] = exp_scalar(np.float64(row[i]) - top)
            log_total = log_scalar(tree_row(e, 0, n, buf, stack))
            picked[r] = (np.float64(row[targets[r]]) - top) - log_total

    @_kernel
    def cross_entropy_rows(x, targets, chunks, picked):
        """picked[r] = (x[r, t] - max) - log(tree(exp(x[r] - max))), t = targets[r] (float64)."""
        rows = x.shape[0]
        for c in prange(chunks):
            _cross_entropy_span(x, targets, picked, c * rows // chunks, (c + 1) * rows // chunks)

    @_function
    def _cross_entropy_grad_span(x, targets, scale, out, first, stop):
        n = x.shape[1]
        e = np.empty(n, np.float64)
        buf = np.empty((2, _BLOCK), np.float64)
        stack = np.empty(_STACK, np.float64)
        for r in range(first, stop):
            row = x[r]
            top = _shift_of(row, n)
            for i in range(n):
                e[i] = exp_scalar(np.float64(row[i]) - top)
            total = tree_row(e, 0, n, buf, stack)
            t = targets[r]
            dst = out[r]
            for i in range(n):
                p = e[i] / total
                if i == t:
                    p = p - 1.0
                dst[i] = p * scale

    @_kernel
    def cross_entropy_grad_rows(x, targets, scale, chunks, out):
        """out = (e / tree(e) - onehot(t)) * scale per row, e = exp(x - max)."""
        rows = x.shape[0]
        for c in prange(chunks):
            _cross_entropy_grad_span(x, targets, scale, out, c * rows // chunks, (c + 1) * rows // chunks)

# --- entry points for the operator modules (NumPy arrays only) ------------------------


def _chunks(rows: int, per_row: int) -> int:
    """Row groups for prange: enough to share among threads, each worth starting a thread for."""
    return max(1, min(rows, 64, rows * per_row // 8192))


def map_unary(name: str, x: np.ndarray, out_dtype) -> np.ndarray:
    """The compiled primitive `name` over every element of x (float32 or float64), C-order result."""
    flat = np.ascontiguousarray(x).reshape(-1)
    out = np.empty(flat.shape, dtype=out_dtype)
    chunks = _chunks(flat.size, 1)
    if chunks == 1:  # not worth waking threads
        SPANS[name](flat, out, 0, flat.size)
    else:
        MAPS[name](flat, out, chunks)
    return out.reshape(x.shape)


def tree_last(a: np.ndarray) -> np.ndarray:
    """The tree over the last axis of a (rows, n) float32/float64 array; float64 (rows,)."""
    a = np.ascontiguousarray(a)
    rows, n = a.shape
    if n > _PIECE:
        pieces = np.empty((rows, -(-n // _PIECE)), np.float64)
        tree_pieces(a, pieces)
        a, n = pieces, pieces.shape[1]
    out = np.empty(rows, np.float64)
    if rows:
        tree_rows(a, _chunks(rows, n), out)
    return out


def tree_first(a: np.ndarray) -> np.ndarray:
    """The tree over the first axis of an (n, cols) float32/float64 array; float64 (cols,)."""
    a = np.ascontiguousarray(a)
    n, cols = a.shape
    out = np.zeros(cols, np.float64)
    if n and cols:
        tree_cols(a, out)
    return out


def _gelu_constants() -> tuple[float, ...]:
    from . import elementwise as E  # at call time: elementwise imports this module's users

    return (E.INV_SQRT2, E.INV_SQRT_2PI, E.SQRT_2_OVER_PI, E.GELU_TANH_K, E.GELU_TANH_3K)


def gelu(x: np.ndarray, approximate: str) -> np.ndarray:
    """elementwise.gelu on the compiled path (float32 in and out)."""
    flat = np.ascontiguousarray(x).reshape(-1)
    out = np.empty(flat.shape, np.float32)
    kernel = gelu_tanh_map if approximate == "tanh" else gelu_erf_map
    kernel(flat, out, _gelu_constants(), _chunks(flat.size, 1))
    return out.reshape(x.shape)


def gelu_grad(g: np.ndarray, x: np.ndarray, approximate: str) -> np.ndarray:
    """elementwise.gelu_grad on the compiled path (float32 in and out)."""
    flat_g = np.ascontiguousarray(g).reshape(-1)
    flat_x = np.ascontiguousarray(x).reshape(-1)
    out = np.empty(flat_x.shape, np.float32)
    kernel = gelu_grad_tanh_map if approximate == "tanh" else gelu_grad_erf_map
    kernel(flat_g, flat_x, out, _gelu_constants(), _chunks(flat_x.size, 1))
    return out.reshape(x.shape)


def _rows(x: np.ndarray, axis: int) -> np.ndarray:
    """x with `axis` moved last, as a C-contiguous (rows, n) array (no copy when it already is)."""
    moved = np.moveaxis(x, axis, -1)
    return np.ascontiguousarray(moved).reshape(-1, moved.shape[-1])


def _unrows(out: np.ndarray, x: np.ndarray, axis: int) -> np.ndarray:
    """The inverse of `_rows` for a result shaped like x, C-contiguous."""
    moved_shape = np.moveaxis(x, axis, -1).shape
    return np.ascontiguousarray(np.moveaxis(out.reshape(moved_shape), -1, axis))


def _row_op(kernel, axis: int, first: np.ndarray, *others: np.ndarray) -> np.ndarray:
    """A float32 row kernel over `axis` of same-shaped float32 arrays."""
    rows = [_rows(a, axis) for a in (first, *others)]
    out = np.empty(rows[0].shape, np.float32)
    kernel(*rows, _chunks(*rows[0].shape), out)
    return _unrows(out, first, axis)


def softmax(x: np.ndarray, axis: int) -> np.ndarray:
    return _row_op(softmax_rows, axis, x)


def log_softmax(x: np.ndarray, axis: int) -> np.ndarray:
    return _row_op(log_softmax_rows, axis, x)


def softmax_grad(g: np.ndarray, y: np.ndarray, axis: int) -> np.ndarray:
    return _row_op(softmax_grad_rows, axis, g, y)


def log_softmax_grad(g: np.ndarray, y: np.ndarray, axis: int) -> np.ndarray:
    return _row_op(log_softmax_grad_rows, axis, g, y)


def layer_norm(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float) -> np.ndarray:
    rows = _rows(x, -1)
    out = np.empty(rows.shape, np.float32)
    layer_norm_rows(rows, np.ascontiguousarray(gamma), np.ascontiguousarray(beta), float(eps),
                    _chunks(*rows.shape), out)
    return out.reshape(x.shape)


def layer_norm_grad_x(g: np.ndarray, x: np.ndarray, gamma: np.ndarray, eps: float) -> np.ndarray:
    rows = _rows(x, -1)
    out = np.empty(rows.shape, np.float32)
    layer_norm_grad_x_rows(_rows(g, -1), rows, np.ascontiguousarray(gamma), float(eps), _chunks(*rows.shape), out)
    return out.reshape(x.shape)


def layer_norm_xhat_g(g: np.ndarray, x: np.ndarray, eps: float) -> np.ndarray:
    """xhat * g in float64 as (rows, D): the addends of layer_norm_grad_gamma."""
    rows = _rows(x, -1)
    out = np.empty(rows.shape, np.float64)
    layer_norm_xhat_g_rows(_rows(g, -1), rows, float(eps), _chunks(*rows.shape), out)
    return out


def cross_entropy_picked(logits: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """log_softmax(logits)[n, targets[n]] in float64, shape (N,)."""
    rows = np.ascontiguousarray(logits)
    picked = np.empty(rows.shape[0], np.float64)
    cross_entropy_rows(rows, targets.astype(np.int64), _chunks(*rows.shape), picked)
    return picked


def cross_entropy_grad(logits: np.ndarray, targets: np.ndarray, scale: float) -> np.ndarray:
    """(softmax(logits) - onehot(targets)) * scale, rounded to float32."""
    rows = np.ascontiguousarray(logits)
    out = np.empty(rows.shape, np.float32)
    cross_entropy_grad_rows(rows, targets.astype(np.int64), float(scale), _chunks(*rows.shape), out)
    return out
