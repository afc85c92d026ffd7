"""Signed roots, equivocation evidence, and the state-hash layout shared with training.

A `SignedRoot` is a node's signed statement "in job J, as role R, my `kind` tree
number `sequence` has `leaf_count` leaves and this root". The kinds:

- ``trace``: state hashes at checkpoints 0..C; `sequence` is the last checkpoint covered;
- ``interval``: per-step state hashes of checkpoint interval `sequence`, recomputed in a dispute;
- ``step``: node-output hashes of step `sequence` followed by the state after it.

A node may sign only one statement per (job, role, kind, sequence). Two validly
signed statements that differ for the same key are *equivocation*:
`equivocation_proof` checks such a pair and returns an `EquivocationProof` that a
referee or contract verifies with nothing but the two statements.

State hashes are encoded by `repops_cupy.hashing`, the one owner of the bytes that
a trainer writes and a referee recomputes: the Merkle root over one leaf per named
tensor, in the order of the names' UTF-8 bytes, each leaf being
``u16 little-endian name length || name || hash_tensor(tensor)``. The functions
below use it and add the protocol's rules (a state holds a tensor; misuse raises
`LocalProtocolError`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

from repops_cupy import hashing

from .errors import LocalProtocolError
from .identity import DOMAIN_SIGNED_ROOT, NODE_ID_SIZE, SIGNATURE_SIZE, Identity, verify_signature
from .merkle import HASH_SIZE, MAX_TREE_SIZE, MerkleTree
from .wire import Bytes, Nested, Text, UInt, WireStruct, packb, wire

ROOT_KINDS = ("trace", "interval", "step")
MAX_ROLE_LEN = 32


@dataclass(frozen=True)
class SignedRoot(WireStruct):
    job_id: bytes = field(metadata=wire(Bytes(32)))
    signer: bytes = field(metadata=wire(Bytes(NODE_ID_SIZE)))
    role: str = field(metadata=wire(Text(MAX_ROLE_LEN, empty=False)))
    kind: str = field(metadata=wire(Text(16, choices=ROOT_KINDS)))
    sequence: int = field(metadata=wire(UInt()))
    leaf_count: int = field(metadata=wire(UInt(1, MAX_TREE_SIZE)))
    root: bytes = field(metadata=wire(Bytes(HASH_SIZE)))
    signature: bytes = field(metadata=wire(Bytes(SIGNATURE_SIZE)))

    @classmethod
    def sign(cls, identity: Identity, *, job_id: bytes, role: str, kind: str, sequence: int,
             leaf_count: int, root: bytes) -> SignedRoot:
        unsigned = cls(job_id, identity.node_id, role, kind, sequence, leaf_count, root, bytes(SIGNATURE_SIZE))
        return cls(job_id, identity.node_id, role, kind, sequence, leaf_count, root,
                   identity.sign(DOMAIN_SIGNED_ROOT, unsigned.signed_bytes()))

    def signed_bytes(self) -> bytes:
        wire_map = self.to_wire()
        del wire_map["signature"]
        return packb(wire_map)

    def verify(self) -> bool:
        return verify_signature(self.signer, DOMAIN_SIGNED_ROOT, self.signed_bytes(), self.signature)

    @property
    def key(self) -> tuple[bytes, bytes, str, str, int]:
        """What a signer may commit to only once: (job, signer, role, kind, sequence)."""
        return (self.job_id, self.signer, self.role, self.kind, self.sequence)

    @property
    def statement(self) -> tuple[int, bytes]:
        """What is committed under the key: (leaf count, root)."""
        return (self.leaf_count, self.root)


@dataclass(frozen=True)
class EquivocationProof(WireStruct):
    """Two signed roots by one key for one (job, role, kind, sequence) that say different things."""

    first: SignedRoot = field(metadata=wire(Nested(SignedRoot)))
    second: SignedRoot = field(metadata=wire(Nested(SignedRoot)))

    @property
    def culprit(self) -> bytes:
        return self.first.signer

    def verify(self) -> bool:
        a, b = self.first, self.second
        return a.key == b.key and a.statement != b.statement and a.verify() and b.verify()


def equivocation_proof(a: SignedRoot, b: SignedRoot) -> EquivocationProof | None:
    """The proof that `a` and `b` equivocate, or None when they are not evidence of it.

    They are when both signatures hold, they share signer, job, role, kind and
    sequence, and their roots or leaf counts differ. The pair is ordered canonically
    so that one equivocation has one proof.
    """
    if not (isinstance(a, SignedRoot) and isinstance(b, SignedRoot)):
        return None
    first, second = sorted((a, b), key=lambda r: r.encode())
    proof = EquivocationProof(first, second)
    return proof if proof.verify() else None


class CommitmentStore:
    """Every signed root seen, by key; reports the first conflicting pair."""

    def __init__(self) -> None:
        self._roots: dict[tuple[bytes, bytes, str, str, int], SignedRoot] = {}

    def add(self, root: SignedRoot) -> EquivocationProof | None:
        """Record `root` (if its signature holds); returns an equivocation proof on conflict."""
        if not root.verify():
            return None
        seen = self._roots.get(root.key)
        if seen is None:
            self._roots[root.key] = root
            return None
        return equivocation_proof(seen, root)

    def get(self, key: tuple[bytes, bytes, str, str, int]) -> SignedRoot | None:
        return self._roots.get(key)


# --- trees a party commits to --------------------------------------------------------


def hash_tree(hashes: Sequence[bytes]) -> MerkleTree:
    """The tree whose leaves are 32-byte hashes (state hashes, node-output hashes)."""
    if any(type(h) is not bytes or len(h) != HASH_SIZE for h in hashes):
        raise LocalProtocolError("every leaf of a hash tree is a 32-byte hash")
    return MerkleTree.from_data(hashes)


def commit_trace(identity: Identity, *, job_id: bytes, role: str, checkpoint_states: Sequence[bytes]) -> SignedRoot:
    """The signed trace root over the state hashes at checkpoints 0..len-1."""
    tree = hash_tree(checkpoint_states)
    return SignedRoot.sign(identity, job_id=job_id, role=role, kind="trace", sequence=tree.size - 1,
                           leaf_count=tree.size, root=tree.root)


# --- the state-hash layout -----------------------------------------------------------


def state_leaf(name: str, tensor_hash: bytes) -> bytes:
    """Leaf data of one named tensor in a state tree (`repops_cupy.hashing.state_leaf`)."""
    try:
        return hashing.state_leaf(name, tensor_hash)
    except ValueError as exc:
        raise LocalProtocolError(str(exc)) from None


def state_names(named_hashes: Mapping[str, bytes]) -> list[str]:
    """Tensor names in state-tree order (by UTF-8 bytes)."""
    return hashing.sorted_names(named_hashes)


def state_tree(named_hashes: Mapping[str, bytes]) -> tuple[MerkleTree, list[str]]:
    """The state tree over named tensor hashes and the names in leaf order."""
    names = state_names(named_hashes)
    if not names:
        raise LocalProtocolError("a state holds at least one tensor")
    return MerkleTree.from_data([state_leaf(n, named_hashes[n]) for n in names]), names


def state_root(named_hashes: Mapping[str, bytes]) -> bytes:
    """The state hash of named tensor hashes."""
    return state_tree(named_hashes)[0].root
