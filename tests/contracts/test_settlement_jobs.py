"""Jobs on the embedded EVM: open, accept, commit, settle; every guard and every deadline."""

import pytest
from .settlement_world import (
    ACCEPT_WINDOW,
    CHALLENGE_WINDOW,
    COMMIT_WINDOW,
    NODE_STAKE,
    PRICE,
    PROVIDER_STAKE,
    RULING_PERIOD,
    WINNER_SHARE_BPS,
    job_id,
    reverts,
    root,
)

from contracts import (
    ETHER,
    ClientRefunded,
    JobAdvanced,
    JobOpened,
    JobStatus,
    ProviderAccepted,
    ProviderPaid,
    Role,
    StakeSlashed,
    StakeUnlocked,
    TraceCommitted,
)

pytestmark = pytest.mark.settlement

BURN = "0x000000000000000000000000000000000000dEaD"


def _open(world, jid=None, **overrides):
    now = world.chain.now()
    arguments = dict(
        price=PRICE,
        providers_wanted=2,
        provider_stake=PROVIDER_STAKE,
        accept_by=now + ACCEPT_WINDOW,
        commit_by=now + COMMIT_WINDOW,
        challenge_by=now + CHALLENGE_WINDOW,
        ruling_period=RULING_PERIOD,
    )
    arguments.update(overrides)
    return world.as_(world.client).open_job(jid or job_id("job"), **arguments)


def test_open_job_escrows_the_price(world):
    now = world.chain.now()
    result = _open(world)
    jid = job_id("job")
    assert result.events == (
        JobOpened(jid, world.client, world.client, PRICE, PROVIDER_STAKE, 2,
                  now + ACCEPT_WINDOW, now + COMMIT_WINDOW, now + CHALLENGE_WINDOW, RULING_PERIOD),
    )
    job = world.settlement.job(jid)
    assert (job.client, job.referee, job.price, job.status) == (world.client, world.client, PRICE, JobStatus.OPEN)
    assert world.settlement.balance() == PRICE


def test_open_job_with_a_named_referee(world):
    _open(world, referee=world.referee)
    assert world.settlement.job(job_id("job")).referee == world.referee


def test_open_job_guards(world):
    now = world.chain.now()
    with reverts("JobZeroId"):
        _open(world, b"\0" * 32)
    with reverts("JobZeroPrice"):
        _open(world, price=0)
    with reverts("JobInvalidProviderCount", providersWanted=0):
        _open(world, providers_wanted=0)
    with reverts("JobInvalidProviderCount", providersWanted=17):
        _open(world, providers_wanted=17)
    with reverts("JobZeroProviderStake"):
        _open(world, provider_stake=0)
    with reverts("JobDeadlinesOutOfOrder"):
        _open(world, accept_by=now)  # already past by the time it is mined
    with reverts("JobDeadlinesOutOfOrder"):
        _open(world, commit_by=now + ACCEPT_WINDOW)
    with reverts("JobDeadlinesOutOfOrder"):
        _open(world, challenge_by=now + COMMIT_WINDOW)
    with reverts("JobInvalidRulingPeriod", rulingPeriod=0):
        _open(world, ruling_period=0)
    with reverts("JobInvalidRulingPeriod", rulingPeriod=365 * 24 * 3600 + 1):
        _open(world, ruling_period=365 * 24 * 3600 + 1)
    _open(world)
    with reverts("JobExists", jobId=job_id("job")):
        _open(world)
    assert world.settlement.balance() == PRICE


def test_accept_locks_stake_and_fills_the_job(cast):
    jid = cast.open_job()
    p1, p2 = cast.providers[:2]
    first = cast.as_(p1).accept(jid)
    assert first.events == (ProviderAccepted(jid, p1, PROVIDER_STAKE),)
    node = cast.settlement.node(p1)
    assert (node.locked, node.obligations, node.free_stake) == (PROVIDER_STAKE, 1, NODE_STAKE - PROVIDER_STAKE)
    last = cast.as_(p2).accept(jid)
    assert last.events == (ProviderAccepted(jid, p2, PROVIDER_STAKE), JobAdvanced(jid, JobStatus.ACCEPTED))
    assert cast.settlement.providers(jid) == (p1, p2)
    assert cast.settlement.seat(jid, p2).accepted
    with reverts("JobWrongStatus", jobId=jid, status=JobStatus.ACCEPTED):
        cast.as_(cast.providers[2]).accept(jid)


def test_accept_guards(cast):
    jid = cast.open_job(referee=cast.referee)
    with reverts("JobNotFound", jobId=job_id("nothing")):
        cast.as_(cast.providers[0]).accept(job_id("nothing"))
    with reverts("JobPartyIsReferee", account=cast.client):
        cast.as_(cast.client).accept(jid)
    with reverts("JobPartyIsReferee", account=cast.referee):
        cast.as_(cast.referee).accept(jid)
    with reverts("NodeNotRegistered", account=cast.outsider):
        cast.as_(cast.outsider).accept(jid)
    with reverts("NodeMissingRole", account=cast.auditor, role=Role.PROVIDER):
        cast.as_(cast.auditor).accept(jid)
    cast.as_(cast.providers[0]).accept(jid)
    with reverts("JobAlreadyAccepted", provider=cast.providers[0]):
        cast.as_(cast.providers[0]).accept(jid)
    # A node registered with the minimum stake has room for one seat only.
    small = cast.as_(cast.outsider)
    small.register(b"\x07" * 32, Role.PROVIDER, stake=PROVIDER_STAKE)
    small.accept(jid)
    with reverts("NodeInsufficientFreeStake", account=cast.outsider, free=0, needed=PROVIDER_STAKE):
        small.accept(cast.open_job("second"))


def test_accept_after_the_deadline_is_refused(cast):
    jid = cast.open_job()
    accept_by = cast.jobs[jid]["accept_by"]
    cast.mine_at(accept_by - 2)
    cast.as_(cast.providers[0]).accept(jid)  # mined at accept_by - 1
    with reverts("JobDeadlinePassed", deadline=accept_by):
        cast.as_(cast.providers[1]).accept(jid)  # mined at accept_by


def test_commit_records_the_root(cast):
    jid = cast.seated_job()
    p1, p2 = cast.providers[:2]
    first = cast.as_(p1).commit(jid, root("a"))
    assert first.events == (TraceCommitted(jid, p1, root("a")), JobAdvanced(jid, JobStatus.COMMITTED))
    assert cast.as_(p2).commit(jid, root("b")).events == (TraceCommitted(jid, p2, root("b")),)
    seat = cast.settlement.seat(jid, p1)
    assert (seat.trace_root, seat.committed, seat.forfeited) == (root("a"), True, False)
    assert cast.settlement.job(jid).commitments == 2


def test_commit_guards(cast):
    jid = cast.open_job(providers_wanted=2)
    cast.as_(cast.providers[0]).accept(jid)
    with reverts("JobWrongStatus", jobId=jid, status=JobStatus.OPEN):
        cast.as_(cast.providers[0]).commit(jid, root("a"))
    cast.as_(cast.providers[1]).accept(jid)
    with reverts("JobNotAProvider", account=cast.providers[2]):
        cast.as_(cast.providers[2]).commit(jid, root("a"))
    with reverts("JobZeroTraceRoot"):
        cast.as_(cast.providers[0]).commit(jid, b"\0" * 32)
    cast.as_(cast.providers[0]).commit(jid, root("a"))
    with reverts("JobAlreadyCommitted", provider=cast.providers[0]):
        cast.as_(cast.providers[0]).commit(jid, root("other"))
    commit_by = cast.jobs[jid]["commit_by"]
    cast.mine_at(commit_by - 1)
    with reverts("JobDeadlinePassed", deadline=commit_by):
        cast.as_(cast.providers[1]).commit(jid, root("b"))
    with reverts("JobNotFound"):
        cast.as_(cast.providers[1]).commit(job_id("nothing"), root("b"))


def test_settle_pays_honest_providers_and_returns_the_remainder(cast):
    jid = cast.committed_job(roots=("same", "same"))
    p1, p2 = cast.providers[:2]
    cast.mine_at(cast.jobs[jid]["challenge_by"] - 2)
    with reverts("JobTooEarly", notBefore=cast.jobs[jid]["challenge_by"]):
        cast.settlement.settle(jid)
    result = cast.as_(cast.outsider).settle(jid)  # anyone may settle
    share = PRICE // 2
    assert result.events == (
        JobAdvanced(jid, JobStatus.FINALIZED),
        StakeUnlocked(jid, p1, PROVIDER_STAKE),
        ProviderPaid(jid, p1, share),
        StakeUnlocked(jid, p2, PROVIDER_STAKE),
        ProviderPaid(jid, p2, share),
        ClientRefunded(jid, cast.client, PRICE - 2 * share),
    )
    for p in (p1, p2):
        assert cast.fund_of(p) == (NODE_STAKE, 0, share)
        assert cast.settlement.node(p).obligations == 0
    assert cast.settlement.credit_of(cast.client) == 1
    with reverts("JobWrongStatus", jobId=jid, status=JobStatus.FINALIZED):
        cast.settlement.settle(jid)


def test_settle_refunds_a_job_whose_seats_never_filled(cast):
    jid = cast.open_job(providers_wanted=3)
    cast.as_(cast.providers[0]).accept(jid)
    with reverts("JobTooEarly", notBefore=cast.jobs[jid]["accept_by"]):
        cast.settlement.settle(jid)
    cast.mine_at(cast.jobs[jid]["accept_by"])
    result = cast.settlement.settle(jid)
    assert result.events == (
        JobAdvanced(jid, JobStatus.REFUNDED),
        StakeUnlocked(jid, cast.providers[0], PROVIDER_STAKE),
        ClientRefunded(jid, cast.client, PRICE),
    )
    # Not the provider's fault: nothing slashed.
    assert cast.fund_of(cast.providers[0]) == (NODE_STAKE, 0, 0)


def test_settle_slashes_providers_that_never_committed(cast):
    jid = cast.seated_job()
    with reverts("JobTooEarly", notBefore=cast.jobs[jid]["commit_by"]):
        cast.settlement.settle(jid)
    cast.mine_at(cast.jobs[jid]["commit_by"])
    burned_before = cast.chain.balance(BURN)
    result = cast.settlement.settle(jid)
    to_client = PROVIDER_STAKE * WINNER_SHARE_BPS // 10_000
    assert result.all(StakeSlashed) == [
        StakeSlashed(jid, p, PROVIDER_STAKE, cast.client, to_client, PROVIDER_STAKE - to_client)
        for p in cast.providers[:2]
    ]
    assert result.one(JobAdvanced).status == JobStatus.REFUNDED
    assert result.one(ClientRefunded).amount == PRICE
    assert cast.settlement.credit_of(cast.client) == PRICE + 2 * to_client
    assert cast.chain.balance(BURN) - burned_before == 2 * (PROVIDER_STAKE - to_client)
    assert cast.fund_of(cast.providers[0]) == (NODE_STAKE - PROVIDER_STAKE, 0, 0)
    assert cast.settlement.seat(jid, cast.providers[0]).forfeited


def test_settle_pays_the_committed_and_slashes_the_no_show(cast):
    jid = cast.seated_job()
    p1, p2 = cast.providers[:2]
    cast.as_(p1).commit(jid, root("a"))
    cast.mine_at(cast.jobs[jid]["challenge_by"])
    result = cast.settlement.settle(jid)
    assert result.one(ProviderPaid) == ProviderPaid(jid, p1, PRICE)
    assert result.one(StakeSlashed).loser == p2
    assert cast.settlement.job(jid).status == JobStatus.FINALIZED
    assert cast.fund_of(p1) == (NODE_STAKE, 0, PRICE)


def test_balance_matches_what_is_owed_after_a_settlement(cast):
    jid = cast.committed_job(roots=("same", "same"))
    cast.chain.advance_time(CHALLENGE_WINDOW)
    cast.settlement.settle(jid)
    owed = sum(cast.settlement.node(a).stake + cast.settlement.credit_of(a)
               for a in cast.providers + [cast.auditor, cast.client])
    assert cast.settlement.balance() == owed == 4 * NODE_STAKE + PRICE


def test_settle_with_every_seat_fits_its_gas_limit(cast):
    """The worst settle: MAX_PROVIDERS seats, each paid into a fresh credit slot."""
    chain = cast.chain
    seats = [chain.new_account(10 * ETHER) for _ in range(16)]
    for i, account in enumerate(seats):
        cast.as_(account).register(bytes([i + 1]) * 32, Role.PROVIDER, stake=ETHER)
    jid = cast.open_job("full", providers_wanted=16)
    for account in seats:
        cast.as_(account).accept(jid)
    for account in seats:
        cast.as_(account).commit(jid, root("agreed"))
    chain.advance_time(CHALLENGE_WINDOW)
    result = cast.settlement.settle(jid)
    assert len(result.all(ProviderPaid)) == 16
    assert result.gas_used < cast.settlement.gas_limits["settle"] * 0.8
