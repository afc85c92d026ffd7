"""The fourth level wired into the claim game (docs/onchain-step.md, "The settlement's side"), on the
real GavelSettlementV2 and its OneStepVerifier on the embedded EVM, for a real small job: the tiny
MLP's graph, states and node lists (`step_world_v2`). A node claim on a covered operator ends by the
contract's own execution: duels opened by `openStepGame`, played on the verifier by
`protocol.step_game` players, settled by `settleStepGame`. The cheater loses its stake or its bond in
either seat, every honest party ends with at least what it put in (read from the contract), the
client (the job's referee) never moves, and every coin is accounted for after every move."""

from __future__ import annotations

from dataclasses import replace

import pytest
from eth_abi import encode as abi_encode

from contracts.settlement_v2 import ForfeitReason
from contracts.settlement_v2_games import ClaimJoined, ClaimStatus, StepGameSettled
from contracts.settlement_v2_referees import ClaimRuled
from contracts.step_verifier import StepVerifier
from protocol import economics
from protocol.economics import ESTIMATED_GAS
from protocol.element_specs import SETUP_ABI
from protocol.step_game import BOTH_LOST, CHALLENGER_WON, DEFENDER_WON, OUTCOME_CODES

from .game_world_v2 import GameTable, holdings, register_auditors
from .settlement_world import WINNER_SHARE_BPS, reverts
from .settlement_world_v2 import MARGIN, PRICE, PROVIDER_STAKE
from .step_world_v2 import STEP, JobComputation, duel_arguments, mlp_run, open_duel, play_duel, step_table

pytestmark = pytest.mark.settlement

S = PROVIDER_STAKE
GAMMA = 10**9
C, S_IN = (STEP - 1) // 3, (STEP - 1) % 3 + 1  # the disputed step's interval, and its index there
PATH_GAS = ESTIMATED_GAS.open_game + ESTIMATED_GAS.resolve + ESTIMATED_GAS.pick_step + ESTIMATED_GAS.pick_node
FINDERS = S * WINNER_SHARE_BPS // 10_000 // 3 * 3


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return mlp_run(tmp_path_factory.mktemp("mlp"))


def _relu(run) -> int:
    return run.node_of("relu")


def _settled(t: GameTable, duel) -> StepGameSettled:
    return _settle(t, duel).one(StepGameSettled)


def _settle(t: GameTable, duel):
    result = t._booked(t.w.as_(t.w.keeper).settle_step_game(duel.id))
    assert t.w.settlement.step_game(duel.id).settled
    return result


def _close_node(t: GameTable, claim: bytes) -> ClaimStatus:
    """Ends a node claim played on the fourth level: after its duels' window (evidenceBy + 2Δ)."""
    t.after(t.w.settlement.claim(claim).answer_by + 2 * MARGIN)
    return t.close(claim)


def _duel_bond(t: GameTable, duel) -> int:
    """What the duel locked: B_node + γ·G_duel(depth), as protocol.economics computes it."""
    bond = t.w.settlement.step_game_bond(t.jid, duel.setup.spec.length)
    terms = t.w.opened[t.jid].economic_terms()
    assert bond == economics.duel_bond(terms, t.w.settlement.chain_settings(), duel.setup.depth)
    assert t.w.settlement.step_game(duel.id).depth == duel.setup.depth
    return bond


def _side_gas(played, side: int, settled_gas: int) -> int:
    """The most one side of a played duel spent: its commit and reveals, the ruling (whoever sent it)
    and the settlement."""
    return sum(tx.gas for tx in played.transactions if tx.side == side or tx.name == "rule") + settled_gas


def _no_referee_moved(t: GameTable, since: int) -> None:
    assert not [e for e in t.w.settlement.events(since) if isinstance(e.event, ClaimRuled)]


def _duel_a_cheater(w, run, element: int):
    """The second seat cheats at element `element` of the relu node; the auditor's dispute down to
    that node and its duel against the seat. Returns (table, (game, step, node claim), duel)."""
    auditor, _ = register_auditors(w)
    cheater = w.providers[1]
    n = _relu(run)
    t = step_table(w, run, (JobComputation(run), JobComputation(run, "cheat", node=n, element=element)))
    claims = t.path_to_node(auditor, cheater, C, S_IN, n)
    return t, claims, open_duel(t, run, claims[2], auditor, JobComputation(run), cheater, n, element)


def test_a_cheating_defender_loses_its_duel_and_its_stake(cast_v2, run):
    """A seat claims a wrong relu output; the auditor duels it on the verifier and wins."""
    w = cast_v2
    since = w.chain.block_number()
    t, (game, step, node), duel = _duel_a_cheater(w, run, 5)
    auditor, (honest, cheater) = duel.opened.challenger, w.providers[:2]
    before = {a: holdings(w, a) for a in (auditor, honest, cheater, w.client)}  # bonds are locks: all in
    assert w.settlement.step_claim(node).games == 1
    # the event carries the setup whole (the defender reads it there, not from the opener's calldata)
    assert abi_encode([SETUP_ABI], [duel.opened.setup]) == abi_encode([SETUP_ABI], [duel.setup.as_abi()])
    played = play_duel(t, duel, ruler=0)
    assert played.outcome == CHALLENGER_WON
    duel_gas = _duel_bond(t, duel) - w.settlement.bonds_of(t.jid).pick_node
    result = _settle(t, duel)
    settled = result.one(StepGameSettled)
    assert settled.outcome == OUTCOME_CODES[CHALLENGER_WON]
    # the lost lock pays the winner's moves at γ: at least what they used
    assert GAMMA * _side_gas(played, 0, result.gas_used) <= duel_gas
    assert w.settlement.seat(t.jid, cheater).forfeit == ForfeitReason.LOST_GAME
    assert _close_node(t, node) == ClaimStatus.UPHELD
    assert t.close(step) == ClaimStatus.UPHELD
    assert t.close(game) == ClaimStatus.UPHELD
    assert holdings(w, w.client) == before[w.client]  # the referee never moved
    _no_referee_moved(t, since)
    t.settle()
    assert holdings(w, auditor) == before[auditor] + FINDERS + GAMMA * PATH_GAS + duel_gas
    assert holdings(w, cheater) == before[cheater] - S
    assert holdings(w, honest) == before[honest] + PRICE // 2
    assert holdings(w, w.client) == before[w.client] + PRICE - PRICE // 2


def test_a_cheating_challenger_loses_its_bonds_to_the_honest_defenders(cast_v2, run):
    """An adversary claims an honest relu output is wrong and duels a seat; the seat's trace wins."""
    w = cast_v2
    adversary, _ = register_auditors(w)
    a, b = w.providers[:2]
    n = _relu(run)
    t = step_table(w, run, (JobComputation(run), JobComputation(run)))
    paid = w.settlement.bonds_of(t.jid)
    since = w.chain.block_number()
    before = {x: holdings(w, x) for x in (adversary, a, b, w.client)}
    game, step, node = t.path_to_node(adversary, a, C, S_IN, n)  # b endorses a's lists
    lie = JobComputation(run, "lie", node=n, element=3)
    duel = open_duel(t, run, node, adversary, lie, a, n, lie.element)
    played = play_duel(t, duel, ruler=0)  # the ruling handed in by the liar
    assert played.outcome == DEFENDER_WON
    bond = _duel_bond(t, duel)
    result = _settle(t, duel)
    assert result.one(StepGameSettled).outcome == OUTCOME_CODES[DEFENDER_WON]
    assert w.settlement.credit_of(a) == bond  # the duel's bond...
    assert GAMMA * _side_gas(played, 1, result.gas_used) <= bond - paid.pick_node  # ... pays the seat's moves
    assert _close_node(t, node) == ClaimStatus.FAILED
    assert t.close(step) == ClaimStatus.FAILED
    assert t.close(game) == ClaimStatus.FAILED
    _no_referee_moved(t, since)
    t.settle()
    lost = paid.open_game + paid.pick_step + paid.pick_node + bond
    assert holdings(w, adversary) == before[adversary] - lost
    assert holdings(w, w.client) == before[w.client] + PRICE - 2 * (PRICE // 2)
    for seat in (a, b):
        assert holdings(w, seat) >= before[seat] + PRICE // 2 + paid.pick_node // 2
        assert w.settlement.seat(t.jid, seat).forfeit == ForfeitReason.NONE


def test_a_silent_defender_loses_on_the_verifiers_clock(cast_v2, run):
    """The cheater never commits: the auditor times it out on the verifier; settling the duel earlier
    than its stepBy is refused while undecided."""
    w = cast_v2
    t, (_, _, node), duel = _duel_a_cheater(w, run, 0)
    cheater = duel.opened.defender
    with reverts("GameTooEarly", notBefore=duel.opened.step_by):
        w.as_(w.keeper).settle_step_game(duel.id)
    assert play_duel(t, duel, silent=(1,)).outcome == CHALLENGER_WON
    assert _settled(t, duel).outcome == OUTCOME_CODES[CHALLENGER_WON]
    assert w.settlement.seat(t.jid, cheater).forfeit == ForfeitReason.LOST_GAME
    assert _close_node(t, node) == ClaimStatus.UPHELD


def test_a_duel_nobody_timed_out_is_timed_out_by_its_settlement(cast_v2, run):
    """Past stepBy anyone settles an undecided duel: the settlement times the verifier out."""
    w = cast_v2
    t, _, duel = _duel_a_cheater(w, run, 1)
    auditor, cheater = duel.opened.challenger, duel.opened.defender
    verifier = StepVerifier(w.chain, w.settlement.setting("STEP_VERIFIER"), auditor)
    verifier.commit(duel.id, duel.setup, duel.players[0].commitment())  # the cheater stays silent
    t.after(duel.opened.step_by)
    assert _settled(t, duel).outcome == OUTCOME_CODES[CHALLENGER_WON]
    assert verifier.game(duel.id).outcome == CHALLENGER_WON
    assert w.settlement.seat(t.jid, cheater).forfeit == ForfeitReason.LOST_GAME


def test_a_located_step_nobody_rules_is_lost_by_both(cast_v2, run):
    """The walk located the step and neither side ruled by stepBy: the cheating seat forfeits with
    nothing paid from its lock, the challenger's bond burns, and the claim fails."""
    w = cast_v2
    t, (_, _, node), duel = _duel_a_cheater(w, run, 2)
    cheater = duel.opened.defender
    assert play_duel(t, duel, rule=False).outcome is None
    burned = w.ledger()["burned"]
    t.after(duel.opened.step_by)
    assert _settled(t, duel).outcome == OUTCOME_CODES[BOTH_LOST]
    assert w.settlement.seat(t.jid, cheater).forfeit == ForfeitReason.LOST_GAME
    assert w.ledger()["burned"] == burned + S + _duel_bond(t, duel)
    assert _close_node(t, node) == ClaimStatus.FAILED


def test_each_seat_answers_for_its_own_duel_only(cast_v2, run):
    """Two seats cover an honest list and one throws its duel (silent): only it forfeits; the other
    beats the same challenger and is paid. The claim is upheld, the client never moves."""
    w = cast_v2
    adversary, _ = register_auditors(w)
    honest, thrower = w.providers[:2]
    n = _relu(run)
    t = step_table(w, run, (JobComputation(run), JobComputation(run)))
    since = w.chain.block_number()
    before = {x: holdings(w, x) for x in (honest, thrower, w.client)}
    game, step, node = t.path_to_node(adversary, honest, C, S_IN, n)
    lie = JobComputation(run, "lie", node=n, element=4)
    thrown = open_duel(t, run, node, adversary, lie, thrower, n, lie.element)
    fought = open_duel(t, run, node, adversary, lie, honest, n, lie.element)
    assert play_duel(t, fought, ruler=1).outcome == DEFENDER_WON
    assert play_duel(t, thrown, silent=(1,)).outcome == CHALLENGER_WON  # its clock runs out
    for duel in (thrown, fought):
        _settled(t, duel)
    assert _close_node(t, node) == ClaimStatus.UPHELD
    assert w.settlement.seat(t.jid, honest).forfeit == ForfeitReason.NONE
    assert w.settlement.seat(t.jid, thrower).forfeit == ForfeitReason.LOST_GAME
    assert (t.close(step), t.close(game)) == (ClaimStatus.UPHELD, ClaimStatus.UPHELD)
    _no_referee_moved(t, since)
    t.settle()
    assert holdings(w, honest) == before[honest] + PRICE // 2 + _duel_bond(t, fought)
    assert holdings(w, thrower) == before[thrower] - S
    assert holdings(w, w.client) == before[w.client] + PRICE - PRICE // 2


def test_a_joiner_duels_the_cheater_a_front_running_author_let_off(cast_v2, run):
    """The cheater's accomplice picks the node first and throws its duel; an honest auditor that joined
    the claim duels the cheater and wins, and is paid the node's third of the finder's share."""
    w = cast_v2
    accomplice, auditor = register_auditors(w)
    honest, cheater = w.providers[:2]
    n = _relu(run)
    cheat = JobComputation(run, "cheat", node=n, element=6)
    t = step_table(w, run, (JobComputation(run), cheat))
    before = {x: holdings(w, x) for x in (auditor, honest, cheater)}
    game, step, node = t.path_to_node(accomplice, cheater, C, S_IN, n)
    joined = t._booked(w.as_(auditor).pick_node(step, t.nodes_root(cheater, STEP), n)).one(ClaimJoined)
    assert joined.claim_id == node
    thrown = open_duel(t, run, node, accomplice, JobComputation(run), cheater, n, cheat.element)
    won = open_duel(t, run, node, auditor, JobComputation(run), cheater, n, cheat.element)
    assert play_duel(t, won, ruler=0).outcome == CHALLENGER_WON
    assert play_duel(t, thrown, silent=(0,)).outcome == DEFENDER_WON  # the accomplice never commits
    _settled(t, won)
    assert w.settlement.seat(t.jid, cheater).forfeit == ForfeitReason.LOST_GAME
    burned = w.ledger()["burned"]
    _settled(t, thrown)  # its winner fell already: the accomplice's bond is burned, not the cheater's
    assert w.ledger()["burned"] == burned + _duel_bond(t, thrown)
    assert _close_node(t, node) == ClaimStatus.UPHELD
    assert t.close(step) == ClaimStatus.UPHELD
    assert t.close(game) == ClaimStatus.UPHELD
    t.settle()
    third = S * WINNER_SHARE_BPS // 10_000 // 3
    won_gas = _duel_bond(t, won) - w.settlement.bonds_of(t.jid).pick_node  # the won duel's moves at γ
    assert holdings(w, auditor) == before[auditor] + third + GAMMA * ESTIMATED_GAS.join + won_gas
    assert holdings(w, honest) == before[honest] + PRICE // 2
    assert holdings(w, cheater) == before[cheater] - S


def test_duel_guards(cast_v2, run):
    """Each refusal of openStepGame and settleStepGame, and the referees' moves refused on a duelled claim."""
    w = cast_v2
    auditor, outsider = register_auditors(w)
    honest, cheater = w.providers[:2]
    n = _relu(run)
    cheat = JobComputation(run, "cheat", node=n, element=5)
    truth = JobComputation(run)
    t = step_table(w, run, (truth, cheat))
    _, step, node = t.path_to_node(auditor, cheater, C, S_IN, n)
    setup, proofs = duel_arguments(t, run, truth, cheater, n, cheat.element)
    s = w.as_(auditor)
    with reverts("StepGameNotAClaimant", account=outsider):
        w.as_(outsider).open_step_game(node, setup, proofs, cheater)
    with reverts("StepGameNotADefender", account=honest):  # it covers another node list
        s.open_step_game(node, setup, proofs, honest)
    wrong_input = replace(setup.inputs[0], root=b"\x01" * 32)
    with reverts("StepGameBadInput", input=0):
        s.open_step_game(node, replace(setup, inputs=(wrong_input, *setup.inputs[1:])), proofs, cheater)
    with reverts("StepGameBadInput", input=len(setup.inputs)):
        s.open_step_game(node, setup, replace(proofs, input_nodes=proofs.input_nodes[1:]), cheater)
    with reverts("StepGameBadInput", input=0):  # an input is an earlier entry
        s.open_step_game(node, setup, replace(proofs, input_nodes=(n,)), cheater)
    other = replace(setup.outputs[1], root=setup.outputs[0].root)  # the defender's is its list's entry n
    with reverts("StepGameBadOutput"):
        s.open_step_game(node, replace(setup, outputs=(setup.outputs[0], other)), proofs, cheater)
    elements = run.graph.nodes[n].shape[0] * run.graph.nodes[n].shape[1]
    with reverts("StepGameBadElement", element=elements):  # nobody could commit to it: both would lose
        s.open_step_game(node, replace(setup, element=elements), proofs, cheater)
    # Wrong tensor metadata is not the spec every party agreed to: refused, whatever the proofs.
    bigger = replace(setup.inputs[0], size=setup.inputs[0].size + 4)
    with reverts("StepGameBadSpecProof"):
        s.open_step_game(node, replace(setup, inputs=(bigger, *setup.inputs[1:])), proofs, cheater)
    with reverts("StepGameBadSpecProof"):
        s.open_step_game(node, setup, replace(proofs, spec_proof=proofs.spec_proof[1:]), cheater)
    state_claim = t.pick_node(auditor, step, cheater, STEP, run.nodes)  # entry N: the state after the step
    with reverts("StepGameNotAnOperator", node=run.nodes):
        s.open_step_game(state_claim, setup, proofs, cheater)
    ruled = t.pick_node(auditor, step, cheater, STEP, n - 1)
    t.post_evidence(cheater, ruled)
    w.as_(w.client).rule(ruled, False, b"\x02" * 32)
    with reverts("RefereeAlreadyRuled"):  # a ruling keeps its appeal path
        s.open_step_game(ruled, setup, proofs, cheater)
    duel = open_duel(t, run, node, auditor, truth, cheater, n, cheat.element)
    with reverts("StepGameAlreadyOpen", challenger=auditor, defender=cheater):
        s.open_step_game(node, setup, proofs, cheater)
    play_duel(t, duel, ruler=0)
    # Nobody rules over the verifier: the referees' moves are refused on a duelled claim.
    t.post_evidence(cheater, node)
    with reverts("RefereeStepGame", claimId=node):
        w.as_(w.client).rule(node, True, b"\x03" * 32)
    with reverts("RefereeStepGame", claimId=node):
        w.as_(w.keeper).draw_referee(node)
    t.after(w.settlement.claim(node).answer_by + 2 * MARGIN)
    with reverts("GameStepGameOpen", claimId=node):  # the claim waits for its duels to be settled
        w.as_(w.keeper).timeout(node)
    t._booked(w.as_(outsider).pick_node(step, t.nodes_root(cheater, STEP), n))  # joins: a claimant now
    with reverts("RefereeDeadlinePassed", deadline=w.settlement.claim(node).answer_by + 2 * MARGIN):
        w.as_(outsider).open_step_game(node, setup, proofs, cheater)
    late = t.pick_node(auditor, step, cheater, STEP, n - 2)
    t.after(w.settlement.claim(late).answer_by)
    with reverts("RefereeDeadlinePassed", deadline=w.settlement.claim(late).answer_by):  # the switch comes before it
        s.open_step_game(late, setup, proofs, cheater)
    with reverts("GameNoStepGame", id=duel.id + 1):
        w.as_(w.keeper).settle_step_game(duel.id + 1)
    _settled(t, duel)
    with reverts("GameStepGameSettled", id=duel.id):
        w.as_(w.keeper).settle_step_game(duel.id)


def test_the_fourth_level_is_offered_only_by_the_terms(cast_v2, run):
    """A job whose terms carry no elementSpecRoot keeps the referees for every node claim."""
    w = cast_v2
    auditor, _ = register_auditors(w)
    cheater = w.providers[1]
    n = _relu(run)
    truth = JobComputation(run)
    t = step_table(w, run, (truth, JobComputation(run, "cheat", node=n)), element_spec_root=bytes(32))
    _, _, node = t.path_to_node(auditor, cheater, C, S_IN, n)
    setup, proofs = duel_arguments(t, run, truth, cheater, n, 0)
    with reverts("StepGameNotOffered", jobId=t.jid):
        w.as_(auditor).open_step_game(node, setup, proofs, cheater)


def test_duels_opened_at_their_last_seconds_end_within_the_games_bound(cast_v2, run):
    """Two colluding seats cover a cheated list: the author switches at evidenceBy's last second, a
    joiner duels the other seat at the last second of the duels' window, and both defenders stall
    to their stepBy. Both forfeit, and the claim ends within T_game's ruling part after evidenceBy
    (protocol.economics.step_game_allowance), the job by finalBy."""
    w = cast_v2
    auditor, joiner = register_auditors(w)
    first, second = w.providers[:2]
    n = _relu(run)
    cheat = JobComputation(run, "cheat", node=n, element=7)
    truth = JobComputation(run)
    t = step_table(w, run, (cheat, cheat))
    game, step, node = t.path_to_node(auditor, first, C, S_IN, n)  # the second seat endorses
    t._booked(w.as_(joiner).pick_node(step, t.nodes_root(first, STEP), n))
    evidence_by = w.settlement.claim(node).answer_by
    t.after(evidence_by - 2)
    duels = [open_duel(t, run, node, auditor, truth, first, n, cheat.element)]
    t.after(evidence_by + 2 * MARGIN - 2)
    duels.append(open_duel(t, run, node, joiner, truth, second, n, cheat.element))
    allowed = w.settlement.allowances_of(w.opened[t.jid])
    depth = (run.element_node(n).spec.length - 1).bit_length()
    clock = economics.step_clock(allowed.rule, depth, MARGIN)
    assert [d.opened.clock for d in duels] == [clock, clock]
    assert duels[1].opened.step_by == evidence_by + 2 * MARGIN - 1 + 2 * clock + 2 * MARGIN
    verifier = StepVerifier(w.chain, w.settlement.setting("STEP_VERIFIER"), auditor)
    for duel in duels:
        verifier.connect(duel.opened.challenger).commit(duel.id, duel.setup, duel.players[0].commitment())
    for duel in duels:
        t.after(duel.opened.step_by)
        assert _settled(t, duel).outcome == OUTCOME_CODES[CHALLENGER_WON]
    assert t.close(node) == ClaimStatus.UPHELD
    assert w.chain.now() <= evidence_by + economics.step_game_allowance(allowed.rule, MARGIN)
    assert (t.close(step), t.close(game)) == (ClaimStatus.UPHELD, ClaimStatus.UPHELD)
    t.settle()
    assert w.chain.now() <= w.settlement.deadlines(t.jid).final_by
    for seat in (first, second):
        assert w.settlement.seat(t.jid, seat).forfeit == ForfeitReason.LOST_GAME
