"""The testnet's ledger, fed by the real settlement contract on the embedded EVM."""
from __future__ import annotations

import hashlib

import pytest

from contracts import ETHER, EmbeddedChain, JobStatus, Outcome, Role, Settlement
from node.testnet.ledger import Ledger

STAKE = 5 * ETHER
SEAT = ETHER
PRICE = 3 * ETHER + 1


def _h(label: str) -> bytes:
    return hashlib.sha256(label.encode()).digest()


@pytest.fixture(scope="module")
def chain_and_contract():
    chain = EmbeddedChain()
    settlement = Settlement.deploy(chain, unbonding_delay=1000, min_stake=ETHER, winner_share_bps=5000)
    return chain, settlement


def _feed(ledger: Ledger, settlement: Settlement, at: float) -> None:
    ledger.feed(settlement.events(ledger.last_block + 1), at)


def test_ledger_follows_a_disputed_job_and_agrees_with_the_contract(chain_and_contract):
    chain, settlement = chain_and_contract
    client, honest, cheat, auditor = chain.accounts[1:5]
    ledger = Ledger()
    for i, (account, roles) in enumerate(((honest, Role.PROVIDER), (cheat, Role.PROVIDER), (auditor, Role.AUDITOR))):
        settlement.connect(account).register(_h(f"key {i}"), roles, stake=STAKE)
    _feed(ledger, settlement, 1.0)

    now = chain.now()
    jid = _h("job")
    settlement.connect(client).open_job(jid, price=PRICE, providers_wanted=2, provider_stake=SEAT,
                                        accept_by=now + 100, commit_by=now + 200, challenge_by=now + 300,
                                        ruling_period=50)
    for provider in (honest, cheat):
        settlement.connect(provider).accept(jid)
    for provider, root in ((honest, _h("honest root")), (cheat, _h("cheat root"))):
        settlement.connect(provider).commit(jid, root)
    _feed(ledger, settlement, 2.0)
    assert ledger.book(cheat).locked == SEAT and ledger.book(honest).locked == SEAT

    dispute_id = settlement.connect(auditor).open_dispute(jid, cheat).events[0].dispute_id
    _feed(ledger, settlement, 3.0)
    assert ledger.open_disputes == 1 and ledger.book(auditor).locked == SEAT  # the auditor's bond
    settlement.connect(client).rule(dispute_id, Outcome.CHALLENGER_WINS, step=4, node=7, transcript_hash=_h("t"))
    chain.mine(now + 301)
    settlement.settle(jid)
    settlement.connect(honest).withdraw()
    _feed(ledger, settlement, 4.0)

    job = ledger.jobs[jid]
    assert job.status == JobStatus.FINALIZED and job.settled_at == 4.0
    assert job.commits[cheat][0] == _h("cheat root") and set(job.accepted) == {honest, cheat}
    dispute = ledger.disputes[dispute_id]
    assert dispute.losers == (cheat,) and (dispute.step, dispute.node) == (4, 7) and not dispute.open
    (slash,) = ledger.slashes
    assert (slash.loser, slash.amount, slash.beneficiary, slash.dispute_id) == (cheat, SEAT, auditor, dispute_id)
    assert job.paid == {honest: PRICE} and job.refunded == 0
    assert ledger.book(cheat).stake == STAKE - SEAT
    assert ledger.book(honest).credit == 0 and ledger.book(honest).earned == PRICE  # withdrawn
    assert ledger.book(auditor).credit == SEAT // 2  # the winner's share of the slash
    assert ledger.mismatches(settlement) == []
    # the history of the cheater: registered, seat locked, slashed
    assert [row[1:] for row in ledger.book(cheat).history] == [
        (STAKE, 0, 0, 0), (STAKE, SEAT, 0, 0), (STAKE - SEAT, 0, 0, 0)]


def test_ledger_mismatch_is_reported(chain_and_contract):
    chain, settlement = chain_and_contract
    ledger = Ledger()
    _feed(ledger, settlement, 1.0)
    account = chain.accounts[2]
    ledger.book(account).stake += 1  # a ledger that missed something
    assert any(account in line for line in ledger.mismatches(settlement))


def test_a_seat_never_committed_is_slashed_at_settlement(chain_and_contract):
    chain, settlement = chain_and_contract
    client, provider = chain.accounts[1], chain.accounts[5]
    settlement.connect(provider).register(_h("seat key"), Role.PROVIDER, stake=STAKE)
    ledger = Ledger()
    _feed(ledger, settlement, 0.0)
    now = chain.now()
    jid = _h("abandoned job")
    settlement.connect(client).open_job(jid, price=PRICE, providers_wanted=1, provider_stake=SEAT,
                                        accept_by=now + 10, commit_by=now + 20, challenge_by=now + 30,
                                        ruling_period=5)
    settlement.connect(provider).accept(jid)
    chain.mine(now + 21)
    settlement.settle(jid)
    _feed(ledger, settlement, 9.0)
    job = ledger.jobs[jid]
    assert job.status == JobStatus.REFUNDED and job.refunded == PRICE
    assert [(s.loser, s.beneficiary, s.dispute_id) for s in job.slashes] == [(provider, client, None)]
    assert ledger.mismatches(settlement) == []
