"""The fourth level as the nodes play it (docs/onchain-step.md), on the real contract and its
OneStepVerifier: a small MLP job's seats revealed by direct SettlementV2 calls, its terms carrying the
graph's elementSpecRoot, each seat's lists from a real `TrainingOracle` (one honest, one whose first
operator's output at step 4 is changed). The claim-game roles are real (`claim_world.ClaimRoles`: the
seats' `Defender`s, the auditor, the client's referee duty, every party's `GameKeeper`) and each node
plays its duels (`Duels`): the auditor picks down to the node, opens the duel, both sides play every
move from the chain's state, the side that can rules, the keepers settle the duel and end the claims.
The client, the job's referee, never rules. Money read from the contract."""
from __future__ import annotations

import numpy as np
import trio

from contracts import Role
from contracts.settlement_v2 import ForfeitReason, trace_root
from contracts.settlement_v2_games import ClaimPicked, ClaimStatus, EvidencePosted, GameOpened, StepGameSettled
from contracts.settlement_v2_referees import ClaimRuled, StepGameOpened
from contracts.step_verifier import StepVerifier
from node.errors import BadMessage, RemoteError
from node.roles.v2.duels import CHALLENGER, DEFENDER, DuelMaterial, Duels
from node.roles.v2.node_output_protocol import fetch_node_output, serve_node_outputs
from protocol import claim_lists
from protocol.element_specs import duel_proofs, duel_setup, element_spec_leaves, element_spec_root, node_element_spec
from protocol.listtree import list_root
from protocol.step_game import CHALLENGER_WON, DEFENDER_WON, OUTCOME_CODES, claimed_output
from protocol.step_trace import element_bits
from repops_cupy.hashing import hash_tensor
from tests.contracts.game_world_v2 import holdings
from tests.contracts.settlement_world_v2 import MARGIN

from ..conftest import running_hosts, trio_test
from .claim_world import ClaimRoles, binding, cast_v2, new_account, _stage_v2  # noqa: F401
from .test_defender import CHEATED_STEP, revealed_job, runs  # noqa: F401

STAKE = 5 * 10**18


def _events(w, kind, since: int = 0) -> list:
    return [e.event for e in w.settlement.events(since) if isinstance(e.event, kind)]


def _outcome(w, duel: int) -> str | None:
    return StepVerifier(w.chain, w.settlement.setting("STEP_VERIFIER"), w.keeper).game(duel).outcome


def _cheated_job(w, runs, tmp_path) -> tuple[ClaimRoles, bytes, str, str, str]:
    """The honest and the cheating seat revealed on terms offering the fourth level, an auditor that
    duels; (roles, job, honest seat, cheater, auditor)."""
    honest, cheat, _ = runs
    jid = revealed_job(w, (honest, cheat), element_spec_root=element_spec_root(honest.training.graph))
    honest_seat, cheater = w.providers[:2]
    auditor = new_account(w, "auditor", Role.AUDITOR, STAKE)
    roles = ClaimRoles(w, jid, {honest_seat: honest, cheater: cheat}, tmp_path, honest.training, duels=True)
    roles.auditor(auditor, duels=True)
    return roles, jid, honest_seat, cheater, auditor


@trio_test(240)
async def test_the_auditor_duels_a_cheating_seat_and_the_contract_alone_slashes_it(cast_v2, runs, tmp_path):
    w = cast_v2
    roles, jid, honest_seat, cheater, auditor = _cheated_job(w, runs, tmp_path)
    since = w.chain.block_number()
    before = {a: holdings(w, a) for a in (honest_seat, cheater, auditor, w.client)}
    await roles.play()  # the audit finds interval 1 wrong: game, step and node picked, the duel opened at once

    (game,) = _events(w, GameOpened, since)
    (opened,) = _events(w, StepGameOpened, since)
    assert (opened.challenger, opened.defender) == (auditor, cheater)
    assert [p.author for p in _events(w, ClaimPicked, since)] == [auditor, auditor]
    assert opened.claim_id == _events(w, ClaimPicked, since)[-1].claim_id
    assert not [e for e in _events(w, EvidencePosted, since) if e.claim_id == opened.claim_id]  # none owed
    await roles.duel()
    assert _outcome(w, opened.id) == CHALLENGER_WON
    assert [m for m, _ in roles.duels[auditor].moves][-1] == "rule"  # the auditor handed the step in
    assert "rule" not in [m for m, _ in roles.duels[cheater].moves]

    await roles.finish([game.game_id])
    (settled,) = _events(w, StepGameSettled, since)
    assert settled.outcome == OUTCOME_CODES[CHALLENGER_WON]
    assert not _events(w, ClaimRuled, since)  # nobody ruled: the verifier did
    assert w.settlement.claim(opened.claim_id).status == ClaimStatus.UPHELD
    assert w.settlement.claim(game.game_id).status == ClaimStatus.UPHELD
    assert w.settlement.seat(jid, cheater).forfeit == ForfeitReason.LOST_GAME
    roles.settle()
    after = {a: holdings(w, a) for a in before}
    info = w.settlement.job(jid)
    assert after[cheater] == before[cheater] - info.provider_stake
    assert after[honest_seat] == before[honest_seat] + info.price // 2
    assert after[auditor] > before[auditor]  # its bonds back, the finders' share and the path's gas
    assert after[w.client] == before[w.client] + info.price - info.price // 2  # the cheater's pay back
    w.assert_every_coin_accounted()


@trio_test(240)
async def test_a_restarted_node_plays_on_the_duels_it_was_in(cast_v2, runs, tmp_path):
    """Both players' duel duty dropped after the commits and made anew on the same data directory,
    handed no event again: each takes its duel up from duels.json and the chain, and it ends as before."""
    w = cast_v2
    roles, _, _, cheater, auditor = _cheated_job(w, runs, tmp_path)
    since = w.chain.block_number()
    await roles.play()
    (opened,) = _events(w, StepGameOpened, since)
    for duels in roles.duels.values():  # both commits land
        await duels.play_once()
    assert [m for m, _ in roles.duels[auditor].moves] == [m for m, _ in roles.duels[cheater].moves] == ["commit"]
    sources = {auditor: (CHALLENGER, roles.auditors[auditor].challenger.material),
               cheater: (DEFENDER, roles.defenders[cheater].duel_material)}
    for account, (side, source) in sources.items():
        roles.duels[account] = Duels(binding(w, account), roles.spawn, data_dir=roles._dir(account))
        assert roles.duels[account].open == {opened.id: (side, opened_block(w, opened))}
        roles.duels[account].serve(side, source)
    await roles.duel()
    assert _outcome(w, opened.id) == CHALLENGER_WON
    assert "commit" not in [m for d in roles.duels.values() for m, _ in d.moves]  # nothing sent twice


@trio_test(240)
async def test_a_duel_opened_after_the_evidence_still_takes_the_claim_from_the_referee(cast_v2, runs, tmp_path):
    """The cheater posts its evidence (and hands it to the client) before the auditor's duel opens, as a
    network race may have it: the client, which could rule, waits until due; once the duel opened nobody
    rules, and the keepers end the claim by timeout after the duel."""
    w = cast_v2
    n = runs[2]
    roles, jid, _, cheater, auditor = _cheated_job(w, runs, tmp_path)
    challenger, roles.auditors[auditor].challenger = roles.auditors[auditor].challenger, None
    since = w.chain.block_number()
    await roles.play()  # down to the node claim; the cheater answers it with evidence
    (evidence,) = _events(w, EvidencePosted, since)
    picked = _events(w, ClaimPicked, since)[-1]
    assert (evidence.seat, evidence.claim_id) == (cheater, picked.claim_id) and not _events(w, ClaimRuled, since)
    (game,) = _events(w, GameOpened, since)
    listed = next(x for x in w.settlement.events(since) if getattr(x.event, "claim_id", None) == picked.parent
                  and type(x.event).__name__ == "ListPosted" and x.event.seat == cheater)
    await challenger.claimed(picked.claim_id, jid, game.trace_root, game.interval, CHEATED_STEP, n, listed)
    await roles.duel()
    await roles.finish([game.game_id])
    assert not _events(w, ClaimRuled, since)
    assert w.settlement.claim(picked.claim_id).status == ClaimStatus.UPHELD
    assert w.settlement.seat(jid, cheater).forfeit == ForfeitReason.LOST_GAME


@trio_test(240)
async def test_a_defender_that_never_moves_loses_on_its_clock_timed_out_by_the_challengers_node(cast_v2, runs,
                                                                                               tmp_path):
    w = cast_v2
    roles, jid, _, cheater, auditor = _cheated_job(w, runs, tmp_path)
    silent = roles.duels.pop(cheater)  # the cheater's node takes its duel and never plays it
    since = w.chain.block_number()
    await roles.play()
    (opened,) = _events(w, StepGameOpened, since)
    assert opened.id in silent.open and not silent.moves
    await roles.duels[auditor].play_once()  # the auditor commits
    verifier = StepVerifier(w.chain, w.settlement.setting("STEP_VERIFIER"), w.keeper)
    clocks = verifier.clocks(opened.id)
    assert clocks.moved == (True, False)
    w.mine_at(clocks.turn_start + clocks.clock[1])  # the cheater's clock runs out with the next block
    await roles.duel()
    assert [m for m, _ in roles.duels[auditor].moves] == ["commit", "timeout"]
    assert _outcome(w, opened.id) == CHALLENGER_WON
    (game,) = _events(w, GameOpened, since)
    await roles.finish([game.game_id])
    assert w.settlement.seat(jid, cheater).forfeit == ForfeitReason.LOST_GAME
    assert w.settlement.claim(opened.claim_id).status == ClaimStatus.UPHELD


def opened_block(w, opened) -> int:
    return next(e.block_number for e in w.settlement.events(0) if e.event == opened)


@trio_test(240)
async def test_a_challenger_that_claims_an_honest_output_wrong_loses_its_duel_and_its_bonds(cast_v2, runs, tmp_path):
    """X precomputed the honest seat's lists, picks its first operator at step 4 and duels it with an
    output one bit off at element 3, its side played by a node's own duel player from that output. The
    seat's trace is the program's: it rules at the located step, and X's bonds go to the seat."""
    w = cast_v2
    honest, _, n = runs
    graph = honest.training.graph
    jid = revealed_job(w, (honest,), element_spec_root=element_spec_root(graph))
    seat = w.providers[0]
    x = new_account(w, "precomputing challenger", Role.AUDITOR, STAKE)
    before = {a: holdings(w, a) for a in (seat, x, w.client)}
    roles = ClaimRoles(w, jid, {seat: honest}, tmp_path, honest.training, duels=True)
    since = w.chain.block_number()

    c, j = claim_lists.step_index(honest.schedule, CHEATED_STEP)
    steps, nodes = claim_lists.steps_list(honest, c), claim_lists.node_list(honest, CHEATED_STEP)
    game = w.as_(x).open_game(jid, trace_root(list(honest.checkpoint_states())), c).one(GameOpened).game_id
    await roles.play()
    step = w.as_(x).pick_step(game, list_root(steps), j).one(ClaimPicked).claim_id
    await roles.play()
    claim = w.as_(x).pick_node(step, list_root(nodes), n).one(ClaimPicked).claim_id
    spec, inputs = node_element_spec(graph, n), honest.node_inputs(CHEATED_STEP, n)
    truth = honest.node_value(CHEATED_STEP, n)
    lie = claimed_output(truth, 3, element_bits(truth, 3) ^ 1)
    setup = duel_setup(spec, 3, nodes, hash_tensor(lie))
    w.as_(x).open_step_game(claim, setup, duel_proofs(spec, nodes, element_spec_leaves(graph)), seat)

    async def lying(case):
        await trio.lowlevel.checkpoint()
        return DuelMaterial(graph, tuple(inputs), lie)

    roles.duel_player(x).serve(CHALLENGER, lying)
    await roles.duel()
    (opened,) = _events(w, StepGameOpened, since)
    assert _outcome(w, opened.id) == DEFENDER_WON
    assert [m for m, _ in roles.duels[seat].moves][-1] == "rule"
    await roles.finish([game])
    assert not _events(w, ClaimRuled, since) and not _events(w, EvidencePosted, since)
    assert all(w.settlement.claim(k).status == ClaimStatus.FAILED for k in (claim, step, game))
    roles.settle()
    after = {a: holdings(w, a) for a in before}
    bonds = w.settlement.bonds_of(jid)
    duel = w.settlement.step_game_bond(jid, setup.spec.length)  # B_node and the seat's moves at γ
    assert after[x] == before[x] - (bonds.open_game + bonds.pick_step + bonds.pick_node + duel)
    assert after[seat] == before[seat] + w.settlement.job(jid).price + bonds.open_game + bonds.pick_step \
        + bonds.pick_node + duel
    assert after[w.client] == before[w.client]
    assert w.settlement.seat(jid, seat).forfeit == ForfeitReason.NONE
    w.assert_every_coin_accounted()


@trio_test(240)
async def test_a_seat_that_serves_another_output_leaves_the_claim_to_the_referee(cast_v2, runs, tmp_path):
    """The cheater answers the auditor's request for its node output with another tensor: the auditor
    names no element blind, opens no duel, and the client's ruling slashes the cheater as before."""
    w = cast_v2
    roles, jid, _, cheater, _ = _cheated_job(w, runs, tmp_path)
    served = roles.defenders[cheater].node_output

    async def another(claim_id):
        return await served(claim_id) + 1  # refused by the claimant: not the node list's entry

    roles.defenders[cheater].node_output = another
    since = w.chain.block_number()
    await roles.play()
    assert not _events(w, StepGameOpened, since)
    (claim,) = [e for e in _events(w, EvidencePosted, since) if e.seat == cheater]
    assert not _events(w, ClaimRuled, since)  # a duel could still open: the referee rules only when due
    w.mine_at(claim.rule_by - MARGIN)
    await roles.duties[w.client].rule_overdue()
    (ruled,) = _events(w, ClaimRuled, since)
    assert ruled.referee == w.client and not ruled.defender_right
    (game,) = _events(w, GameOpened, since)
    await roles.finish([game.game_id])
    assert w.settlement.seat(jid, cheater).forfeit == ForfeitReason.LOST_GAME


@trio_test(30)
async def test_a_seat_serves_its_node_output_over_libp2p_and_a_wrong_one_is_refused():
    out = np.arange(12, dtype=np.float32).reshape(3, 4)
    claim = bytes(range(32))

    async def lookup(claim_id):
        await trio.lowlevel.checkpoint()
        if claim_id != claim:
            raise LookupError("no such claim here")
        return out

    async with running_hosts(2) as (seat_host, claimant_host):
        serve_node_outputs(seat_host, lookup)
        got = await fetch_node_output(claimant_host, seat_host.public_key, claim, hash_tensor(out))
        assert got.dtype == out.dtype and np.array_equal(got, out)
        try:
            await fetch_node_output(claimant_host, seat_host.public_key, claim, hash_tensor(out + 1))
        except BadMessage as error:
            assert "not the tensor of the node list's entry" in str(error)
        else:
            raise AssertionError("a tensor of another hash was taken")
        try:
            await fetch_node_output(claimant_host, seat_host.public_key, bytes(32), hash_tensor(out))
        except RemoteError as error:
            assert "no such claim here" in str(error)
        else:
            raise AssertionError("a refusal was taken for an answer")


def test_a_duelled_node_claim_ends_by_timeout_once_its_duels_are_settled_never_by_a_referee():
    """The keeper's move on a node claim some duel plays: nothing while a duel is open or within 2Δ
    of evidenceBy, then `timeout`, whether a seat posted evidence before the duel opened or not."""
    from types import SimpleNamespace

    from contracts.settlement_v2_games import NODE
    from contracts.settlement_v2_referees import AppealStage
    from node.roles.v2.game_keeper import TIMEOUT, due_move

    claim = SimpleNamespace(status=ClaimStatus.OPEN, level=NODE, answer_by=1_000, rule_by=1_050, ruled=False)
    ruling = SimpleNamespace(appeal=AppealStage.NONE, referee="0x" + "00" * 20, referees_out=False, armed_block=0)
    for answered in (False, True):
        def move(now, open_duels, games=1):
            return due_move(claim, ruling, now=now, block=10, answered=answered, client_may_rule=True,
                            duels=SimpleNamespace(games=games, open=open_duels), margin=MARGIN)

        assert move(5_000, 1) is None  # a duel not settled yet
        assert move(1_000 + 2 * MARGIN - 1, 0) is None  # another may still open
        assert move(1_000 + 2 * MARGIN, 0) == TIMEOUT
    assert due_move(claim, ruling, now=1_060, block=10, answered=True, client_may_rule=True,
                    duels=SimpleNamespace(games=0, open=0), margin=MARGIN) == "timeoutReferee"  # no duel: referees
