// SPDX-License-Identifier: Apache-2.0
pragma solidity 0.8.28;

import {TensorChunk} from "../TensorChunk.sol";

/// @title TensorChunkHarness
/// @notice Test contract exposing TensorChunk, so its verdicts can be compared with
/// `protocol/chunk_tree.py` and the gas of one chunk proof measured in each tree.
contract TensorChunkHarness {
    /// @notice TensorChunk.verifyKeccak.
    function verifyKeccak(bytes32 root, bytes calldata chunk, uint256 index, uint256 count, bytes32[] calldata siblings)
        external
        pure
        returns (bool)
    {
        return TensorChunk.verifyKeccak(root, chunk, index, count, siblings);
    }

    /// @notice TensorChunk.verifyBlake3.
    function verifyBlake3(bytes32 root, bytes calldata chunk, uint256 index, uint256 count, bytes32[] calldata siblings)
        external
        pure
        returns (bool)
    {
        return TensorChunk.verifyBlake3(root, chunk, index, count, siblings);
    }

    /// @notice The gas of each check alone (keccak, BLAKE3), measured around the library call.
    function gasOf(
        bytes32 keccakRoot,
        bytes32 blake3Root,
        bytes calldata chunk,
        uint256 index,
        uint256 count,
        bytes32[] calldata keccakSiblings,
        bytes32[] calldata blake3Siblings
    ) external view returns (uint256 keccakGas, uint256 blake3Gas) {
        uint256 before = gasleft();
        TensorChunk.verifyKeccak(keccakRoot, chunk, index, count, keccakSiblings);
        keccakGas = before - gasleft();
        before = gasleft();
        TensorChunk.verifyBlake3(blake3Root, chunk, index, count, blake3Siblings);
        blake3Gas = before - gasleft();
    }
}
