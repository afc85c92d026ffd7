"""A party machine follows the referee's descent and refuses requests out of order."""
from __future__ import annotations

import pytest

from protocol import (
    CHALLENGER, DEFENDER, DisputeParty, Envelope, EvidenceRequest, Identity, IntervalRequest, LocalProtocolError,
    RemoteProtocolError, RevealChildren, RevealRequest, StepRequest, Verdict,
)
from .protocol_world import ALICE, BOB, CLIENT, Tamper, World, chain_program, make_game, make_terms, play

PROGRAM = chain_program(5)
STEPS, EVERY = 9, 3


def setup():
    honest, cheat = World(PROGRAM, STEPS, EVERY), World(PROGRAM, STEPS, EVERY, tamper=Tamper("node", 4, 6))
    game = make_game(PROGRAM, STEPS, EVERY, challenger_world=honest, defender_world=cheat)
    opening = game.challenger.open_dispute(game.defender.trace_root, now=100)
    requests = game.referee.receive(opening.envelope, now=101)
    return game, requests


class RefereeVoice:
    """Seals arbitrary referee messages for one job, with fresh sequence numbers."""

    def __init__(self, job_id):
        self.job_id, self.seq = job_id, 1000

    def __call__(self, body, deadline=10_000, identity=CLIENT):
        self.seq += 1
        return Envelope.seal(body, identity=identity, job_id=self.job_id, seq=self.seq, deadline=deadline)


def test_defender_joins_on_its_first_request_and_answers_for_its_trace_root():
    game, requests = setup()
    defender = game.defender
    assert defender.state == "IDLE" and defender.dispute_id is None
    (answer,) = defender.receive(requests[1].envelope, now=102)
    assert defender.state == "CHECKPOINTS" and defender.dispute_id == game.referee.dispute_id
    body = answer.envelope.body
    assert isinstance(body, RevealChildren) and body.root == defender.trace_root
    assert answer.to == CLIENT.node_id and answer.envelope.deadline == requests[1].envelope.deadline
    assert body.proof.verify(defender.trace_root.root, lo=0, hi=defender.trace_root.leaf_count)


def test_requests_out_of_order_are_refused_and_change_nothing():
    game, requests = setup()
    say = RefereeVoice(game.terms.job_id)
    party = game.challenger
    dispute = game.referee.dispute_id
    party.receive(requests[0].envelope, now=102)
    size = party.trace_root.leaf_count
    refused = [
        say(RevealRequest(dispute, 1, 0, size)),            # the root again: not a child
        say(RevealRequest(dispute, 2, 0, 2)),               # the wrong level
        say(RevealRequest(bytes(32), 1, 0, 2)),             # another dispute
        say(IntervalRequest(dispute, 0)),                   # the descent has not reached a leaf
        say(StepRequest(dispute, 1)),                       # not at level 2 yet
        say(EvidenceRequest(dispute, 1, 0)),                # not at level 3 yet
        say(RevealRequest(dispute, 1, 0, 2), identity=ALICE),  # not from the referee
        say(RevealRequest(dispute, 1, 0, 2), deadline=50),     # expired
    ]
    for envelope in refused:
        with pytest.raises(RemoteProtocolError):
            party.receive(envelope, now=103)
        assert party.state == "CHECKPOINTS"
    with pytest.raises(RemoteProtocolError, match="replays"):
        party.receive(requests[0].envelope, now=104)


def test_defender_does_not_adopt_a_dispute_from_a_bad_first_request():
    game, requests = setup()
    say = RefereeVoice(game.terms.job_id)
    with pytest.raises(RemoteProtocolError):
        game.defender.receive(say(RevealRequest(bytes(32), 1, 0, 1)), now=102)
    assert game.defender.dispute_id is None and game.defender.state == "IDLE"
    game.defender.receive(requests[1].envelope, now=103)
    assert game.defender.dispute_id == game.referee.dispute_id


def test_party_takes_the_verdict_and_then_nothing():
    honest, cheat = World(PROGRAM, STEPS, EVERY), World(PROGRAM, STEPS, EVERY, tamper=Tamper("node", 4, 6))
    game = make_game(PROGRAM, STEPS, EVERY, challenger_world=honest, defender_world=cheat)
    outcome = play(game)
    for party in (game.challenger, game.defender):
        assert party.state == "DONE" and party.verdict == outcome.verdict
        with pytest.raises(RemoteProtocolError):
            party.receive(outcome.verdict_envelope, now=10**9)


def test_a_verdict_that_does_not_name_the_party_is_refused():
    game, requests = setup()
    game.challenger.receive(requests[0].envelope, now=102)
    say = RefereeVoice(game.terms.job_id)
    stranger = Identity(bytes([9]) * 32).node_id
    body = Verdict(game.referee.dispute_id, stranger, BOB.node_id, (), 0, 0, 0, 0, b"", 0, bytes(32), None)
    with pytest.raises(RemoteProtocolError, match="does not name"):
        game.challenger.receive(say(body), now=103)


def test_the_oracle_must_match_the_job():
    terms = make_terms(PROGRAM, STEPS, EVERY)
    short = World(PROGRAM, STEPS - 3, EVERY)
    party = DisputeParty(identity=ALICE, terms=terms, oracle=short, role="auditor", side=CHALLENGER)
    with pytest.raises(LocalProtocolError, match="checkpoint states"):
        party.trace_root
    other = World(chain_program(6), STEPS, EVERY)
    party = DisputeParty(identity=ALICE, terms=terms, oracle=other, role="auditor", side=CHALLENGER)
    with pytest.raises(LocalProtocolError, match="program"):
        party.program


def test_only_the_challenger_opens_and_a_side_is_required():
    terms = make_terms(PROGRAM, STEPS, EVERY)
    world = World(PROGRAM, STEPS, EVERY)
    defender = DisputeParty(identity=BOB, terms=terms, oracle=world, role="provider", side=DEFENDER)
    with pytest.raises(LocalProtocolError):
        defender.open_dispute(defender.trace_root, now=1)
    with pytest.raises(LocalProtocolError):
        DisputeParty(identity=BOB, terms=terms, oracle=world, role="provider", side="referee")
