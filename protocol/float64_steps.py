"""IEEE-754 primitive steps on raw bit patterns, in integer arithmetic only: the on-chain twin.

These are the steps the settlement contract executes at the bottom of a dispute
(`contracts/solidity/Float64Step.sol` is the same definition in Solidity, docs/onchain-step.md
lists them). Every value is a bit pattern: float64 and int64 as uint64 (two's complement
for int64), float32 as uint32. Every result is correctly rounded (round to nearest, ties to
even) from the exact value, which Python's unbounded integers hold exactly.

NaN rule (what NumPy gives on x86, which the operator specs inherit):
- an operation with NaN operands returns the first NaN operand in argument order, quieted
  (quiet bit set; sign and payload kept);
- an invalid operation on non-NaN operands (inf - inf, 0 * inf, 0 / 0, inf / inf,
  sqrt(x < 0)) returns the x86 default NaN, 0xFFF8000000000000 (0xFFC00000 for float32);
- neg and abs only flip or clear the sign bit, also of a NaN;
- float32 <-> float64 keep sign and the top payload bits, quieted.
NumPy's own SIMD loops for the commutative add and multiply sometimes return the *second*
NaN when both operands are NaN (it depends on the array length), which is one reason tensor
hashes store every NaN as the one canonical NaN (`repops_cupy.hashing`).

float32 add/sub/mul/div/sqrt are the float64 step rounded to float32: exact, since 53 >= 2*24 + 2
makes the double rounding innocuous (Figueroa 1995).
"""
from __future__ import annotations

from math import isqrt
from typing import Callable, NamedTuple

from .errors import LocalProtocolError

__all__ = [
    "DEFAULT_NAN32", "DEFAULT_NAN64", "FLOAT32_OPERANDS", "INT64_INDEFINITE", "STEPS", "Step", "run_step",
    "f32_add", "f32_div", "f32_mul", "f32_sqrt", "f32_sub", "f32_to_f64",
    "f64_abs", "f64_add", "f64_div", "f64_eq", "f64_fma", "f64_frexp_exponent", "f64_frexp_mantissa",
    "f64_ldexp", "f64_le", "f64_lt", "f64_mul", "f64_neg", "f64_rint", "f64_sqrt", "f64_sub",
    "f64_to_f32", "f64_to_i64", "f64_trunc", "i64_to_f64", "is_nan32", "is_nan64",
    "bit_and", "bit_or", "bit_xor", "f32_canon", "f64_max", "i64_add", "i64_lt", "i64_mul", "i64_sar", "i64_sub",
    "select",
]


class _Format(NamedTuple):
    """A binary interchange format: fraction bits and exponent bits."""

    frac_bits: int
    exp_bits: int

    @property
    def sign(self) -> int:
        return 1 << (self.frac_bits + self.exp_bits)

    @property
    def inf(self) -> int:
        return ((1 << self.exp_bits) - 1) << self.frac_bits

    @property
    def quiet(self) -> int:
        return 1 << (self.frac_bits - 1)

    @property
    def lsb_min(self) -> int:
        """Exponent of the least significant bit of subnormals (and of the smallest normals)."""
        return 2 - (1 << (self.exp_bits - 1)) - self.frac_bits


F64 = _Format(52, 11)
F32 = _Format(23, 8)
DEFAULT_NAN64 = 0xFFF8000000000000  # x86's "real indefinite": what inf - inf gives there
DEFAULT_NAN32 = 0xFFC00000
INT64_INDEFINITE = 0x8000000000000000  # x86 cvttsd2si of NaN or out of range; NumPy's astype(int64)
_MASK64 = (1 << 64) - 1
_LDEXP_LIMIT = 2200  # beyond +-2200 every finite input saturates: exponents span [-1074, 1023]


def _is_nan(x: int, fmt: _Format) -> bool:
    return (x & (fmt.sign - 1)) > fmt.inf


def _is_inf(x: int, fmt: _Format) -> bool:
    return (x & (fmt.sign - 1)) == fmt.inf


def is_nan64(x: int) -> bool:
    return _is_nan(x, F64)


def is_nan32(x: int) -> bool:
    return _is_nan(x, F32)


def _unpack(x: int, fmt: _Format) -> tuple[int, int, int]:
    """(sign, m, e) of a finite value (-1)^sign * m * 2^e, m an integer (0 for zeros)."""
    sign = 1 if x & fmt.sign else 0
    field = (x >> fmt.frac_bits) & ((1 << fmt.exp_bits) - 1)
    frac = x & ((1 << fmt.frac_bits) - 1)
    if field == 0:
        return sign, frac, fmt.lsb_min
    return sign, frac | (1 << fmt.frac_bits), fmt.lsb_min + field - 1


def _round_pack(sign: int, m: int, e: int, fmt: _Format) -> int:
    """The bits of (-1)^sign * m * 2^e rounded to nearest even: subnormals, overflow to inf."""
    if m == 0:
        return fmt.sign if sign else 0
    precision = fmt.frac_bits + 1
    lsb = max(e + m.bit_length() - precision, fmt.lsb_min)
    shift = lsb - e
    if shift <= 0:
        r = m << -shift
    else:
        r, rest = m >> shift, m & ((1 << shift) - 1)
        half = 1 << (shift - 1)
        if rest > half or (rest == half and r & 1):
            r += 1
    # a normal r holds the hidden bit, which adds one to the exponent field; a carry out
    # of rounding (r = 2^precision) lands on the next binade by the same addition
    bits = ((lsb - fmt.lsb_min) << fmt.frac_bits) + r
    bits = min(bits, fmt.inf)
    return (fmt.sign if sign else 0) | bits


def _first_nan(fmt: _Format, *operands: int) -> int | None:
    for x in operands:
        if _is_nan(x, fmt):
            return x | fmt.quiet
    return None


def _signed_sum(sx: int, mx: int, ex: int, sy: int, my: int, ey: int) -> tuple[int, int, int]:
    """Exact (-1)^sx mx 2^ex + (-1)^sy my 2^ey as (sign, m, e); an exact zero is +0."""
    e = min(ex, ey)
    total = (-mx if sx else mx) * (1 << (ex - e)) + (-my if sy else my) * (1 << (ey - e))
    return (1 if total < 0 else 0), abs(total), e


# --- float64 arithmetic ------------------------------------------------------------------


def f64_add(a: int, b: int) -> int:
    nan = _first_nan(F64, a, b)
    if nan is not None:
        return nan
    if _is_inf(a, F64):
        return DEFAULT_NAN64 if _is_inf(b, F64) and (a ^ b) & F64.sign else a
    if _is_inf(b, F64):
        return b
    sa, ma, ea = _unpack(a, F64)
    sb, mb, eb = _unpack(b, F64)
    if ma == 0 and mb == 0:
        return F64.sign if sa and sb else 0  # -0 + -0 = -0, any other sum of zeros +0
    return _round_pack(*_signed_sum(sa, ma, ea, sb, mb, eb), F64)


def f64_neg(a: int) -> int:
    return a ^ F64.sign


def f64_abs(a: int) -> int:
    return a & ~F64.sign & _MASK64


def f64_sub(a: int, b: int) -> int:
    nan = _first_nan(F64, a, b)  # before the sign flip: the NaN keeps its own sign
    if nan is not None:
        return nan
    return f64_add(a, f64_neg(b))


def f64_mul(a: int, b: int) -> int:
    nan = _first_nan(F64, a, b)
    if nan is not None:
        return nan
    sign = 1 if (a ^ b) & F64.sign else 0
    sa, ma, ea = _unpack(a, F64)
    sb, mb, eb = _unpack(b, F64)
    if _is_inf(a, F64) or _is_inf(b, F64):
        zero = (not _is_inf(a, F64) and ma == 0) or (not _is_inf(b, F64) and mb == 0)
        return DEFAULT_NAN64 if zero else (F64.sign if sign else 0) | F64.inf
    return _round_pack(sign, ma * mb, ea + eb, F64)


_QUOTIENT_BITS = 2 * 53 + 2  # the scaled quotient keeps more than 53 + 2 bits, so a sticky bit suffices


def f64_div(a: int, b: int) -> int:
    nan = _first_nan(F64, a, b)
    if nan is not None:
        return nan
    sign_bit = F64.sign if (a ^ b) & F64.sign else 0
    a_inf, b_inf = _is_inf(a, F64), _is_inf(b, F64)
    _, ma, ea = _unpack(a, F64)
    _, mb, eb = _unpack(b, F64)
    if a_inf:
        return DEFAULT_NAN64 if b_inf else sign_bit | F64.inf
    if b_inf:
        return sign_bit
    if mb == 0:
        return DEFAULT_NAN64 if ma == 0 else sign_bit | F64.inf
    if ma == 0:
        return sign_bit
    q, r = divmod(ma << _QUOTIENT_BITS, mb)
    return _round_pack(1 if sign_bit else 0, (q << 1) | (r != 0), ea - eb - _QUOTIENT_BITS - 1, F64)


def f64_sqrt(a: int) -> int:
    nan = _first_nan(F64, a)
    if nan is not None:
        return nan
    sa, ma, ea = _unpack(a, F64)
    if ma == 0:
        return a  # sqrt(-0) = -0
    if sa:
        return DEFAULT_NAN64
    if _is_inf(a, F64):
        return a
    if ea & 1:
        ma, ea = ma << 1, ea - 1
    scaled = ma << (2 * 56)  # the root keeps at least 56 bits: 53 + guard + sticky room
    root = isqrt(scaled)
    return _round_pack(0, (root << 1) | (root * root != scaled), (ea - 2 * 56) // 2 - 1, F64)


def f64_fma(a: int, b: int, c: int) -> int:
    """a * b + c with one rounding. NaN operands win (first of a, b, c) over invalid products."""
    nan = _first_nan(F64, a, b, c)
    if nan is not None:
        return nan
    sp = 1 if (a ^ b) & F64.sign else 0
    a_inf, b_inf, c_inf = _is_inf(a, F64), _is_inf(b, F64), _is_inf(c, F64)
    _, ma, ea = _unpack(a, F64)
    _, mb, eb = _unpack(b, F64)
    sc, mc, ec = _unpack(c, F64)
    if a_inf or b_inf:
        if (not a_inf and ma == 0) or (not b_inf and mb == 0):
            return DEFAULT_NAN64  # 0 * inf
        if c_inf and sc != sp:
            return DEFAULT_NAN64  # inf - inf
        return (F64.sign if sp else 0) | F64.inf
    if c_inf:
        return c
    mp = ma * mb
    if mp == 0 and mc == 0:
        return F64.sign if sp and sc else 0
    return _round_pack(*_signed_sum(sp, mp, ea + eb, sc, mc, ec), F64)


# --- comparisons (IEEE: every comparison with NaN is false; -0 == +0) ---------------------


def _order_key(x: int) -> int:
    magnitude = x & (F64.sign - 1)
    return -magnitude if x & F64.sign else magnitude


def f64_lt(a: int, b: int) -> bool:
    return not (is_nan64(a) or is_nan64(b)) and _order_key(a) < _order_key(b)


def f64_le(a: int, b: int) -> bool:
    return not (is_nan64(a) or is_nan64(b)) and _order_key(a) <= _order_key(b)


def f64_eq(a: int, b: int) -> bool:
    return not (is_nan64(a) or is_nan64(b)) and _order_key(a) == _order_key(b)


# --- conversions ---------------------------------------------------------------------------


def f32_to_f64(x: int) -> int:
    """Exact widening; a NaN keeps sign and payload (shifted to the top), quieted."""
    sign = F64.sign if x & F32.sign else 0
    if _is_nan(x, F32):
        return sign | F64.inf | F64.quiet | ((x & (F32.quiet - 1)) << 29)
    if _is_inf(x, F32):
        return sign | F64.inf
    s, m, e = _unpack(x, F32)
    return _round_pack(s, m, e, F64)


def f64_to_f32(x: int) -> int:
    """Round to nearest even; overflow to inf, underflow through subnormals to signed zero."""
    sign = F32.sign if x & F64.sign else 0
    if _is_nan(x, F64):
        return sign | F32.inf | F32.quiet | ((x >> 29) & (F32.quiet - 1))
    if _is_inf(x, F64):
        return sign | F32.inf
    s, m, e = _unpack(x, F64)
    return _round_pack(s, m, e, F32)


def i64_to_f64(n: int) -> int:
    """int64 (two's complement bits) to the nearest float64, ties to even."""
    n &= _MASK64
    value = n - (1 << 64) if n & (1 << 63) else n
    return _round_pack(1 if value < 0 else 0, abs(value), 0, F64)


def f64_to_i64(x: int) -> int:
    """Truncation toward zero, as two's complement bits; NaN and out of range give INT64_MIN (x86)."""
    if is_nan64(x) or _is_inf(x, F64):
        return INT64_INDEFINITE
    s, m, e = _unpack(x, F64)
    magnitude = m << e if e >= 0 else m >> -e
    value = -magnitude if s else magnitude
    if not -(1 << 63) <= value < (1 << 63):
        return INT64_INDEFINITE
    return value & _MASK64


def f64_trunc(x: int) -> int:
    """The integer part as a float64 (C trunc): signs of zeros kept, NaN quieted."""
    if is_nan64(x):
        return x | F64.quiet
    s, m, e = _unpack(x, F64)
    if _is_inf(x, F64) or e >= 0:
        return x
    return _round_pack(s, (m >> -e) << -e, e, F64) if (m >> -e) else (F64.sign if s else 0)


def f64_rint(x: int) -> int:
    """Nearest integer as a float64, ties to even (NumPy rint)."""
    if is_nan64(x):
        return x | F64.quiet
    s, m, e = _unpack(x, F64)
    if _is_inf(x, F64) or e >= 0:
        return x
    q, rest = m >> -e, m & ((1 << -e) - 1)
    half = 1 << (-e - 1)
    if rest > half or (rest == half and q & 1):
        q += 1
    return _round_pack(s, q, 0, F64)


def f64_ldexp(x: int, n: int) -> int:
    """x * 2^n rounded once (n an int64 bit pattern); NaN quieted, zeros and inf unchanged."""
    if is_nan64(x):
        return x | F64.quiet
    if _is_inf(x, F64):
        return x
    n &= _MASK64
    shift = n - (1 << 64) if n & (1 << 63) else n
    s, m, e = _unpack(x, F64)
    return _round_pack(s, m, e + max(-_LDEXP_LIMIT, min(_LDEXP_LIMIT, shift)), F64)


def f64_frexp_mantissa(x: int) -> int:
    """m of x = m * 2^k with 0.5 <= |m| < 1; zeros, inf and NaN (even signalling) unchanged, as C frexp."""
    if is_nan64(x) or _is_inf(x, F64):
        return x
    s, m, e = _unpack(x, F64)
    if m == 0:
        return x
    return _round_pack(s, m, -m.bit_length(), F64)


def f64_frexp_exponent(x: int) -> int:
    """k of x = m * 2^k (0 for zeros, inf and NaN), as int64 bits."""
    if is_nan64(x) or _is_inf(x, F64):
        return 0
    _, m, e = _unpack(x, F64)
    return (e + m.bit_length()) & _MASK64 if m else 0


# --- float32 arithmetic: the float64 step rounded once to float32 ----------------------------


def _f32_binary(step: Callable[[int, int], int]) -> Callable[[int, int], int]:
    def f32_step(a: int, b: int) -> int:
        return f64_to_f32(step(f32_to_f64(a), f32_to_f64(b)))
    return f32_step


f32_add = _f32_binary(f64_add)
f32_sub = _f32_binary(f64_sub)
f32_mul = _f32_binary(f64_mul)
f32_div = _f32_binary(f64_div)


def f32_sqrt(a: int) -> int:
    return f64_to_f32(f64_sqrt(f32_to_f64(a)))


# --- the step table (op codes shared with Float64StepHarness.sol) ---------------------------


class Step(NamedTuple):
    """One primitive step: the harness's op code, its arity and the Python definition."""

    code: int
    arity: int
    fn: Callable[..., int]


def _as_bits(predicate: Callable[[int, int], bool]) -> Callable[[int, int], int]:
    def compare(a: int, b: int) -> int:
        return 1 if predicate(a, b) else 0
    compare.__name__ = predicate.__name__
    return compare


STEPS: dict[str, Step] = {
    "f64_add": Step(0, 2, f64_add), "f64_sub": Step(1, 2, f64_sub), "f64_mul": Step(2, 2, f64_mul),
    "f64_div": Step(3, 2, f64_div), "f64_sqrt": Step(4, 1, f64_sqrt), "f64_fma": Step(5, 3, f64_fma),
    "f64_neg": Step(6, 1, f64_neg), "f64_abs": Step(7, 1, f64_abs),
    "f64_lt": Step(8, 2, _as_bits(f64_lt)), "f64_le": Step(9, 2, _as_bits(f64_le)),
    "f64_eq": Step(10, 2, _as_bits(f64_eq)),
    "f32_to_f64": Step(11, 1, f32_to_f64), "f64_to_f32": Step(12, 1, f64_to_f32),
    "i64_to_f64": Step(13, 1, i64_to_f64), "f64_to_i64": Step(14, 1, f64_to_i64),
    "f64_trunc": Step(15, 1, f64_trunc), "f64_rint": Step(16, 1, f64_rint), "f64_ldexp": Step(17, 2, f64_ldexp),
    "f64_frexp_mantissa": Step(18, 1, f64_frexp_mantissa), "f64_frexp_exponent": Step(19, 1, f64_frexp_exponent),
    "f32_add": Step(20, 2, f32_add), "f32_sub": Step(21, 2, f32_sub), "f32_mul": Step(22, 2, f32_mul),
    "f32_div": Step(23, 2, f32_div), "f32_sqrt": Step(24, 1, f32_sqrt),
}


# --- glue steps of the element programs (protocol/step_trace.py): selects, int64, bits -------


def select(cond: int, a: int, b: int) -> int:
    """a where cond is nonzero, else b (NumPy's where on one lane)."""
    return a if cond else b


def _i64(x: int) -> int:
    return x - (1 << 64) if x & (1 << 63) else x


def i64_add(a: int, b: int) -> int:
    return (a + b) & _MASK64


def i64_sub(a: int, b: int) -> int:
    return (a - b) & _MASK64


def i64_mul(a: int, b: int) -> int:
    return (a * b) & _MASK64


def i64_lt(a: int, b: int) -> int:
    """Signed a < b of two int64 bit patterns, 1 or 0."""
    return 1 if _i64(a) < _i64(b) else 0


def i64_sar(a: int, b: int) -> int:
    """Arithmetic shift right of an int64 bit pattern by b mod 64 (floor division by 2^(b mod 64))."""
    return (_i64(a) >> (b & 63)) & _MASK64


def bit_or(a: int, b: int) -> int:
    return a | b


def bit_and(a: int, b: int) -> int:
    return a & b


def bit_xor(a: int, b: int) -> int:
    """Philox's mixing (dropout's random words, repops_cupy/rng.py). Its 32x32 -> 64-bit products
    are i64_mul (exact below 2^64), their words bit_and and i64_sar: xor is the one step it lacked."""
    return a ^ b


def f64_max(a: int, b: int) -> int:
    """The larger of a and b, NaN first (quieted) when either is NaN; a when they compare equal."""
    nan = _first_nan(F64, a, b)
    if nan is not None:
        return nan
    return b if f64_lt(a, b) else a


def f32_canon(x: int) -> int:
    """A float32 NaN becomes the canonical NaN 0x7FC00000 (as tensor hashes store it); others unchanged."""
    return 0x7FC00000 if is_nan32(x) else x


STEPS.update({
    "select": Step(25, 3, select), "i64_add": Step(26, 2, i64_add), "i64_sub": Step(27, 2, i64_sub),
    "i64_mul": Step(28, 2, i64_mul), "i64_lt": Step(29, 2, i64_lt), "bit_or": Step(30, 2, bit_or),
    "bit_and": Step(31, 2, bit_and), "f64_max": Step(32, 2, f64_max), "f32_canon": Step(33, 1, f32_canon),
    "i64_sar": Step(34, 2, i64_sar), "bit_xor": Step(35, 2, bit_xor),
})

FLOAT32_OPERANDS = frozenset({"f32_to_f64", "f32_add", "f32_sub", "f32_mul", "f32_div", "f32_sqrt", "f32_canon"})


def run_step(name: str, *operands: int) -> int:
    """One step by name, its operands checked: the entry point for bit patterns from outside.

    The step functions themselves trust their operands (they run millions of times in tests);
    this raises LocalProtocolError for an unknown step, a wrong operand count or an operand
    that is not a bit pattern of the step's width.
    """
    step = STEPS.get(name)
    if step is None:
        raise LocalProtocolError(f"no primitive step {name!r}")
    if len(operands) != step.arity:
        raise LocalProtocolError(f"{name} takes {step.arity} operands, got {len(operands)}")
    width = 32 if name in FLOAT32_OPERANDS else 64
    for x in operands:
        if type(x) is not int or not 0 <= x < (1 << width):
            raise LocalProtocolError(f"{name}: operand {x!r} is not a {width}-bit pattern")
    return step.fn(*operands)
