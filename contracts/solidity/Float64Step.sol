// SPDX-License-Identifier: Apache-2.0
pragma solidity 0.8.28;

/// @title Float64Step
/// @notice IEEE-754 primitive steps on raw bit patterns, correctly rounded (to nearest, ties to
/// even) by integer arithmetic: the steps the contract executes at the bottom of a dispute
/// (docs/onchain-step.md). `protocol/float64_steps.py` is its twin and holds the definition:
/// float64 and int64 travel as uint64 (int64 in two's complement), float32 as uint32.
///
/// NaN rule (NumPy on x86): NaN operands give the first NaN operand quieted; an invalid
/// operation on other operands gives the default NaN 0xFFF8000000000000 (0xFFC00000 in
/// float32); neg and abs touch the sign bit only.
///
/// Exactness: an operation's exact result is kept as (sign, m, e), the value m * 2^e, with m
/// below 2^250; where the exact value needs more bits (an addend far below the other), the
/// dropped bits leave a sticky 1 at bit 0, at least 140 bits under the rounding position.
library Float64Step {
    uint64 internal constant SIGN = 1 << 63;
    uint64 internal constant INF = 0x7FF0000000000000;
    uint64 internal constant QUIET = 1 << 51;
    uint64 internal constant DEFAULT_NAN = 0xFFF8000000000000;
    uint64 internal constant INT64_INDEFINITE = 0x8000000000000000;
    uint32 internal constant SIGN32 = 1 << 31;
    uint32 internal constant INF32 = 0x7F800000;
    uint32 internal constant QUIET32 = 1 << 22;

    uint256 private constant FRAC_MASK = (1 << 52) - 1;
    int256 private constant LSB_MIN = -1074; // exponent of the subnormals' last bit
    int256 private constant LSB_MIN32 = -149;
    uint256 private constant QUOTIENT_BITS = 108; // the quotient keeps more than 53 + 2 bits
    uint256 private constant ROOT_SCALE = 112; // the root keeps at least 56 bits
    uint256 private constant LEAD = 200; // where _sum puts the larger addend's top bit
    int256 private constant LDEXP_LIMIT = 2200; // finite exponents span [-1074, 1023]

    // --- classification and packing ----------------------------------------------------

    function isNaN(uint64 x) internal pure returns (bool) {
        return x & ~SIGN > INF;
    }

    function isInf(uint64 x) internal pure returns (bool) {
        return x & ~SIGN == INF;
    }

    function _isNaN32(uint32 x) private pure returns (bool) {
        return x & ~SIGN32 > INF32;
    }

    /// @dev (negative, m, e) of a finite float64, the value m * 2^e (m = 0 for zeros).
    function _unpack(uint64 x) private pure returns (bool negative, uint256 m, int256 e) {
        uint256 field = (x >> 52) & 0x7FF;
        m = x & FRAC_MASK;
        negative = x & SIGN != 0;
        if (field == 0) return (negative, m, LSB_MIN);
        return (negative, m | (1 << 52), LSB_MIN + int256(field) - 1);
    }

    function _bitLength(uint256 x) private pure returns (uint256 n) {
        if (x >> 128 != 0) { x >>= 128; n += 128; }
        if (x >> 64 != 0) { x >>= 64; n += 64; }
        if (x >> 32 != 0) { x >>= 32; n += 32; }
        if (x >> 16 != 0) { x >>= 16; n += 16; }
        if (x >> 8 != 0) { x >>= 8; n += 8; }
        if (x >> 4 != 0) { x >>= 4; n += 4; }
        if (x >> 2 != 0) { x >>= 2; n += 2; }
        if (x >> 1 != 0) { x >>= 1; n += 1; }
        return n + x;
    }

    /// @dev Magnitude bits of m * 2^e (m < 2^250) rounded to nearest even in a format with
    /// `fracBits` fraction bits; subnormal below `lsbMin`, saturating at `inf`. A normal result
    /// keeps its hidden bit, which adds one to the exponent field; a carry out of rounding
    /// lands on the next binade by the same addition.
    function _round(uint256 m, int256 e, uint256 fracBits, int256 lsbMin, uint256 inf)
        private
        pure
        returns (uint256)
    {
        if (m == 0) return 0;
        int256 lsb = e + int256(_bitLength(m)) - int256(fracBits + 1);
        if (lsb < lsbMin) lsb = lsbMin;
        int256 shift = lsb - e;
        uint256 r;
        if (shift <= 0) {
            r = m << uint256(-shift);
        } else if (shift < 252) {
            uint256 s = uint256(shift);
            r = m >> s;
            uint256 rest = m & ((1 << s) - 1);
            uint256 half = 1 << (s - 1);
            if (rest > half || (rest == half && r & 1 == 1)) r += 1;
        } // else m < 2^250 is below half of the last place: r = 0
        uint256 bits = (uint256(lsb - lsbMin) << fracBits) + r;
        return bits < inf ? bits : inf;
    }

    function _pack(bool negative, uint256 m, int256 e) private pure returns (uint64) {
        return uint64(_round(m, e, 52, LSB_MIN, INF)) | (negative ? SIGN : 0);
    }

    function _firstNaN(uint64 a, uint64 b) private pure returns (bool, uint64) {
        if (isNaN(a)) return (true, a | QUIET);
        if (isNaN(b)) return (true, b | QUIET);
        return (false, 0);
    }

    /// @dev (-1)^sx mx 2^ex + (-1)^sy my 2^ey, both m nonzero and below 2^107: exact, or with a
    /// sticky bit far below the rounding position. An exact zero comes back as m = 0.
    function _sum(bool sx, uint256 mx, int256 ex, bool sy, uint256 my, int256 ey)
        private
        pure
        returns (bool, uint256, int256)
    {
        if (ey + int256(_bitLength(my)) > ex + int256(_bitLength(mx))) return _sum(sy, my, ey, sx, mx, ex);
        // x's top bit at LEAD, so x ends in at least 94 zero bits; y's top bit is at or below it
        uint256 up = LEAD + 1 - _bitLength(mx);
        uint256 vx = mx << up;
        int256 e0 = ex - int256(up);
        uint256 vy = _align(my, ey - e0);
        if (sx == sy) return (sx, vx + vy, e0);
        if (vx >= vy) return (sx, vx - vy, e0);
        return (sy, vy - vx, e0);
    }

    /// @dev m * 2^d for d >= 0; for d < 0 the bits shifted out leave a sticky 1 at bit 0.
    function _align(uint256 m, int256 d) private pure returns (uint256) {
        if (d >= 0) return m << uint256(d);
        if (d <= -250) return 1;
        uint256 s = uint256(-d);
        uint256 kept = m >> s;
        return m & ((1 << s) - 1) != 0 ? kept | 1 : kept;
    }

    // --- float64 arithmetic --------------------------------------------------------------

    /// @notice a + b.
    function add(uint64 a, uint64 b) internal pure returns (uint64) {
        (bool nan, uint64 q) = _firstNaN(a, b);
        if (nan) return q;
        if (isInf(a)) return isInf(b) && (a ^ b) & SIGN != 0 ? DEFAULT_NAN : a;
        if (isInf(b)) return b;
        (bool sa, uint256 ma, int256 ea) = _unpack(a);
        (bool sb, uint256 mb, int256 eb) = _unpack(b);
        if (ma == 0) return mb == 0 ? (sa && sb ? SIGN : 0) : b;
        if (mb == 0) return a;
        (bool s, uint256 m, int256 e) = _sum(sa, ma, ea, sb, mb, eb);
        return m == 0 ? 0 : _pack(s, m, e);
    }

    /// @notice a - b (a NaN b keeps its own sign).
    function sub(uint64 a, uint64 b) internal pure returns (uint64) {
        (bool nan, uint64 q) = _firstNaN(a, b);
        if (nan) return q;
        return add(a, b ^ SIGN);
    }

    /// @notice a * b.
    function mul(uint64 a, uint64 b) internal pure returns (uint64) {
        (bool nan, uint64 q) = _firstNaN(a, b);
        if (nan) return q;
        bool negative = (a ^ b) & SIGN != 0;
        (, uint256 ma, int256 ea) = _unpack(a);
        (, uint256 mb, int256 eb) = _unpack(b);
        bool aInf = isInf(a);
        bool bInf = isInf(b);
        if (aInf || bInf) {
            if ((!aInf && ma == 0) || (!bInf && mb == 0)) return DEFAULT_NAN;
            return INF | (negative ? SIGN : 0);
        }
        return _pack(negative, ma * mb, ea + eb);
    }

    /// @notice a / b.
    function div(uint64 a, uint64 b) internal pure returns (uint64) {
        (bool nan, uint64 q) = _firstNaN(a, b);
        if (nan) return q;
        bool negative = (a ^ b) & SIGN != 0;
        uint64 signBit = negative ? SIGN : 0;
        (, uint256 ma, int256 ea) = _unpack(a);
        (, uint256 mb, int256 eb) = _unpack(b);
        if (isInf(a)) return isInf(b) ? DEFAULT_NAN : INF | signBit;
        if (isInf(b)) return signBit;
        if (mb == 0) return ma == 0 ? DEFAULT_NAN : INF | signBit;
        if (ma == 0) return signBit;
        uint256 scaled = ma << QUOTIENT_BITS;
        uint256 quotient = scaled / mb;
        uint256 sticky = scaled % mb != 0 ? 1 : 0;
        return _pack(negative, (quotient << 1) | sticky, ea - eb - int256(QUOTIENT_BITS) - 1);
    }

    /// @notice sqrt(a); sqrt(-0) = -0, sqrt(a < 0) = default NaN.
    function sqrt(uint64 a) internal pure returns (uint64) {
        if (isNaN(a)) return a | QUIET;
        (bool negative, uint256 m, int256 e) = _unpack(a);
        if (m == 0) return a;
        if (negative) return DEFAULT_NAN;
        if (isInf(a)) return a;
        if (e & 1 != 0) {
            m <<= 1;
            e -= 1;
        }
        uint256 scaled = m << ROOT_SCALE;
        uint256 root = _isqrt(scaled);
        uint256 sticky = root * root != scaled ? 1 : 0;
        return _pack(false, (root << 1) | sticky, (e - int256(ROOT_SCALE)) / 2 - 1);
    }

    /// @dev floor(sqrt(x)) by Newton's method from a power of two above the root.
    function _isqrt(uint256 x) private pure returns (uint256 r) {
        r = 1 << ((_bitLength(x) + 1) / 2);
        uint256 next = (r + x / r) >> 1;
        while (next < r) {
            r = next;
            next = (r + x / r) >> 1;
        }
    }

    /// @notice a * b + c rounded once; NaN operands (first of a, b, c) win over invalid products.
    function fma(uint64 a, uint64 b, uint64 c) internal pure returns (uint64) {
        (bool nan, uint64 q) = _firstNaN(a, b);
        if (nan) return q;
        if (isNaN(c)) return c | QUIET;
        if (isInf(a) || isInf(b)) {
            if (a & ~SIGN == 0 || b & ~SIGN == 0) return DEFAULT_NAN; // 0 * inf
            bool productNegative = (a ^ b) & SIGN != 0;
            if (isInf(c) && (c & SIGN != 0) != productNegative) return DEFAULT_NAN; // inf - inf
            return INF | (productNegative ? SIGN : 0);
        }
        if (isInf(c)) return c;
        return _fmaFinite(a, b, c);
    }

    function _fmaFinite(uint64 a, uint64 b, uint64 c) private pure returns (uint64) {
        (, uint256 ma, int256 ea) = _unpack(a);
        (, uint256 mb, int256 eb) = _unpack(b);
        (bool sc, uint256 mc, int256 ec) = _unpack(c);
        bool sp = (a ^ b) & SIGN != 0;
        ma *= mb; // the exact product, below 2^106
        if (ma == 0) return mc == 0 ? (sp && sc ? SIGN : 0) : c;
        if (mc == 0) return _pack(sp, ma, ea + eb);
        (sp, ma, ea) = _sum(sp, ma, ea + eb, sc, mc, ec);
        return ma == 0 ? 0 : _pack(sp, ma, ea);
    }

    /// @notice -a (sign bit flipped, also of a NaN).
    function neg(uint64 a) internal pure returns (uint64) {
        return a ^ SIGN;
    }

    /// @notice |a| (sign bit cleared, also of a NaN).
    function abs(uint64 a) internal pure returns (uint64) {
        return a & ~SIGN;
    }

    // --- comparisons: false with a NaN; -0 == +0 -----------------------------------------

    function _key(uint64 x) private pure returns (int256) {
        int256 magnitude = int256(uint256(x & ~SIGN));
        return x & SIGN != 0 ? -magnitude : magnitude;
    }

    /// @notice a < b.
    function lt(uint64 a, uint64 b) internal pure returns (bool) {
        return !isNaN(a) && !isNaN(b) && _key(a) < _key(b);
    }

    /// @notice a <= b.
    function le(uint64 a, uint64 b) internal pure returns (bool) {
        return !isNaN(a) && !isNaN(b) && _key(a) <= _key(b);
    }

    /// @notice a == b.
    function eq(uint64 a, uint64 b) internal pure returns (bool) {
        return !isNaN(a) && !isNaN(b) && _key(a) == _key(b);
    }

    // --- conversions ----------------------------------------------------------------------

    /// @notice float32 -> float64, exact; a NaN keeps sign and payload (at the top), quieted.
    function f32ToF64(uint32 x) internal pure returns (uint64) {
        uint64 signBit = x & SIGN32 != 0 ? SIGN : 0;
        if (_isNaN32(x)) return signBit | INF | QUIET | (uint64(x & (QUIET32 - 1)) << 29);
        if (x & ~SIGN32 == INF32) return signBit | INF;
        uint256 field = (x >> 23) & 0xFF;
        uint256 m = x & ((1 << 23) - 1);
        if (field == 0) return _pack(signBit != 0, m, LSB_MIN32);
        return _pack(signBit != 0, m | (1 << 23), LSB_MIN32 + int256(field) - 1);
    }

    /// @notice float64 -> float32, round to nearest even, overflow to inf, underflow to zero.
    function f64ToF32(uint64 x) internal pure returns (uint32) {
        uint32 signBit = x & SIGN != 0 ? SIGN32 : 0;
        if (isNaN(x)) return signBit | INF32 | QUIET32 | uint32((x >> 29) & (QUIET32 - 1));
        if (isInf(x)) return signBit | INF32;
        (, uint256 m, int256 e) = _unpack(x);
        return signBit | uint32(_round(m, e, 23, LSB_MIN32, INF32));
    }

    /// @notice int64 (two's complement bits) -> nearest float64, ties to even.
    function i64ToF64(uint64 n) internal pure returns (uint64) {
        if (n & SIGN == 0) return _pack(false, n, 0);
        return _pack(true, (1 << 64) - uint256(n), 0);
    }

    /// @notice float64 -> int64 bits, truncated toward zero; NaN and out of range give INT64_MIN (x86).
    function f64ToI64(uint64 x) internal pure returns (uint64) {
        if (isNaN(x) || isInf(x)) return INT64_INDEFINITE;
        (bool negative, uint256 m, int256 e) = _unpack(x);
        uint256 magnitude;
        if (e >= 0) {
            if (e > 63) return INT64_INDEFINITE;
            magnitude = m << uint256(e);
        } else {
            magnitude = e > -64 ? m >> uint256(-e) : 0;
        }
        if (magnitude > (negative ? uint256(1) << 63 : (uint256(1) << 63) - 1)) return INT64_INDEFINITE;
        return negative ? uint64(((1 << 64) - magnitude) & type(uint64).max) : uint64(magnitude);
    }

    /// @notice The integer part as a float64 (C trunc); NaN quieted.
    function trunc(uint64 x) internal pure returns (uint64) {
        if (isNaN(x)) return x | QUIET;
        (bool negative, uint256 m, int256 e) = _unpack(x);
        if (isInf(x) || e >= 0) return x;
        if (e <= -53) return negative ? SIGN : 0;
        uint256 s = uint256(-e);
        return _pack(negative, (m >> s) << s, e);
    }

    /// @notice The nearest integer as a float64, ties to even (rint); NaN quieted.
    function rint(uint64 x) internal pure returns (uint64) {
        if (isNaN(x)) return x | QUIET;
        (bool negative, uint256 m, int256 e) = _unpack(x);
        if (isInf(x) || e >= 0) return x;
        if (e < -54) return negative ? SIGN : 0;
        uint256 s = uint256(-e);
        uint256 q = m >> s;
        uint256 rest = m & ((1 << s) - 1);
        uint256 half = 1 << (s - 1);
        if (rest > half || (rest == half && q & 1 == 1)) q += 1;
        return _pack(negative, q, 0);
    }

    /// @notice x * 2^n rounded once (n as int64 bits); NaN quieted, zeros and inf unchanged.
    function ldexp(uint64 x, uint64 n) internal pure returns (uint64) {
        if (isNaN(x)) return x | QUIET;
        if (isInf(x)) return x;
        int256 shift = int256(int64(n));
        if (shift > LDEXP_LIMIT) shift = LDEXP_LIMIT;
        if (shift < -LDEXP_LIMIT) shift = -LDEXP_LIMIT;
        (bool negative, uint256 m, int256 e) = _unpack(x);
        return _pack(negative, m, e + shift);
    }

    /// @notice m of x = m * 2^k, 0.5 <= |m| < 1; zeros, inf and NaN unchanged (C frexp).
    function frexpMantissa(uint64 x) internal pure returns (uint64) {
        if (isNaN(x) || isInf(x)) return x;
        (bool negative, uint256 m,) = _unpack(x);
        if (m == 0) return x;
        return _pack(negative, m, -int256(_bitLength(m)));
    }

    /// @notice k of x = m * 2^k as int64 bits (0 for zeros, inf and NaN).
    function frexpExponent(uint64 x) internal pure returns (uint64) {
        if (isNaN(x) || isInf(x)) return 0;
        (, uint256 m, int256 e) = _unpack(x);
        if (m == 0) return 0;
        return uint64(int64(e + int256(_bitLength(m))));
    }

    // --- float32 arithmetic: the float64 step rounded once (53 >= 2 * 24 + 2) ---------------

    /// @notice float32 a + b.
    function add32(uint32 a, uint32 b) internal pure returns (uint32) {
        return f64ToF32(add(f32ToF64(a), f32ToF64(b)));
    }

    /// @notice float32 a - b.
    function sub32(uint32 a, uint32 b) internal pure returns (uint32) {
        return f64ToF32(sub(f32ToF64(a), f32ToF64(b)));
    }

    /// @notice float32 a * b.
    function mul32(uint32 a, uint32 b) internal pure returns (uint32) {
        return f64ToF32(mul(f32ToF64(a), f32ToF64(b)));
    }

    /// @notice float32 a / b.
    function div32(uint32 a, uint32 b) internal pure returns (uint32) {
        return f64ToF32(div(f32ToF64(a), f32ToF64(b)));
    }

    /// @notice float32 sqrt(a).
    function sqrt32(uint32 a) internal pure returns (uint32) {
        return f64ToF32(sqrt(f32ToF64(a)));
    }

    // --- glue steps of the element programs (protocol/step_trace.py) and the dispatch ---------

    /// @notice The larger of a and b; the first NaN (quieted) when either is NaN; a when equal.
    function max(uint64 a, uint64 b) internal pure returns (uint64) {
        (bool nan, uint64 q) = _firstNaN(a, b);
        if (nan) return q;
        return lt(a, b) ? b : a;
    }

    /// @notice Signed a < b of two int64 bit patterns.
    function ltInt64(uint64 a, uint64 b) internal pure returns (bool) {
        return int64(a) < int64(b);
    }

    /// @notice A float32 NaN becomes the canonical NaN 0x7FC00000 (as tensor hashes store it).
    function canon32(uint32 x) internal pure returns (uint32) {
        return _isNaN32(x) ? 0x7FC00000 : x;
    }

    /// @dev A float32 operand: the low 32 bits (the caller's program never sets the others).
    function _f32(uint64 operand) private pure returns (uint32) {
        if (operand >> 32 != 0) revert NotAFloat32(operand);
        return uint32(operand);
    }

    /// @notice A float32 step got an operand wider than 32 bits.
    error NotAFloat32(uint64 operand);
    /// @notice The op code names no step.
    error UnknownStep(uint8 code);

    /// @notice Step `code` of `protocol.float64_steps.STEPS` on (a, b, c); unary steps ignore b
    /// and c, binary ones c. Comparisons give 1 or 0.
    function run(uint8 code, uint64 a, uint64 b, uint64 c) internal pure returns (uint64) {
        if (code < 8) {
            if (code == 0) return add(a, b);
            if (code == 1) return sub(a, b);
            if (code == 2) return mul(a, b);
            if (code == 3) return div(a, b);
            if (code == 4) return sqrt(a);
            if (code == 5) return fma(a, b, c);
            if (code == 6) return neg(a);
            return abs(a);
        }
        if (code < 16) {
            if (code == 8) return lt(a, b) ? 1 : 0;
            if (code == 9) return le(a, b) ? 1 : 0;
            if (code == 10) return eq(a, b) ? 1 : 0;
            if (code == 11) return f32ToF64(_f32(a));
            if (code == 12) return f64ToF32(a);
            if (code == 13) return i64ToF64(a);
            if (code == 14) return f64ToI64(a);
            return trunc(a);
        }
        if (code < 25) {
            if (code == 16) return rint(a);
            if (code == 17) return ldexp(a, b);
            if (code == 18) return frexpMantissa(a);
            if (code == 19) return frexpExponent(a);
            if (code == 20) return add32(_f32(a), _f32(b));
            if (code == 21) return sub32(_f32(a), _f32(b));
            if (code == 22) return mul32(_f32(a), _f32(b));
            if (code == 23) return div32(_f32(a), _f32(b));
            return sqrt32(_f32(a));
        }
        unchecked {
            if (code == 25) return a != 0 ? b : c;
            if (code == 26) return a + b;
            if (code == 27) return a - b;
            if (code == 28) return a * b;
            if (code == 29) return ltInt64(a, b) ? 1 : 0;
            if (code == 30) return a | b;
            if (code == 31) return a & b;
            if (code == 32) return max(a, b);
            if (code == 33) return canon32(_f32(a));
            if (code == 34) return uint64(int64(a) >> (b & 63));
            if (code == 35) return a ^ b;
        }
        revert UnknownStep(code);
    }
}
