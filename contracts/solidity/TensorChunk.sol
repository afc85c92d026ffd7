// SPDX-License-Identifier: Apache-2.0
pragma solidity 0.8.28;

/// @title TensorChunk
/// @notice Opens one 1 KiB chunk of a tensor's bytes against a chunk-tree root (issue 18;
/// docs/onchain-step.md measures both trees and says which one the game uses).
/// `protocol/chunk_tree.py` is its twin. Both trees have the RFC 6962 shape and are checked
/// with RFC 9162's inclusion walk (siblings from the chunk up, none for a level where the
/// node is carried up unpaired):
///
///     keccak: leaf = keccak256(0x00 ‖ chunk), node = keccak256(0x01 ‖ left ‖ right)
///     BLAKE3: BLAKE3's own chunk tree, so the root is the BLAKE3 hash of all the bytes
///
/// Every chunk but the last holds CHUNK_SIZE bytes; `count` is the number of chunks, which
/// the caller takes from the tensor's agreed size.
library TensorChunk {
    uint256 internal constant CHUNK_SIZE = 1024;
    uint256 private constant BLOCK_SIZE = 64;
    uint256 private constant CHUNK_START = 1;
    uint256 private constant CHUNK_END = 2;
    uint256 private constant PARENT = 4;
    uint256 private constant ROOT = 8;

    // --- the inclusion walk shared by both trees ------------------------------------------

    /// @dev One step of RFC 9162's walk: the node's new (fn, sn) and whether it is on the left.
    function _up(uint256 fn, uint256 sn) private pure returns (uint256, uint256, bool) {
        if (fn & 1 == 1 || fn == sn) {
            while (fn & 1 == 0 && fn != 0) {
                fn >>= 1;
                sn >>= 1;
            }
            return (fn >> 1, sn >> 1, false);
        }
        return (fn >> 1, sn >> 1, true);
    }

    function _chunkFits(uint256 length, uint256 index, uint256 count) private pure returns (bool) {
        if (index >= count) return false;
        if (length == CHUNK_SIZE) return true;
        return index == count - 1 && (length != 0 || count == 1) && length < CHUNK_SIZE;
    }

    // --- keccak ------------------------------------------------------------------------------

    /// @notice Whether `chunk` is chunk `index` of `count` under the keccak chunk root.
    function verifyKeccak(bytes32 root, bytes calldata chunk, uint256 index, uint256 count, bytes32[] calldata siblings)
        internal
        pure
        returns (bool)
    {
        if (!_chunkFits(chunk.length, index, count)) return false;
        bytes32 r = keccak256(abi.encodePacked(bytes1(0x00), chunk));
        uint256 fn = index;
        uint256 sn = count - 1;
        for (uint256 i; i < siblings.length; ++i) {
            if (sn == 0) return false; // more siblings than the path has levels
            bool onLeft;
            (fn, sn, onLeft) = _up(fn, sn);
            r = onLeft ? _keccakNode(r, siblings[i]) : _keccakNode(siblings[i], r);
        }
        return sn == 0 && r == root;
    }

    function _keccakNode(bytes32 left, bytes32 right) private pure returns (bytes32 hashed) {
        assembly ("memory-safe") {
            let p := mload(0x40)
            mstore8(p, 0x01)
            mstore(add(p, 1), left)
            mstore(add(p, 33), right)
            hashed := keccak256(p, 65)
        }
    }

    // --- BLAKE3 ------------------------------------------------------------------------------

    /// @notice Whether `chunk` is chunk `index` of a `count`-chunk input whose BLAKE3 hash is `root`.
    function verifyBlake3(bytes32 root, bytes calldata chunk, uint256 index, uint256 count, bytes32[] calldata siblings)
        internal
        pure
        returns (bool)
    {
        if (!_chunkFits(chunk.length, index, count)) return false;
        if (count == 1) return siblings.length == 0 && _chunkCv(chunk, 0, true) == root;
        bytes32 r = _chunkCv(chunk, index, false);
        uint256 fn = index;
        uint256 sn = count - 1;
        for (uint256 i; i < siblings.length; ++i) {
            if (sn == 0) return false;
            bool onLeft;
            (fn, sn, onLeft) = _up(fn, sn);
            r = onLeft ? _parentCv(r, siblings[i], sn == 0) : _parentCv(siblings[i], r, sn == 0);
        }
        return sn == 0 && r == root;
    }

    /// @dev The chaining value of one chunk: its blocks compressed in turn, counter = index.
    function _chunkCv(bytes calldata chunk, uint256 index, bool isRoot) private pure returns (bytes32) {
        uint256[8] memory cv = _iv8();
        uint256 blocks = chunk.length == 0 ? 1 : (chunk.length + BLOCK_SIZE - 1) / BLOCK_SIZE;
        for (uint256 b; b < blocks; ++b) {
            uint256 offset = b * BLOCK_SIZE;
            uint256 length = chunk.length - offset < BLOCK_SIZE ? chunk.length - offset : BLOCK_SIZE;
            uint256 flags = (b == 0 ? CHUNK_START : 0) | (b == blocks - 1 ? CHUNK_END : 0);
            if (isRoot && b == blocks - 1) flags |= ROOT;
            cv = _compress(cv, _block(chunk, offset, length), index, length, flags);
        }
        return _cvBytes(cv);
    }

    function _parentCv(bytes32 left, bytes32 right, bool isRoot) private pure returns (bytes32) {
        uint256[16] memory m;
        uint256[8] memory l = _cvWords(left);
        uint256[8] memory r = _cvWords(right);
        for (uint256 i; i < 8; ++i) {
            m[i] = l[i];
            m[i + 8] = r[i];
        }
        return _cvBytes(_compress(_iv8(), m, 0, BLOCK_SIZE, PARENT | (isRoot ? ROOT : 0)));
    }

    function _iv8() private pure returns (uint256[8] memory) {
        return [uint256(0x6A09E667), 0xBB67AE85, 0x3C6EF372, 0xA54FF53A, 0x510E527F, 0x9B05688C, 0x1F83D9AB,
            0x5BE0CD19];
    }

    /// @dev The bytes of each 32-bit lane of `w` reversed: big-endian loads to BLAKE3's little-endian words.
    function _swapLanes(uint256 w) private pure returns (uint256) {
        w = ((w >> 8) & 0x00FF00FF00FF00FF00FF00FF00FF00FF00FF00FF00FF00FF00FF00FF00FF00FF) | ((w & 0x00FF00FF00FF00FF00FF00FF00FF00FF00FF00FF00FF00FF00FF00FF00FF00FF) << 8);
        return ((w >> 16) & 0x0000FFFF0000FFFF0000FFFF0000FFFF0000FFFF0000FFFF0000FFFF0000FFFF) | ((w & 0x0000FFFF0000FFFF0000FFFF0000FFFF0000FFFF0000FFFF0000FFFF0000FFFF) << 16);
    }

    /// @dev Little-endian words of `length` bytes at `offset`, zero-padded to 64 bytes.
    function _block(bytes calldata data, uint256 offset, uint256 length) private pure returns (uint256[16] memory m) {
        uint256 hi;
        uint256 lo;
        assembly ("memory-safe") {
            hi := calldataload(add(data.offset, offset))
            lo := calldataload(add(data.offset, add(offset, 32)))
        }
        // calldata past the chunk belongs to other arguments: keep only `length` bytes
        if (length < 32) {
            hi = length == 0 ? 0 : hi & ~((uint256(1) << (256 - 8 * length)) - 1);
            lo = 0;
        } else if (length < 64) {
            lo = length == 32 ? 0 : lo & ~((uint256(1) << (512 - 8 * length)) - 1);
        }
        hi = _swapLanes(hi);
        lo = _swapLanes(lo);
        assembly ("memory-safe") {
            for { let j := 0 } lt(j, 8) { j := add(j, 1) } {
                let shift := sub(224, shl(5, j))
                mstore(add(m, shl(5, j)), and(shr(shift, hi), 0xFFFFFFFF))
                mstore(add(m, add(0x100, shl(5, j))), and(shr(shift, lo), 0xFFFFFFFF))
            }
        }
    }

    function _cvWords(bytes32 cv) private pure returns (uint256[8] memory w) {
        uint256 swapped = _swapLanes(uint256(cv));
        assembly ("memory-safe") {
            for { let j := 0 } lt(j, 8) { j := add(j, 1) } {
                mstore(add(w, shl(5, j)), and(shr(sub(224, shl(5, j)), swapped), 0xFFFFFFFF))
            }
        }
    }

    function _cvBytes(uint256[8] memory w) private pure returns (bytes32) {
        uint256 out;
        assembly ("memory-safe") {
            for { let j := 0 } lt(j, 8) { j := add(j, 1) } {
                out := or(out, shl(sub(224, shl(5, j)), mload(add(w, shl(5, j)))))
            }
        }
        return bytes32(_swapLanes(out));
    }

    /// @dev BLAKE3's compression with the 4x4 state as four rows, each row's four words in the
    /// low halves of four 64-bit lanes of one uint256, so one lane-wise G mixes all four
    /// columns (or, with b, c, d rotated by one, two, three lanes, all four diagonals) at once.
    /// Masking every lane to 32 bits after an addition drops the carries. Round r reads the
    /// message through its schedule (16 word indices at bytes 16r..16r+15 of MSG_SCHEDULE),
    /// which is the permutation applied r times.
    function _compress(uint256[8] memory cv, uint256[16] memory m, uint256 counter, uint256 blockLen, uint256 flags)
        private
        pure
        returns (uint256[8] memory out)
    {
        assembly ("memory-safe") {
            function rotr(x, n) -> y {
                y := and(or(shr(n, x), shl(sub(32, n), x)), 0x00000000FFFFFFFF00000000FFFFFFFF00000000FFFFFFFF00000000FFFFFFFF)
            }
            function add3(x, y, z) -> w {
                w := and(add(add(x, y), z), 0x00000000FFFFFFFF00000000FFFFFFFF00000000FFFFFFFF00000000FFFFFFFF)
            }
            function add2(x, y) -> w {
                w := and(add(x, y), 0x00000000FFFFFFFF00000000FFFFFFFF00000000FFFFFFFF00000000FFFFFFFF)
            }
            function word(block, order, k) -> w {
                w := mload(add(block, shl(5, byte(k, order))))
            }
            // round r's message words at schedule positions j, j+2, j+4, j+6, in lanes 0..3
            function pack(block, r, j) -> w {
                let order := 0x0b0f0500010908060e0a020c0304070d00000000000000000000000000000000
                switch shr(1, r)
                case 0 { order := 0x000102030405060708090a0b0c0d0e0f0206030a0700040d010b0c05090e0f08 }
                case 1 { order := 0x03040a0c0d02070e060509000b0f08010a070c090e030d0f04000b0205080106 }
                case 2 { order := 0x0c0d090b0f0a0e080702050300010604090e0b05080c0f010d03000a02060407 }
                let k := add(shl(4, and(r, 1)), j)
                w := or(or(word(block, order, k), shl(64, word(block, order, add(k, 2)))),
                        or(shl(128, word(block, order, add(k, 4))), shl(192, word(block, order, add(k, 6)))))
            }
            function row(p) -> w {
                w := or(or(mload(p), shl(64, mload(add(p, 0x20)))), or(shl(128, mload(add(p, 0x40))), shl(192, mload(add(p, 0x60)))))
            }
            let d := or(or(and(counter, 0xFFFFFFFF), shl(64, and(shr(32, counter), 0xFFFFFFFF))), or(shl(128, blockLen), shl(192, flags)))
            let a := row(cv)
            let b := row(add(cv, 0x80))
            let c := 0xA54FF53A000000003C6EF37200000000BB67AE85000000006A09E667
            for { let r := 0 } lt(r, 7) { r := add(r, 1) } {
                // columns
                a := add3(a, b, pack(m, r, 0))
                d := rotr(xor(d, a), 16)
                c := add2(c, d)
                b := rotr(xor(b, c), 12)
                a := add3(a, b, pack(m, r, 1))
                d := rotr(xor(d, a), 8)
                c := add2(c, d)
                b := rotr(xor(b, c), 7)
                // diagonals: lane i of b, c, d moves to lane i-1, i-2, i-3
                b := or(shr(64, b), shl(192, b))
                c := or(shr(128, c), shl(128, c))
                d := or(shl(64, d), shr(192, d))
                a := add3(a, b, pack(m, r, 8))
                d := rotr(xor(d, a), 16)
                c := add2(c, d)
                b := rotr(xor(b, c), 12)
                a := add3(a, b, pack(m, r, 9))
                d := rotr(xor(d, a), 8)
                c := add2(c, d)
                b := rotr(xor(b, c), 7)
                b := or(shl(64, b), shr(192, b))
                c := or(shr(128, c), shl(128, c))
                d := or(shr(64, d), shl(192, d))
            }
            a := xor(a, c)
            b := xor(b, d)
            for { let i := 0 } lt(i, 4) { i := add(i, 1) } {
                mstore(add(out, shl(5, i)), and(shr(shl(6, i), a), 0xFFFFFFFF))
                mstore(add(out, add(0x80, shl(5, i))), and(shr(shl(6, i), b), 0xFFFFFFFF))
            }
        }
    }
}
