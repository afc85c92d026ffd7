"""The claim game (docs/economics.md, section 8) against the real GavelSettlementV2 on the embedded EVM:
honest and cheating parties play it to the end; every coin is accounted for after every move."""

from __future__ import annotations

from dataclasses import replace

import pytest
from eth_utils import keccak

from contracts.settlement_v2 import ForfeitReason, SeatForfeited
from contracts.settlement_v2_games import ClaimJoined, ClaimPicked, ClaimResolved, ClaimStatus
from protocol.economics import DRAW_DELAY, ESTIMATED_GAS, MAX_DRAWS, bonds
from protocol.listtree import ListTree, list_root

from .game_world_v2 import CHEAT, EVERY, REFEREE_FEE, TRUTH, WRONG_NODE, WRONG_STEP, GameTable, holdings, register_auditors
from .settlement_world import WINNER_SHARE_BPS, reverts
from .settlement_world_v2 import PRICE, PROVIDER_STAKE

pytestmark = pytest.mark.settlement

S = PROVIDER_STAKE
GAMMA = 10**9  # the terms' gas price cap
# What a won path pays back at γ (GavelGamesV2's constants, protocol.economics.ESTIMATED_GAS)
OPEN_AND_RESOLVE, PICK_STEP, PICK_NODE, JOIN = (ESTIMATED_GAS.open_game + ESTIMATED_GAS.resolve,
                                                ESTIMATED_GAS.pick_step, ESTIMATED_GAS.pick_node, ESTIMATED_GAS.join)
C_BAD, S_BAD = (WRONG_STEP - 1) // EVERY, (WRONG_STEP - 1) % EVERY + 1  # the cheated interval and its step


def test_bonds_of_is_protocol_economics_bonds(cast_v2):
    w = cast_v2
    t = GameTable(w, (TRUTH, CHEAT))
    expected = bonds(w.opened[t.jid].economic_terms(), w.settlement.chain_settings())
    got = w.settlement.bonds_of(t.jid)
    assert (got.open_game, got.pick_step, got.pick_node, got.referee, got.appeal) == (
        expected.open_game, expected.pick_step, expected.pick_node, expected.referee, expected.appeal)
    s = w.settlement  # the gas figures the appeal bond pre-pays are protocol.economics's
    assert (s.setting("GAS_APPEAL"), s.setting("GAS_DRAW"), s.setting("GAS_RULE_APPEAL")) == (
        ESTIMATED_GAS.appeal, ESTIMATED_GAS.draw, ESTIMATED_GAS.rule_appeal)
    assert (s.setting("MAX_DRAWS"), s.setting("DRAW_DELAY")) == (MAX_DRAWS, DRAW_DELAY)
    # and those a duel's bond pre-pays: B_node + γ·G_duel(⌈log2 length⌉)
    assert (s.setting("GAS_DUEL_BASE"), s.setting("GAS_DUEL_LEVEL")) == (ESTIMATED_GAS.duel_base, ESTIMATED_GAS.duel_level)
    terms = w.opened[t.jid].economic_terms()
    for length, depth in ((1, 0), (2, 1), (3, 2), (1647, 11), (2**40, 40)):
        assert s.step_game_bond(t.jid, length) == expected.pick_node + terms.gas_price_cap * ESTIMATED_GAS.duel(depth)
    assert w.settlement.node(w.client).locked == expected.referee  # locked at openJob


def test_a_cheated_root_is_upheld_the_finder_gains_and_the_cheater_loses_its_stake(cast_v2):
    """Section 12: cheat a step. The auditor plays the whole path; the client rules on the evidence."""
    w = cast_v2
    auditor, _ = register_auditors(w)
    honest, cheater = w.providers[:2]
    t = GameTable(w, (TRUTH, CHEAT))
    before = {a: holdings(w, a) for a in (auditor, honest, cheater, w.client)}
    game = t.open_game(auditor, cheater, C_BAD)
    w.assert_every_coin_accounted()
    t.post_steps(cheater, game, C_BAD)
    step = t.pick_step(auditor, game, cheater, C_BAD, S_BAD)
    t.post_nodes(cheater, step, C_BAD, S_BAD)
    node = t.pick_node(auditor, step, cheater, WRONG_STEP, WRONG_NODE)
    t.post_evidence(cheater, node)
    w.as_(w.client).rule(node, False, keccak(b"transcript"))
    w.assert_every_coin_accounted()
    assert t.close(node) == ClaimStatus.UPHELD  # _close checks the books too
    assert w.settlement.seat(t.jid, cheater).forfeit == ForfeitReason.LOST_GAME
    assert t.close(step) == ClaimStatus.UPHELD
    assert t.close(game) == ClaimStatus.UPHELD
    t.settle()
    finder = S * WINNER_SHARE_BPS // 10_000 // 3 * 3  # all three claims are the auditor's
    gas_back = GAMMA * (OPEN_AND_RESOLVE + PICK_STEP + PICK_NODE)
    assert holdings(w, auditor) == before[auditor] + finder + gas_back
    assert holdings(w, cheater) == before[cheater] - S
    assert holdings(w, honest) >= before[honest] + PRICE // 2
    assert holdings(w, w.client) == before[w.client] + PRICE - PRICE // 2  # the cheater's pay back
    assert w.settlement.node(w.client).locked == 0


def test_a_false_pick_at_an_honest_root_loses_its_bonds_to_the_defenders(cast_v2):
    """An adversary plays the whole path against two honest seats with one root; it ends poorer."""
    w = cast_v2
    adversary, _ = register_auditors(w)
    a, b = w.providers[:2]
    t = GameTable(w, (TRUTH, TRUTH))
    paid = w.settlement.bonds_of(t.jid)
    before = {x: holdings(w, x) for x in (adversary, a, b, w.client)}
    game, step, node = t.path_to_evidence(adversary, a, 0, 1, 0)  # b endorses a's lists, both post evidence
    w.as_(w.client).rule(node, True, keccak(b"transcript"))
    assert t.close(node) == ClaimStatus.FAILED
    assert t.close(step) == ClaimStatus.FAILED
    assert t.close(game) == ClaimStatus.FAILED
    t.settle()
    lost = paid.open_game + paid.pick_step + paid.pick_node
    assert holdings(w, adversary) == before[adversary] - lost
    assert holdings(w, w.client) == before[w.client] + REFEREE_FEE + PRICE - 2 * (PRICE // 2)
    for seat in (a, b):
        assert holdings(w, seat) >= before[seat] + PRICE // 2 + (lost - REFEREE_FEE) // 2 - 1


def test_a_silent_defender_forfeits_and_the_picker_is_paid(cast_v2):
    w = cast_v2
    auditor, _ = register_auditors(w)
    _, cheater = w.providers[:2]
    t = GameTable(w, (TRUTH, CHEAT))
    before = holdings(w, auditor)
    game = t.open_game(auditor, cheater, C_BAD)
    result_status = t.close(game)
    assert result_status == ClaimStatus.UPHELD
    assert w.settlement.seat(t.jid, cheater).forfeit == ForfeitReason.SILENT_DEFENDER
    assert holdings(w, auditor) == before + S * WINNER_SHARE_BPS // 10_000
    assert holdings(w, cheater) < 5 * 10**18  # lost its seat's lock
    t.settle()


def test_many_challengers_meet_in_one_game_and_each_honest_one_ends_with_at_least_what_it_put_in(cast_v2):
    w = cast_v2
    first, second = register_auditors(w)
    honest, cheater = w.providers[:2]
    t = GameTable(w, (TRUTH, CHEAT))
    before = {x: holdings(w, x) for x in (first, second)}
    game = t.open_game(first, cheater, C_BAD)
    joined = w.as_(second).open_game(t.jid, t.root(cheater), C_BAD)
    assert joined.one(ClaimJoined).claim_id == game
    assert joined.gas_used <= JOIN  # the reimbursement covers the join
    t.post_steps(cheater, game, C_BAD)
    step = t.pick_step(second, game, cheater, C_BAD, S_BAD)  # the second picks first this time
    same = w.as_(first).pick_step(game, t.steps_root(cheater, C_BAD), S_BAD)
    assert same.one(ClaimJoined) == ClaimJoined(step, first)  # the same pick joins, with no bond
    t.post_nodes(cheater, step, C_BAD, S_BAD)
    node = t.pick_node(first, step, cheater, WRONG_STEP, WRONG_NODE)
    w.as_(second).pick_node(step, t.nodes_root(cheater, WRONG_STEP), WRONG_NODE).one(ClaimJoined)
    t.post_evidence(cheater, node)
    w.as_(w.client).rule(node, False, keccak(b"transcript"))
    for claim in (node, step, game):
        assert t.close(claim) == ClaimStatus.UPHELD
    t.settle()
    third = S * WINNER_SHARE_BPS // 10_000 // 3
    # first: the interval and node claims, a join of the step claim; second: the step claim, two joins
    assert holdings(w, first) == before[first] + 2 * third + GAMMA * (OPEN_AND_RESOLVE + PICK_NODE + JOIN)
    assert holdings(w, second) == before[second] + third + GAMMA * (PICK_STEP + 2 * JOIN)
    assert w.settlement.seat(t.jid, honest).status == 4      # PAID


def test_a_client_that_referees_cannot_rule_a_game_it_picked_in(cast_v2):
    w = cast_v2
    _, cheater = w.providers[:2]
    t = GameTable(w, (TRUTH, CHEAT))
    referee_bond = w.settlement.bonds_of(t.jid).referee
    before = holdings(w, w.client)
    game = t.open_game(w.client, cheater, C_BAD)
    t.post_steps(cheater, game, C_BAD)
    step = t.pick_step(w.client, game, cheater, C_BAD, S_BAD)
    t.post_nodes(cheater, step, C_BAD, S_BAD)
    node = t.pick_node(w.client, step, cheater, WRONG_STEP, WRONG_NODE)
    t.post_evidence(cheater, node)
    with reverts("RefereeIsParty", account=w.client):
        w.as_(w.client).rule(node, False, keccak(b"transcript"))
    # A referee is drawn instead (section 9); with none registered every draw finds nobody, and
    # after MAX_DRAWS the claim voids, bonds back; the client's bond is not burned for a silence
    # it could not help.
    for _ in range(3):
        assert t.draw(node) is None
    assert w.settlement.ruling(node).referees_out
    assert t.close(node) == ClaimStatus.VOID
    assert t.close(step) == ClaimStatus.VOID
    assert t.close(game) == ClaimStatus.VOID
    assert holdings(w, w.client) == before
    assert w.settlement.node(w.client).locked == referee_bond


def test_a_silent_referee_loses_its_bond_and_the_claim_voids_with_bonds_back(cast_v2):
    w = cast_v2
    auditor, _ = register_auditors(w)
    _, cheater = w.providers[:2]
    t = GameTable(w, (TRUTH, CHEAT))
    referee_bond = w.settlement.bonds_of(t.jid).referee
    before = {x: holdings(w, x) for x in (auditor, w.client)}
    game = t.open_game(auditor, cheater, C_BAD)
    t.post_steps(cheater, game, C_BAD)
    step = t.pick_step(auditor, game, cheater, C_BAD, S_BAD)
    t.post_nodes(cheater, step, C_BAD, S_BAD)
    node = t.pick_node(auditor, step, cheater, WRONG_STEP, WRONG_NODE)
    t.post_evidence(cheater, node)
    burned = w.ledger()["burned"]
    t.after(w.settlement.claim(node).rule_by)
    w.as_(w.keeper).timeout_referee(node)  # the silent client's bond is burned, a draw armed
    assert w.ledger()["burned"] == burned + referee_bond
    for _ in range(3):  # nobody to draw: the claim voids
        assert t.draw(node) is None
    assert t.close(node) == ClaimStatus.VOID
    assert holdings(w, w.client) == before[w.client] - referee_bond
    assert t.close(step) == ClaimStatus.VOID
    assert t.close(game) == ClaimStatus.VOID
    assert holdings(w, auditor) == before[auditor]


def test_games_on_distinct_intervals_of_one_root_queue_the_defenders_recompute(cast_v2):
    w = cast_v2
    auditor, _ = register_auditors(w)
    honest = w.providers[0]
    t = GameTable(w, (TRUTH, CHEAT))
    allowed = w.settlement.job(t.jid).allowed
    margin = w.settlement.setting("MARGIN")
    games = [t.open_game(auditor, honest, c) for c in (0, 1)]
    for c, game in enumerate(games):
        t.post_steps(honest, game, c)
    first = w.settlement.claim(t.pick_step(auditor, games[0], honest, 0, 1))
    assert w.settlement.busy_until(t.jid, t.root(honest)) == first.answer_by - 2 * margin
    second = w.settlement.claim(t.pick_step(auditor, games[1], honest, 1, 1))
    assert second.answer_by == first.answer_by - 2 * margin + allowed.interval
    # A later pick in the same game keeps the interval's nodesBy.
    again = w.settlement.claim(t.pick_step(auditor, games[0], honest, 0, 2))
    assert again.answer_by == first.answer_by


def test_seat_forfeits_of_the_game_are_the_seat_forfeited_events(cast_v2):
    w = cast_v2
    auditor, _ = register_auditors(w)
    _, cheater = w.providers[:2]
    t = GameTable(w, (TRUTH, CHEAT))
    game = t.open_game(auditor, cheater, C_BAD)
    t.after(w.settlement.claim(game).answer_by)
    result = w.as_(w.keeper).resolve_game(game)
    assert result.one(SeatForfeited) == SeatForfeited(t.jid, cheater, ForfeitReason.SILENT_DEFENDER)
    assert result.one(ClaimResolved) == ClaimResolved(game, ClaimStatus.UPHELD)


def test_a_co_defender_that_posts_a_wrong_node_list_sinks_only_itself(cast_v2):
    """Two seats with one (honest) root; one posts a wrong node list under it. The claim on that
    list is upheld: its poster loses S, the seat that posted its own right list keeps its pay."""
    w = cast_v2
    auditor, _ = register_auditors(w)
    honest, saboteur = w.providers[:2]
    t = GameTable(w, (TRUTH, TRUTH))
    before = {x: holdings(w, x) for x in (auditor, honest, saboteur)}
    game = t.open_game(auditor, honest, 0)
    t.post_steps(honest, game, 0)
    w.as_(saboteur).endorse(game, t.steps_root(honest, 0))
    step = t.pick_step(auditor, game, honest, 0, 1)
    t.post_nodes(honest, step, 0, 1)
    wrong = TRUTH.nodes(1)
    wrong[0] = keccak(b"a wrong node output")
    w.as_(saboteur).post_nodes(step, wrong, ListTree(TRUTH.steps(0)).proof(1).siblings)
    node = w.as_(auditor).pick_node(step, list_root(wrong), 0).one(ClaimPicked).claim_id
    w.as_(saboteur).post_evidence(node, keccak(b"the saboteur's evidence"))
    w.as_(w.client).rule(node, False, keccak(b"transcript"))
    assert t.close(node) == ClaimStatus.UPHELD
    assert t.close(step) == ClaimStatus.UPHELD
    assert t.close(game) == ClaimStatus.UPHELD
    t.settle()
    assert w.settlement.seat(t.jid, saboteur).forfeit == ForfeitReason.LOST_GAME
    assert w.settlement.seat(t.jid, honest).forfeit == ForfeitReason.NONE
    assert holdings(w, saboteur) == before[saboteur] - S
    assert holdings(w, honest) == before[honest] + PRICE // 2
    assert holdings(w, auditor) > before[auditor]


def test_posted_list_reads_a_steps_and_a_node_list_back_from_calldata(cast_v2):
    from contracts.settlement_v2_games import ListPosted

    w = cast_v2
    auditor, _ = register_auditors(w)
    _, cheater = w.providers[:2]
    t = GameTable(w, (TRUTH, CHEAT))
    game = t.open_game(auditor, cheater, C_BAD)
    first = t.post_steps(cheater, game, C_BAD).block_number
    step = t.pick_step(auditor, game, cheater, C_BAD, S_BAD)
    t.post_nodes(cheater, step, C_BAD, S_BAD)
    posted = [e for e in w.settlement.events(first) if isinstance(e.event, ListPosted)]
    assert [list(w.settlement.posted_list(e)) for e in posted] == [CHEAT.steps(C_BAD), CHEAT.nodes(WRONG_STEP)]
    forged = replace(posted[0], event=replace(posted[0].event, entries=tuple(TRUTH.steps(C_BAD))))
    with pytest.raises(ValueError, match="does not hash to the event's root"):
        w.settlement.posted_list(forged)
