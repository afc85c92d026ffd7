"""The dispute sessions resume: rebuilt from their stored records mid-game, the referee
and both parties go on to the verdict, byte for byte, an uninterrupted game reaches."""
from __future__ import annotations

import random

import pytest

from node.cheats import CheatContext, perturb_weight
from node.roles.disputes import PartySession, RefereeSession, first_seq
from node.training_oracle import StageTimer, TrainingOracle, batch_hashes, job_terms
from protocol import CHALLENGER, DEFENDER, DisputeRules, Identity, Referee, RemoteProtocolError
from repops_cupy.jobspec import load_job
from repops_cupy.train import TrainingProgram

from .test_roles_support import write_job

RULES = DisputeRules(move_timeout_ms=60_000, clock_ms=600_000)
CHEAT_SEED = 4


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    training = TrainingProgram(load_job(write_job(tmp_path_factory.mktemp("job"))))
    client, honest, cheater = (Identity(bytes([i]) * 32) for i in (1, 2, 3))
    terms = job_terms(training, client, rules=RULES)
    return training, terms, client, honest, cheater


def _oracles(training):
    honest = TrainingOracle(training)
    honest.train()
    shadow = TrainingOracle(training, program=honest.program())
    shadow.train()
    cheat = perturb_weight(CheatContext(training, shadow, random.Random(CHEAT_SEED), StageTimer()))
    cheat.oracle.train()
    return honest, cheat.oracle


def _sessions(job):
    training, terms, client, honest_id, cheater_id = job
    honest, deviating = _oracles(training)
    challenger = PartySession(identity=honest_id, terms=terms, oracle=honest, role="provider", side=CHALLENGER,
                              seq=first_seq(1))
    defender = PartySession(identity=cheater_id, terms=terms, oracle=deviating, role="provider", side=DEFENDER,
                            seq=first_seq(1))
    referee = RefereeSession(host=None, referee=_referee(job), seq=first_seq(1), chain_dispute=7, save=None,
                             on_verdict=None)
    return referee, {honest_id.node_id: challenger, cheater_id.node_id: defender}


def _referee(job):
    training, terms, client, _, _ = job
    return Referee(identity=client, terms=terms, batch_hashes=batch_hashes(training), first_seq=first_seq(1))


def _restore(job, referee, parties):
    training, terms, client, honest_id, cheater_id = job
    honest, deviating = _oracles(training)
    oracles = {honest_id.node_id: honest, cheater_id.node_id: deviating}
    identities = {honest_id.node_id: honest_id, cheater_id.node_id: cheater_id}
    restored = {key: PartySession.restore(p.record(), identity=identities[key], terms=terms, oracle=oracles[key])
                for key, p in parties.items()}
    again = RefereeSession.restore(referee.record(), host=None, referee=_referee(job), save=None, on_verdict=None)
    return again, restored


def _play(job, *, restore_at: int | None):
    referee, parties = _sessions(job)
    now = 1_000
    challenger = next(p for p in parties.values() if p.side == CHALLENGER)
    defender = next(p for p in parties.values() if p.side == DEFENDER)
    opened = challenger.open_sync(defender.party.trace_root, now)
    referee.open_sync(opened.encode(), now)
    moves = []
    rounds = 0
    while referee.verdict is None:
        if rounds == restore_at:
            referee, parties = _restore(job, referee, parties)
        requests = list(referee.pending.items())
        assert requests, "the game stalled"
        for key, request in requests:
            answer = parties[key].answer_sync(request.encode(), now)
            # A repeated request gets the same answer; the machines saw it once.
            assert parties[key].answer_sync(request.encode(), now + 1) == answer
            moves.append(answer)
            referee.receive_sync(answer, now + 2)
        now += 100
        rounds += 1
    return referee, parties, moves, rounds


def test_sessions_restored_mid_game_reach_the_same_verdict(job):
    referee, parties, moves, rounds = _play(job, restore_at=None)
    verdict = referee.verdict
    assert verdict.losers == {job[4].node_id} and verdict.faults[0].reason == "wrong-result"
    assert rounds > 4
    for restore_at in (1, rounds // 2, rounds - 1):
        again, again_parties, again_moves, _ = _play(job, restore_at=restore_at)
        assert again.verdict_envelope.encode() == referee.verdict_envelope.encode()
        assert again_moves == moves  # every move signed again is the same bytes: no equivocation


def test_a_party_refuses_an_older_request_and_a_restored_one_answers_a_repeat(job):
    referee, parties = _sessions(job)
    challenger = next(p for p in parties.values() if p.side == CHALLENGER)
    defender = next(p for p in parties.values() if p.side == DEFENDER)
    referee.open_sync(challenger.open_sync(defender.party.trace_root, 1_000).encode(), 1_000)
    first = dict(referee.pending)
    for key, request in first.items():
        referee.receive_sync(parties[key].answer_sync(request.encode(), 1_100), 1_200)
    key, older = next(iter(first.items()))
    newer = referee.pending[key]
    answer = parties[key].answer_sync(newer.encode(), 1_300)
    with pytest.raises(RemoteProtocolError, match="replays"):
        parties[key].answer_sync(older.encode(), 1_400)
    _, restored = _restore(job, referee, parties)
    assert restored[key].answer_sync(newer.encode(), 1_500) == answer
