"""Message bodies: tensors on the wire, verdicts, and the checks that tie a body to its envelope."""
from __future__ import annotations

import numpy as np
import pytest

from protocol import (
    Envelope, Fault, LocalProtocolError, OpenDispute, RemoteProtocolError, RevealChildren, SignedRoot,
    TensorPayload, Verdict, decode_envelope, dispute_id_of,
)
from protocol.merkle import MerkleTree
from protocol.wire import decode_struct
from .protocol_world import ALICE, BOB, CLIENT
from repops_cupy.hashing import hash_tensor

JOB = bytes([4]) * 32


@pytest.mark.parametrize("array", [
    np.arange(6, dtype=np.float32).reshape(2, 3), np.array(3.5), np.zeros((0, 4), np.int64),
    np.arange(5, dtype=">i4"), np.array([True, False]), np.arange(8, dtype=np.uint8).reshape(2, 2, 2)[:, ::-1],
    np.array([np.nan, -0.0, np.inf], np.float64), np.arange(4, dtype=np.float16),
])
def test_tensor_payload_round_trips_with_the_same_hash(array):
    payload = TensorPayload.from_array(array)
    back = payload.to_array()
    assert back.shape == array.shape and back.dtype == array.dtype.newbyteorder("<")
    assert np.array_equal(back, array, equal_nan=True)
    assert payload.tensor_hash() == hash_tensor(array)
    assert decode_struct(TensorPayload, payload.encode()) == payload
    back[...] = 0 if back.size else back  # the array is a writable copy


def test_tensor_payload_is_validated():
    with pytest.raises(LocalProtocolError):
        TensorPayload("<f4", (2,), bytes(4))
    with pytest.raises(LocalProtocolError):
        TensorPayload(">f4", (1,), bytes(4))
    with pytest.raises(LocalProtocolError):
        TensorPayload("<f4", (1,) * 9, bytes(4))
    with pytest.raises(LocalProtocolError):
        TensorPayload.from_array(np.array([1 + 2j]))


def fault(party, reason="timeout"):
    return Fault(party, reason, "")


def verdict(**change):
    fields = dict(dispute_id=bytes(32), challenger=ALICE.node_id, defender=BOB.node_id, faults=(), depth=0,
                  checkpoint=0, step=0, node=0, recomputed=b"", rounds=0, transcript_hash=bytes(32),
                  equivocation=None)
    fields.update(change)
    return Verdict(**fields)


def test_verdict_validates_its_parties_and_faults():
    v = verdict(faults=(fault(ALICE.node_id), fault(BOB.node_id, "wrong-result")))
    assert v.losers == {ALICE.node_id, BOB.node_id} and v.lost(BOB.node_id)
    assert verdict().losers == frozenset()
    for bad in ({"defender": ALICE.node_id}, {"faults": (fault(CLIENT.node_id),)},
                {"faults": (fault(ALICE.node_id), fault(ALICE.node_id))}, {"recomputed": b"abc"}, {"depth": 4}):
        with pytest.raises(LocalProtocolError):
            verdict(**bad)
    with pytest.raises(LocalProtocolError):
        Fault(ALICE.node_id, "bored", "")


def trace_root(identity, value=b"\x01" * 32, job=JOB, kind="trace"):
    return SignedRoot.sign(identity, job_id=job, role="provider", kind=kind, sequence=3, leaf_count=4, root=value)


def test_open_dispute_must_come_from_the_challenger_against_another_party():
    good = OpenDispute(trace_root(ALICE), trace_root(BOB, b"\x02" * 32))
    env = Envelope.seal(good, identity=ALICE, job_id=JOB, seq=1, deadline=9)
    assert decode_envelope(env.encode()).body == good
    assert dispute_id_of(env) != dispute_id_of(Envelope.seal(good, identity=ALICE, job_id=JOB, seq=2, deadline=9))
    cases = [
        (OpenDispute(trace_root(ALICE), trace_root(BOB)), BOB),                          # sender is not the challenger
        (OpenDispute(trace_root(ALICE), trace_root(ALICE, b"\x02" * 32)), ALICE),        # challenges itself
        (OpenDispute(trace_root(ALICE), trace_root(BOB, job=bytes(32))), ALICE),         # another job's root
        (OpenDispute(trace_root(ALICE), trace_root(BOB, kind="step")), ALICE),           # not a trace root
    ]
    for body, sender in cases:
        with pytest.raises(RemoteProtocolError):
            decode_envelope(Envelope.seal(body, identity=sender, job_id=JOB, seq=1, deadline=9).encode())


def test_a_reveal_speaks_for_a_root_of_its_level():
    tree = MerkleTree.from_data([b"a", b"b", b"c", b"d"])
    proof = tree.children_proof(0, 4)
    good = RevealChildren(bytes(32), 1, trace_root(ALICE, tree.root), proof)
    assert decode_envelope(Envelope.seal(good, identity=ALICE, job_id=JOB, seq=1, deadline=9).encode()).body == good
    wrong_level = RevealChildren(bytes(32), 2, trace_root(ALICE, tree.root), proof)
    with pytest.raises(RemoteProtocolError, match="interval"):
        decode_envelope(Envelope.seal(wrong_level, identity=ALICE, job_id=JOB, seq=1, deadline=9).encode())
