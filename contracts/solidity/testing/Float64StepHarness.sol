// SPDX-License-Identifier: Apache-2.0
pragma solidity 0.8.28;

import {Float64Step} from "../Float64Step.sol";

/// @title Float64StepHarness
/// @notice Test contract running Float64Step over arrays, so one eth_call checks thousands of
/// cases against `protocol/float64_steps.py` (whose STEPS table holds the same op codes), and
/// measuring each step's gas.
contract Float64StepHarness {
    /// @notice The operand arrays differ in length.
    error LengthMismatch();

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

    function _step(uint8 code, uint64 a, uint64 b, uint64 c) private pure returns (uint64) {
        return Float64Step.run(code, a, b, c);
    }
}
