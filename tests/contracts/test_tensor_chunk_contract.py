"""TensorChunk.sol on the EVM against its twin protocol/chunk_tree.py: the same chunk proofs
accepted, the same altered ones refused, and the gas of one chunk proof in each tree."""
from __future__ import annotations

import random

import pytest

from contracts.abi import ContractAbi
from contracts.artifacts import load_artifact
from contracts.embedded_chain import EmbeddedChain
from protocol import chunk_tree as T
from tests.protocol.test_chunk_tree import altered_proofs

pytestmark = pytest.mark.settlement

SIZES = (0, 1, 64, 100, 1024, 1025, 2048, 3 * 1024 + 5, 8 * 1024, 13 * 1024 + 1)


class Harness:
    """TensorChunkHarness deployed on its own chain."""

    def __init__(self) -> None:
        self.chain = EmbeddedChain()
        artifact = load_artifact("TensorChunkHarness")
        self.abi = ContractAbi(artifact.abi)
        receipt = self.chain.transact(self.chain.accounts[0], None, artifact.bytecode, gas=5_000_000)
        self.address = receipt.contract_address

    def call(self, name, *args):
        return self.abi.decode_result(name, self.chain.call(self.address, self.abi.encode_call(name, *args)))


@pytest.fixture(scope="module")
def harness() -> Harness:
    return Harness()


def _bytes(size: int, seed: int = 0) -> bytes:
    return random.Random(seed).randbytes(size)


@pytest.mark.parametrize("size", SIZES)
def test_chunk_proofs_of_the_python_twin_verify_on_chain(harness, size):
    data = _bytes(size, seed=size)
    count = T.chunk_count(size)
    keccak_root, blake3_root = T.keccak_chunk_root(data), T.blake3_chunk_root(data)
    for index in sorted({0, count // 2, count - 1}):
        chunk, siblings = T.keccak_chunk_proof(data, index)
        assert harness.call("verifyKeccak", keccak_root, chunk, index, count, siblings) == (True,)
        chunk, siblings = T.blake3_chunk_proof(data, index)
        assert harness.call("verifyBlake3", blake3_root, chunk, index, count, siblings) == (True,)


@pytest.mark.parametrize("size", (5, 1024, 5 * 1024 + 3))
def test_altered_proofs_are_refused_on_chain_as_in_python(harness, size):
    data = _bytes(size, seed=2)
    count = T.chunk_count(size)
    for name, prove, root in (("verifyKeccak", T.keccak_chunk_proof, T.keccak_chunk_root(data)),
                              ("verifyBlake3", T.blake3_chunk_proof, T.blake3_chunk_root(data))):
        for index in {0, count - 1}:
            chunk, siblings = prove(data, index)
            for altered in altered_proofs(chunk, index, count, siblings):
                assert harness.call(name, root, *altered) == (False,), (name, size, index, altered[1:3])


def test_one_chunk_of_a_4_mib_tensor_costs_what_the_docs_say(harness):
    """docs/onchain-step.md: keccak about 7k gas, BLAKE3 (28 compressions) about 0.74M: both under 5M."""
    data = _bytes(4 << 20, seed=3)
    count = T.chunk_count(len(data))
    index = count - 1
    chunk, keccak_siblings = T.keccak_chunk_proof(data, index)
    _, blake3_siblings = T.blake3_chunk_proof(data, index)
    keccak_gas, blake3_gas = harness.call("gasOf", T.keccak_chunk_root(data), T.blake3_chunk_root(data), chunk, index,
                                          count, keccak_siblings, blake3_siblings)
    assert keccak_gas < 10_000
    assert blake3_gas < 800_000
