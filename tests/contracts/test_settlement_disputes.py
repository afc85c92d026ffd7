"""Disputes on the embedded EVM: opening, the referee's verdict, lapse, and the slash split."""

import pytest
from .settlement_world import NODE_STAKE, PRICE, PROVIDER_STAKE, RULING_PERIOD, WINNER_SHARE_BPS, job_id, reverts, root

from contracts import (
    DisputeLapsed,
    DisputeOpened,
    DisputeRuled,
    DisputeStatus,
    JobAdvanced,
    JobStatus,
    Outcome,
    ProviderPaid,
    Role,
    StakeSlashed,
    StakeUnlocked,
)

pytestmark = pytest.mark.settlement

BURN = "0x000000000000000000000000000000000000dEaD"
TRANSCRIPT = bytes(range(32))
TO_WINNER = PROVIDER_STAKE * WINNER_SHARE_BPS // 10_000
BURNED = PROVIDER_STAKE - TO_WINNER


def _dispute(world, jid, challenger, respondent):
    result = world.as_(challenger).open_dispute(jid, respondent)
    return result.one(DisputeOpened).dispute_id, result


def _rule(world, dispute_id, outcome, referee=None):
    return world.as_(referee or world.client).rule(dispute_id, outcome, step=12, node=345, transcript_hash=TRANSCRIPT)


def test_provider_against_provider_challenger_wins(cast):
    jid = cast.committed_job()
    p1, p2 = cast.providers[:2]
    did, opened = _dispute(cast, jid, p1, p2)
    rule_by = cast.chain.now() + RULING_PERIOD
    assert opened.events == (
        DisputeOpened(did, jid, p1, p2, 0, rule_by),
        JobAdvanced(jid, JobStatus.DISPUTED),
    )
    burned_before = cast.chain.balance(BURN)
    ruled = _rule(cast, did, Outcome.CHALLENGER_WINS)
    assert ruled.events == (
        DisputeRuled(did, Outcome.CHALLENGER_WINS, 12, 345, TRANSCRIPT),
        StakeSlashed(jid, p2, PROVIDER_STAKE, p1, TO_WINNER, BURNED),
        JobAdvanced(jid, JobStatus.COMMITTED),
    )
    assert cast.chain.balance(BURN) - burned_before == BURNED
    dispute = cast.settlement.dispute(did)
    assert (dispute.status, dispute.outcome, dispute.step, dispute.node, dispute.transcript_hash) == (
        DisputeStatus.RULED, Outcome.CHALLENGER_WINS, 12, 345, TRANSCRIPT)
    assert cast.fund_of(p2) == (NODE_STAKE - PROVIDER_STAKE, 0, 0)
    assert cast.settlement.seat(jid, p2).forfeited

    cast.chain.advance_time(300)
    settled = cast.settlement.settle(jid)
    assert settled.all(ProviderPaid) == [ProviderPaid(jid, p1, PRICE)]
    assert cast.fund_of(p1) == (NODE_STAKE, 0, TO_WINNER + PRICE)
    assert cast.settlement.node(p2).obligations == 0


def test_provider_against_provider_respondent_wins(cast):
    jid = cast.committed_job()
    p1, p2 = cast.providers[:2]
    did, _ = _dispute(cast, jid, p1, p2)
    ruled = _rule(cast, did, Outcome.RESPONDENT_WINS)
    assert ruled.one(StakeSlashed) == StakeSlashed(jid, p1, PROVIDER_STAKE, p2, TO_WINNER, BURNED)
    assert cast.settlement.credit_of(p2) == TO_WINNER
    assert cast.settlement.seat(jid, p1).forfeited and not cast.settlement.seat(jid, p2).forfeited


def test_both_lose_burns_both_and_refunds_the_client(cast):
    jid = cast.committed_job()
    p1, p2 = cast.providers[:2]
    did, _ = _dispute(cast, jid, p2, p1)
    burned_before = cast.chain.balance(BURN)
    ruled = _rule(cast, did, Outcome.BOTH_LOSE)
    zero = "0x" + "00" * 20
    assert ruled.all(StakeSlashed) == [
        StakeSlashed(jid, p2, PROVIDER_STAKE, zero, 0, PROVIDER_STAKE),
        StakeSlashed(jid, p1, PROVIDER_STAKE, zero, 0, PROVIDER_STAKE),
    ]
    assert cast.chain.balance(BURN) - burned_before == 2 * PROVIDER_STAKE
    # The referee (here the client) gained nothing from the verdict itself.
    assert cast.settlement.credit_of(cast.client) == 0
    cast.chain.advance_time(300)
    settled = cast.settlement.settle(jid)
    assert settled.one(JobAdvanced).status == JobStatus.REFUNDED
    assert cast.settlement.credit_of(cast.client) == PRICE
    # Four nodes staked, two seat locks burned, the price owed back to the client.
    assert cast.settlement.balance() == 4 * NODE_STAKE - 2 * PROVIDER_STAKE + PRICE


def test_auditor_challenge_locks_a_bond_and_wins(cast):
    jid = cast.committed_job(roots=("same", "same"))
    p1 = cast.providers[0]
    did, opened = _dispute(cast, jid, cast.auditor, p1)
    assert opened.one(DisputeOpened).bond == PROVIDER_STAKE
    auditor = cast.settlement.node(cast.auditor)
    assert (auditor.locked, auditor.obligations) == (PROVIDER_STAKE, 1)
    ruled = _rule(cast, did, Outcome.CHALLENGER_WINS)
    assert ruled.one(StakeUnlocked) == StakeUnlocked(jid, cast.auditor, PROVIDER_STAKE)
    assert ruled.one(StakeSlashed) == StakeSlashed(jid, p1, PROVIDER_STAKE, cast.auditor, TO_WINNER, BURNED)
    assert cast.fund_of(cast.auditor) == (NODE_STAKE, 0, TO_WINNER)
    assert cast.settlement.node(cast.auditor).obligations == 0


def test_auditor_challenge_loses_its_bond(cast):
    jid = cast.committed_job(roots=("same", "same"))
    p1 = cast.providers[0]
    did, _ = _dispute(cast, jid, cast.auditor, p1)
    ruled = _rule(cast, did, Outcome.RESPONDENT_WINS)
    assert ruled.one(StakeSlashed) == StakeSlashed(jid, cast.auditor, PROVIDER_STAKE, p1, TO_WINNER, BURNED)
    assert cast.fund_of(cast.auditor) == (NODE_STAKE - PROVIDER_STAKE, 0, 0)
    assert cast.settlement.node(cast.auditor).obligations == 0
    assert cast.fund_of(p1) == (NODE_STAKE, PROVIDER_STAKE, TO_WINNER)  # its seat is still locked until settle


def test_a_second_loss_takes_nothing_more(cast):
    jid = cast.committed_job(roots=("a", "b"))
    p1, p2 = cast.providers[:2]
    d1, _ = _dispute(cast, jid, p1, p2)
    d2, _ = _dispute(cast, jid, cast.auditor, p2)
    _rule(cast, d1, Outcome.CHALLENGER_WINS)
    # The auditor's dispute is still open against a provider that already lost its lock.
    ruled = _rule(cast, d2, Outcome.CHALLENGER_WINS)
    assert ruled.all(StakeSlashed) == []
    assert cast.fund_of(cast.auditor) == (NODE_STAKE, 0, 0)
    assert cast.fund_of(p2) == (NODE_STAKE - PROVIDER_STAKE, 0, 0)
    with reverts("DisputeForfeited", party=p2):
        cast.as_(cast.providers[0]).open_dispute(jid, p2)


def test_open_dispute_guards(cast):
    jid = cast.seated_job(providers_wanted=3)
    p1, p2, p3 = cast.providers
    with reverts("JobWrongStatus", jobId=jid, status=JobStatus.ACCEPTED):
        cast.as_(p1).open_dispute(jid, p2)
    cast.as_(p1).commit(jid, root("a"))
    cast.as_(p2).commit(jid, root("a"))
    with reverts("JobNotFound"):
        cast.as_(p1).open_dispute(job_id("nothing"), p2)
    with reverts("DisputeSelf"):
        cast.as_(p1).open_dispute(jid, p1)
    with reverts("JobPartyIsReferee", account=cast.client):
        cast.as_(cast.client).open_dispute(jid, p1)
    with reverts("DisputeNotCommitted", party=p3):
        cast.as_(p1).open_dispute(jid, p3)
    with reverts("DisputeNotCommitted", party=p3):
        cast.as_(p3).open_dispute(jid, p1)
    with reverts("DisputeRootsAgree", traceRoot=root("a")):
        cast.as_(p1).open_dispute(jid, p2)
    with reverts("NodeNotRegistered", account=cast.outsider):
        cast.as_(cast.outsider).open_dispute(jid, p1)
    cast.as_(cast.outsider).register(b"\x05" * 32, Role.PROVIDER, stake=PROVIDER_STAKE)
    with reverts("NodeMissingRole", account=cast.outsider, role=Role.AUDITOR):
        cast.as_(cast.outsider).open_dispute(jid, p1)

    cast.as_(cast.auditor).open_dispute(jid, p1)
    with reverts("DisputeNotCommitted", party=cast.auditor):
        cast.as_(p1).open_dispute(jid, cast.auditor)  # only committed providers answer disputes
    cast.as_(p3).commit(jid, root("c"))
    cast.as_(p3).open_dispute(jid, p1)
    with reverts("DisputePairRepeated", challenger=p1, respondent=p3):
        cast.as_(p1).open_dispute(jid, p3)  # the same pair, the other way round
    with reverts("DisputePairRepeated", challenger=p3, respondent=p1):
        cast.as_(p3).open_dispute(jid, p1)

    cast.as_(cast.auditor).begin_unbonding()
    with reverts("NodeNotActive", account=cast.auditor):
        cast.as_(cast.auditor).open_dispute(jid, p2)
    cast.as_(cast.auditor).cancel_unbonding()
    challenge_by = cast.jobs[jid]["challenge_by"]
    cast.mine_at(challenge_by - 1)
    with reverts("JobDeadlinePassed", deadline=challenge_by):
        cast.as_(cast.auditor).open_dispute(jid, p2)


def test_auditor_bond_needs_free_stake(cast):
    jid = cast.committed_job(roots=("a", "b"))
    p1, p2 = cast.providers[:2]
    poor = cast.as_(cast.outsider)
    poor.register(b"\x05" * 32, Role.AUDITOR, stake=PROVIDER_STAKE)
    poor.open_dispute(jid, p1)
    with reverts("NodeInsufficientFreeStake", account=cast.outsider, free=0, needed=PROVIDER_STAKE):
        poor.open_dispute(jid, p2)


def test_rule_guards(cast):
    jid = cast.committed_job(referee=cast.referee)
    p1, p2 = cast.providers[:2]
    did, _ = _dispute(cast, jid, p1, p2)
    with reverts("DisputeNotFound", disputeId=99):
        _rule(cast, 99, Outcome.CHALLENGER_WINS, referee=cast.referee)
    for wrong in (cast.client, p1, p2, cast.outsider):
        with reverts("DisputeNotReferee", caller=wrong):
            _rule(cast, did, Outcome.CHALLENGER_WINS, referee=wrong)
    with reverts("DisputeInvalidOutcome"):
        _rule(cast, did, Outcome.NONE, referee=cast.referee)
    with reverts("JobDisputesOpen", openDisputes=1):
        cast.settlement.settle(jid)
    _rule(cast, did, Outcome.RESPONDENT_WINS, referee=cast.referee)
    with reverts("DisputeNotOpen", disputeId=did, status=DisputeStatus.RULED):
        _rule(cast, did, Outcome.CHALLENGER_WINS, referee=cast.referee)
    with reverts("DisputeNotOpen", disputeId=did, status=DisputeStatus.RULED):
        cast.settlement.lapse(did)


def test_ruling_deadline_then_lapse(cast):
    jid = cast.committed_job()
    p1, p2 = cast.providers[:2]
    did, _ = _dispute(cast, jid, cast.auditor, p2)
    rule_by = cast.settlement.dispute(did).rule_by
    cast.mine_at(rule_by - 2)
    with reverts("JobTooEarly", notBefore=rule_by):
        cast.settlement.lapse(did)  # mined at rule_by - 1: the referee still has a second
    with reverts("JobDeadlinePassed", deadline=rule_by):
        _rule(cast, did, Outcome.CHALLENGER_WINS)  # mined at rule_by: too late
    lapsed = cast.as_(cast.outsider).lapse(did)
    assert lapsed.events == (
        DisputeLapsed(did),
        StakeUnlocked(jid, cast.auditor, PROVIDER_STAKE),
        JobAdvanced(jid, JobStatus.COMMITTED),
    )
    assert cast.fund_of(cast.auditor) == (NODE_STAKE, 0, 0)
    assert cast.fund_of(p2) == (NODE_STAKE, PROVIDER_STAKE, 0)
    with reverts("DisputeNotOpen", disputeId=did, status=DisputeStatus.LAPSED):
        cast.settlement.lapse(did)
    with reverts("DisputeNotOpen", disputeId=did, status=DisputeStatus.LAPSED):
        _rule(cast, did, Outcome.CHALLENGER_WINS)
    # A lapsed dispute leaves both providers honest: both are paid.
    cast.chain.advance_time(300)
    assert len(cast.settlement.settle(jid).all(ProviderPaid)) == 2


def test_dispute_count_and_records(cast):
    jid = cast.committed_job()
    assert cast.settlement.dispute_count() == 0
    did, _ = _dispute(cast, jid, cast.providers[0], cast.providers[1])
    assert cast.settlement.dispute_count() == did == 1
    dispute = cast.settlement.dispute(did)
    assert (dispute.job_id, dispute.challenger, dispute.respondent, dispute.status, dispute.bond) == (
        jid, cast.providers[0], cast.providers[1], DisputeStatus.OPEN, 0)
    assert cast.settlement.job(jid).open_disputes == 1
