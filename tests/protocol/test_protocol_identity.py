"""Ed25519 identities from a seed, and domain-separated signatures."""
from __future__ import annotations

import nacl.signing
import pytest

from protocol import (
    DOMAIN_ENVELOPE, DOMAIN_JOB_TERMS, DOMAIN_SIGNED_ROOT, Identity, LocalProtocolError, short_id, signing_input,
    verify_signature,
)

SEED = bytes(range(32))


def test_same_seed_same_key_and_it_is_plain_ed25519():
    a, b = Identity(SEED), Identity(SEED)
    assert a == b and a.node_id == b.node_id and len(a.node_id) == 32
    assert a.node_id == bytes(nacl.signing.SigningKey(SEED).verify_key)
    assert a.seed == SEED
    assert Identity(bytes(32)) != a


def test_generated_identities_differ():
    assert Identity.generate().node_id != Identity.generate().node_id


def test_bad_seeds_are_refused():
    for bad in (b"", bytes(31), bytes(33), "x" * 32):
        with pytest.raises(LocalProtocolError):
            Identity(bad)  # type: ignore[arg-type]


def test_repr_never_shows_the_seed():
    ident = Identity(SEED)
    assert SEED.hex() not in repr(ident) and short_id(ident.node_id) in repr(ident)


def test_signatures_verify_only_under_their_own_domain():
    ident = Identity(SEED)
    sig = ident.sign(DOMAIN_ENVELOPE, b"message")
    assert verify_signature(ident.node_id, DOMAIN_ENVELOPE, b"message", sig)
    assert not verify_signature(ident.node_id, DOMAIN_SIGNED_ROOT, b"message", sig)
    assert not verify_signature(ident.node_id, DOMAIN_ENVELOPE, b"messagE", sig)
    assert not verify_signature(Identity(bytes(32)).node_id, DOMAIN_ENVELOPE, b"message", sig)
    # a signature over the raw bytes (no domain) is not accepted either
    raw = nacl.signing.SigningKey(SEED).sign(b"message").signature
    assert not verify_signature(ident.node_id, DOMAIN_ENVELOPE, b"message", raw)


def test_signing_input_is_prefixed_and_domains_are_closed():
    assert signing_input(DOMAIN_JOB_TERMS, b"x") == b"gavel/job-terms/v1\0x"
    with pytest.raises(LocalProtocolError):
        signing_input("made-up/v1", b"x")


def test_verify_never_raises_on_garbage():
    ident = Identity(SEED)
    sig = ident.sign(DOMAIN_ENVELOPE, b"m")
    for node_id, signature in ((b"short", sig), (ident.node_id, b"short"), (bytes(32), sig), ("str", sig),
                               (ident.node_id, None), (b"\xff" * 32, sig)):
        assert verify_signature(node_id, DOMAIN_ENVELOPE, b"m", signature) is False  # type: ignore[arg-type]
