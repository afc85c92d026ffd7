"""Node identities: Ed25519 keys (PyNaCl) from a 32-byte seed, and domain-separated signatures.

A node id is the 32-byte Ed25519 public key. The same seed later gives the libp2p
identity, so one key names the peer and signs its protocol messages.

Every signature covers ``b"gavel/" + domain + b"\\0" + message``: a signature made
for one purpose (an envelope, a signed root, a job's terms) can never be replayed
as another, even when the message bytes happen to coincide.
"""
from __future__ import annotations

import nacl.exceptions
import nacl.signing
import nacl.utils

from .errors import LocalProtocolError

SEED_SIZE = 32
NODE_ID_SIZE = 32
SIGNATURE_SIZE = 64

# signature domains; a new kind of signed object gets a new domain
DOMAIN_ENVELOPE = "envelope/v1"
DOMAIN_SIGNED_ROOT = "signed-root/v1"
DOMAIN_JOB_TERMS = "job-terms/v1"
DOMAIN_OFFER_V2 = "offer/v2"  # a settlement-v2 offer: spec, on-chain terms, chain, contract, client account
_DOMAINS = frozenset({DOMAIN_ENVELOPE, DOMAIN_SIGNED_ROOT, DOMAIN_JOB_TERMS, DOMAIN_OFFER_V2})


def signing_input(domain: str, message: bytes) -> bytes:
    """The exact bytes an Ed25519 signature covers for `message` under `domain`."""
    if domain not in _DOMAINS:
        raise LocalProtocolError(f"unknown signature domain {domain!r}")
    return b"gavel/" + domain.encode() + b"\0" + message


class Identity:
    """A node's signing key. The seed never appears in repr or str."""

    __slots__ = ("_key", "node_id")

    def __init__(self, seed: bytes) -> None:
        if not isinstance(seed, bytes) or len(seed) != SEED_SIZE:
            raise LocalProtocolError(f"an identity seed is {SEED_SIZE} bytes")
        self._key = nacl.signing.SigningKey(seed)
        self.node_id: bytes = bytes(self._key.verify_key)

    @classmethod
    def generate(cls) -> Identity:
        """A fresh identity from the operating system's random source (via libsodium)."""
        return cls(nacl.utils.random(SEED_SIZE))

    @property
    def seed(self) -> bytes:
        """The 32-byte secret seed: for key files and for deriving the libp2p key."""
        return bytes(self._key)

    def sign(self, domain: str, message: bytes) -> bytes:
        return self._key.sign(signing_input(domain, message)).signature

    def __repr__(self) -> str:
        return f"Identity({short_id(self.node_id)})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Identity) and other.node_id == self.node_id

    def __hash__(self) -> int:
        return hash(self.node_id)


def verify_signature(node_id: bytes, domain: str, message: bytes, signature: bytes) -> bool:
    """True when `signature` is `node_id`'s signature of `message` under `domain`; never raises on bad input."""
    if not (isinstance(node_id, bytes) and len(node_id) == NODE_ID_SIZE):
        return False
    if not (isinstance(signature, bytes) and len(signature) == SIGNATURE_SIZE):
        return False
    try:
        nacl.signing.VerifyKey(node_id).verify(signing_input(domain, message), signature)
    except (nacl.exceptions.CryptoError, ValueError, TypeError):
        return False
    return True


def short_id(node_id: bytes) -> str:
    """First 8 hex digits of a node id, for logs and reprs."""
    return node_id[:4].hex()
