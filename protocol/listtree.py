"""Keccak list commitments: the twin of the settlement contract's `LibList` (docs/economics.md, section 6).

A list is 1 to `MAX_LIST` (1024) entries of 32 bytes: a trace's C+1 state hashes, an
interval's k+1 per-step state hashes, a step's N node-output hashes and the state after
it. Its root is a Merkle tree of the RFC 6962 shape that `protocol/merkle.py` uses (the
left subtree holds the largest power of two strictly below the size), hashed with keccak256
so the EVM can check it:

    leaf(h)    = keccak256(abi.encodePacked(bytes1(0x00), h))        33 bytes hashed
    node(l, r) = keccak256(abi.encodePacked(bytes1(0x01), l, r))     65 bytes hashed
    root([h])  = leaf(h);  root(list) = node(root(list[:m]), root(list[m:])), m = split_point(len)

A membership proof of entry i is ``(size, index, siblings)``: the sibling hashes from the
leaf up to the root (bottom-up, the order a Solidity loop consumes them), with no entry for
a level where the node is carried up unpaired. Verification is RFC 9162's inclusion check
(section 2.1.3.2), which needs no recursion:

    fn = index; sn = size - 1; r = leaf(entry)
    for p in siblings:
        if sn == 0: fail
        if fn & 1 or fn == sn:
            r = node(p, r)
            while fn & 1 == 0 and fn != 0: fn >>= 1; sn >>= 1
        else:
            r = node(r, p)
        fn >>= 1; sn >>= 1
    ok iff sn == 0 and r == root

The root does not commit to the size a proof names (a proof of entry 0 of 33 entries also
checks as entry 0 of 34): the verifier passes the size it expects, which the contract knows
from the terms (C+1, k+1, N+1). Lists of different sizes never share a root (the prefixes).

On chain a proof travels as ``abi.encode(uint256 size, uint256 index, bytes32[] siblings)``
(`ListProof.abi_encode`). Choice: an empty list has no root (refused), as the contract
reverts on one; verification answers False, never raises, for anything that does not hold.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from eth_abi import decode as abi_decode
from eth_abi import encode as abi_encode
from .keccak import keccak

from repops_cupy.merkle import split_point

from .errors import LocalProtocolError, RemoteProtocolError

MAX_LIST = 1024
ENTRY_SIZE = 32
MAX_PROOF_LENGTH = 10  # ⌈log2(MAX_LIST)⌉
_LEAF_PREFIX = b"\x00"
_NODE_PREFIX = b"\x01"
_PROOF_ABI = ("uint256", "uint256", "bytes32[]")


def list_leaf(entry: bytes) -> bytes:
    """keccak256(0x00 ‖ entry): an entry as a leaf, never equal to an inner node's preimage."""
    return keccak(_LEAF_PREFIX + entry)


def list_node(left: bytes, right: bytes) -> bytes:
    """keccak256(0x01 ‖ left ‖ right)."""
    return keccak(_NODE_PREFIX + left + right)


def _check_entries(entries: Sequence[bytes]) -> list[bytes]:
    items = list(entries)
    if not 1 <= len(items) <= MAX_LIST:
        raise LocalProtocolError(f"a list holds 1 to {MAX_LIST} entries, got {len(items)}")
    if any(type(e) is not bytes or len(e) != ENTRY_SIZE for e in items):
        raise LocalProtocolError(f"every list entry is {ENTRY_SIZE} bytes")
    return items


def list_root(entries: Sequence[bytes]) -> bytes:
    """`LibList.root(entries)`."""
    return ListTree(entries).root


class ListTree:
    """A list's tree with every level kept, for its root and the proof of any entry.

    Pairing nodes level by level and carrying an unpaired last node up unchanged builds
    the same tree as the recursive split (see `protocol/merkle.py`).
    """

    __slots__ = ("entries", "levels")

    def __init__(self, entries: Sequence[bytes]) -> None:
        self.entries: list[bytes] = _check_entries(entries)
        levels = [[list_leaf(e) for e in self.entries]]
        while len(levels[-1]) > 1:
            below = levels[-1]
            up = [list_node(below[i], below[i + 1]) for i in range(0, len(below) - 1, 2)]
            if len(below) % 2:
                up.append(below[-1])
            levels.append(up)
        self.levels: list[list[bytes]] = levels

    @property
    def size(self) -> int:
        return len(self.entries)

    @property
    def root(self) -> bytes:
        return self.levels[-1][0]

    def proof(self, index: int) -> ListProof:
        """The membership proof of entry `index`."""
        if type(index) is not int or not 0 <= index < self.size:
            raise LocalProtocolError(f"entry {index!r} is outside a list of {self.size}")
        siblings, i = [], index
        for level in self.levels[:-1]:
            if i ^ 1 < len(level):
                siblings.append(level[i ^ 1])
            i >>= 1
        return ListProof(self.size, index, tuple(siblings))


def root_of_split(entries: Sequence[bytes]) -> bytes:
    """The root by the recursive definition (the docstring's), for tests against `ListTree`."""
    items = _check_entries(entries)

    def build(lo: int, hi: int) -> bytes:
        if hi - lo == 1:
            return list_leaf(items[lo])
        m = lo + split_point(hi - lo)
        return list_node(build(lo, m), build(m, hi))

    return build(0, len(items))


@dataclass(frozen=True)
class ListProof:
    """Entry `index` of a list of `size` entries: sibling hashes from the leaf up."""

    size: int
    index: int
    siblings: tuple[bytes, ...]

    def __post_init__(self) -> None:
        if type(self.size) is not int or not 1 <= self.size <= MAX_LIST:
            raise LocalProtocolError(f"a list holds 1 to {MAX_LIST} entries, got size {self.size!r}")
        if type(self.index) is not int or not 0 <= self.index < self.size:
            raise LocalProtocolError(f"entry {self.index!r} is outside a list of {self.size}")
        if type(self.siblings) is not tuple or len(self.siblings) > MAX_PROOF_LENGTH \
                or any(type(s) is not bytes or len(s) != ENTRY_SIZE for s in self.siblings):
            raise LocalProtocolError(f"a proof is a tuple of at most {MAX_PROOF_LENGTH} hashes of 32 bytes")

    def root_for(self, entry: bytes) -> bytes | None:
        """The root this proof gives for `entry`, or None when the proof cannot fit a list of its size."""
        if type(entry) is not bytes or len(entry) != ENTRY_SIZE:
            return None
        fn, sn, r = self.index, self.size - 1, list_leaf(entry)
        for sibling in self.siblings:
            if sn == 0:
                return None  # more siblings than the path has levels
            if fn & 1 or fn == sn:
                r = list_node(sibling, r)
                while fn & 1 == 0 and fn != 0:  # levels where this node is carried up unpaired
                    fn >>= 1
                    sn >>= 1
            else:
                r = list_node(r, sibling)
            fn >>= 1
            sn >>= 1
        return r if sn == 0 else None

    def verify(self, root: bytes, entry: bytes, *, size: int | None = None, index: int | None = None) -> bool:
        """`LibList.verify`: `entry` is entry `index` (if given) of a list of `size` (if given) under `root`."""
        if size is not None and size != self.size or index is not None and index != self.index:
            return False
        return self.root_for(entry) == root

    def abi_encode(self) -> bytes:
        """The proof as the contract takes it: abi.encode(uint256 size, uint256 index, bytes32[] siblings)."""
        return abi_encode(list(_PROOF_ABI), [self.size, self.index, list(self.siblings)])

    @classmethod
    def abi_decode(cls, data: bytes) -> ListProof:
        """Read a proof from untrusted bytes; raises only RemoteProtocolError."""
        try:
            size, index, siblings = abi_decode(list(_PROOF_ABI), bytes(data), strict=True)
            return cls(size, index, tuple(bytes(s) for s in siblings))
        except LocalProtocolError as exc:
            raise RemoteProtocolError(f"list proof out of range: {exc}") from None
        except Exception as exc:  # eth_abi raises several types on bad input; all mean "malformed"
            raise RemoteProtocolError(f"malformed list proof: {type(exc).__name__}") from None
