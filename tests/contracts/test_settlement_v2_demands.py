"""Demands of data and their witnesses (docs/economics.md, section 7) against the real GavelSettlementV2
on the embedded EVM: every refusal of each call, and money tests that play each side to the end (a
seat that withholds data loses more than it was paid, a demander who griefs an honest seat pays for
it, a lying witness costs an honest seat nothing while one witness of MAX_DRAWS is honest); every coin
is accounted for after every move."""

from __future__ import annotations

import pytest

from contracts import Role
from contracts.settlement_v2 import ForfeitReason, JobSettled, JobStatus, SettlementV2
from contracts.settlement_v2_demands import (
    BUNDLE, DataDemanded, DemandAttested, DemandFailed, DemandStage, DemandVoided, WitnessCalled, WitnessDrawn,
    WitnessTimedOut, checkpoint_item)
from node.testnet.ledger_v2 import LedgerV2
from protocol.economics import ESTIMATED_GAS, MAX_DRAWS, bonds

from .game_world_v2 import DRAW_DELAY, holdings, register_auditors, register_referees
from .settlement_world import reverts
from .settlement_world_v2 import MARGIN, PRICE, PROVIDER_STAKE, STEPS, WorldV2

pytestmark = pytest.mark.settlement

S = PROVIDER_STAKE
GAMMA = 10**9
WITNESS_FEE = 10**15
CALLS = GAMMA * ESTIMATED_GAS.call_witness  # the seat's callWitness + drawWitness, paid at γ
ATTEST = GAMMA * ESTIMATED_GAS.attest       # a witness's attestServed, paid at γ
LAST = checkpoint_item(STEPS)               # the result: checkpoint C (one checkpoint a step)


class Demands:
    """A revealed two-seat job with f_W set, two staked auditors and three witnesses in the registry."""

    def __init__(self, w: WorldV2, seats: int = 2):
        self.w, self.s = w, w.settlement
        self.auditor, self.outsider = register_auditors(w)
        self.witnesses = register_referees(w, 3)
        labels = ("a", "b")[:seats]
        self.jid = w.revealed_job(labels, witness_fee=WITNESS_FEE, gas_price_cap=GAMMA)
        self.seats = list(w.providers[:seats])
        self.bond = self.s.demand_bond_of(self.jid)
        self.xfer = self.s.job(self.jid).allowed.xfer_state

    def booked(self, result):
        self.w.assert_every_coin_accounted()
        return result

    def demand(self, by: str, seat: str, item: int = LAST) -> bytes:
        return self.booked(self.w.as_(by).demand_data(self.jid, seat, item)).one(DataDemanded).demand_id

    def at(self, timestamp: int) -> None:
        """The next transaction lands at `timestamp`."""
        if timestamp - 1 > self.w.chain.now():
            self.w.mine_at(timestamp - 1)

    def call_witness(self, demand: bytes):
        d = self.s.demand(demand)
        self.at(d.deadline)
        return self.booked(self.w.as_(d.seat).call_witness(demand))

    def draw(self, demand: bytes, by: str | None = None, *, find: bool = True):
        """Mines to the seed block and draws; returns the result (its WitnessDrawn names the witness).
        With `find`, the seed block's time is chosen, as a block maker may, so that the draw finds a
        witness: the accounts are fresh each run and a seed whose probes all miss the three would void
        the demand."""
        armed = self.s.demand(demand).armed_block
        while self.w.chain.block_number() < armed + DRAW_DELAY - 1:
            self.w.chain.mine()
        caller = self.w.as_(by or self.w.keeper)
        for offset in range(1, 64):
            mark = self.w.chain.snapshot()
            if self.w.chain.block_number() < armed + DRAW_DELAY:
                self.w.chain.mine(self.w.chain.now() + offset)
            result = caller.draw_witness(demand)
            if not find or any(isinstance(e, WitnessDrawn) for e in result.events):
                return self.booked(result)
            self.w.chain.revert(mark)
        raise AssertionError("no seed block time within 63 s draws a witness")

    def witness(self, demand: bytes) -> str:
        """Calls (if open) and draws a witness; returns it."""
        if self.s.demand(demand).stage == DemandStage.OPEN:
            self.call_witness(demand)
        return self.draw(demand).one(WitnessDrawn).witness

    def attest(self, demand: bytes, served: bool):
        witness = self.s.demand(demand).witness
        return self.booked(self.w.as_(witness).attest_served(demand, served))

    def settle(self):
        self.at(self.s.job(self.jid).challenge_end)
        return self.booked(self.w.as_(self.w.keeper).settle(self.jid))

    def money(self) -> dict[str, int]:
        cast = [self.w.client, *self.seats, self.auditor, self.outsider, *self.witnesses]
        return {a: holdings(self.w, a) for a in cast}


@pytest.fixture
def d(cast_v2) -> Demands:
    return Demands(cast_v2)


def test_the_contract_names_section_7s_figures_and_bond(d):
    s = d.s
    expected = bonds(d.w.opened[d.jid].economic_terms(), s.chain_settings())
    assert s.bonds_of(d.jid).demand == d.bond == expected.demand == WITNESS_FEE + GAMMA * (
        ESTIMATED_GAS.call_witness + ESTIMATED_GAS.attest)
    assert (s.setting("GAS_CALL_WITNESS"), s.setting("GAS_ATTEST")) == (ESTIMATED_GAS.call_witness, ESTIMATED_GAS.attest)
    assert s.setting("MAX_DRAWS") == MAX_DRAWS


def test_demand_data_guards(d):
    w, s, jid, (seat, other) = d.w, d.s, d.jid, d.seats
    module = SettlementV2(w.chain, s.setting("DEMANDS"), d.auditor)
    with reverts("DemandDirectCall"):
        module.demand_data(jid, seat, LAST)
    with reverts("DemandJobNotRunning", jobId=b"\x07" * 32):
        w.as_(d.auditor).demand_data(b"\x07" * 32, seat, LAST)
    with reverts("DemandSeatNotStanding", seat=d.auditor):
        w.as_(d.outsider).demand_data(jid, d.auditor, LAST)
    with reverts("DemandOwnSeat", seat=seat):
        w.as_(seat).demand_data(jid, seat, LAST)
    with reverts("DemandNoSuchItem", item=LAST + 1):
        w.as_(d.auditor).demand_data(jid, seat, LAST + 1)
    with reverts("NodeNotRegistered"):
        w.as_(w.deployer).demand_data(jid, seat, LAST)
    poor = w.chain.new_account(10**18)
    w.others.append(poor)
    w.as_(poor).register(b"\x05" * 32, Role.CLIENT, stake=d.bond - 1)
    with reverts("NodeInsufficientFreeStake"):
        w.as_(poor).demand_data(jid, seat, LAST)
    first = d.demand(d.auditor, seat)
    with reverts("DemandAlreadyOpen", demandId=first):
        w.as_(d.outsider).demand_data(jid, seat, LAST)
    d.demand(d.outsider, seat, BUNDLE)      # another item of the same seat, and a co-seat, may be demanded
    d.demand(other, seat, checkpoint_item(0))
    closes, closes_other = s.seat(jid, seat).challenge_by, s.seat(jid, other).challenge_by
    d.at(max(closes, closes_other))
    with reverts("DemandDeadlinePassed", deadline=closes_other):
        w.as_(d.auditor).demand_data(jid, other, LAST)
    # A demand's end extends the seat's window for games, not for more demands.
    d.booked(w.as_(d.auditor).release_demand(first))
    assert s.seat(jid, seat).challenge_by > max(closes, closes_other)
    with reverts("DemandDeadlinePassed", deadline=closes):
        w.as_(d.auditor).demand_data(jid, seat, LAST)


def test_release_and_call_witness_guards(d):
    w, s, seat = d.w, d.s, d.seats[0]
    unknown = b"\x09" * 32
    with reverts("DemandNotFound", demandId=unknown):
        w.as_(d.auditor).release_demand(unknown)
    demand = d.demand(d.auditor, seat)
    serve_by = s.demand(demand).deadline
    with reverts("DemandNotTheDemander", account=seat):
        w.as_(seat).release_demand(demand)
    with reverts("DemandNotTheSeat", account=d.auditor):
        w.as_(d.auditor).call_witness(demand)
    with reverts("DemandTooEarly", notBefore=serve_by):
        w.as_(seat).call_witness(demand)
    d.at(serve_by + MARGIN)
    with reverts("DemandDeadlinePassed", deadline=serve_by + MARGIN):
        w.as_(seat).call_witness(demand)
    d.booked(w.as_(d.auditor).release_demand(demand))   # late, but before anyone failed it
    with reverts("DemandWrongStage", demandId=demand, stage=DemandStage.RELEASED):
        w.as_(d.auditor).release_demand(demand)
    with reverts("DemandWrongStage", demandId=demand, stage=DemandStage.RELEASED):
        w.as_(seat).call_witness(demand)


def test_draw_attest_timeout_and_fail_guards(d):
    w, s, seat = d.w, d.s, d.seats[0]
    demand = d.demand(d.auditor, seat)
    with reverts("DemandWrongStage", demandId=demand, stage=DemandStage.OPEN):
        w.as_(w.keeper).draw_witness(demand)
    with reverts("DemandTooEarly", notBefore=s.demand(demand).deadline + MARGIN):
        w.as_(w.keeper).fail_demand(demand)
    called = d.call_witness(demand).one(WitnessCalled)
    with reverts("DemandWrongStage", demandId=demand, stage=DemandStage.DRAWING):
        w.as_(d.auditor).release_demand(demand)
    with reverts("DemandDrawTooEarly", fromBlock=called.draw_block + DRAW_DELAY + 1):
        w.as_(w.keeper).draw_witness(demand)
    with reverts("DemandTooEarly", notBefore=called.draw_by):
        w.as_(w.keeper).fail_demand(demand)
    with reverts("DemandWrongStage", demandId=demand, stage=DemandStage.DRAWING):
        w.as_(w.keeper).attest_served(demand, True)
    with reverts("DemandWrongStage", demandId=demand, stage=DemandStage.DRAWING):
        w.as_(w.keeper).timeout_witness(demand)
    drawn = d.draw(demand).one(WitnessDrawn)
    with reverts("DemandNotTheWitness", account=seat):
        w.as_(seat).attest_served(demand, True)
    with reverts("DemandTooEarly", notBefore=drawn.attest_by):
        w.as_(w.keeper).timeout_witness(demand)
    with reverts("DemandWrongStage", demandId=demand, stage=DemandStage.WITNESSING):
        w.as_(w.keeper).fail_demand(demand)
    with reverts("DemandWrongStage", demandId=demand, stage=DemandStage.WITNESSING):
        w.as_(w.keeper).draw_witness(demand)
    d.at(drawn.attest_by)
    with reverts("DemandDeadlinePassed", deadline=drawn.attest_by):
        w.as_(drawn.witness).attest_served(demand, True)
    with reverts("DemandNotFound"):
        w.as_(w.keeper).fail_demand(b"\x09" * 32)


def test_a_stale_draw_rearms(d):
    demand = d.demand(d.auditor, d.seats[0])
    armed = d.call_witness(demand).one(WitnessCalled).draw_block
    for _ in range(256):
        d.w.chain.mine()
    again = d.booked(d.w.as_(d.w.keeper).draw_witness(demand)).one(WitnessCalled)
    assert again.draw_block > armed + 255 and again.draws == 0
    assert d.draw(demand).one(WitnessDrawn).witness in d.witnesses


def test_settle_waits_for_an_open_demand_and_the_window_after_it(d):
    w, s, seat = d.w, d.s, d.seats[0]
    d.at(s.job(d.jid).challenge_end - 100)
    demand = d.demand(d.auditor, seat)
    d.at(s.job(d.jid).challenge_end)
    with reverts("JobItemsOpen", openItems=1):
        w.as_(w.keeper).settle(d.jid)
    d.booked(w.as_(d.auditor).release_demand(demand))
    end = s.job(d.jid).challenge_end
    assert end == s.seat(d.jid, seat).challenge_by == w.chain.now() + s.job(d.jid).allowed.interval
    with reverts("JobTooEarly", notBefore=end):
        w.as_(w.keeper).settle(d.jid)
    assert d.settle().one(JobSettled).paid_seats == 2


def test_a_stonewalling_seat_forfeits_more_than_it_was_paid_and_the_demander_gains(d):
    """Section 12, stonewalling: the seat never serves nor calls a witness. It loses S and its pay p;
    the demander gets its bond back and w·S; the client gets p back."""
    w, s, (cheat, honest) = d.w, d.s, d.seats
    before = d.money()
    demand = d.demand(d.auditor, cheat)
    d.at(s.demand(demand).deadline + MARGIN)
    result = d.booked(w.as_(w.keeper).fail_demand(demand))
    assert result.one(DemandFailed).seat == cheat
    assert s.seat(d.jid, cheat).forfeit == ForfeitReason.UNAVAILABLE
    assert s.demand(demand).stage == DemandStage.FAILED
    d.settle()
    after = d.money()
    pay = PRICE // 2
    assert after[cheat] - before[cheat] == -S                  # paid nothing, stake gone: −(S + p) against serving
    assert after[d.auditor] - before[d.auditor] == S // 2      # D back and w·S
    assert after[honest] - before[honest] == pay
    assert after[w.client] - before[w.client] == PRICE - pay   # the stonewaller's p came back


def test_a_seat_every_witness_finds_silent_forfeits_and_the_refusers_earn_their_fee(d):
    """No gossip, at the end: a one-seat job whose seat answers nobody. Three witnesses refuse in turn;
    the seat forfeits, the client is refunded P, the demanding client ends with more than it put in."""
    w, s = d.w, d.s
    jid2 = w.revealed_job(("c",), nonce=2, witness_fee=WITNESS_FEE, gas_price_cap=GAMMA)
    d.jid, seat = jid2, w.providers[0]
    d.seats = [seat]
    before = d.money()
    demand = d.demand(w.client, seat)   # the client wants its result
    refusers = []
    for i in range(MAX_DRAWS):
        refusers.append(d.witness(demand))
        d.attest(demand, False)
    assert s.demand(demand).stage == DemandStage.REFUSED and s.refusers_of(demand) == tuple(refusers)
    d.booked(w.as_(w.keeper).fail_demand(demand))
    d.settle()
    after = d.money()
    assert after[seat] - before[seat] == -S
    assert after[w.client] - before[w.client] == PRICE + S // 2    # P refunded, w·S from the lock
    for r in refusers:
        assert after[r] - before[r] == WITNESS_FEE + ATTEST


def test_a_griefing_demander_pays_the_witness_and_the_seats_calls_and_the_seat_ends_whole(d):
    """The seat serves; the demander never confirms. The witness fetches it and says so: the griefer
    loses D = f_W + γ·(G_callWitness + G_attest), the seat is paid back its two calls at γ (at least
    their gas), the witness earns f_W and its attestation's gas at γ."""
    s, seat = d.s, d.seats[0]
    before = d.money()
    demand = d.demand(d.outsider, seat)
    called = d.call_witness(demand)
    drawn = d.draw(demand, by=seat)
    assert called.gas_used + drawn.gas_used <= ESTIMATED_GAS.call_witness   # what γ·G_callWitness pays for
    witness = drawn.one(WitnessDrawn).witness
    attested = d.attest(demand, True)
    assert attested.one(DemandAttested).served and attested.gas_used <= ESTIMATED_GAS.attest
    assert s.demand(demand).stage == DemandStage.SERVED
    d.settle()
    after = d.money()
    assert after[d.outsider] - before[d.outsider] == -d.bond == -(WITNESS_FEE + CALLS + ATTEST)
    assert after[seat] - before[seat] == PRICE // 2 + CALLS
    assert after[witness] - before[witness] == WITNESS_FEE + ATTEST


def test_a_released_demand_costs_the_demander_nothing(d):
    before = d.money()
    demand = d.demand(d.auditor, d.seats[0], BUNDLE)
    assert d.s.node(d.auditor).locked == d.bond
    d.booked(d.w.as_(d.auditor).release_demand(demand))
    assert d.money() == before and d.s.node(d.auditor).locked == 0


def test_lying_witnesses_cost_an_honest_seat_nothing_while_one_witness_is_honest(d):
    """The bound of section 7: a witness that says "not served" when the seat served only forces a
    redraw, which it pays for (γ·G_callWitness from its bond to the seat, no fee); an honest seat loses
    nothing on chain and gets every call it made back at γ, as long as one of the MAX_DRAWS witnesses
    is honest (here the first MAX_DRAWS − 1 lie). Only MAX_DRAWS liars in a row forfeit it (S + p, the
    previous test): the registry must hold more witnesses than one coalition, as for referees."""
    seat = d.seats[0]
    before = d.money()
    demand = d.demand(d.auditor, seat)
    liars = []
    for _ in range(MAX_DRAWS - 1):
        liars.append(d.witness(demand))
        d.attest(demand, False)
    honest = d.witness(demand)
    assert d.attest(demand, True).gas_used <= ESTIMATED_GAS.attest   # with MAX_DRAWS − 1 refusers to charge
    d.settle()
    after = d.money()
    assert after[seat] - before[seat] == PRICE // 2 + MAX_DRAWS * CALLS   # every round it drove, paid at γ
    for liar in liars:
        assert after[liar] - before[liar] == -CALLS
    assert after[honest] - before[honest] == WITNESS_FEE + ATTEST
    assert after[d.auditor] - before[d.auditor] == -d.bond
    ledger = LedgerV2()  # the testnet's books agree: each liar's D leaves its stake with the demander's
    ledger.feed(d.s.events(0, None), 0.0)
    assert ledger.demands[demand].refusers == liars
    assert ledger.mismatches(d.s) == []


def test_silent_witnesses_are_burned_and_then_the_demand_voids(d):
    w, s, seat = d.w, d.s, d.seats[0]
    before = d.money()
    demand = d.demand(d.auditor, seat)
    silent = []
    for _ in range(MAX_DRAWS):
        drawn = d.witness(demand)
        silent.append(drawn)
        d.at(s.demand(demand).deadline)
        result = d.booked(w.as_(w.keeper).timeout_witness(demand))
        assert result.one(WitnessTimedOut).burned == d.bond
    assert result.one(DemandVoided) and s.demand(demand).stage == DemandStage.VOID
    after = d.money()
    assert after[d.auditor] == before[d.auditor] and after[seat] == before[seat]
    for x in silent:
        assert after[x] - before[x] == -d.bond
    assert s.job(d.jid).open_items == 0


def test_a_draw_with_no_eligible_witness_counts_and_voids(cast_v2):
    w = cast_v2
    auditor, _ = register_auditors(w)
    jid = w.revealed_job(witness_fee=WITNESS_FEE, gas_price_cap=GAMMA)
    d = Demands.__new__(Demands)
    d.w, d.s, d.jid, d.auditor = w, w.settlement, jid, auditor
    demand = d.demand(auditor, w.providers[0])   # the registry is empty
    d.call_witness(demand)
    for i in range(MAX_DRAWS):
        result = d.draw(demand, find=False)
        assert not result.all(WitnessDrawn)
    assert result.one(DemandVoided) and d.s.demand(demand).stage == DemandStage.VOID
    assert d.s.node(auditor).locked == 0


def test_a_seat_that_calls_but_never_draws_fails(d):
    w, s, seat = d.w, d.s, d.seats[0]
    demand = d.demand(d.auditor, seat)
    called = d.call_witness(demand).one(WitnessCalled)
    d.at(called.draw_by)
    d.booked(w.as_(w.keeper).fail_demand(demand))
    assert s.seat(d.jid, seat).forfeit == ForfeitReason.UNAVAILABLE


def test_a_second_demand_on_a_forfeited_seat_voids(d):
    w, s, seat = d.w, d.s, d.seats[0]
    first = d.demand(d.auditor, seat)
    second = d.demand(d.outsider, seat, BUNDLE)
    d.at(s.demand(second).deadline + MARGIN)
    d.booked(w.as_(w.keeper).fail_demand(first))
    with reverts("DemandSeatNotStanding", seat=seat):
        w.as_(d.auditor).demand_data(d.jid, seat, BUNDLE + 1)
    result = d.booked(w.as_(w.keeper).fail_demand(second))
    assert result.one(DemandVoided) and not result.all(DemandFailed)
    assert s.node(d.outsider).locked == 0
    assert d.settle().one(JobSettled).status == JobStatus.FINALIZED
