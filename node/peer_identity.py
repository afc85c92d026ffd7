"""A node's identity on the network: one 32-byte seed, two keys, one PeerID.

The seed gives the PyNaCl ``SigningKey`` that signs protocol messages and the libp2p
Ed25519 key whose public half is the PeerID, so a PeerID names the key that signed a
commitment (and embeds it: ``public_key_of`` reads it back out).
"""
from __future__ import annotations

from libp2p.crypto.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from libp2p.crypto.keys import KeyPair
from libp2p.peer.id import ID
from nacl.signing import SigningKey

from .errors import BadMessage, LocalError


def identity_from_seed(seed: bytes) -> tuple[SigningKey, KeyPair]:
    """The protocol signing key and the libp2p key pair of one 32-byte seed."""
    if not isinstance(seed, (bytes, bytearray)) or len(seed) != 32:
        raise LocalError("a node seed is exactly 32 bytes")
    private = Ed25519PrivateKey.new(bytes(seed))
    return SigningKey(bytes(seed)), KeyPair(private, private.get_public_key())


def peer_id_from_seed(seed: bytes) -> ID:
    return ID.from_pubkey(identity_from_seed(seed)[1].public_key)


def public_key_of(peer_id: ID) -> bytes:
    """The 32-byte Ed25519 key a PeerID names (it is embedded in the ID)."""
    key = peer_id.extract_public_key()
    if key is None:
        raise BadMessage("peer id does not embed an Ed25519 key", peer=peer_id)
    return key.to_bytes()


def peer_id_of_key(public_key: bytes) -> ID:
    return ID.from_pubkey(Ed25519PublicKey.from_bytes(public_key))
