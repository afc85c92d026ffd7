// SPDX-License-Identifier: Apache-2.0
pragma solidity 0.8.28;

import {LibList} from "../LibList.sol";

/// @title LibListHarnessV2
/// @notice Test contract exposing LibList, so its roots and proofs can be compared with
/// `protocol/listtree.py` (and its gas measured).
contract LibListHarnessV2 {
    /// @notice LibList.root.
    function root(bytes32[] calldata entries) external pure returns (bytes32) {
        return LibList.root(entries);
    }

    /// @notice LibList.verify.
    function verify(bytes32 listRoot, bytes32 entry, uint256 size, uint256 index, bytes32[] calldata siblings)
        external
        pure
        returns (bool)
    {
        return LibList.verify(listRoot, entry, size, index, siblings);
    }
}
