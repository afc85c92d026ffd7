"""Merkle trees that keep their levels, proofs of subtrees, and the dispute's descent.

Built on `repops_cupy.merkle` (leaf and inner hashing with domain separation, the
RFC 6962 shape): the tree over n leaves splits off the largest power of two below
n as its left subtree. That tree is also what pairing leaves level by level gives
when an unpaired last node is carried up unchanged, so `MerkleTree` stores those
levels and finds any subtree ``[lo, hi)`` at height ``ceil(log2(hi - lo))``.

Every proof here names a subtree by its leaf range and carries the hashes of the
siblings on the path from the root down to it. `InclusionProof` proves one leaf;
`ChildrenProof` proves the two children of an inner node, the move of the bisection
game. Verification never raises: it answers False for anything that does not hold.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator, Sequence

from repops_cupy.merkle import inner_hash, leaf_hash, merkle_root_of_hashes, split_point

from .errors import LocalProtocolError
from .wire import Bytes, SeqOf, UInt, WireStruct, wire

HASH_SIZE = 32
MAX_TREE_SIZE = 1 << 48
MAX_DEPTH = 48  # ceil(log2(MAX_TREE_SIZE))

__all__ = [
    "ChildrenProof", "Descent", "InclusionProof", "MerkleTree", "is_node", "leaf_hash",
    "leftmost_difference", "merkle_root_of_hashes", "node_path",
]


def node_path(size: int, lo: int, hi: int) -> list[tuple[int, int, bool]]:
    """The siblings met going from the root of a tree of `size` leaves down to node ``[lo, hi)``.

    Returns ``(sib_lo, sib_hi, sibling_is_right)`` top-down. Raises LocalProtocolError
    when ``[lo, hi)`` is not a node of that tree.
    """
    if not (1 <= size <= MAX_TREE_SIZE and 0 <= lo < hi <= size):
        raise LocalProtocolError(f"[{lo}, {hi}) is not a range of a tree of {size} leaves")
    a, b = 0, size
    path = []
    while (a, b) != (lo, hi):
        if b - a < 2:
            raise LocalProtocolError(f"[{lo}, {hi}) is not a node of a tree of {size} leaves")
        m = a + split_point(b - a)
        if hi <= m:
            path.append((m, b, True))
            b = m
        elif lo >= m:
            path.append((a, m, False))
            a = m
        else:
            raise LocalProtocolError(f"[{lo}, {hi}) is not a node of a tree of {size} leaves")
    return path


def is_node(size: int, lo: int, hi: int) -> bool:
    try:
        node_path(size, lo, hi)
    except LocalProtocolError:
        return False
    return True


def _fold(node_hash: bytes, path: list[tuple[int, int, bool]], siblings: Sequence[bytes]) -> bytes:
    h = node_hash
    for (_, _, sibling_is_right), sibling in zip(reversed(path), reversed(siblings)):
        h = inner_hash(h, sibling) if sibling_is_right else inner_hash(sibling, h)
    return h


class MerkleTree:
    """A tree over leaf hashes (`leaf_hash` of each item), with every level kept for proofs."""

    __slots__ = ("levels",)

    def __init__(self, leaf_hashes: Sequence[bytes]) -> None:
        leaves = list(leaf_hashes)
        if not 1 <= len(leaves) <= MAX_TREE_SIZE:
            raise LocalProtocolError(f"a tree needs 1 to {MAX_TREE_SIZE} leaves, got {len(leaves)}")
        if any(type(h) is not bytes or len(h) != HASH_SIZE for h in leaves):
            raise LocalProtocolError("every leaf hash is 32 bytes")
        levels = [leaves]
        while len(levels[-1]) > 1:
            below = levels[-1]
            up = [inner_hash(below[i], below[i + 1]) for i in range(0, len(below) - 1, 2)]
            if len(below) % 2:
                up.append(below[-1])  # the unpaired last node is carried up unchanged
            levels.append(up)
        self.levels: list[list[bytes]] = levels

    @classmethod
    def from_data(cls, items: Sequence[bytes]) -> MerkleTree:
        """Tree over raw leaf data (each hashed with the leaf prefix)."""
        return cls([leaf_hash(x) for x in items])

    @property
    def size(self) -> int:
        return len(self.levels[0])

    @property
    def root(self) -> bytes:
        return self.levels[-1][0]

    def leaf(self, index: int) -> bytes:
        return self.levels[0][index]

    def node(self, lo: int, hi: int) -> bytes:
        """Hash of the subtree over leaves ``[lo, hi)``, which must be a node of this tree."""
        node_path(self.size, lo, hi)
        return self._node(lo, hi)

    def _node(self, lo: int, hi: int) -> bytes:
        height = (hi - lo - 1).bit_length()
        return self.levels[height][lo >> height]

    def _siblings(self, lo: int, hi: int) -> tuple[bytes, ...]:
        return tuple(self._node(a, b) for a, b, _ in node_path(self.size, lo, hi))

    def inclusion_proof(self, index: int) -> InclusionProof:
        return InclusionProof(self.size, index, self._siblings(index, index + 1))

    def children_proof(self, lo: int, hi: int) -> ChildrenProof:
        """The two children of inner node ``[lo, hi)`` and its path to the root."""
        if hi - lo < 2:
            raise LocalProtocolError(f"[{lo}, {hi}) is a leaf: it has no children")
        siblings = self._siblings(lo, hi)  # validates that [lo, hi) is a node
        m = lo + split_point(hi - lo)
        return ChildrenProof(self.size, lo, hi, self._node(lo, m), self._node(m, hi), siblings)


def _hash32() -> Bytes:
    return Bytes(HASH_SIZE)


@dataclass(frozen=True)
class InclusionProof(WireStruct):
    """Leaf `index` of a tree of `size` leaves: the sibling hashes from the root down."""

    size: int = field(metadata=wire(UInt(1, MAX_TREE_SIZE)))
    index: int = field(metadata=wire(UInt(0, MAX_TREE_SIZE - 1)))
    siblings: tuple[bytes, ...] = field(metadata=wire(SeqOf(_hash32(), MAX_DEPTH)))

    def _validate(self) -> None:
        if self.index >= self.size:
            raise LocalProtocolError(f"leaf {self.index} is outside a tree of {self.size} leaves")

    def root_for_hash(self, leaf_hash_value: bytes) -> bytes | None:
        """The root this proof gives for a leaf hash, or None when the proof is malformed."""
        path = node_path(self.size, self.index, self.index + 1)
        if len(path) != len(self.siblings):
            return None
        return _fold(leaf_hash_value, path, self.siblings)

    def verify(self, root: bytes, leaf_data: bytes, *, size: int | None = None, index: int | None = None) -> bool:
        """True when `leaf_data` is leaf `index` (if given) of a tree of `size` (if given) with `root`."""
        return self.verify_hash(root, leaf_hash(leaf_data), size=size, index=index)

    def verify_hash(self, root: bytes, leaf_hash_value: bytes, *, size: int | None = None,
                    index: int | None = None) -> bool:
        if size is not None and size != self.size or index is not None and index != self.index:
            return False
        return self.root_for_hash(leaf_hash_value) == root


@dataclass(frozen=True)
class ChildrenProof(WireStruct):
    """Inner node ``[lo, hi)`` of a tree of `size` leaves has children `left` and `right`."""

    size: int = field(metadata=wire(UInt(2, MAX_TREE_SIZE)))
    lo: int = field(metadata=wire(UInt(0, MAX_TREE_SIZE)))
    hi: int = field(metadata=wire(UInt(0, MAX_TREE_SIZE)))
    left: bytes = field(metadata=wire(_hash32()))
    right: bytes = field(metadata=wire(_hash32()))
    siblings: tuple[bytes, ...] = field(metadata=wire(SeqOf(_hash32(), MAX_DEPTH)))

    def _validate(self) -> None:
        if not self.lo + 2 <= self.hi <= self.size:
            raise LocalProtocolError(f"[{self.lo}, {self.hi}) is not an inner node of a tree of {self.size} leaves")

    @property
    def split(self) -> int:
        """First leaf of the right child."""
        return self.lo + split_point(self.hi - self.lo)

    def verify(self, root: bytes, *, size: int | None = None, lo: int | None = None, hi: int | None = None) -> bool:
        if size is not None and size != self.size:
            return False
        if lo is not None and lo != self.lo or hi is not None and hi != self.hi:
            return False
        try:
            path = node_path(self.size, self.lo, self.hi)
        except LocalProtocolError:
            return False
        if len(path) != len(self.siblings):
            return False
        return _fold(inner_hash(self.left, self.right), path, self.siblings) == root


@dataclass
class Descent:
    """The leftmost-difference walk down a tree of `size` leaves, one inner node per round.

    Both sides reveal the children of the current node ``[lo, hi)``; if the left
    children differ the walk goes left, otherwise right (the parents differ, so the
    right children must). It ends at a leaf ``[leaf, leaf + 1)``: the first leaf that
    differs, every leaf before it being equal.
    """

    size: int
    lo: int = 0
    hi: int = -1

    def __post_init__(self) -> None:
        if not 1 <= self.size <= MAX_TREE_SIZE:
            raise LocalProtocolError(f"a tree needs 1 to {MAX_TREE_SIZE} leaves, got {self.size}")
        if self.hi == -1:
            self.hi = self.size

    @property
    def done(self) -> bool:
        return self.hi - self.lo == 1

    @property
    def leaf(self) -> int:
        if not self.done:
            raise LocalProtocolError("the descent has not reached a leaf yet")
        return self.lo

    @property
    def split(self) -> int:
        return self.lo + split_point(self.hi - self.lo)

    def choose(self, left_differs: bool) -> None:
        if self.done:
            raise LocalProtocolError("the descent is already at a leaf")
        m = self.split
        if left_differs:
            self.hi = m
        else:
            self.lo = m


def leftmost_difference(a: MerkleTree, b: MerkleTree) -> int | None:
    """Index of the first leaf where two trees of equal size differ; None when the roots agree."""
    if a.size != b.size:
        raise LocalProtocolError(f"trees of {a.size} and {b.size} leaves cannot be compared leaf by leaf")
    if a.root == b.root:
        return None
    walk = Descent(a.size)
    while not walk.done:
        m = walk.split
        walk.choose(a.node(walk.lo, m) != b.node(walk.lo, m))
    return walk.leaf


def iter_nodes(size: int) -> Iterator[tuple[int, int]]:
    """Every node ``(lo, hi)`` of a tree of `size` leaves, parents before children."""
    stack = [(0, size)]
    while stack:
        lo, hi = stack.pop()
        yield lo, hi
        if hi - lo > 1:
            m = lo + split_point(hi - lo)
            stack.extend(((m, hi), (lo, m)))
