// SPDX-License-Identifier: Apache-2.0
pragma solidity 0.8.28;

/// @title LibList
/// @notice Keccak Merkle lists (docs/economics.md, section 6): a trace's C+1 state hashes, an
/// interval's per-step hashes, a step's node hashes. The tree has the RFC 6962 shape of
/// `protocol/merkle.py` (the left subtree holds the largest power of two below the size), and
/// `protocol/listtree.py` is its twin:
///
///     leaf(h)    = keccak256(0x00 ‖ h)
///     node(l, r) = keccak256(0x01 ‖ l ‖ r)
///
/// `root` pairs nodes level by level and carries an unpaired last node up unchanged, which
/// builds the same tree. `verify` is RFC 9162's inclusion check (section 2.1.3.2): siblings
/// from the leaf up, none for a level where the node is carried up unpaired. The root does not
/// commit to the size: the caller passes the size it expects (the terms fix it).
library LibList {
    // Most entries of one list (C+1, k+1 and N+1 are bounded by it).
    uint256 internal constant MAX_LIST = 1024;

    /// @notice The list is empty or longer than MAX_LIST.
    error ListInvalidSize(uint256 size);

    /// @notice keccak256(0x00 ‖ entry).
    function leaf(bytes32 entry) internal pure returns (bytes32 hashed) {
        assembly ("memory-safe") {
            let p := mload(0x40)
            mstore8(p, 0x00)
            mstore(add(p, 1), entry)
            hashed := keccak256(p, 33)
        }
    }

    /// @notice keccak256(0x01 ‖ left ‖ right).
    function node(bytes32 left, bytes32 right) internal pure returns (bytes32 hashed) {
        assembly ("memory-safe") {
            let p := mload(0x40)
            mstore8(p, 0x01)
            mstore(add(p, 1), left)
            mstore(add(p, 33), right)
            hashed := keccak256(p, 65)
        }
    }

    /// @notice The root of a list of 1 to MAX_LIST entries.
    function root(bytes32[] calldata entries) internal pure returns (bytes32) {
        uint256 size = entries.length;
        // An empty list has no root, and longer lists are not part of any job's shape.
        if (size == 0 || size > MAX_LIST) revert ListInvalidSize(size);
        bytes32[] memory level = new bytes32[](size);
        // Indices stay below size <= MAX_LIST: nothing here can overflow.
        unchecked {
            for (uint256 i; i < size; ++i) {
                level[i] = leaf(entries[i]);
            }
            // Pair in place: entry i of the level above is built from entries 2i and 2i+1 below.
            while (size > 1) {
                uint256 pairs = size >> 1;
                for (uint256 i; i < pairs; ++i) {
                    level[i] = node(level[2 * i], level[2 * i + 1]);
                }
                if (size & 1 == 1) level[pairs] = level[size - 1];
                size = pairs + (size & 1);
            }
        }
        return level[0];
    }

    /// @notice Whether `entry` is entry `index` of a list of `size` entries under `listRoot`.
    function verify(bytes32 listRoot, bytes32 entry, uint256 size, uint256 index, bytes32[] calldata siblings)
        internal
        pure
        returns (bool)
    {
        if (size == 0 || size > MAX_LIST || index >= size) return false;
        uint256 fn = index;
        uint256 sn = size - 1;
        bytes32 r = leaf(entry);
        for (uint256 i; i < siblings.length; ++i) {
            // More siblings than the path has levels.
            if (sn == 0) return false;
            if (fn & 1 == 1 || fn == sn) {
                r = node(siblings[i], r);
                // Levels where this node is carried up unpaired.
                while (fn & 1 == 0 && fn != 0) {
                    fn >>= 1;
                    sn >>= 1;
                }
            } else {
                r = node(r, siblings[i]);
            }
            fn >>= 1;
            sn >>= 1;
        }
        return sn == 0 && r == listRoot;
    }
}
