// SPDX-License-Identifier: Apache-2.0
pragma solidity 0.8.28;

import {Float64Step} from "../Float64Step.sol";

/// @title Float64StepHarness
/// @notice Test contract running Float64Step over arrays, so one eth_call checks thousands of
/// cases against `protocol/float64_steps.py` (whose STEPS table holds the same op codes), and
/// measuring each step's gas.
contract Float64StepHarness {
    /// @notice The op code names no step.
    error UnknownStep(uint8 code);
    /// @notice The operand arrays differ in length.
    error LengthMismatch();
    /// @notice A float32 step got an operand wider than 32 bits.
    error NotAFloat32(uint64 operand);

    /// @notice out[i] = step(x[i], y[i], z[i]); unary steps ignore y and z, binary ones z.
    function run(uint8 code, uint64[] calldata x, uint64[] calldata y, uint64[] calldata z)
        external
        pure
        returns (uint64[] memory out)
    {
        if (y.length != x.length || z.length != x.length) revert LengthMismatch();
        out = new uint64[](x.length);
        for (uint256 i; i < x.length; ++i) {
            out[i] = _step(code, x[i], y[i], z[i]);
        }
    }

    /// @notice gas[i]: the gas of step(x[i], y[i], z[i]) alone, measured around the library call.
    function gasOf(uint8 code, uint64[] calldata x, uint64[] calldata y, uint64[] calldata z)
        external
        view
        returns (uint256[] memory gas)
    {
        if (y.length != x.length || z.length != x.length) revert LengthMismatch();
        gas = new uint256[](x.length);
        for (uint256 i; i < x.length; ++i) {
            (uint64 a, uint64 b, uint64 c) = (x[i], y[i], z[i]);
            uint256 before = gasleft();
            _step(code, a, b, c);
            gas[i] = before - gasleft();
        }
    }

    function _f32(uint64 operand) private pure returns (uint32) {
        if (operand >> 32 != 0) revert NotAFloat32(operand);
        return uint32(operand);
    }

    function _step(uint8 code, uint64 a, uint64 b, uint64 c) private pure returns (uint64) {
        if (code < 8) {
            if (code == 0) return Float64Step.add(a, b);
            if (code == 1) return Float64Step.sub(a, b);
            if (code == 2) return Float64Step.mul(a, b);
            if (code == 3) return Float64Step.div(a, b);
            if (code == 4) return Float64Step.sqrt(a);
            if (code == 5) return Float64Step.fma(a, b, c);
            if (code == 6) return Float64Step.neg(a);
            return Float64Step.abs(a);
        }
        if (code < 16) {
            if (code == 8) return Float64Step.lt(a, b) ? 1 : 0;
            if (code == 9) return Float64Step.le(a, b) ? 1 : 0;
            if (code == 10) return Float64Step.eq(a, b) ? 1 : 0;
            if (code == 11) return Float64Step.f32ToF64(_f32(a));
            if (code == 12) return Float64Step.f64ToF32(a);
            if (code == 13) return Float64Step.i64ToF64(a);
            if (code == 14) return Float64Step.f64ToI64(a);
            return Float64Step.trunc(a);
        }
        if (code == 16) return Float64Step.rint(a);
        if (code == 17) return Float64Step.ldexp(a, b);
        if (code == 18) return Float64Step.frexpMantissa(a);
        if (code == 19) return Float64Step.frexpExponent(a);
        if (code == 20) return Float64Step.add32(_f32(a), _f32(b));
        if (code == 21) return Float64Step.sub32(_f32(a), _f32(b));
        if (code == 22) return Float64Step.mul32(_f32(a), _f32(b));
        if (code == 23) return Float64Step.div32(_f32(a), _f32(b));
        if (code == 24) return Float64Step.sqrt32(_f32(a));
        revert UnknownStep(code);
    }
}
