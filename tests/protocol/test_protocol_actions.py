"""The bookkeeping the machines share: sealing in sequence, time that never runs backwards."""
from __future__ import annotations

import pytest

from protocol import LocalProtocolError, Outbox, RevealRequest, decode_envelope
from protocol.actions import MonotonicTime
from .protocol_world import CLIENT

JOB = bytes([4]) * 32


def test_outbox_numbers_messages_in_order():
    outbox = Outbox(CLIENT, JOB, first_seq=7)
    a = outbox.seal(RevealRequest(bytes(32), 1, 0, 2), 100)
    b = outbox.seal(RevealRequest(bytes(32), 1, 0, 2), 100)
    assert (a.seq, b.seq, outbox.next_seq) == (7, 8, 9)
    assert decode_envelope(a.encode()) == a and a.sender == CLIENT.node_id and a.job_id == JOB
    with pytest.raises(LocalProtocolError):
        Outbox(CLIENT, JOB, first_seq=-1)


def test_time_never_runs_backwards():
    t = MonotonicTime()
    assert t.advance(5) == 5 and t.advance(5) == 5 and t.advance(9) == 9
    for bad in (8, -1, 9.5, True):
        with pytest.raises(LocalProtocolError):
            t.advance(bad)
