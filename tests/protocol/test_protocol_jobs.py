"""Job terms, job ids and the checkpoint schedule."""
from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol import CheckpointSchedule, DisputeRules, Identity, JobTerms, LocalProtocolError, SignedJobTerms, job_id
from protocol.wire import decode_struct

CLIENT = Identity(bytes([1]) * 32)


def terms(**change) -> JobTerms:
    base = JobTerms(client=CLIENT.node_id, config_hash=bytes(32), program_root=bytes([1]) * 32, program_size=9,
                    data_root=bytes([2]) * 32, initial_state=bytes([3]) * 32, steps=100, checkpoint_every=8,
                    payment=10, stake=5, deadline=10**9, nonce=0, rules=DisputeRules(1000, 5000))
    return dataclasses.replace(base, **change)


def test_job_id_is_the_hash_of_the_signed_terms():
    signed = SignedJobTerms.sign(CLIENT, terms())
    assert signed.verify() and signed.job_id == job_id(signed) and len(signed.job_id) == 32
    assert SignedJobTerms.sign(CLIENT, terms()).job_id == signed.job_id  # deterministic
    assert decode_struct(SignedJobTerms, signed.encode()).job_id == signed.job_id
    for change in ({"nonce": 1}, {"steps": 101}, {"rules": DisputeRules(1000, 5001)}, {"payment": 11}):
        assert SignedJobTerms.sign(CLIENT, terms(**change)).job_id != signed.job_id


def test_only_the_client_signs_and_tampering_breaks_the_signature():
    with pytest.raises(LocalProtocolError):
        SignedJobTerms.sign(Identity(bytes(32)), terms())
    signed = SignedJobTerms.sign(CLIENT, terms())
    assert not dataclasses.replace(signed, terms=terms(payment=11)).verify()


def test_terms_validate_themselves():
    for change in ({"steps": 0}, {"checkpoint_every": 0}, {"program_size": 1}, {"client": b"x"}, {"payment": -1}):
        with pytest.raises(LocalProtocolError):
            terms(**change)
    with pytest.raises(LocalProtocolError):
        DisputeRules(0, 10)


def test_schedule_examples():
    s = CheckpointSchedule(10, 4)
    assert s.intervals == 3 and s.checkpoints == 4
    assert [s.checkpoint_step(c) for c in range(4)] == [0, 4, 8, 10]
    assert [list(s.interval_steps(c)) for c in range(3)] == [[1, 2, 3, 4], [5, 6, 7, 8], [9, 10]]
    assert [s.interval_leaves(c) for c in range(3)] == [5, 5, 3]
    assert [s.is_checkpoint(x) for x in range(11)] == [True, False, False, False, True, False, False, False, True,
                                                       False, True]
    assert s.interval_of_step(4) == 0 and s.interval_of_step(5) == 1 and s.interval_of_step(10) == 2
    for bad in (lambda: s.checkpoint_step(4), lambda: s.interval_steps(3), lambda: s.interval_of_step(0),
                lambda: s.interval_of_step(11), lambda: CheckpointSchedule(0, 1)):
        with pytest.raises(LocalProtocolError):
            bad()


@given(st.integers(1, 300), st.integers(1, 40))
def test_schedule_partitions_the_steps(steps, every):
    s = CheckpointSchedule(steps, every)
    covered = [x for c in range(s.intervals) for x in s.interval_steps(c)]
    assert covered == list(range(1, steps + 1))
    for c in range(s.intervals):
        r = s.interval_steps(c)
        assert r[0] == s.checkpoint_step(c) + 1 and r[-1] == s.checkpoint_step(c + 1)
        assert all(s.interval_of_step(x) == c for x in r)
    assert s.checkpoint_step(s.intervals) == steps and s.is_checkpoint(steps)
    assert [x for x in range(steps + 1) if s.is_checkpoint(x)] == [s.checkpoint_step(c) for c in range(s.checkpoints)]
