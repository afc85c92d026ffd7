"""Compiled CPU kernels for the matrix product: the same values as `_matmul_spec`, faster.

Splitting into digits and the final combine are memory-bound chains of NumPy
temporaries; here each element goes through its chain once, on all cores. numba
compiles without fastmath, so every float operation is the IEEE operation that the
array code performs (no contraction into FMA, no reassociation); the integer steps are
exact. Tests compare every kernel bit for bit with `_matmul_spec`.

Each kernel exists twice, in `parallel` (numba threads; worth it on large operands)
and `serial` (no thread start-up cost, for small ones); both compute the same values.
numba is optional: `AVAILABLE` is False without it and `matmul.py` uses the array code.
"""
from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np

from ._matmul_spec import DIGIT_BITS, DIGITS, SPLIT_WEIGHT, TOP_BIT

try:
    from numba import njit, prange
except ImportError:  # pragma: no cover - exercised only where numba is absent
    AVAILABLE = False
else:
    AVAILABLE = True

if AVAILABLE:
    _KERNELS = {}

    def _jit(fn):  # the kernel is compiled in both variants, see the module docstring
        _KERNELS[fn.__name__] = fn
        return fn

    _jit_serial = njit(cache=True, nogil=True)

    _ABS_MASK = 0x7FFFFFFF
    _INF_BITS = 0x7F800000

    @_jit_serial
    def _shift_of(abs_bits, buf_f, buf_i):
        # |max| as float32 bits -> frexp exponent e; |max| * 2^(38 - e) lies in [2^37, 2^38).
        buf_i[0] = abs_bits
        return TOP_BIT + 1 - math.frexp(np.float64(buf_f[0]))[1]

    @_jit_serial
    def _finite_abs_max(bits, start, count, stride):
        # the slow path for a row or column that holds inf/NaN: max over the finite entries
        big = 0
        for c in range(count):
            u = bits.flat[start + c * stride] & _ABS_MASK
            big = max(big, u if u < _INF_BITS else 0)
        return big

    @_jit
    def row_shifts(bits, shift, nonfinite):
        """Per row of float32 bits (M, K) int32 (C order): exponent shift, and whether it holds inf/NaN.

        For non-negative floats the order of the bit patterns is the order of the
        values, so the largest |value| is an integer max (exact, order-free). A row
        whose max pattern is inf/NaN takes a second pass over its finite entries.
        """
        m, k = bits.shape
        for i in prange(m):
            buf_f = np.zeros(1, np.float32)
            big = 0
            for c in range(k):
                big = max(big, bits[i, c] & _ABS_MASK)
            nonfinite[i] = big >= _INF_BITS
            if big >= _INF_BITS:
                big = _finite_abs_max(bits, i * k, k, 1)
            shift[i] = _shift_of(big, buf_f, buf_f.view(np.int32))

    @_jit
    def col_shifts(bits, shift, nonfinite):
        """Per column of a batch of float32 bits (Bt, K, N) int32 (C order): shift and inf/NaN flag (Bt, N)."""
        nb, k, n = bits.shape
        blocks = max(1, min(k, 64 // nb))  # row blocks, reduced after (max is exact, order-free)
        big = np.zeros((nb, blocks, n), np.int32)
        for task in prange(nb * blocks):
            bt, blk = task // blocks, task % blocks
            row_max = big[bt, blk]
            for r in range(blk * k // blocks, (blk + 1) * k // blocks):
                row = bits[bt, r]
                for j in range(n):
                    row_max[j] = max(row_max[j], row[j] & _ABS_MASK)
        buf_f = np.zeros(1, np.float32)
        buf_i = buf_f.view(np.int32)
        for bt in range(nb):
            for j in range(n):
                top = 0
                for blk in range(blocks):
                    top = max(top, big[bt, blk, j])
                nonfinite[bt, j] = top >= _INF_BITS
                if top >= _INF_BITS:
                    top = _finite_abs_max(bits, (bt * k) * n + j, k, n)
                shift[bt, j] = _shift_of(top, buf_f, buf_i)

    @_jit_serial
    def _digits_of(rest, planes, first, step):
        # the balanced digits of the integers in `rest` (overwritten), least significant
        # first, into planes[first + step * s]: one pass per digit, so the loops vectorise
        n = rest.shape[0]
        for s in range(DIGITS - 1):
            plane = planes[first + step * s]
            for j in range(n):
                r = rest[j]
                d = ((r + 128) & 255) - 128
                plane[j] = d
                rest[j] = (r - d) >> DIGIT_BITS
        plane = planes[first + step * (DIGITS - 1)]
        for j in range(n):
            plane[j] = rest[j]

    @_jit_serial
    def _scaled(v):
        # rint(v) as int64 for v = x * 2^shift (exact), a non-finite x counting as 0;
        # rint is the one truncation of the specification
        return np.int64(np.rint(v if abs(v) < 1e300 else 0.0))

    @_jit
    def split_rows(a, shift, k0, out):
        """Digits of a[:, k0:k0+L] into out (M, DIGITS, L) int8, most significant first."""
        m = a.shape[0]
        width = out.shape[2]
        blocks = min(m, 64)  # row blocks: one task each, scratch allocated per block
        for blk in prange(blocks):
            rest = np.empty(width, np.int64)
            for i in range(blk * m // blocks, (blk + 1) * m // blocks):
                scale = math.ldexp(1.0, shift[i])
                row = a[i, k0:k0 + width]
                for j in range(width):
                    rest[j] = _scaled(np.float64(row[j]) * scale)  # float32 -> float64 exact
                _digits_of(rest, out[i], DIGITS - 1, -1)

    @_jit
    def split_cols(b, shift, k0, out):
        """Digits of b[:, k0:k0+L, :] (Bt, K, N) into out (Bt, DIGITS, L, N) int8, least significant first."""
        nb, _, n = b.shape
        width = out.shape[2]
        scale = np.empty((nb, n), np.float64)
        for bt in range(nb):
            for j in range(n):
                scale[bt, j] = math.ldexp(1.0, shift[bt, j])
        tasks = nb * width
        blocks = min(tasks, 64)  # (product, row) tasks in blocks, scratch allocated per block
        for blk in prange(blocks):
            rest = np.empty(n, np.int64)
            for task in range(blk * tasks // blocks, (blk + 1) * tasks // blocks):
                bt, r = task // width, task % width
                row, cols = b[bt, k0 + r], scale[bt]
                for j in range(n):
                    rest[j] = _scaled(np.float64(row[j]) * cols[j])  # float32 -> float64 exact
                _digits_of(rest, out[bt, :, r], 0, 1)

    @_jit_serial
    def _add_planes(planes, weights, i, h, low):
        # row i of sum_q planes[q] * 2^weights[q] into h * 2^24 + low (exact int64)
        n = h.shape[0]
        for q in range(planes.shape[0]):
            w = weights[q]
            if w >= SPLIT_WEIGHT:
                mult = np.int64(1) << (w - SPLIT_WEIGHT)
                for j in range(n):
                    h[j] += np.int64(planes[q, i, j]) * mult
            else:
                mult = np.int64(1) << w
                for j in range(n):
                    low[j] += np.int64(planes[q, i, j]) * mult
        for j in range(n):
            h[j] += low[j] >> SPLIT_WEIGHT
            low[j] &= (1 << SPLIT_WEIGHT) - 1

    @_jit
    def accumulate(planes, weights, hi, lo):
        """hi * 2^24 + lo += sum_q planes[q] * 2^weights[q], exactly; lo kept in [0, 2^24)."""
        m = planes.shape[1]
        for i in prange(m):
            _add_planes(planes, weights, i, hi[i], lo[i])

    @_jit_serial
    def _round_rows(planes, weights, row_factor, col_factor, hi, lo, out, first, last, rows_per_batch):
        # rows first..last-1 of `combine`; scratch rows are allocated once per call
        n = out.shape[1]
        carry = hi.shape[0] > 0
        mask = (1 << SPLIT_WEIGHT) - 1
        h = np.zeros(n, np.int64)
        low = np.zeros(n, np.int64)
        total = np.empty(n, np.float64)
        err = np.empty(n, np.float64)
        bits = total.view(np.int64)
        for i in range(first, last):
            if carry:
                h[:] = hi[i]
                low[:] = lo[i]
            else:
                h[:] = 0
                low[:] = 0
            _add_planes(planes, weights, i, h, low)
            for j in range(n):
                top = np.float64(h[j] >> SPLIT_WEIGHT) * 281474976710656.0  # 2^48, exact
                rest = np.float64(((h[j] & mask) << SPLIT_WEIGHT) | low[j])  # exact, < 2^48
                t = top + rest
                total[j] = t
                err[j] = rest - (t - top)  # Fast2Sum error, exact
            for j in range(n):
                # round to odd: an inexact sum with an even last bit moves to its odd
                # neighbour on the side of the error (branch-free, so the loop vectorises)
                e = err[j]
                b = bits[j]
                fix = np.int64((e != 0.0) & ((b & 1) == 0))
                step = np.int64(1) if (total[j] > 0.0) == (e > 0.0) else np.int64(-1)
                bits[j] = b + fix * step
            cols = col_factor[i // rows_per_batch]
            rf = row_factor[i]
            for j in range(n):
                out[i, j] = np.float32(total[j] * (rf * cols[j]))  # exact: product of powers of two

    @_jit
    def combine(planes, weights, row_factor, col_factor, hi, lo, out):
        """out = float32 of (hi * 2^24 + lo + sum_q planes[q] * 2^weights[q]) * factors.

        Rows are Bt stacked blocks of M: row i takes col_factor[i // M]. hi and lo carry
        earlier K chunks; pass 0-by-0 arrays when there are none. The rounding follows
        _matmul_spec.round_hi_lo step by step.
        """
        m = out.shape[0]
        rows_per_batch = m // col_factor.shape[0]
        blocks = min(m, 64)  # row blocks: one task each, scratch allocated per block
        for blk in prange(blocks):
            _round_rows(planes, weights, row_factor, col_factor, hi, lo, out,
                        blk * m // blocks, (blk + 1) * m // blocks, rows_per_batch)

    parallel = SimpleNamespace(**{n: njit(parallel=True, cache=True, nogil=True)(f) for n, f in _KERNELS.items()})
    serial = SimpleNamespace(**{n: njit(cache=True, nogil=True)(f) for n, f in _KERNELS.items()})
