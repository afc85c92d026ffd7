"""Keccak list commitments: roots by the documented layout, every proof of several list sizes, tampering."""
from __future__ import annotations

import hashlib

import pytest
from eth_utils import keccak as other_keccak  # a second keccak binding: the layout, not the module, is checked

from protocol.listtree import ListProof, ListTree, list_root
from protocol.errors import LocalProtocolError, RemoteProtocolError
from protocol.listtree import MAX_LIST, list_leaf, list_node, root_of_split

SIZES = (1, 2, 3, 4, 5, 7, 8, 9, 16, 17, 33, 100)


def entries(n: int, tag: bytes = b"") -> list[bytes]:
    return [hashlib.sha256(tag + i.to_bytes(4, "big")).digest() for i in range(n)]


def test_leaf_and_node_are_the_abi_packed_layout():
    a, b = entries(2)
    assert list_leaf(a) == other_keccak(b"\x00" + a)
    assert list_node(a, b) == other_keccak(b"\x01" + a + b)
    assert list_node(a, b) != list_node(b, a)


def test_small_roots_by_hand():
    a, b, c = entries(3)
    leaf = lambda h: other_keccak(b"\x00" + h)  # noqa: E731
    node = lambda l, r: other_keccak(b"\x01" + l + r)  # noqa: E731
    assert list_root([a]) == leaf(a)
    assert list_root([a, b]) == node(leaf(a), leaf(b))
    # three entries: the largest power of two below 3 (two) on the left
    assert list_root([a, b, c]) == node(node(leaf(a), leaf(b)), leaf(c))


@pytest.mark.parametrize("size", SIZES + (MAX_LIST,))
def test_levels_and_recursive_split_agree(size):
    items = entries(size)
    assert ListTree(items).root == root_of_split(items)


@pytest.mark.parametrize("size", SIZES)
def test_every_index_proves_and_no_other_entry_or_index_does(size):
    items = entries(size)
    tree = ListTree(items)
    for i, entry in enumerate(items):
        proof = tree.proof(i)
        assert proof.verify(tree.root, entry, size=size, index=i)
        assert len(proof.siblings) <= (size - 1).bit_length()
        assert not proof.verify(tree.root, entries(1, b"other")[0])
        if size > 1:
            assert not proof.verify(tree.root, items[(i + 1) % size])
            assert not proof.verify(tree.root, entry, index=(i + 1) % size)
        assert not proof.verify(tree.root, entry, size=size + 1)
        assert ListProof.abi_decode(proof.abi_encode()) == proof


@pytest.mark.parametrize("size", (2, 5, 9, 33))
def test_tampered_proofs_are_rejected(size):
    items = entries(size)
    tree = ListTree(items)
    for i, entry in enumerate(items):
        proof = tree.proof(i)
        for k in range(len(proof.siblings)):
            flipped = bytearray(proof.siblings[k])
            flipped[0] ^= 1
            siblings = proof.siblings[:k] + (bytes(flipped),) + proof.siblings[k + 1:]
            assert not ListProof(size, i, siblings).verify(tree.root, entry)
        assert not ListProof(size, i, proof.siblings[:-1]).verify(tree.root, entry)  # one level short
        assert not ListProof(size, i, proof.siblings + (items[0],)).verify(tree.root, entry)  # one too many
        if size > 1:
            assert not ListProof(size, (i + 1) % size, proof.siblings).verify(tree.root, entry)


def test_a_list_of_another_order_or_length_has_another_root():
    items = entries(6)
    assert list_root(items) != list_root(items[::-1])
    assert list_root(items) != list_root(items[:5])
    # the prefixes keep a one-entry list holding a root apart from the list under that root
    pair_root = list_root(items[:2])
    assert list_root([pair_root]) != pair_root


def test_bad_lists_and_proofs_are_refused():
    with pytest.raises(LocalProtocolError):
        list_root([])
    with pytest.raises(LocalProtocolError):
        list_root(entries(MAX_LIST + 1))
    with pytest.raises(LocalProtocolError):
        list_root([b"short"])
    with pytest.raises(LocalProtocolError):
        ListTree(entries(3)).proof(3)
    with pytest.raises(LocalProtocolError):
        ListProof(3, 3, ())
    with pytest.raises(LocalProtocolError):
        ListProof(3, 0, (b"x" * 31,))
    with pytest.raises(RemoteProtocolError):
        ListProof.abi_decode(b"\x00" * 17)
    with pytest.raises(RemoteProtocolError):  # decodes, but names entry 5 of a list of 2
        ListProof.abi_decode(ListProof(8, 5, ()).abi_encode().replace((8).to_bytes(32, "big"), (2).to_bytes(32, "big"), 1))
    assert not ListTree(entries(3)).proof(0).verify(list_root(entries(3)), b"short")
