"""protocol.keccak is Ethereum's keccak256 whichever backend it took: the known empty-input digest,
and eth-hash's own on inputs of every length up to two of keccak's 136-byte blocks."""
import os

from eth_hash.auto import keccak as eth_keccak

from protocol.keccak import keccak


def test_keccak256_of_nothing_is_the_known_digest():
    assert keccak(b"").hex() == "c5d2460186f7233c927e7db2dcc703c0e500b653ca82273b7bfad8045d85a470"


def test_keccak256_equals_eth_hash_on_every_length():
    for n in range(2 * 136 + 2):
        data = os.urandom(n)
        assert keccak(data) == eth_keccak(data), n
