"""The reproducible matrix product, written over the array module: the defining code path.

Everything here is plain array arithmetic that is exact or correctly rounded on NumPy
and CuPy alike (integer ops, power-of-two scaling, one IEEE rounding per step). The
compiled CPU kernels in `_matmul_cpu` compute the same values and are tested bit for
bit against these functions. `matmul.py` holds the specification in words.
"""
from __future__ import annotations

from types import ModuleType
from typing import Any

import numpy as np

DIGITS = 5  # balanced base-256 digits per scaled value
DIGIT_BITS = 8
TOP_BIT = DIGIT_BITS * DIGITS - 3  # a row's largest |value| is scaled into [2^37, 2^38)
MAX_DIAGONAL = DIGITS  # digit pairs (s, t) are kept where s + t <= 5
# V' = sum of kept pairs, weight 2^(8 * (5 - s - t)); it is held as hi * 2^24 + lo.
SPLIT_WEIGHT = 24
MAX_K = 1 << 30  # hi and lo stay below 2^63 for every K under this (see matmul.py)


def kept_pairs() -> list[tuple[int, int]]:
    """(s, t) digit-index pairs of A and B whose products are summed; s = 0 is the top digit."""
    return [(s, t) for s in range(DIGITS) for t in range(DIGITS) if s + t <= MAX_DIAGONAL]


def pair_weight_bits(s: int, t: int) -> int:
    """log2 of the weight of digit pair (s, t) in V' = V / 2^24."""
    return DIGIT_BITS * (MAX_DIAGONAL - s - t)


def exponent_shift(absmax: Any, xp: ModuleType) -> Any:
    """Per-row (or column) shift s with |largest| * 2^s in [2^37, 2^38); 38 for an all-zero row."""
    _, e = xp.frexp(absmax.astype(xp.float64))  # exact: frexp returns the binary exponent
    return (TOP_BIT + 1 - e).astype(xp.int32)


def finite_part(x: Any, xp: ModuleType) -> tuple[Any, Any]:
    """x with non-finite entries replaced by 0, and the mask of entries that were non-finite."""
    bad = ~xp.isfinite(x)
    if not bool(bad.any()):
        return x, bad
    return xp.where(bad, xp.float32(0), x), bad


def scaled_integers(x: Any, shift: Any, xp: ModuleType) -> Any:
    """rint(x * 2^shift) as int64; `shift` broadcasts against x (per row or per column)."""
    # x is float32, so x * 2^shift is exact in float64 (|result| < 2^38, no underflow);
    # rint (nearest, ties to even) is the one truncation of the specification.
    return xp.rint(xp.ldexp(x.astype(xp.float64), shift)).astype(xp.int64)


def balanced_digits(big: Any, xp: ModuleType) -> list[Any]:
    """Digits of int64 values |X| < 2^38, most significant first.

    X = sum_s d_s * 2^(8 * (4 - s)) with d_1..d_4 in [-128, 127] (each the residue of X
    mod 256 taken in [-128, 128)) and d_0 the rest, which lies in [-64, 64].
    """
    digits = []
    rest = big
    for _ in range(DIGITS - 1):
        d = ((rest + 128) & 255) - 128
        digits.append(d)
        rest = (rest - d) >> DIGIT_BITS  # exact: rest - d is a multiple of 256
    digits.append(rest)
    return digits[::-1]


def split_lhs(a: Any, shift: Any, xp: ModuleType) -> Any:
    """Digits of A (R, K), shift per row, as int8 (R, DIGITS, K): most significant first."""
    digits = balanced_digits(scaled_integers(a, shift[:, None], xp), xp)
    return xp.stack([d.astype(xp.int8) for d in digits], axis=1)


def split_rhs(b: Any, shift: Any, xp: ModuleType) -> Any:
    """Digits of a batch of B (Bt, K, N), shift (Bt, N), as int8 (Bt, DIGITS, K, N).

    Least significant first: stored in this order, the B planes that meet A digits 0,
    1, 2, ... on one diagonal s + t = d are consecutive, so one diagonal is one product
    of contiguous blocks.
    """
    digits = balanced_digits(scaled_integers(b, shift[:, None, :], xp), xp)
    return xp.stack([d.astype(xp.int8) for d in digits[::-1]], axis=1)


def scale_factors(shift: Any, xp: ModuleType) -> Any:
    """2^(12 - shift): the row factor times the column factor is 2^(24 - sa - sb)."""
    return xp.ldexp(xp.ones(shift.shape, xp.float64), 12 - shift.astype(xp.int32))


def combine(planes: Any, weights: list[int], row_factor: Any, col_factor: Any, xp: ModuleType,
            carry: tuple[Any, Any] | None = None) -> Any:
    """Round sum_q planes[q] * 2^weights[q] * row_factor * col_factor once to float32.

    The factors broadcast against planes[q] (e.g. (Bt, M, 1) and (Bt, 1, N)).

    `planes` holds exact integers (int32, int64 or integer-valued float64). The sum is
    formed exactly as hi * 2^24 + lo in int64, converted to float64 by rounding to odd,
    scaled by a power of two (exact) and rounded to float32: rounding to odd at 53 bits
    and then to nearest at 24 bits is the correct rounding of the exact value.
    """
    hi, lo = accumulate(planes, weights, xp, carry)
    return round_hi_lo(hi, lo, row_factor, col_factor, xp)


def accumulate(planes: Any, weights: list[int], xp: ModuleType,
               carry: tuple[Any, Any] | None = None) -> tuple[Any, Any]:
    """Exact int64 (hi, lo) with value hi * 2^24 + lo, lo normalised into [0, 2^24)."""
    shape = planes.shape[1:]
    hi = xp.zeros(shape, xp.int64) if carry is None else carry[0].copy()
    lo = xp.zeros(shape, xp.int64) if carry is None else carry[1].copy()
    for q, w in enumerate(weights):
        p = planes[q].astype(xp.int64)  # exact: integer-valued, |p| < 2^53
        if w >= SPLIT_WEIGHT:
            hi += p * (1 << (w - SPLIT_WEIGHT))
        else:
            lo += p * (1 << w)
    hi += lo >> SPLIT_WEIGHT
    lo &= (1 << SPLIT_WEIGHT) - 1
    return hi, lo


def round_hi_lo(hi: Any, lo: Any, row_factor: Any, col_factor: Any, xp: ModuleType) -> Any:
    """float32 of (hi * 2^24 + lo) * row_factor * col_factor, rounded once (see `combine`)."""
    mask = (1 << SPLIT_WEIGHT) - 1
    top = (hi >> SPLIT_WEIGHT).astype(xp.float64) * float(1 << 48)  # exact: |hi >> 24| < 2^53
    low = (((hi & mask) << SPLIT_WEIGHT) | lo).astype(xp.float64)  # exact: 0 <= low < 2^48
    total = top + low
    # Fast2Sum: top is 0 or a multiple of 2^48 >= low, so the rounding error is exact.
    err = low - (total - top)
    bits = total.view(xp.int64)
    inexact_even = (err != 0) & ((bits & 1) == 0)
    step = xp.where((total > 0) == (err > 0), 1, -1).astype(xp.int64)
    bits = xp.where(inexact_even, bits + step, bits)  # round to odd: move to the odd neighbour
    total = bits.view(xp.float64)
    scaled = total * row_factor * col_factor  # exact: powers of two, in range
    with np.errstate(over="ignore"):
        return scaled.astype(xp.float32)


def nonfinite_block(a: Any, b: Any, xp: ModuleType) -> Any:
    """IEEE result of A @ B where every output involves a non-finite input (m, K) x (K, n).

    Only called for rows of A (columns of B) that hold an inf or NaN: there every
    output element is inf or NaN, whatever the other entries are. It is NaN when a NaN
    takes part, when inf meets 0, or when +inf and -inf products meet; else the sign of
    the infinite products. Counts are products of 0/1 indicator matrices.
    """
    f64 = xp.float64

    def ind(mask):
        return mask.astype(f64)

    row_nan = xp.isnan(a).any(axis=1)
    col_nan = xp.isnan(b).any(axis=0)
    a_inf, b_inf = xp.isinf(a), xp.isinf(b)
    inf_times_zero = xp.matmul(  # exact: 0/1 indicators, counts < 2^53
        ind(xp.concatenate([a_inf, a == 0], axis=1)), ind(xp.concatenate([b == 0, b_inf], axis=0)))
    a_sides = ind(xp.concatenate([a == np.inf, a == -np.inf, a > 0, a < 0], axis=1))
    b_pos, b_neg = b > 0, b < 0
    positive = xp.matmul(  # exact: 0/1 indicators, counts < 2^53
        a_sides, ind(xp.concatenate([b_pos, b_neg, b == np.inf, b == -np.inf], axis=0)))
    negative = xp.matmul(  # exact: 0/1 indicators, counts < 2^53
        a_sides, ind(xp.concatenate([b_neg, b_pos, b == -np.inf, b == np.inf], axis=0)))
    is_nan = row_nan[:, None] | col_nan[None, :] | (inf_times_zero > 0) | ((positive > 0) & (negative > 0))
    signed_inf = xp.where(positive > 0, xp.float32(np.inf), xp.float32(-np.inf))
    return xp.where(is_nan, xp.float32(np.nan), signed_inf)
