"""Merkle roots with domain separation, shared by training (state hashes) and protocol.

The tree over n leaves is the one of RFC 6962: the left subtree holds the largest
power of two strictly below n, so the shape depends only on n and every prefix of
a list keeps its subtrees. Leaves and inner nodes hash with different prefixes, so
an inner node can never pass for a leaf. Proofs and the dispute's descent live in
`protocol.merkle`, on top of these three functions.
"""
from __future__ import annotations

from typing import Sequence

import blake3

LEAF_PREFIX = b"\x00"
INNER_PREFIX = b"\x01"
EMPTY_ROOT = blake3.blake3(b"gavel/merkle/empty").digest()


def leaf_hash(data: bytes) -> bytes:
    return blake3.blake3(LEAF_PREFIX + data).digest()


def inner_hash(left: bytes, right: bytes) -> bytes:
    return blake3.blake3(INNER_PREFIX + left + right).digest()


def split_point(n: int) -> int:
    """Size of the left subtree of a tree over n >= 2 leaves."""
    return 1 << ((n - 1).bit_length() - 1)


def merkle_root_of_hashes(leaves: Sequence[bytes]) -> bytes:
    """Root over already-hashed leaves (each a ``leaf_hash``)."""
    n = len(leaves)
    if n == 0:
        return EMPTY_ROOT
    if n == 1:
        return leaves[0]
    k = split_point(n)
    return inner_hash(merkle_root_of_hashes(leaves[:k]), merkle_root_of_hashes(leaves[k:]))


def merkle_root(items: Sequence[bytes]) -> bytes:
    """Root over raw leaf data."""
    return merkle_root_of_hashes([leaf_hash(x) for x in items])
