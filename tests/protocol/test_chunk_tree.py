"""protocol/chunk_tree.py: BLAKE3's chunk tree gives the BLAKE3 hash (and so today's tensor hash),
both trees' proofs verify, and every altered proof is refused."""
from __future__ import annotations

import random
import struct

import blake3
import numpy as np
import pytest

from protocol import chunk_tree as T
from protocol.errors import LocalProtocolError
from repops_cupy.hashing import canonical_array, hash_tensor

SIZES = (0, 1, 63, 64, 65, 1023, 1024, 1025, 2048, 2049, 3 * 1024 + 5, 8 * 1024, 13 * 1024 + 1)


def _bytes(size: int, seed: int = 0) -> bytes:
    return random.Random(seed).randbytes(size)


@pytest.mark.parametrize("size", SIZES)
def test_blake3_chunk_root_is_the_blake3_hash(size):
    data = _bytes(size)
    assert T.blake3_chunk_root(data) == blake3.blake3(data).digest()


def test_the_tensor_hash_is_a_blake3_chunk_root_over_its_message():
    """The layout of repops_cupy.hashing's docstring, spelled out here to show a proof opens it."""
    x = np.arange(700, dtype=np.float32).reshape(7, 100)
    arr = canonical_array(x)
    code = arr.dtype.str.encode()
    message = (b"gavel/tensor/v1\0" + struct.pack("<B", len(code)) + code
               + struct.pack(f"<I{arr.ndim}Q", arr.ndim, *arr.shape) + arr.tobytes())
    assert T.blake3_chunk_root(message) == hash_tensor(x)
    chunk, siblings = T.blake3_chunk_proof(message, 1)
    assert T.blake3_verify_chunk(hash_tensor(x), chunk, 1, T.chunk_count(len(message)), siblings)


@pytest.mark.parametrize("size", SIZES)
def test_every_chunk_proof_verifies_in_both_trees(size):
    data = _bytes(size, seed=size)
    count = T.chunk_count(size)
    keccak_root, blake3_root = T.keccak_chunk_root(data), T.blake3_chunk_root(data)
    for index in range(count):
        chunk, siblings = T.keccak_chunk_proof(data, index)
        assert T.keccak_verify_chunk(keccak_root, chunk, index, count, siblings)
        chunk, siblings = T.blake3_chunk_proof(data, index)
        assert T.blake3_verify_chunk(blake3_root, chunk, index, count, siblings)
        assert len(siblings) <= max(1, count - 1).bit_length()


def altered_proofs(chunk: bytes, index: int, count: int, siblings: list[bytes]):
    """(chunk, index, count, siblings) variants that must all be refused.

    The count is not among them: a root does not commit to it (as in RFC 9162), so the caller
    takes it from the agreed tensor size, and a path can fit two counts."""
    yield bytes([chunk[0] ^ 1]) + chunk[1:] if chunk else b"\x00", index, count, siblings
    yield chunk[:-1], index, count, siblings
    yield chunk + b"\x00", index, count, siblings
    yield chunk, index + 1, count, siblings
    yield chunk, index, count, siblings + [bytes(32)]
    if siblings:
        yield chunk, index, count, siblings[:-1]
        yield chunk, index, count, [bytes([siblings[0][0] ^ 1]) + siblings[0][1:]] + siblings[1:]
    if index:
        yield chunk, index - 1, count, siblings


@pytest.mark.parametrize("size", (5, 1024, 1025, 5 * 1024 + 3))
def test_altered_proofs_are_refused(size):
    data = _bytes(size, seed=1)
    count = T.chunk_count(size)
    for verify, prove, root in ((T.keccak_verify_chunk, T.keccak_chunk_proof, T.keccak_chunk_root(data)),
                                (T.blake3_verify_chunk, T.blake3_chunk_proof, T.blake3_chunk_root(data))):
        for index in {0, count // 2, count - 1}:
            chunk, siblings = prove(data, index)
            for altered in altered_proofs(chunk, index, count, siblings):
                assert not verify(root, *altered), (verify.__name__, size, index)


def test_a_chunk_outside_the_data_is_a_local_error():
    with pytest.raises(LocalProtocolError):
        T.blake3_chunk_proof(b"abc", 1)
    with pytest.raises(LocalProtocolError):
        T.keccak_chunk_proof(bytes(2048), -1)
