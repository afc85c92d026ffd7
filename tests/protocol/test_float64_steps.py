"""protocol/float64_steps.py against NumPy's float64/float32 (x86) and exact fractions.

Cases: random bit patterns, operands with close exponents (where add and subtract round
and cancel), products and quotients near the underflow and overflow boundaries, halfway
ties, and every pair of an edge set (signed zeros, subnormals, min/max normals, inf, NaNs
with payloads of both kinds and signs). The case generators are shared with
tests/contracts/test_float64_step_contract.py.
"""
from __future__ import annotations

import os
from fractions import Fraction

import numpy as np
import pytest

from protocol import float64_steps as F
from protocol.errors import LocalProtocolError

U64 = np.uint64
SIGN = 1 << 63


def f64(bits) -> np.ndarray:
    return np.asarray(bits, dtype=U64).view(np.float64)


def _finite_edges() -> list[int]:
    ones = [0x3FF0000000000000, 0x3FF0000000000001, 0x3FEFFFFFFFFFFFFF, 0x4000000000000000, 0x3FE0000000000000]
    tiny = [0x0000000000000001, 0x0000000000000002, 0x0000000000000003, 0x000FFFFFFFFFFFFF, 0x0008000000000000]
    normals = [0x0010000000000000, 0x0010000000000001, 0x001FFFFFFFFFFFFF, 0x7FEFFFFFFFFFFFFF, 0x7FEFFFFFFFFFFFFE,
               0x7FE0000000000000, 0x4340000000000000, 0x4330000000000001, 0x43E0000000000000, 0xC3E0000000000000,
               0x43DFFFFFFFFFFFFF, 0x47EFFFFFE0000000, 0x47EFFFFFF0000000, 0x36A0000000000000, 0x3690000000000000,
               0x3810000000000000, 0x380FFFFFF0000000]  # f32 max/overflow edge, f32 min subnormal/2, f32 min normal
    positive = [0] + ones + tiny + normals
    return positive + [x | SIGN for x in positive]


NANS = [0x7FF8000000000000, 0xFFF8000000000000, 0x7FF0000000000001, 0xFFF0000000000001, 0x7FF4000000000123,
        0x7FFFFFFFFFFFFFFF, 0xFFF80000DEADBEEF, 0x7FF00000FFFFFFFF]
INFS = [0x7FF0000000000000, 0xFFF0000000000000]
EDGES = _finite_edges() + INFS + NANS


def edge_pairs() -> tuple[np.ndarray, np.ndarray]:
    a, b = np.meshgrid(np.array(EDGES, dtype=U64), np.array(EDGES, dtype=U64))
    return a.ravel(), b.ravel()


def random_bits(rng: np.random.Generator, n: int) -> np.ndarray:
    return rng.integers(0, 1 << 64, n, dtype=U64)


def with_exponents(rng: np.random.Generator, fields: np.ndarray) -> np.ndarray:
    """Random signs and fractions under the given exponent fields (clipped to finite)."""
    n = len(fields)
    sign = rng.integers(0, 2, n, dtype=U64) << U64(63)
    frac = rng.integers(0, 1 << 52, n, dtype=U64)
    field = np.clip(fields, 0, 2046).astype(U64)
    return sign | (field << U64(52)) | frac


def close_pairs(rng: np.random.Generator, n: int, spread: int = 60) -> tuple[np.ndarray, np.ndarray]:
    """Operands whose exponents differ by at most `spread`: rounding, cancellation, subnormal sums."""
    centre = rng.integers(0, 2047, n)
    a = with_exponents(rng, centre)
    b = with_exponents(rng, centre + rng.integers(-spread, spread + 1, n))
    return a, b


def boundary_pairs(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Products and quotients that land near the subnormal range and near overflow."""
    target = rng.choice(np.array([1, 2, 3, 2045, 2046, 2047, -52, -20, 0]), n)  # exponent field of the result
    first = rng.integers(1, 2047, n)
    second = target - first + 1023 + rng.integers(-2, 3, n)
    quotient = rng.integers(0, 2, n).astype(bool)  # for div: b's field from a - target
    second = np.where(quotient, first - target + 1023, second)
    return with_exponents(rng, first), with_exponents(rng, second)


def tie_pairs(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    """a + b exactly halfway between two doubles: b is half an ulp of a (times a power of two)."""
    a = with_exponents(rng, rng.integers(60, 2000, n)) & U64((1 << 63) - 1)
    a_field = (a >> U64(52)).astype(np.int64)
    b_field = a_field - 53 - rng.integers(0, 2, n)  # half an ulp or a quarter: a tie and a non-tie
    sign = rng.integers(0, 2, n, dtype=U64) << U64(63)
    return a, sign | (b_field.astype(U64) << U64(52))


def f32_tie_bits(rng: np.random.Generator, n: int) -> np.ndarray:
    """float64 values exactly halfway between float32 neighbours (normal and subnormal float32)."""
    field = rng.choice(np.array([1023, 1023 + 127, 1023 - 126, 1023 - 130, 1023 - 149, 1023 - 150, 1023 + 128]), n)
    frac = (rng.integers(0, 1 << 23, n, dtype=U64) << U64(29)) | (U64(1) << U64(28))
    sign = rng.integers(0, 2, n, dtype=U64) << U64(63)
    return sign | (field.astype(U64) << U64(52)) | frac


def int64_cases(rng: np.random.Generator, n: int) -> np.ndarray:
    """int64 bit patterns of every magnitude, with ties and near-ties of the float64 rounding."""
    width = rng.integers(0, 64, n)
    values = rng.integers(0, 1 << 63, n, dtype=U64) >> (U64(63) - width.astype(U64))
    tie = (values | U64(1 << 62)) & ~U64((1 << 10) - 1) | U64(1 << 9)
    values = np.where(rng.integers(0, 4, n) == 0, tie, values)
    negate = rng.integers(0, 2, n).astype(bool)
    values = np.where(negate, (~values) + U64(1), values)
    extra = np.array([0, 1, SIGN, SIGN - 1, (1 << 64) - 1, (1 << 53) + 1, (1 << 54) + 2, (1 << 54) + 6], dtype=U64)
    return np.concatenate([values, extra])


def quiet(bits: np.ndarray) -> np.ndarray:
    return bits | U64(1 << 51)


def assert_same(name: str, fn, args: tuple[np.ndarray, ...], expected: np.ndarray, either_nan: bool = False) -> None:
    """fn on every case equals NumPy's bits; with `either_nan`, two NaN operands may give the second one."""
    got = np.array([fn(*(int(x[i]) for x in args)) for i in range(len(expected))], dtype=U64)
    bad = got != expected
    if either_nan:  # NumPy's SIMD add/multiply loops may swap commutative operands
        both = np.isnan(f64(args[0])) & np.isnan(f64(args[1]))
        bad &= ~(both & (got == quiet(args[0])) & (expected == quiet(args[1])))
    idx = np.flatnonzero(bad)[:5]
    assert not idx.size, f"{name}: {int(bad.sum())} mismatches, e.g. " + ", ".join(
        f"{tuple(hex(int(x[i])) for x in args)} -> {hex(int(got[i]))}, numpy {hex(int(expected[i]))}" for i in idx)


def binary_operands(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    parts = [edge_pairs(), (random_bits(rng, n), random_bits(rng, n)), close_pairs(rng, n),
             close_pairs(rng, n, spread=3), boundary_pairs(rng, n), tie_pairs(rng, n)]
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])


NUMPY_BINARY = {"f64_add": np.add, "f64_sub": np.subtract, "f64_mul": np.multiply, "f64_div": np.divide}


def check_binary_f64(rng: np.random.Generator, n: int) -> None:
    a, b = binary_operands(rng, n)
    with np.errstate(all="ignore"):
        for name, ufunc in NUMPY_BINARY.items():
            assert_same(name, F.STEPS[name].fn, (a, b), ufunc(f64(a), f64(b)).view(U64),
                        either_nan=name in ("f64_add", "f64_mul"))
        for name, ufunc in {"f64_lt": np.less, "f64_le": np.less_equal, "f64_eq": np.equal}.items():
            assert_same(name, F.STEPS[name].fn, (a, b), ufunc(f64(a), f64(b)).astype(U64))


def check_unary_f64(rng: np.random.Generator, n: int) -> None:
    x = np.concatenate([np.array(EDGES, dtype=U64), random_bits(rng, n), with_exponents(rng, rng.integers(0, 2047, n)),
                        f32_tie_bits(rng, n), with_exponents(rng, rng.integers(1000, 1090, n))])
    fx = f64(x)
    with np.errstate(all="ignore"):
        assert_same("f64_sqrt", F.f64_sqrt, (x,), np.sqrt(fx).view(U64))
        assert_same("f64_neg", F.f64_neg, (x,), np.negative(fx).view(U64))
        assert_same("f64_abs", F.f64_abs, (x,), np.abs(fx).view(U64))
        assert_same("f64_to_f32", F.f64_to_f32, (x,), fx.astype(np.float32).view(np.uint32).astype(U64))
        assert_same("f64_trunc", F.f64_trunc, (x,), np.trunc(fx).view(U64))
        assert_same("f64_rint", F.f64_rint, (x,), np.rint(fx).view(U64))
        assert_same("f64_to_i64", F.f64_to_i64, (x,), fx.astype(np.int64).view(U64))
        mantissa, exponent = np.frexp(fx)
        # a NaN goes through unchanged; NumPy's scalar loop (C frexp: x + x) quiets a signalling one, its
        # AVX-512 loop does not. No hashed bit reads a NaN's mantissa: the specs take frexp's exponent of
        # finite values only.
        numpy_mantissa = mantissa.view(U64)
        numpy_mantissa = np.where(np.isnan(fx) & (numpy_mantissa == quiet(x)), x, numpy_mantissa)
        assert_same("f64_frexp_mantissa", F.f64_frexp_mantissa, (x,), numpy_mantissa)
        assert_same("f64_frexp_exponent", F.f64_frexp_exponent, (x,), exponent.astype(np.int64).view(U64))
        shifts = rng.integers(-1200, 1200, len(x)).astype(np.int64)
        shifts[: len(EDGES)] = -1074
        assert_same("f64_ldexp", F.f64_ldexp, (x, shifts.view(U64)), np.ldexp(fx, shifts.astype(np.int32)).view(U64))
    ints = int64_cases(rng, n)
    assert_same("i64_to_f64", F.i64_to_f64, (ints,), ints.view(np.int64).astype(np.float64).view(U64))


def check_float32(rng: np.random.Generator, n: int) -> None:
    edges32 = np.array([0, 1, 2, 0x7FFFFF, 0x800000, 0x7F7FFFFF, 0x3F800000, 0x3F800001, 0x7F800000, 0x7FC00000,
                        0x7F800001, 0x7FA00123, 0x7FFFFFFF], dtype=np.uint32)
    edges32 = np.concatenate([edges32, edges32 | np.uint32(1 << 31)])
    ea, eb = (m.ravel() for m in np.meshgrid(edges32, edges32))
    ra = rng.integers(0, 1 << 32, n, dtype=np.uint32)
    rb = rng.integers(0, 1 << 32, n, dtype=np.uint32)
    ca = (ra & np.uint32(0x807FFFFF)) | (rng.integers(100, 160, n).astype(np.uint32) << np.uint32(23))
    cb = (rb & np.uint32(0x807FFFFF)) | (rng.integers(100, 160, n).astype(np.uint32) << np.uint32(23))
    a = np.concatenate([ea, ra, ca, ra & np.uint32(0x80FFFFFF)]).astype(np.uint32)
    b = np.concatenate([eb, rb, cb, rb & np.uint32(0x80FFFFFF)]).astype(np.uint32)
    fa, fb = a.view(np.float32), b.view(np.float32)
    with np.errstate(all="ignore"):
        for name, ufunc in {"f32_add": np.add, "f32_sub": np.subtract, "f32_mul": np.multiply,
                            "f32_div": np.divide}.items():
            expected = ufunc(fa, fb).view(np.uint32).astype(U64)
            got = np.array([F.STEPS[name].fn(int(x), int(y)) for x, y in zip(a, b)], dtype=U64)
            both = np.isnan(fa) & np.isnan(fb)
            ok = (got == expected) | (both & (name in ("f32_add", "f32_mul")) & (expected == (b | np.uint32(1 << 22))))
            assert ok.all(), f"{name}: {[(hex(a[i]), hex(b[i]), hex(got[i]), hex(expected[i])) for i in np.flatnonzero(~ok)[:3]]}"
        assert_same("f32_sqrt", F.f32_sqrt, (a.astype(U64),), np.sqrt(fa).view(np.uint32).astype(U64))
        assert_same("f32_to_f64", F.f32_to_f64, (a.astype(U64),), fa.astype(np.float64).view(U64))


def _exact(bits: int) -> Fraction:
    return Fraction(float(f64([bits])[0]))


def fma_operands(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Finite a, b, c: random, close exponents, and c = -round(a*b) (the product's rounding error)."""
    a, b = close_pairs(rng, n, spread=1100)
    c_close = with_exponents(rng, ((a >> U64(52)) & U64(2047)).astype(np.int64) + ((b >> U64(52)) & U64(2047)).astype(np.int64)
                             - 1023 + rng.integers(-60, 60, n))
    with np.errstate(all="ignore"):
        cancel = (-(f64(a) * f64(b))).view(U64)
    c = np.where(rng.integers(0, 2, n).astype(bool), cancel, c_close)
    finite = np.isfinite(f64(a)) & np.isfinite(f64(b)) & np.isfinite(f64(c))
    return a[finite], b[finite], c[finite]


def fma_reference(a: int, b: int, c: int) -> int:
    """float(Fraction) is CPython's correctly rounded integer division: an independent rounding."""
    exact = _exact(a) * _exact(b) + _exact(c)
    if exact == 0:  # IEEE: +0, except -0 for a zero product and a zero c that are both negative
        zero_product = not (a & ~SIGN) or not (b & ~SIGN)
        negative = zero_product and not (c & ~SIGN) and bool((a ^ b) & SIGN) and bool(c & SIGN)
        return SIGN if negative else 0
    try:
        return int(np.array([float(exact)]).view(U64)[0])
    except OverflowError:
        return (SIGN if exact < 0 else 0) | F.F64.inf


def check_fma(rng: np.random.Generator, n: int) -> None:
    a, b, c = fma_operands(rng, n)
    bad = [(hex(int(x)), hex(int(y)), hex(int(z))) for x, y, z in zip(a, b, c)
           if F.f64_fma(int(x), int(y), int(z)) != fma_reference(int(x), int(y), int(z))]
    assert not bad, f"{len(bad)} fma mismatches, e.g. {bad[:3]}"


# --- the default tests: about 100k cases ---------------------------------------------------


def test_binary_float64_steps_equal_numpy():
    check_binary_f64(np.random.default_rng(18), 4_000)


def test_unary_float64_steps_and_conversions_equal_numpy():
    check_unary_f64(np.random.default_rng(19), 4_000)


def test_float32_steps_equal_numpy_float32():
    check_float32(np.random.default_rng(20), 3_000)


def test_fma_rounds_once_as_exact_fractions_do():
    check_fma(np.random.default_rng(21), 3_000)


def test_fma_special_values():
    one, two, inf, zero, nan = 0x3FF0000000000000, 0x4000000000000000, F.F64.inf, 0, 0x7FF4000000000001
    assert F.f64_fma(inf, zero, one) == F.DEFAULT_NAN64
    assert F.f64_fma(inf, zero, nan) == nan | (1 << 51)  # a NaN operand wins over the invalid product
    assert F.f64_fma(inf, one, inf | SIGN) == F.DEFAULT_NAN64
    assert F.f64_fma(inf, two | SIGN, one) == inf | SIGN
    assert F.f64_fma(one, two, inf | SIGN) == inf | SIGN
    assert F.f64_fma(zero | SIGN, one, zero | SIGN) == SIGN  # -0 * 1 + -0 = -0
    assert F.f64_fma(zero | SIGN, one, zero) == 0
    assert F.f64_fma(one, one, one | SIGN) == 0  # exact cancellation is +0
    assert F.f64_fma(0x7FEFFFFFFFFFFFFF, two, zero) == inf  # overflow
    # the single rounding: (1 + 2^-52)^2 - (1 + 2^-51) = 2^-104, which a separate multiply loses
    x = 0x3FF0000000000001
    assert F.f64_fma(x, x, 0x3FF0000000000002 | SIGN) == 0x3970000000000000
    assert F.f64_add(F.f64_mul(x, x), 0x3FF0000000000002 | SIGN) == 0


def test_nan_rule_is_the_first_nan_operand_quieted():
    a, b = 0x7FF0000000000123, 0xFFF8000000000456
    for name in ("f64_add", "f64_sub", "f64_mul", "f64_div"):
        assert F.STEPS[name].fn(a, b) == a | (1 << 51)
        assert F.STEPS[name].fn(b, a) == b
        assert F.STEPS[name].fn(0x3FF0000000000000, a) == a | (1 << 51)
    with np.errstate(all="ignore"):  # NumPy's one-element loop follows the rule too
        for name, ufunc in NUMPY_BINARY.items():
            assert ufunc(f64([a]), f64([b])).view(U64)[0] == F.STEPS[name].fn(a, b)
    assert F.f64_add(F.F64.inf, F.F64.inf | SIGN) == F.DEFAULT_NAN64
    assert F.f64_sqrt(0x3FF0000000000000 | SIGN) == F.DEFAULT_NAN64
    assert F.f64_sqrt(SIGN) == SIGN
    assert F.f64_neg(a) == a ^ SIGN and F.f64_abs(b) == b ^ SIGN  # sign bit only, no quieting
    assert F.f64_to_f32(b) == 0xFFC00000 and F.f32_to_f64(0x7F800001) == 0x7FF8000020000000


def test_step_table_codes_are_distinct_and_arities_match():
    codes = [step.code for step in F.STEPS.values()]
    assert sorted(codes) == list(range(len(codes)))
    for name, step in F.STEPS.items():
        assert step.fn(*([0x3FF0000000000000] * step.arity)) >= 0, name


def test_run_step_checks_its_operands():
    assert F.run_step("f64_add", 0x3FF0000000000000, 0x3FF0000000000000) == 0x4000000000000000
    assert F.run_step("f32_add", 0x3F800000, 0x3F800000) == 0x40000000
    for name, operands, says in (("f64_pow", (1, 2), "no primitive step"), ("f64_add", (1,), "takes 2 operands"),
                                 ("f64_add", (-1, 0), "64-bit pattern"), ("f64_sqrt", (1 << 64,), "64-bit pattern"),
                                 ("f32_add", (1 << 32, 0), "32-bit pattern"), ("f64_neg", (1.0,), "64-bit pattern")):
        with pytest.raises(LocalProtocolError, match=says):
            F.run_step(name, *operands)


# Rounds of the deep test: about 260k cases each; GAVEL_FLOAT_ROUNDS=8 for two million.
FLOAT_ROUNDS = int(os.environ.get("GAVEL_FLOAT_ROUNDS", "2"))


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(FLOAT_ROUNDS))
def test_hundreds_of_thousands_of_cases_equal_numpy(seed):
    """About 260k cases over every step a round; `scripts/bench_onchain_step.py` does not run this."""
    rng = np.random.default_rng(1000 + seed)
    check_binary_f64(rng, 40_000)
    check_unary_f64(rng, 25_000)
    check_float32(rng, 25_000)
    check_fma(rng, 15_000)
