"""Chunk trees over a tensor's bytes that the contract can open one chunk of (issue 18).

Two trees over 1 KiB chunks, both of the RFC 6962 shape (the left subtree holds the largest
power of two of chunks below the count; pairing level by level and carrying an unpaired
last node up builds it), both with an inclusion check that `contracts/solidity/TensorChunk.sol`
repeats (RFC 9162, section 2.1.3.2: siblings from the chunk up):

- keccak: leaf = keccak256(0x00 ‖ chunk), node = keccak256(0x01 ‖ left ‖ right);
- BLAKE3: BLAKE3's own tree, whose root is the BLAKE3 hash of the bytes: chunk chaining
  values by the chunk compression (16 blocks of 64 bytes, counter = chunk index), parents by
  the parent compression, the last compression flagged ROOT. So the root of this tree over a
  tensor hash's message *is* `repops_cupy.hashing.hash_tensor`'s digest, and a proof needs no
  second hash at checkpoint time.

docs/onchain-step.md has the gas and throughput of each and the choice. The BLAKE3 code
here is numpy over all chunks at once (proofs are made in disputes only; the fast library
hashes every checkpoint).
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np
from .keccak import keccak

from .errors import LocalProtocolError

CHUNK_SIZE = 1024
BLOCK_SIZE = 64
IV = np.array([0x6A09E667, 0xBB67AE85, 0x3C6EF372, 0xA54FF53A, 0x510E527F, 0x9B05688C, 0x1F83D9AB, 0x5BE0CD19],
              dtype=np.uint32)
PERMUTATION = (2, 6, 3, 10, 7, 0, 4, 13, 1, 11, 12, 5, 9, 14, 15, 8)
CHUNK_START, CHUNK_END, PARENT, ROOT = 1, 2, 4, 8

__all__ = [
    "CHUNK_SIZE", "blake3_chunk_proof", "blake3_chunk_root", "blake3_verify_chunk", "chunk_count",
    "keccak_chunk_proof", "keccak_chunk_root", "keccak_verify_chunk",
]


def chunk_count(size: int) -> int:
    """Chunks of `size` bytes: at least one (an empty input is one empty chunk)."""
    return max(1, -(-size // CHUNK_SIZE))


def _chunk(data: bytes, index: int) -> bytes:
    if not 0 <= index < chunk_count(len(data)):
        raise LocalProtocolError(f"chunk {index} of {chunk_count(len(data))}")
    return bytes(data[index * CHUNK_SIZE:(index + 1) * CHUNK_SIZE])


# --- the tree shape shared by both hashes -----------------------------------------------------


def _chunk_fits(length: int, index: int, count: int) -> bool:
    """Every chunk but the last is full; the last holds 1 to CHUNK_SIZE bytes (0 only when alone)."""
    if not 0 <= index < count:
        return False
    return length == CHUNK_SIZE or (index == count - 1 and (length or count == 1) and length < CHUNK_SIZE)


def _levels(leaves: list, pair: Callable[[list, list, bool], list]) -> list[list]:
    """Levels bottom-up; `pair(lefts, rights, is_root)` hashes a level's pairs at once."""
    levels = [leaves]
    while len(levels[-1]) > 1:
        level = levels[-1]
        half = len(level) // 2
        nxt = pair(level[0:2 * half:2], level[1:2 * half:2], len(level) == 2)
        levels.append(list(nxt) + ([level[-1]] if len(level) % 2 else []))
    return levels


def _path(levels: list[list], index: int) -> list:
    """Siblings from the leaf up; none for a level where the node is carried up unpaired."""
    siblings = []
    for level in levels[:-1]:
        if index ^ 1 < len(level):
            siblings.append(level[index ^ 1])
        index >>= 1
    return siblings


def _walk(leaf, index: int, count: int, siblings: Sequence, node: Callable[[object, object, bool], object]):
    """RFC 9162's inclusion walk; `node(left, right, is_root)`. None when the path does not fit."""
    if not 0 <= index < count:
        return None
    fn, sn, r = index, count - 1, leaf
    for sibling in siblings:
        if sn == 0:
            return None
        if fn & 1 or fn == sn:
            while not fn & 1 and fn:  # levels where this node is carried up unpaired
                fn, sn = fn >> 1, sn >> 1
            fn, sn = fn >> 1, sn >> 1
            r = node(sibling, r, sn == 0)
        else:
            fn, sn = fn >> 1, sn >> 1
            r = node(r, sibling, sn == 0)
    return r if sn == 0 else None


# --- keccak ------------------------------------------------------------------------------------


def _keccak_leaf(chunk: bytes) -> bytes:
    return keccak(b"\x00" + chunk)


def _keccak_node(left: bytes, right: bytes, is_root: bool = False) -> bytes:
    return keccak(b"\x01" + left + right)


def _keccak_levels(data: bytes) -> list[list[bytes]]:
    view = memoryview(data)
    leaves = [_keccak_leaf(bytes(view[i:i + CHUNK_SIZE])) for i in range(0, max(len(data), 1), CHUNK_SIZE)]
    return _levels(leaves, lambda lefts, rights, _: [_keccak_node(a, b) for a, b in zip(lefts, rights)])


def keccak_chunk_root(data: bytes) -> bytes:
    return _keccak_levels(data)[-1][0]


def keccak_chunk_proof(data: bytes, index: int) -> tuple[bytes, list[bytes]]:
    """(chunk `index`, its siblings bottom-up)."""
    chunk = _chunk(data, index)
    return chunk, _path(_keccak_levels(data), index)


def keccak_verify_chunk(root: bytes, chunk: bytes, index: int, count: int, siblings: Sequence[bytes]) -> bool:
    if not _chunk_fits(len(chunk), index, count):
        return False
    return _walk(_keccak_leaf(chunk), index, count, siblings, _keccak_node) == root


# --- BLAKE3 (numpy over many compressions at once) --------------------------------------------


def _rotr(x: np.ndarray, n: int) -> np.ndarray:
    return (x >> np.uint32(n)) | (x << np.uint32(32 - n))


def _g(v: np.ndarray, a: int, b: int, c: int, d: int, mx: np.ndarray, my: np.ndarray) -> None:
    v[a] = v[a] + v[b] + mx
    v[d] = _rotr(v[d] ^ v[a], 16)
    v[c] = v[c] + v[d]
    v[b] = _rotr(v[b] ^ v[c], 12)
    v[a] = v[a] + v[b] + my
    v[d] = _rotr(v[d] ^ v[a], 8)
    v[c] = v[c] + v[d]
    v[b] = _rotr(v[b] ^ v[c], 7)


def _compress(cv: np.ndarray, block: np.ndarray, counter: np.ndarray, block_len: np.ndarray,
              flags: np.ndarray) -> np.ndarray:
    """BLAKE3's compression of n inputs at once: cv (8, n), block (16, n) words -> new cv (8, n)."""
    n = cv.shape[1]
    v = np.empty((16, n), dtype=np.uint32)
    v[:8] = cv
    v[8:12] = IV[:4, None]
    v[12] = (counter & 0xFFFFFFFF).astype(np.uint32)
    v[13] = (counter >> 32).astype(np.uint32)
    v[14] = block_len.astype(np.uint32)
    v[15] = flags.astype(np.uint32)
    m = block
    for _ in range(7):
        _g(v, 0, 4, 8, 12, m[0], m[1])
        _g(v, 1, 5, 9, 13, m[2], m[3])
        _g(v, 2, 6, 10, 14, m[4], m[5])
        _g(v, 3, 7, 11, 15, m[6], m[7])
        _g(v, 0, 5, 10, 15, m[8], m[9])
        _g(v, 1, 6, 11, 12, m[10], m[11])
        _g(v, 2, 7, 8, 13, m[12], m[13])
        _g(v, 3, 4, 9, 14, m[14], m[15])
        m = m[list(PERMUTATION)]
    return v[:8] ^ v[8:]


def _chunk_cvs(data: bytes, first_index: int = 0, is_root: bool = False) -> np.ndarray:
    """Chaining values (8, n) of the chunks of `data`, numbered from `first_index`."""
    n = chunk_count(len(data))
    padded = np.zeros(n * CHUNK_SIZE, dtype=np.uint8)
    padded[:len(data)] = np.frombuffer(data, dtype=np.uint8)
    words = padded.view("<u4").reshape(n, CHUNK_SIZE // BLOCK_SIZE, 16).astype(np.uint32)
    lengths = np.full(n, CHUNK_SIZE)
    lengths[-1] = len(data) - (n - 1) * CHUNK_SIZE
    blocks = np.maximum(1, -(-lengths // BLOCK_SIZE))  # blocks of each chunk (an empty chunk has one)
    counter = np.arange(first_index, first_index + n, dtype=np.uint64)
    cv = np.repeat(IV[:, None], n, axis=1)
    for b in range(CHUNK_SIZE // BLOCK_SIZE):
        live = b < blocks
        if not live.any():
            break
        block_len = np.clip(lengths - b * BLOCK_SIZE, 0, BLOCK_SIZE)
        flags = np.where(b == 0, CHUNK_START, 0) | np.where(b == blocks - 1, CHUNK_END, 0)
        if is_root:
            flags = flags | np.where(b == blocks - 1, ROOT, 0)
        out = _compress(cv, words[:, b, :].T.copy(), counter, block_len, flags)
        cv = np.where(live[None, :], out, cv)
    return cv


def _parents(lefts: np.ndarray, rights: np.ndarray, is_root: bool) -> np.ndarray:
    n = lefts.shape[1]
    flags = np.full(n, PARENT | (ROOT if is_root else 0))
    return _compress(np.repeat(IV[:, None], n, axis=1), np.concatenate([lefts, rights]),
                     np.zeros(n, dtype=np.uint64), np.full(n, BLOCK_SIZE), flags)


def _cv_bytes(cv: np.ndarray) -> bytes:
    return cv.astype("<u4").tobytes()


def _blake3_levels(data: bytes) -> list[list[bytes]]:
    cvs = _chunk_cvs(data, is_root=chunk_count(len(data)) == 1)

    def pair(lefts: list[bytes], rights: list[bytes], is_root: bool) -> list[bytes]:
        left = np.frombuffer(b"".join(lefts), dtype="<u4").reshape(-1, 8).T
        right = np.frombuffer(b"".join(rights), dtype="<u4").reshape(-1, 8).T
        out = _parents(left.astype(np.uint32), right.astype(np.uint32), is_root)
        return [_cv_bytes(out[:, i]) for i in range(out.shape[1])]

    return _levels([_cv_bytes(cvs[:, i]) for i in range(cvs.shape[1])], pair)


def blake3_chunk_root(data: bytes) -> bytes:
    """The BLAKE3 hash of `data`, computed through its chunk tree."""
    return _blake3_levels(data)[-1][0]


def blake3_chunk_proof(data: bytes, index: int) -> tuple[bytes, list[bytes]]:
    """(chunk `index`, the chaining values of its siblings bottom-up)."""
    chunk = _chunk(data, index)
    return chunk, _path(_blake3_levels(data), index)


def _blake3_node(left: bytes, right: bytes, is_root: bool) -> bytes:
    as_words = [np.frombuffer(x, dtype="<u4").astype(np.uint32)[:, None] for x in (left, right)]
    return _cv_bytes(_parents(as_words[0], as_words[1], is_root)[:, 0])


def blake3_verify_chunk(root: bytes, chunk: bytes, index: int, count: int, siblings: Sequence[bytes]) -> bool:
    """Whether `chunk` is chunk `index` of a BLAKE3 input of `count` chunks whose hash is `root`."""
    if not _chunk_fits(len(chunk), index, count) or any(len(s) != 32 for s in siblings):
        return False
    leaf = _cv_bytes(_chunk_cvs(chunk, first_index=index, is_root=count == 1)[:, 0])
    if count == 1:
        return not siblings and leaf == root
    return _walk(leaf, index, count, siblings, _blake3_node) == root
