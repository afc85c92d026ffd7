"""Where every coin goes in version 2: the happy path, copy-the-root, commit-and-fall-silent, no
commit, a job that never fills; settle called by a keeper that is no party; the books balance
after every step (contract balance = stakes + credits + escrow; burned coins at 0x…dEaD)."""

import pytest

from contracts import StakeSlashed, StakeUnlocked, Withdrawn
from contracts.settlement_v2 import (
    ClientRefunded,
    ForfeitReason,
    JobSettled,
    JobStatus,
    ProviderPaid,
    SeatForfeited,
    SeatStatus,
    commitment_of,
    trace_root,
)

from .settlement_world import NODE_STAKE, WINNER_SHARE_BPS, reverts
from .settlement_world_v2 import PRICE, PROVIDER_STAKE, SPEC, salt, trace_of

pytestmark = pytest.mark.settlement

S = PROVIDER_STAKE
TO_CLIENT = S * WINNER_SHARE_BPS // 10_000
BURNED = S - TO_CLIENT


def _wealth(w, account: str) -> int:
    """What an account owns: its wallet, its stake and its credit in the contract."""
    return w.chain.balance(account) + w.settlement.node(account).stake + w.settlement.credit_of(account)


def _until_settlable(w, jid) -> None:
    d = w.settlement.deadlines(jid)
    w.mine_at(max(d.reveal_by, d.challenge_end, w.chain.now()))


def test_happy_path_with_two_seats(cast_v2):
    w = cast_v2
    p1, p2 = w.providers[:2]
    before = w.assert_every_coin_accounted()
    wealth = {a: _wealth(w, a) for a in (w.client, p1, p2)}
    fees = dict.fromkeys(wealth, 0)

    def step(account, result):
        fees[account] += result.fee
        w.assert_every_coin_accounted()
        return result

    terms = w.terms()
    opened = w.as_(w.client).open_job(terms, SPEC)
    w.opened[opened.events[0].job_id] = terms
    jid = step(w.client, opened).events[0].job_id
    for p in (p1, p2):
        step(p, w.as_(p).accept(jid))
    for p, label in ((p1, "a"), (p2, "b")):
        step(p, w.as_(p).commit(jid, commitment_of(jid, p, trace_root(trace_of(label)), salt(p))))
    for p, label in ((p1, "a"), (p2, "b")):
        step(p, w.reveal(jid, p, trace_of(label)))
    _until_settlable(w, jid)
    result = w.as_(w.keeper).settle(jid)  # a keeper, no party of the job
    pay = PRICE // 2
    assert result.events == (
        StakeUnlocked(jid, p1, S), ProviderPaid(jid, p1, pay),
        StakeUnlocked(jid, p2, S), ProviderPaid(jid, p2, pay),
        StakeUnlocked(jid, w.client, w.settlement.bonds_of(jid).referee), ClientRefunded(jid, w.client, PRICE - 2 * pay), JobSettled(jid, JobStatus.FINALIZED, 2),
    )
    assert w.settlement.seat(jid, p1).status == SeatStatus.PAID
    after = w.assert_every_coin_accounted()
    assert after["balance"] == before["balance"] + PRICE and after["burned"] == before["burned"]
    for account in (w.client, p1, p2):
        step(account, w.as_(account).withdraw())
    assert w.assert_every_coin_accounted()["balance"] == before["balance"]
    assert _wealth(w, w.client) == wealth[w.client] - PRICE + (PRICE - 2 * pay) - fees[w.client]
    for p in (p1, p2):
        assert _wealth(w, p) == wealth[p] + pay - fees[p]
        assert w.settlement.node(p).locked == 0 and w.settlement.node(p).obligations == 0


def test_copy_the_root_loses_the_copier_its_stake_and_pays_the_honest_seat(cast_v2):
    """Section 12, copy-root: Q commits H's commitment (seen in TraceCommitted); it cannot open it."""
    w = cast_v2
    honest, copier = w.providers[:2]
    jid = w.seated_job()
    wealth = {a: _wealth(w, a) for a in (w.client, honest, copier)}
    copied = w.commit(jid, honest, trace_of("honest"))
    fee = w.as_(copier).commit(jid, copied).fee  # the same 32 bytes, under its own seat
    w.reveal(jid, honest, trace_of("honest"))
    # Now H's trace and salt are public (the reveal's calldata): the commitment still names H.
    with reverts("JobCommitmentMismatch"):
        fee += w.as_(copier).reveal(jid, trace_of("honest"), salt(honest)).fee
    with reverts("JobCommitmentMismatch"):
        w.as_(copier).reveal(jid, trace_of("honest"), salt(copier))
    _until_settlable(w, jid)
    books = w.ledger()
    result = w.as_(w.keeper).settle(jid)
    pay = PRICE // 2
    assert result.events == (
        StakeUnlocked(jid, honest, S), ProviderPaid(jid, honest, pay),
        SeatForfeited(jid, copier, ForfeitReason.NO_REVEAL),
        StakeSlashed(jid, copier, S, w.client, TO_CLIENT, BURNED),
        StakeUnlocked(jid, w.client, w.settlement.bonds_of(jid).referee), ClientRefunded(jid, w.client, PRICE - pay), JobSettled(jid, JobStatus.FINALIZED, 1),
    )
    assert w.ledger()["burned"] == books["burned"] + BURNED
    w.assert_every_coin_accounted()
    # The copier put in its lock and gas and gets nothing back: it loses more than its stake.
    assert _wealth(w, copier) < wealth[copier] - S
    assert w.settlement.node(copier).stake == NODE_STAKE - S
    # The honest seat is paid; the client gets the copier's share and w·S.
    assert w.settlement.credit_of(honest) == pay and w.settlement.node(honest).locked == 0
    assert w.settlement.credit_of(w.client) == PRICE - pay + TO_CLIENT


def test_commit_and_fall_silent_forfeits_and_refunds_the_client(cast_v2):
    """Section 12, silent seat: one seat commits and never reveals; K gets P + w·S back."""
    w = cast_v2
    silent = w.providers[0]
    jid = w.seated_job(seats=1)
    w.commit(jid, silent, trace_of("never shown"))
    reveal_by = w.settlement.deadlines(jid).reveal_by
    w.mine_at(reveal_by - 1)
    result = w.as_(w.keeper).close_seat(jid, silent)  # anyone, at revealBy
    assert result.events == (SeatForfeited(jid, silent, ForfeitReason.NO_REVEAL),
                             StakeSlashed(jid, silent, S, w.client, TO_CLIENT, BURNED))
    w.assert_every_coin_accounted()
    result = w.as_(w.keeper).settle(jid)
    assert result.events == (StakeUnlocked(jid, w.client, w.settlement.bonds_of(jid).referee), ClientRefunded(jid, w.client, PRICE), JobSettled(jid, JobStatus.REFUNDED, 0))
    assert w.settlement.credit_of(w.client) == PRICE + TO_CLIENT
    assert w.settlement.credit_of(silent) == 0 and w.settlement.node(silent).stake == NODE_STAKE - S
    w.assert_every_coin_accounted()


def test_silent_seat_next_to_an_honest_one_is_closed_by_settle(cast_v2):
    """settle closes a seat still owing its reveal; the client gets that seat's pay and w·S."""
    w = cast_v2
    honest, silent = w.providers[:2]
    jid = w.committed_job(("a", "b"))
    w.reveal(jid, honest, trace_of("a"))
    _until_settlable(w, jid)
    result = w.settlement.settle(jid)
    assert SeatForfeited(jid, silent, ForfeitReason.NO_REVEAL) in result.events
    assert w.settlement.credit_of(w.client) == PRICE - PRICE // 2 + TO_CLIENT
    assert w.settlement.credit_of(honest) == PRICE // 2
    w.assert_every_coin_accounted()


def test_a_seat_that_never_commits_forfeits_and_the_rest_reveal_at_commit_by(cast_v2):
    w = cast_v2
    honest, absent = w.providers[:2]
    jid = w.seated_job()
    w.commit(jid, honest, trace_of("a"))
    w.mine_at(w.settlement.job(jid).commit_by)
    w.reveal(jid, honest, trace_of("a"))
    _until_settlable(w, jid)
    result = w.as_(w.keeper).settle(jid)
    assert result.events[:4] == (
        StakeUnlocked(jid, honest, S), ProviderPaid(jid, honest, PRICE // 2),
        SeatForfeited(jid, absent, ForfeitReason.NO_COMMIT), StakeSlashed(jid, absent, S, w.client, TO_CLIENT, BURNED))
    assert w.settlement.job(jid).status == JobStatus.FINALIZED
    w.assert_every_coin_accounted()


def test_nobody_commits_everyone_forfeits_and_the_client_gets_everything(cast_v2):
    w = cast_v2
    jid = w.seated_job()
    _until_settlable(w, jid)
    result = w.as_(w.keeper).settle(jid)
    assert result.one(JobSettled) == JobSettled(jid, JobStatus.REFUNDED, 0)
    assert w.settlement.credit_of(w.client) == PRICE + 2 * TO_CLIENT
    w.assert_every_coin_accounted()


def test_a_job_that_never_fills_returns_every_lock_and_the_price(cast_v2):
    w = cast_v2
    p1 = w.providers[0]
    jid = w.open_job(providers_wanted=3)
    w.as_(p1).accept(jid)
    w.mine_at(w.settlement.job(jid).accept_by - 1)
    result = w.as_(w.keeper).settle(jid)
    assert result.events == (StakeUnlocked(jid, p1, S), StakeUnlocked(jid, w.client, w.settlement.bonds_of(jid).referee), ClientRefunded(jid, w.client, PRICE),
                             JobSettled(jid, JobStatus.REFUNDED, 0))
    assert w.settlement.node(p1).locked == 0 and w.settlement.node(p1).obligations == 0
    w.assert_every_coin_accounted()
    assert w.as_(w.client).withdraw().events == (Withdrawn(w.client, PRICE),)
    w.assert_every_coin_accounted()


def test_every_job_is_settlable_by_final_by(cast_v2):
    """finalBy, fixed at open, is after every deadline this slice can set, on the slowest path."""
    w = cast_v2
    jid = w.open_job()
    final_by = w.settlement.deadlines(jid).final_by
    w.mine_at(w.settlement.job(jid).accept_by - 3)
    for p in w.providers[:2]:
        w.as_(p).accept(jid)  # the last seat at the last second
    w.mine_at(w.settlement.job(jid).commit_by - 3)
    w.commit(jid, w.providers[0], trace_of("a"))
    w.commit(jid, w.providers[1], trace_of("b"))
    w.mine_at(w.settlement.deadlines(jid).reveal_by - 3)
    w.reveal(jid, w.providers[0], trace_of("a"))
    w.reveal(jid, w.providers[1], trace_of("b"))
    d = w.settlement.deadlines(jid)
    assert max(d.reveal_by, d.challenge_end) <= final_by
    w.mine_at(final_by - 1)
    w.as_(w.keeper).settle(jid)
    w.assert_every_coin_accounted()
