"""Every guard of the claim game (GavelGamesV2 through GavelSettlementV2), by its custom error."""

from __future__ import annotations

import pytest
from eth_utils import keccak

from contracts.settlement_v2 import SettlementV2

from .game_world_v2 import CHEAT, EVERY, NODES, TRUTH, WRONG_NODE, WRONG_STEP, GameTable, register_auditors
from .settlement_world import reverts

pytestmark = pytest.mark.settlement

UNKNOWN = b"\x07" * 32
C_BAD, S_BAD = (WRONG_STEP - 1) // EVERY, (WRONG_STEP - 1) % EVERY + 1


@pytest.fixture
def table(cast_v2):
    register_auditors(cast_v2)
    return GameTable(cast_v2, (TRUTH, CHEAT))


def test_the_module_refuses_direct_calls(table):
    w = table.w
    module = SettlementV2(w.chain, w.settlement.setting("GAMES"), w.keeper)
    with reverts("GameDirectCall"):
        module.open_game(table.jid, table.root(w.providers[1]), 0)


def test_open_game_guards(table):
    t, w = table, table.w
    auditor, cheater = w.keeper, w.providers[1]
    opened = w.open_job(nonce=2)
    with reverts("GameJobNotRunning", jobId=opened):
        w.as_(auditor).open_game(opened, t.root(cheater), 0)
    with reverts("GameUnknownRoot", traceRoot=UNKNOWN):
        w.as_(auditor).open_game(t.jid, UNKNOWN, 0)
    with reverts("GameInvalidInterval", interval=5):
        w.as_(auditor).open_game(t.jid, t.root(cheater), 5)
    game = t.open_game(auditor, cheater, C_BAD)
    with reverts("GameAlreadyJoined", account=auditor):
        w.as_(auditor).open_game(t.jid, t.root(cheater), C_BAD)
    t.after(w.settlement.seat(t.jid, cheater).challenge_by)
    with reverts("GameDeadlinePassed"):
        w.as_(w.outsider).open_game(t.jid, t.root(cheater), C_BAD)
    with reverts("JobItemsOpen", openItems=1):
        w.as_(w.keeper).settle(t.jid)
    w.as_(w.keeper).resolve_game(game)
    with reverts("GameClaimClosed", claimId=game):
        w.as_(w.keeper).resolve_game(game)


def test_list_guards(table):
    t, w = table, table.w
    honest, cheater = w.providers[:2]
    game = t.open_game(w.keeper, cheater, C_BAD)
    with reverts("GameClaimNotFound", claimId=UNKNOWN):
        w.as_(cheater).post_steps(UNKNOWN, [], [], [])
    with reverts("GameNotADefender", account=honest):
        t.post_steps(honest, game, C_BAD, CHEAT)
    with reverts("GameWrongListLength", length=2, expected=EVERY + 1):
        w.as_(cheater).post_steps(game, CHEAT.steps(C_BAD)[:2], [], [])
    with reverts("GameBadProof"):
        t.post_steps(cheater, game, C_BAD, TRUTH)  # the truth's interval does not end at the cheater's checkpoint
    with reverts("GameListNotPosted", listRoot=UNKNOWN):
        w.as_(cheater).endorse(game, UNKNOWN)
    t.post_steps(cheater, game, C_BAD)
    with reverts("GameAlreadyAnswered", seat=cheater):
        t.post_steps(cheater, game, C_BAD)
    with reverts("GameInvalidIndex", index=0):
        w.as_(w.keeper).pick_step(game, t.steps_root(cheater, C_BAD), 0)
    with reverts("GameListNotPosted", listRoot=UNKNOWN):
        w.as_(w.keeper).pick_step(game, UNKNOWN, 1)
    step = t.pick_step(w.keeper, game, cheater, C_BAD, S_BAD)
    with reverts("GameWrongLevel", claimId=step, level=1):
        w.as_(w.keeper).pick_step(step, t.steps_root(cheater, C_BAD), 1)
    with reverts("GameWrongLevel", claimId=game, level=0):
        w.as_(w.keeper).timeout(game)
    with reverts("GameBadProof"):
        w.as_(cheater).post_nodes(step, CHEAT.nodes(WRONG_STEP - 1), [])
    with reverts("GameWrongListLength", length=NODES, expected=NODES + 1):
        w.as_(cheater).post_nodes(step, CHEAT.nodes(WRONG_STEP)[:NODES], [])
    with reverts("GameTooEarly"):
        w.as_(w.keeper).timeout(step)
    t.post_nodes(cheater, step, C_BAD, S_BAD)
    with reverts("GameInvalidIndex", index=NODES + 1):  # entry N (the state after the step) may be picked
        w.as_(w.keeper).pick_node(step, t.nodes_root(cheater, WRONG_STEP), NODES + 1)
    node = t.pick_node(w.keeper, step, cheater, WRONG_STEP, WRONG_NODE)
    t.after(w.settlement.claim(game).pick_until)
    with reverts("GameChildrenOpen", openChildren=1):
        w.as_(w.keeper).resolve_game(game)
    with reverts("GameDeadlinePassed"):
        w.as_(w.outsider).pick_step(game, t.steps_root(cheater, C_BAD), 1)
    with reverts("GameDeadlinePassed"):
        t.post_evidence(cheater, node)


def test_evidence_and_ruling_guards(table):
    t, w = table, table.w
    cheater = w.providers[1]
    game = t.open_game(w.keeper, cheater, C_BAD)
    t.post_steps(cheater, game, C_BAD)
    step = t.pick_step(w.keeper, game, cheater, C_BAD, S_BAD)
    t.post_nodes(cheater, step, C_BAD, S_BAD)
    node = t.pick_node(w.keeper, step, cheater, WRONG_STEP, WRONG_NODE)
    with reverts("RefereeNoEvidence", claimId=node):
        w.as_(w.client).rule(node, False, keccak(b"t"))
    with reverts("GameZeroEvidence"):
        w.as_(cheater).post_evidence(node, b"\x00" * 32)
    t.post_evidence(cheater, node)
    with reverts("RefereeNotANodeClaim", claimId=step):
        w.as_(w.client).rule(step, False, keccak(b"t"))
    with reverts("RefereeNotTheReferee", account=w.outsider):
        w.as_(w.outsider).rule(node, False, keccak(b"t"))
    with reverts("RefereeNotTheReferee", account=w.keeper):  # a party, and not the client
        w.as_(w.keeper).rule(node, False, keccak(b"t"))
    w.as_(w.client).rule(node, False, keccak(b"t"))
    with reverts("RefereeAlreadyRuled", claimId=node):
        w.as_(w.client).rule(node, True, keccak(b"t"))


def test_the_ruling_deadline(table):
    t, w = table, table.w
    cheater = w.providers[1]
    game = t.open_game(w.keeper, cheater, C_BAD)
    t.post_steps(cheater, game, C_BAD)
    step = t.pick_step(w.keeper, game, cheater, C_BAD, S_BAD)
    t.post_nodes(cheater, step, C_BAD, S_BAD)
    node = t.pick_node(w.keeper, step, cheater, WRONG_STEP, WRONG_NODE)
    t.post_evidence(cheater, node)
    info = w.settlement.claim(node)
    assert info.rule_by > info.answer_by  # E_rule = s·ρ + E_xfer(Y) runs from the evidence, after the pick
    t.after(info.answer_by)
    with reverts("GameTooEarly", notBefore=info.rule_by):
        w.as_(w.keeper).timeout(node)
    t.after(info.rule_by)
    with reverts("RefereeDeadlinePassed"):
        w.as_(w.client).rule(node, False, keccak(b"t"))
    with reverts("GameNoRuling", claimId=node):  # the silent client's bond is burned first (timeoutReferee)
        w.as_(w.keeper).timeout(node)
