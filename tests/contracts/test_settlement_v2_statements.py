"""Equivocation (docs/economics.md, section 10) against the real contract, with statements signed by
protocol/statements.py: two different lists for one slot, or a list the chain contradicts, cost the seat S."""

from __future__ import annotations

import pytest
from eth_account import Account
from eth_utils import keccak

from contracts.settlement_v2 import ForfeitReason, JobStatus
from contracts.settlement_v2_games import EquivocationSlashed
from protocol.statements import (
    NODES, STEPS, TRACE, SeatStatement, SignedStatement, StatementDomain, digest, sign_statement, signable)

from .game_world_v2 import CHEAT, EVERY, TRUTH, WRONG_STEP, GameTable, holdings, register_auditors
from .settlement_world import WINNER_SHARE_BPS, reverts
from .settlement_world_v2 import PRICE, PROVIDER_STAKE

pytestmark = pytest.mark.settlement


def _key(w, account: str) -> bytes:
    """The embedded chain's account i has private key i + 1."""
    return (w.chain.accounts.index(account) + 1).to_bytes(32, "big")


def _domain(w) -> StatementDomain:
    """The settlement on the embedded chain (py-evm's chain id)."""
    return StatementDomain(chain_id=w.chain.tester.backend.chain.chain_id, contract=w.settlement.address)


def _signed(w, seat: str, jid: bytes, kind: int, index: int, value: bytes, *, signer: str | None = None):
    """`seat`'s statement signed with `signer`'s key (the seat's own unless forging)."""
    statement = SeatStatement(jid, seat, kind, index, value)
    if signer is None:
        return sign_statement(statement, _key(w, seat), _domain(w))
    forged = Account.sign_message(signable(statement, _domain(w)), _key(w, signer))
    return SignedStatement(statement, bytes(forged.signature))


def test_the_contract_digest_is_protocol_statements_digest(cast_v2):
    w = cast_v2
    t = GameTable(w, (TRUTH, CHEAT))
    statement = SeatStatement(t.jid, w.providers[0], STEPS, 3, keccak(b"list"))
    assert w.settlement.statement_digest(statement) == digest(statement, _domain(w))
    signed = sign_statement(statement, _key(w, w.providers[0]), _domain(w))
    assert signed.verify(_domain(w))


def test_two_different_lists_for_one_slot_cost_the_seat_its_stake(cast_v2):
    w = cast_v2
    reporter, _ = register_auditors(w)
    honest, liar = w.providers[:2]
    t = GameTable(w, (TRUTH, CHEAT))
    before = {x: holdings(w, x) for x in (reporter, liar, honest, w.client)}
    a = _signed(w, liar, t.jid, STEPS, 1, keccak(b"one list"))
    b = _signed(w, liar, t.jid, STEPS, 1, keccak(b"another list"))
    result = w.as_(reporter).slash_equivocation(a, b)
    assert result.one(EquivocationSlashed) == EquivocationSlashed(t.jid, liar, reporter, STEPS, 1)
    assert w.settlement.seat(t.jid, liar).forfeit == ForfeitReason.EQUIVOCATED
    w.assert_every_coin_accounted()
    assert holdings(w, reporter) == before[reporter] + PROVIDER_STAKE * WINNER_SHARE_BPS // 10_000
    assert holdings(w, liar) == before[liar] - PROVIDER_STAKE
    with reverts("StatementNothingToSlash", seat=liar):
        w.as_(reporter).slash_equivocation(a, b)
    d = w.settlement.deadlines(t.jid)
    t.after(max(d.reveal_by, d.challenge_end))
    w.as_(w.keeper).settle(t.jid)
    assert w.settlement.job(t.jid).status == JobStatus.FINALIZED
    assert holdings(w, w.client) == before[w.client] + PRICE - PRICE // 2  # the liar's pay back
    assert holdings(w, honest) == before[honest] + PRICE // 2


def test_a_signed_list_the_chain_contradicts_costs_the_seat_its_stake(cast_v2):
    w = cast_v2
    reporter, _ = register_auditors(w)
    honest, cheater = w.providers[:2]
    t = GameTable(w, (TRUTH, CHEAT))
    c, s = (WRONG_STEP - 1) // EVERY, (WRONG_STEP - 1) % EVERY + 1
    # What the cheater told an auditor off chain before the game: the true steps list.
    told = _signed(w, cheater, t.jid, STEPS, c, t.steps_root(honest, c))
    with reverts("StatementNoContradiction"):  # no game yet: nothing on chain to compare with
        w.as_(reporter).slash_contradiction(told)
    game = t.open_game(reporter, cheater, c)
    t.post_steps(cheater, game, c)
    with reverts("StatementNoContradiction"):  # the list it posted agrees with itself
        w.as_(reporter).slash_contradiction(_signed(w, cheater, t.jid, STEPS, c, t.steps_root(cheater, c)))
    step = t.pick_step(reporter, game, cheater, c, s)
    t.post_nodes(cheater, step, c, s)
    with reverts("StatementNoContradiction"):
        w.as_(reporter).slash_contradiction(_signed(w, cheater, t.jid, NODES, WRONG_STEP,
                                                    t.nodes_root(cheater, WRONG_STEP)))
    other_nodes = _signed(w, cheater, t.jid, NODES, WRONG_STEP, t.nodes_root(honest, WRONG_STEP))
    w.as_(reporter).slash_contradiction(other_nodes)
    assert w.settlement.seat(t.jid, cheater).forfeit == ForfeitReason.EQUIVOCATED
    w.assert_every_coin_accounted()
    with reverts("StatementNothingToSlash", seat=cheater):
        w.as_(reporter).slash_contradiction(told)


def test_a_trace_statement_other_than_the_revealed_root_is_a_contradiction(cast_v2):
    w = cast_v2
    reporter, _ = register_auditors(w)
    honest = w.providers[0]
    t = GameTable(w, (TRUTH, CHEAT))
    with reverts("StatementNoContradiction"):
        w.as_(reporter).slash_contradiction(_signed(w, honest, t.jid, TRACE, 0, t.root(honest)))
    w.as_(reporter).slash_contradiction(_signed(w, honest, t.jid, TRACE, 0, keccak(b"another root")))
    assert w.settlement.seat(t.jid, honest).forfeit == ForfeitReason.EQUIVOCATED


def test_statement_guards(cast_v2):
    w = cast_v2
    reporter, _ = register_auditors(w)
    seat, other = w.providers[:2]
    t = GameTable(w, (TRUTH, CHEAT))
    a = _signed(w, seat, t.jid, STEPS, 1, keccak(b"one"))
    with reverts("StatementNotEquivocal"):
        w.as_(reporter).slash_equivocation(a, a)
    with reverts("StatementNotEquivocal"):
        w.as_(reporter).slash_equivocation(a, _signed(w, seat, t.jid, STEPS, 2, keccak(b"two")))
    forged = _signed(w, seat, t.jid, STEPS, 1, keccak(b"two"), signer=other)
    with reverts("StatementBadSignature"):
        w.as_(reporter).slash_equivocation(a, forged)
    bad_v = SignedStatement(a.statement, a.signature[:64] + bytes([29]))
    with reverts("StatementBadSignature"):
        w.as_(reporter).slash_contradiction(bad_v)
    raw = (t.jid, seat, 3, 0, keccak(b"x"))
    with reverts("StatementInvalidKind", kind=3):
        w.settlement.connect(reporter)._transact("slashContradiction", raw, a.signature)
    with reverts("StatementBadSignature"):
        w.settlement.connect(reporter)._transact("slashContradiction", (t.jid, seat, 1, 1, keccak(b"one")),
                                                 a.signature[:64])
