"""Section 7's reimbursement against the real GavelSettlementV2 on the embedded EVM: a demander who paid
D for an item the seat served only to a witness gets D back from that seat's lock when the seat
forfeits in the job for any reason (a lost game, silence in a game, equivocation, another demand it
failed), before anything else the lock pays; the job's first MAX_REIMBURSED_DEMANDS such demands. Every
coin is accounted for after every move."""

from __future__ import annotations

import pytest
from eth_utils import keccak

from contracts.settlement_v2 import ForfeitReason, GAS_LIMITS_V2, StakeSlashed
from contracts.settlement_v2_demands import DataDemanded, DemandReimbursed, DemandStage, WitnessDrawn, checkpoint_item
from contracts.settlement_v2_games import ClaimStatus
from protocol.economics import ESTIMATED_GAS, MAX_REIMBURSED_DEMANDS
from protocol.statements import STEPS as KIND_STEPS

from .game_world_v2 import (
    CHEAT, DRAW_DELAY, EVERY, TRUTH, WRONG_NODE, WRONG_STEP, GameTable, holdings, register_auditors, register_referees)
from .settlement_world import WINNER_SHARE_BPS
from .settlement_world_v2 import PRICE, PROVIDER_STAKE
from .test_settlement_v2_statements import _signed

pytestmark = pytest.mark.settlement

S = PROVIDER_STAKE
GAMMA = 10**9
WITNESS_FEE = 10**15
CALLS = GAMMA * ESTIMATED_GAS.call_witness  # what D pays the seat for bringing a witness
C_BAD, S_BAD = (WRONG_STEP - 1) // EVERY, (WRONG_STEP - 1) % EVERY + 1
# σ = 100 s: a replay's window (2060 s) holds every demand these tests make of one seat.
TERMS = dict(witness_fee=WITNESS_FEE, gas_price_cap=GAMMA, step_millis=100_000)


class Served:
    """A revealed honest and cheated seat, two staked auditors (a finder, a demander), three witnesses."""

    def __init__(self, w):
        self.w, self.s = w, w.settlement
        self.finder, self.demander = register_auditors(w)
        self.witnesses = register_referees(w, 3)
        self.t = GameTable(w, (TRUTH, CHEAT), **TERMS)
        self.jid = self.t.jid
        self.honest, self.cheater = w.providers[:2]
        self.bond = self.s.demand_bond_of(self.jid)

    def booked(self, result):
        self.w.assert_every_coin_accounted()
        return result

    def demand(self, seat: str, item: int) -> bytes:
        return self.booked(self.w.as_(self.demander).demand_data(self.jid, seat, item)).one(DataDemanded).demand_id

    def served_to_witness(self, seat: str, item: int) -> str:
        """A demand the demander does not release: the seat calls a witness, who attests it was served."""
        demand = self.demand(seat, item)
        serve_by = self.s.demand(demand).deadline
        if serve_by - 1 > self.w.chain.now():
            self.w.mine_at(serve_by - 1)
        self.booked(self.w.as_(seat).call_witness(demand))
        armed = self.s.demand(demand).armed_block
        while self.w.chain.block_number() < armed + DRAW_DELAY:
            self.w.chain.mine()
        witness = self.booked(self.w.as_(self.w.keeper).draw_witness(demand)).one(WitnessDrawn).witness
        self.booked(self.w.as_(witness).attest_served(demand, True))
        assert self.s.demand(demand).stage == DemandStage.SERVED
        return witness

    def close(self, claim: bytes):
        """Waits out the claim's deadlines and ends it; returns the transaction."""
        info = self.s.claim(claim)
        self.t.after(max(info.answer_by, info.pick_until, info.rule_by))
        end = self.w.as_(self.w.keeper).resolve_game if info.level == 0 else self.w.as_(self.w.keeper).timeout
        return self.booked(end(claim))

    def settle(self) -> None:
        d = self.s.deadlines(self.jid)
        self.t.after(max(d.reveal_by, d.challenge_end))
        self.booked(self.w.as_(self.w.keeper).settle(self.jid))


@pytest.fixture
def served(cast_v2) -> Served:
    return Served(cast_v2)


def test_the_demander_ends_whole_when_the_seat_it_demanded_from_loses_a_game(served):
    f, w, t = served, served.w, served.t
    cast = (f.demander, f.finder, f.honest, f.cheater, w.client, *f.witnesses)
    before = {a: holdings(w, a) for a in cast}
    witness = f.served_to_witness(f.cheater, checkpoint_item(C_BAD + 1))
    assert holdings(w, f.demander) == before[f.demander] - f.bond  # D went to the witness and the seat
    game = t.open_game(f.finder, f.cheater, C_BAD)
    t.post_steps(f.cheater, game, C_BAD)
    step = t.pick_step(f.finder, game, f.cheater, C_BAD, S_BAD)
    t.post_nodes(f.cheater, step, C_BAD, S_BAD)
    node = t.pick_node(f.finder, step, f.cheater, WRONG_STEP, WRONG_NODE)
    t.post_evidence(f.cheater, node)
    f.booked(w.as_(w.client).rule(node, False, keccak(b"transcript")))
    events = f.close(node).events
    assert f.s.seat(f.jid, f.cheater).forfeit == ForfeitReason.LOST_GAME
    assert DemandReimbursed(f.jid, f.cheater, f.demander, f.bond) in events
    f.close(step)
    assert f.s.claim(step).status == ClaimStatus.UPHELD
    f.close(game)
    f.settle()
    finders = S * WINNER_SHARE_BPS // 10_000 // 3 * 3  # all three claims are the finder's
    gas_back = GAMMA * (ESTIMATED_GAS.open_game + ESTIMATED_GAS.resolve + ESTIMATED_GAS.pick_step
                        + ESTIMATED_GAS.pick_node)
    assert holdings(w, f.demander) == before[f.demander]  # whole: D back from the cheater's lock
    assert holdings(w, f.finder) == before[f.finder] + finders + gas_back  # its reward is not cut
    assert holdings(w, witness) == before[witness] + f.bond - CALLS
    assert holdings(w, f.cheater) == before[f.cheater] - S + CALLS < before[f.cheater]
    assert holdings(w, f.honest) == before[f.honest] + PRICE // 2
    assert holdings(w, w.client) == before[w.client] + PRICE - PRICE // 2  # the cheater's pay back


def _equivocate(f: Served) -> None:
    """The cheater signs two steps lists for one interval; the finder reports it."""
    a, b = (_signed(f.w, f.cheater, f.jid, KIND_STEPS, 1, keccak(v)) for v in (b"one list", b"another list"))
    f.booked(f.w.as_(f.finder).slash_equivocation(a, b))


def _fall_silent(f: Served) -> None:
    """The finder opens a game on the cheater's root; the cheater does not answer."""
    f.close(f.t.open_game(f.finder, f.cheater, C_BAD))


def _fail_another_demand(f: Served) -> None:
    """The demander asks for the bundle too; the cheater calls no witness."""
    demand = f.demand(f.cheater, 0)
    f.t.after(f.s.demand(demand).deadline + f.s.setting("MARGIN"))
    f.booked(f.w.as_(f.w.keeper).fail_demand(demand))


@pytest.mark.parametrize("forfeit, reason, beneficiary", [
    (_fall_silent, ForfeitReason.SILENT_DEFENDER, "finder"),
    (_equivocate, ForfeitReason.EQUIVOCATED, "finder"),
    (_fail_another_demand, ForfeitReason.UNAVAILABLE, "demander"),
])
def test_any_forfeit_pays_the_witnessed_demander_back_before_the_beneficiary(served, forfeit, reason, beneficiary):
    f, w = served, served.w
    to = getattr(f, beneficiary)
    before = {a: holdings(w, a) for a in (f.demander, f.finder, f.cheater)}
    f.served_to_witness(f.cheater, checkpoint_item(C_BAD + 1))
    forfeit(f)
    assert f.s.seat(f.jid, f.cheater).forfeit == reason
    events = (logged.event for logged in f.s.events())
    slashed = [e for e in events if isinstance(e, StakeSlashed) and e.loser == f.cheater]
    assert [(e.amount, e.to_beneficiary) for e in slashed] == [(S, f.bond + S * WINNER_SHARE_BPS // 10_000)]
    f.settle()
    share = S * WINNER_SHARE_BPS // 10_000  # w·S to the beneficiary, whole
    assert holdings(w, f.demander) == before[f.demander] + (share if to == f.demander else 0)
    if to == f.finder:
        assert holdings(w, f.finder) >= before[f.finder] + share
    assert holdings(w, f.cheater) == before[f.cheater] - S + CALLS


def test_a_forfeit_pays_back_only_its_own_of_the_jobs_first_max_reimbursed_demands(served):
    f, w = served, served.w
    before = holdings(w, f.demander)
    f.served_to_witness(f.honest, 0)  # the honest seat's: never paid back, it does not forfeit
    items = [checkpoint_item(c) for c in range(6)] + [0]  # the C + 2 items, then again
    for i in range(MAX_REIMBURSED_DEMANDS):
        f.served_to_witness(f.cheater, items[i % len(items)])  # the last one is past the job's bound
    game = f.t.open_game(f.finder, f.cheater, C_BAD)
    result = f.close(game)  # the cheater is silent: SilentDefender
    repaid = [e for e in result.events if isinstance(e, DemandReimbursed)]
    assert repaid == [DemandReimbursed(f.jid, f.cheater, f.demander, f.bond)] * (MAX_REIMBURSED_DEMANDS - 1)
    assert holdings(w, f.demander) == before - 2 * f.bond  # the honest seat's demand and the one past the bound
    assert result.gas_used < GAS_LIMITS_V2["resolveGame"] // 2
