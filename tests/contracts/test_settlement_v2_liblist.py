"""LibList on the EVM against its twin protocol/listtree.py: the same roots, the same proofs accepted and refused."""

import pytest
from eth_utils import keccak

from contracts.abi import ContractAbi
from contracts.artifacts import load_artifact
from contracts.chain import RevertData
from contracts.embedded_chain import EmbeddedChain
from protocol.listtree import MAX_LIST, ListProof, ListTree, list_leaf, list_node, list_root

pytestmark = pytest.mark.settlement

SIZES = (1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 16, 17, 31, 33)


class Harness:
    """LibListHarnessV2 deployed on its own chain."""

    def __init__(self) -> None:
        self.chain = EmbeddedChain()
        artifact = load_artifact("LibListHarnessV2")
        self.abi = ContractAbi(artifact.abi)
        receipt = self.chain.transact(self.chain.accounts[0], None, artifact.bytecode, gas=2_000_000)
        self.address = receipt.contract_address

    def call(self, name, *args):
        try:
            return self.abi.decode_result(name, self.chain.call(self.address, self.abi.encode_call(name, *args)))[0]
        except RevertData as reverted:
            raise self.abi.revert(reverted.data) from None

    def gas(self, name, *args) -> int:
        return self.chain.estimate_gas(self.chain.accounts[0], self.address, self.abi.encode_call(name, *args))


@pytest.fixture(scope="module")
def harness() -> Harness:
    return Harness()


def entries(size: int) -> list[bytes]:
    return [keccak(f"entry {i}".encode()) for i in range(size)]


def test_leaf_and_node_hashes_are_the_notes():
    h = keccak(b"x")
    assert list_leaf(h) == keccak(b"\x00" + h)
    assert list_node(h, h) == keccak(b"\x01" + h + h)


@pytest.mark.parametrize("size", SIZES + (MAX_LIST,))
def test_roots_equal_the_python_twin(harness, size):
    assert harness.call("root", entries(size)) == list_root(entries(size))


@pytest.mark.parametrize("size", SIZES)
def test_every_proof_of_the_python_twin_verifies_on_chain(harness, size):
    tree = ListTree(entries(size))
    for index, entry in enumerate(tree.entries):
        proof = tree.proof(index)
        assert harness.call("verify", tree.root, entry, size, index, list(proof.siblings))


@pytest.mark.parametrize("size", (5, 8, 11, 17))
def test_tampered_proofs_fail_on_chain_as_in_python(harness, size):
    tree = ListTree(entries(size))
    other = keccak(b"not an entry")
    for index, entry in enumerate(tree.entries):
        siblings = list(tree.proof(index).siblings)
        cases = [
            (tree.root, other, size, index, siblings),                      # another entry
            (tree.root, entry, size, (index + 1) % size, siblings),         # another index
            (tree.root, entry, size, index, siblings + [other]),            # one sibling too many
            (tree.root, entry, size, index, siblings[:-1]),                 # one sibling too few
            (tree.root, entry, size, index, [other] + siblings[1:]),        # a wrong sibling
            (other, entry, size, index, siblings),                          # another root
        ]
        for root, leaf, n, i, path in cases:
            assert ListProof(n, i, tuple(path)).verify(root, leaf) is False
            assert harness.call("verify", root, leaf, n, i, path) is False
        # The root does not commit to the size: the caller passes the one it expects, and the
        # two implementations agree on every size.
        for n in range(index_floor(size), size + 3):
            for index, entry in enumerate(tree.entries[:n]):
                path = list(tree.proof(index).siblings)
                python = ListProof(n, index, tuple(path)).verify(tree.root, entry)
                assert harness.call("verify", tree.root, entry, n, index, path) is python


def index_floor(size: int) -> int:
    return max(1, size - 2)


def test_index_outside_the_size_is_refused(harness):
    tree = ListTree(entries(4))
    assert not harness.call("verify", tree.root, tree.entries[3], 3, 3, list(tree.proof(3).siblings))
    assert not harness.call("verify", tree.root, tree.entries[0], 0, 0, [])


@pytest.mark.parametrize("size", (0, MAX_LIST + 1))
def test_lists_outside_one_to_max_have_no_root(harness, size):
    with pytest.raises(Exception) as refused:
        harness.call("root", entries(size))
    assert refused.value.name == "ListInvalidSize"
    assert refused.value.arguments == {"size": size}


def test_a_full_list_costs_its_calldata_floor_and_little_more(harness):
    """Section 13: a list at MAX_LIST is ~1.3M gas at the EIP-7623 calldata floor (40 gas a
    nonzero byte, 1,280 an entry); the hashing and memory of `root` hide under that floor."""
    small, full = harness.gas("root", entries(11)), harness.gas("root", entries(MAX_LIST))
    per_entry = (full - small) / (MAX_LIST - 11)
    assert per_entry < 1_300, per_entry
    assert full < 1_400_000, full
