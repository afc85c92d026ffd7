"""Merkle trees with levels, subtree proofs and the leftmost-difference descent."""
from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol import ChildrenProof, Descent, InclusionProof, LocalProtocolError, MerkleTree, leftmost_difference
from protocol.merkle import is_node, iter_nodes, node_path
from repops_cupy.merkle import inner_hash, leaf_hash, merkle_root, merkle_root_of_hashes


def data(n: int, tag: int = 0) -> list[bytes]:
    return [bytes([tag, i % 256, i // 256]) for i in range(n)]


def test_root_and_every_node_match_the_shared_definition():
    for n in range(1, 70):
        items = data(n)
        tree = MerkleTree.from_data(items)
        assert tree.root == merkle_root(items)
        for lo, hi in iter_nodes(n):
            assert tree.node(lo, hi) == merkle_root(items[lo:hi])


def test_nodes_of_a_tree_are_exactly_its_rfc6962_subtrees():
    assert {(lo, hi) for lo, hi in iter_nodes(7)} == {
        (0, 7), (0, 4), (4, 7), (0, 2), (2, 4), (4, 6), (6, 7), *((i, i + 1) for i in range(7))}
    assert not is_node(7, 0, 3) and not is_node(7, 2, 6) and is_node(7, 4, 7)
    with pytest.raises(LocalProtocolError):
        node_path(7, 3, 5)
    with pytest.raises(LocalProtocolError):
        MerkleTree.from_data(data(7)).node(0, 8)


def test_inclusion_proofs_hold_for_every_leaf_and_fail_when_altered():
    for n in (1, 2, 3, 5, 8, 13, 33):
        items = data(n)
        tree = MerkleTree.from_data(items)
        for i, item in enumerate(items):
            proof = tree.inclusion_proof(i)
            assert proof.verify(tree.root, item, size=n, index=i)
            assert not proof.verify(tree.root, item + b"!")
            assert not proof.verify(tree.root, item, size=n + 1)
            assert not proof.verify(tree.root, item, index=(i + 1) % max(n, 2) if n > 1 else 1)
            assert not proof.verify(bytes(32), item)
            if proof.siblings:
                bent = dataclasses.replace(proof, siblings=(bytes(32),) + proof.siblings[1:])
                assert not bent.verify(tree.root, item)
                short = dataclasses.replace(proof, siblings=proof.siblings[1:])
                assert not short.verify(tree.root, item)
            if n > 1:
                moved = dataclasses.replace(proof, index=(i + 1) % n)
                assert not moved.verify(tree.root, item) or items[(i + 1) % n] == item


def test_children_proofs_hold_for_every_inner_node():
    for n in (2, 3, 6, 9, 31):
        tree = MerkleTree.from_data(data(n))
        for lo, hi in iter_nodes(n):
            if hi - lo < 2:
                with pytest.raises(LocalProtocolError):
                    tree.children_proof(lo, hi)
                continue
            proof = tree.children_proof(lo, hi)
            assert inner_hash(proof.left, proof.right) == tree.node(lo, hi)
            assert proof.verify(tree.root, size=n, lo=lo, hi=hi)
            assert tree.node(lo, proof.split) == proof.left and tree.node(proof.split, hi) == proof.right
            assert not proof.verify(tree.root, lo=lo + 1)
            assert not dataclasses.replace(proof, left=proof.right, right=proof.left).verify(tree.root) \
                or proof.left == proof.right
            assert not dataclasses.replace(proof, right=bytes(32)).verify(tree.root)


def test_proof_fields_are_validated_on_construction():
    with pytest.raises(LocalProtocolError):
        InclusionProof(4, 4, ())
    with pytest.raises(LocalProtocolError):
        ChildrenProof(4, 3, 4, bytes(32), bytes(32), ())
    with pytest.raises(LocalProtocolError):
        InclusionProof(4, 1, (b"short",))
    with pytest.raises(LocalProtocolError):
        MerkleTree([])


def test_a_children_proof_for_a_range_that_is_not_a_node_does_not_verify():
    tree = MerkleTree.from_data(data(7))
    real = tree.children_proof(4, 7)
    fake = dataclasses.replace(real, lo=3)
    assert not fake.verify(tree.root)


def test_descent_walks_to_a_leaf():
    walk = Descent(5)
    assert (walk.lo, walk.hi, walk.split) == (0, 5, 4)
    walk.choose(left_differs=False)
    assert (walk.lo, walk.hi) == (4, 5) and walk.done and walk.leaf == 4
    with pytest.raises(LocalProtocolError):
        walk.choose(True)
    with pytest.raises(LocalProtocolError):
        Descent(5).leaf


@settings(max_examples=150, deadline=None)
@given(st.lists(st.binary(max_size=3), min_size=1, max_size=60), st.data())
def test_leftmost_difference_is_the_first_differing_leaf(items, draw):
    other = list(items)
    changed = draw.draw(st.lists(st.integers(0, len(items) - 1), max_size=4))
    for i in changed:
        other[i] = other[i] + b"\xff"
    a, b = MerkleTree.from_data(items), MerkleTree.from_data(other)
    expected = min(changed) if changed else None
    assert leftmost_difference(a, b) == expected
    if expected is not None:  # the descent's last step is a children proof in both trees
        assert a.inclusion_proof(expected).verify(a.root, items[expected])


def test_leftmost_difference_needs_equal_sizes():
    with pytest.raises(LocalProtocolError):
        leftmost_difference(MerkleTree.from_data(data(3)), MerkleTree.from_data(data(4)))


def test_leaf_hashes_are_domain_separated_from_inner_nodes():
    items = data(2)
    tree = MerkleTree.from_data(items)
    # the root of two leaves is an inner hash; as leaf data it would hash differently
    assert leaf_hash(leaf_hash(items[0]) + leaf_hash(items[1])) != tree.root
    assert merkle_root_of_hashes([leaf_hash(x) for x in items]) == tree.root
