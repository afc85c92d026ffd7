"""The element program of the matrix product (issue 18), read off `repops_cupy.matmul`'s spec.

C[i, j] of op(A) @ op(B), float32, batch axes broadcast, as `repops_cupy/matmul.py` specifies
it, one step at a time (the constants come from `repops_cupy._matmul_spec`):

1. scale: e = frexp exponent of the largest finite |a| of row i (|b| of column j);
   shift = TOP_BIT + 1 - e (an all-zero row: TOP_BIT + 1);
2. truncate: X = rint(ldexp(a, shift)) as int64 (non-finite entries count as 0);
3. digits: balanced base 2^DIGIT_BITS, residues in [-128, 128) from the bottom, the rest on top;
4. sum: per kept digit pair (s, t), P = Σ_k α_s β_t exactly in int64, then hi·2^24 + lo =
   Σ P · 2^pair_weight_bits(s, t), lo normalised into [0, 2^24);
5. round: `round_hi_lo`'s steps (the value to float64 by rounding to odd, times the two
   power-of-two factors, to float32).

Non-finite inputs: S = Σ_k a_k · b_k in float64 is finite exactly when row i and column j are
(finite float32 products cannot overflow float64), and where it is not, S is what IEEE gives
for the exact products (NaN for a NaN, inf · 0 or inf − inf, else the infinity): that is the
output then, as `nonfinite_block` specifies.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from repops_cupy import _matmul_spec as M

from .step_trace import Tracer, Val, View

__all__ = ["matmul_program", "matmul_views"]

_U64 = (1 << 64) - 1


def _dims(attrs: Mapping[str, Any], shapes: Sequence[tuple[int, ...]]) -> tuple[int, int, int]:
    a, b = shapes
    m, k = (a[-1], a[-2]) if attrs.get("transpose_a") else (a[-2], a[-1])
    n = b[-2] if attrs.get("transpose_b") else b[-1]
    return m, k, n


def _batch_strides(shape: tuple[int, ...], batch: tuple[int, ...]) -> list[int]:
    """Strides of an operand's batch axes within the output's batch axes (0 where broadcast)."""
    own = shape[:-2]
    size = shape[-2] * shape[-1]
    strides = []
    for axis in range(len(own) - 1, -1, -1):
        strides.append(0 if own[axis] == 1 and batch[len(batch) - len(own) + axis] != 1 else size)
        size *= own[axis]
    strides.reverse()
    return [0] * (len(batch) - len(own)) + strides


def matmul_views(attrs: Mapping[str, Any],
                 shapes: Sequence[tuple[int, ...]]) -> tuple[tuple[int, ...], tuple[View, ...]]:
    a, b = (tuple(s) for s in shapes)
    m, k, n = _dims(attrs, shapes)
    batch = tuple(np.broadcast_shapes(a[:-2], b[:-2]))
    out = batch + (m, n)
    # row i of op(A): element (i, kk) sits at i*K + kk, or kk*M + i when transposed
    a_row = (1, 0) if attrs.get("transpose_a") else (k, 0)
    # column j of op(B): element (kk, j) sits at kk*N + j, or j*K + kk when transposed
    b_col = (0, k) if attrs.get("transpose_b") else (0, 1)
    return out, (View(0, tuple(_batch_strides(a, batch)) + a_row), View(1, tuple(_batch_strides(b, batch)) + b_col))


def _i(t: Tracer, n: int) -> Val:
    return t.const(n & _U64)


def _scaled_digits(t: Tracer, x32: Sequence[Val]) -> tuple[list[list[Val]], Val, list[Val]]:
    """The digits (most significant first, per value) of one row or column, its shift, and its float64 values."""
    inf = t.c64(float("inf"))
    x64 = [t.f32_to_f64(v) for v in x32]
    finite = [t.select(t.f64_lt(t.f64_abs(v), inf), v, t.c64(0.0)) for v in x64]
    top = t.c64(0.0)
    for v in finite:
        top = t.f64_max(top, t.f64_abs(v))
    shift = t.i64_sub(_i(t, M.TOP_BIT + 1), t.f64_frexp_exponent(top))
    half, mask = 1 << (M.DIGIT_BITS - 1), (1 << M.DIGIT_BITS) - 1
    digits = []
    for v in finite:
        rest = t.f64_to_i64(t.f64_rint(t.f64_ldexp(v, shift)))
        ds = []
        for _ in range(M.DIGITS - 1):
            d = t.i64_sub(t.bit_and(t.i64_add(rest, _i(t, half)), _i(t, mask)), _i(t, half))
            ds.append(d)
            rest = t.i64_sar(t.i64_sub(rest, d), _i(t, M.DIGIT_BITS))
        ds.append(rest)
        digits.append(ds[::-1])
    return digits, shift, x64


def matmul_program(t: Tracer, attrs: Mapping[str, Any], shapes: Sequence[tuple[int, ...]]) -> Val:
    m, k, n = _dims(attrs, shapes)
    a_step = m if attrs.get("transpose_a") else 1
    b_step = 1 if attrs.get("transpose_b") else n
    alpha, sigma, a64 = _scaled_digits(t, [t.input(0, kk * a_step) for kk in range(k)])
    beta, tau, b64 = _scaled_digits(t, [t.input(1, kk * b_step) for kk in range(k)])
    # exact digit-pair sums, then hi * 2^24 + lo
    hi, lo = _i(t, 0), _i(t, 0)
    for s, u in M.kept_pairs():
        p = _i(t, 0)
        for kk in range(k):
            p = t.i64_add(p, t.i64_mul(alpha[kk][s], beta[kk][u]))
        w = M.pair_weight_bits(s, u)
        if w >= M.SPLIT_WEIGHT:
            hi = t.i64_add(hi, t.i64_mul(p, _i(t, 1 << (w - M.SPLIT_WEIGHT))))
        else:
            lo = t.i64_add(lo, t.i64_mul(p, _i(t, 1 << w)))
    split = _i(t, M.SPLIT_WEIGHT)
    mask = _i(t, (1 << M.SPLIT_WEIGHT) - 1)
    hi = t.i64_add(hi, t.i64_sar(lo, split))
    lo = t.bit_and(lo, mask)
    # round_hi_lo: to float64 by rounding to odd, then the factors, then float32
    top = t.f64_mul(t.i64_to_f64(t.i64_sar(hi, split)), t.c64(float(1 << 48)))
    low = t.i64_to_f64(t.bit_or(t.i64_mul(t.bit_and(hi, mask), _i(t, 1 << M.SPLIT_WEIGHT)), lo))
    total = t.f64_add(top, low)
    err = t.f64_sub(low, t.f64_sub(total, top))
    inexact_even = t.bit_and(t.select(t.f64_eq(err, t.c64(0.0)), _i(t, 0), _i(t, 1)),
                             t.select(t.bit_and(total, _i(t, 1)), _i(t, 0), _i(t, 1)))
    same_side = t.select(t.i64_sub(t.f64_lt(t.c64(0.0), total), t.f64_lt(t.c64(0.0), err)), _i(t, 0), _i(t, 1))
    total = t.select(inexact_even, t.i64_add(total, t.select(same_side, _i(t, 1), _i(t, -1))), total)
    row_factor = t.f64_ldexp(t.c64(1.0), t.i64_sub(_i(t, 12), sigma))
    col_factor = t.f64_ldexp(t.c64(1.0), t.i64_sub(_i(t, 12), tau))
    finite_out = t.f64_to_f32(t.f64_mul(t.f64_mul(total, row_factor), col_factor))
    # a non-finite row or column: the IEEE sum of the products
    products = t.c64(0.0)
    for x, y in zip(a64, b64):
        products = t.f64_add(products, t.f64_mul(x, y))
    out = t.select(t.f64_lt(t.f64_abs(products), t.c64(float("inf"))), finite_out, t.f64_to_f32(products))
    return t.f32_canon(out)

