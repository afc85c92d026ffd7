"""Signed roots, equivocation proofs, and the state-hash layout shared with training."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from protocol import (
    CommitmentStore, EquivocationProof, Identity, LocalProtocolError, SignedRoot, commit_trace, equivocation_proof,
    hash_tree, state_leaf, state_root, state_tree,
)
from protocol.wire import decode_struct
from repops_cupy.checkpoint import state_hash as training_state_hash
from repops_cupy.hashing import hash_tensor
from repops_cupy.hashing import state_leaves as training_state_leaves

ALICE, BOB = Identity(bytes([2]) * 32), Identity(bytes([3]) * 32)
JOB = bytes([4]) * 32


def root(identity=ALICE, *, job=JOB, role="provider", kind="trace", sequence=3, leaf_count=4, value=b"\x01" * 32):
    return SignedRoot.sign(identity, job_id=job, role=role, kind=kind, sequence=sequence, leaf_count=leaf_count,
                           root=value)


def test_signed_root_verifies_and_binds_every_field():
    r = root()
    assert r.verify() and r.signer == ALICE.node_id
    assert decode_struct(SignedRoot, r.encode()) == r
    for change in ({"job_id": bytes(32)}, {"role": "auditor"}, {"kind": "step"}, {"sequence": 4},
                   {"leaf_count": 5}, {"root": bytes(32)}, {"signer": BOB.node_id}):
        assert not dataclasses.replace(r, **change).verify()


def test_two_different_roots_for_one_key_are_equivocation():
    a, b = root(value=b"\x01" * 32), root(value=b"\x02" * 32)
    proof = equivocation_proof(a, b)
    assert isinstance(proof, EquivocationProof) and proof.verify() and proof.culprit == ALICE.node_id
    assert equivocation_proof(b, a) == proof  # one equivocation, one proof
    assert decode_struct(EquivocationProof, proof.encode()).verify()
    assert equivocation_proof(root(leaf_count=4), root(leaf_count=5)).verify()


@pytest.mark.parametrize("other", [
    lambda: root(),                                     # the same statement twice
    lambda: root(BOB, value=b"\x02" * 32),              # another signer
    lambda: root(sequence=2, value=b"\x02" * 32),       # another sequence
    lambda: root(role="auditor", value=b"\x02" * 32),   # another role
    lambda: root(kind="interval", value=b"\x02" * 32),  # another kind
    lambda: root(job=bytes(32), value=b"\x02" * 32),    # another job
    lambda: dataclasses.replace(root(value=b"\x02" * 32), signature=bytes(64)),  # not signed
])
def test_pairs_that_are_not_equivocation(other):
    assert equivocation_proof(root(), other()) is None


def test_a_forged_proof_does_not_verify():
    a, b = root(value=b"\x01" * 32), root(value=b"\x02" * 32)
    assert not EquivocationProof(a, a).verify()
    assert not EquivocationProof(a, dataclasses.replace(b, signature=bytes(64))).verify()
    assert not EquivocationProof(a, root(BOB, value=b"\x02" * 32)).verify()


def test_commitment_store_reports_the_first_conflict():
    store = CommitmentStore()
    assert store.add(root()) is None
    assert store.add(root()) is None
    assert store.add(dataclasses.replace(root(value=b"\x09" * 32), signature=bytes(64))) is None  # unsigned: ignored
    proof = store.add(root(value=b"\x02" * 32))
    assert proof is not None and proof.verify()
    assert store.get(root().key) == root()


def test_commit_trace_is_the_tree_over_checkpoint_states():
    states = [bytes([i]) * 32 for i in range(5)]
    r = commit_trace(ALICE, job_id=JOB, role="provider", checkpoint_states=states)
    assert (r.kind, r.sequence, r.leaf_count, r.root) == ("trace", 4, 5, hash_tree(states).root)
    with pytest.raises(LocalProtocolError):
        hash_tree([b"short"])


def test_state_hash_matches_the_training_side():
    state = {"w": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.zeros(3, np.float32),
             "step": np.array([7], np.int64), "émoji": np.ones(2, np.int32), "B": np.ones(1, np.uint8)}
    hashes = {k: hash_tensor(v) for k, v in state.items()}
    assert state_root(hashes) == training_state_hash(state)
    tree, names = state_tree(hashes)
    assert [state_leaf(n, hashes[n]) for n in names] == training_state_leaves(hashes)
    assert names == ["B", "b", "step", "w", "émoji"]  # UTF-8 byte order
    i = names.index("w")
    assert tree.inclusion_proof(i).verify(state_root(hashes), state_leaf("w", hashes["w"]))


def test_state_leaf_refuses_bad_names_and_hashes():
    with pytest.raises(LocalProtocolError):
        state_leaf("", bytes(32))
    with pytest.raises(LocalProtocolError):
        state_leaf("x", b"short")
    with pytest.raises(LocalProtocolError):
        state_tree({})
