"""accept, commit, reveal, closeSeat and settle of version 2: every guard, every deadline at and one tick before."""

from dataclasses import replace

import pytest

from contracts.settlement_v2 import (
    ForfeitReason,
    JobFilled,
    JobStatus,
    RevealOpened,
    SeatStatus,
    SeatTaken,
    TraceCommitted,
    TraceRevealed,
    commitment_of,
    trace_root,
)

from .settlement_world import reverts
from .settlement_world_v2 import INITIAL_STATE, PROVIDER_STAKE, STEPS, salt, trace_of

pytestmark = pytest.mark.settlement

UNKNOWN = b"\x01" * 32


# ---------------------------------------------------------------- accept


def test_accept_locks_the_stake_and_the_last_seat_fixes_commit_by(cast_v2):
    w = cast_v2
    jid = w.open_job()
    p1, p2 = w.providers[:2]
    assert w.as_(p1).accept(jid).events == (SeatTaken(jid, p1, PROVIDER_STAKE),)
    result = w.as_(p2).accept(jid)
    train = w.settlement.allowances_of(w.opened[jid]).train
    assert result.events == (SeatTaken(jid, p2, PROVIDER_STAKE), JobFilled(jid, w.chain.now() + train))
    assert w.settlement.job(jid).status == JobStatus.RUNNING
    assert w.settlement.seats(jid) == (p1, p2)
    assert w.settlement.node(p1).locked == PROVIDER_STAKE and w.settlement.seat(jid, p1).status == SeatStatus.TAKEN


def test_accept_guards(cast_v2):
    w = cast_v2
    p1, p2, p3 = w.providers
    with reverts("JobNotFound"):
        w.as_(p1).accept(UNKNOWN)
    jid = w.open_job()
    with reverts("JobClientCannotSit", account=w.client):
        w.as_(w.client).accept(jid)
    w.as_(p1).accept(jid)
    with reverts("JobAlreadySeated", account=p1):
        w.as_(p1).accept(jid)
    w.as_(p2).accept(jid)
    with reverts("JobWrongStatus", status=int(JobStatus.RUNNING)):
        w.as_(p3).accept(jid)


def test_accept_deadline_at_and_one_tick_before(cast_v2):
    w = cast_v2
    jid = w.open_job(providers_wanted=3)
    accept_by = w.settlement.job(jid).accept_by
    w.mine_at(accept_by - 2)
    w.as_(w.providers[0]).accept(jid)  # lands at acceptBy - 1
    with reverts("JobDeadlinePassed", deadline=accept_by):
        w.as_(w.providers[1]).accept(jid)  # lands at acceptBy


# ---------------------------------------------------------------- commit


def test_commit_records_the_commitment_and_the_last_one_opens_reveals(cast_v2):
    w = cast_v2
    jid = w.seated_job()
    p1, p2 = w.providers[:2]
    c1 = commitment_of(jid, p1, trace_root(trace_of("a")), salt(p1))
    assert w.as_(p1).commit(jid, c1).events == (TraceCommitted(jid, p1, c1),)
    assert w.settlement.seat(jid, p1).commitment == c1
    c2 = commitment_of(jid, p2, trace_root(trace_of("b")), salt(p2))
    result = w.as_(p2).commit(jid, c2)
    now = w.chain.now()
    assert result.events == (TraceCommitted(jid, p2, c2), RevealOpened(jid, now, now + 30))
    d = w.settlement.deadlines(jid)
    assert (d.reveal_from, d.reveal_by) == (now, now + 30)


def test_commit_guards(cast_v2):
    w = cast_v2
    p1 = w.providers[0]
    with reverts("JobNotFound"):
        w.as_(p1).commit(UNKNOWN, UNKNOWN)
    open_job = w.open_job(nonce=9)
    with reverts("JobWrongStatus", status=int(JobStatus.OPEN)):
        w.as_(p1).commit(open_job, UNKNOWN)
    jid = w.seated_job()
    with reverts("JobNotASeat", account=w.providers[2]):
        w.as_(w.providers[2]).commit(jid, UNKNOWN)
    with reverts("JobZeroCommitment"):
        w.as_(p1).commit(jid, b"\0" * 32)
    w.as_(p1).commit(jid, UNKNOWN)
    with reverts("JobAlreadyCommitted", seat=p1):
        w.as_(p1).commit(jid, UNKNOWN)


def test_commit_deadline_at_and_one_tick_before(cast_v2):
    w = cast_v2
    jid = w.seated_job()
    commit_by = w.settlement.job(jid).commit_by
    w.mine_at(commit_by - 2)
    w.as_(w.providers[0]).commit(jid, UNKNOWN)
    with reverts("JobDeadlinePassed", deadline=commit_by):
        w.as_(w.providers[1]).commit(jid, UNKNOWN)


# ---------------------------------------------------------------- reveal


def test_reveal_stores_the_root_and_a_challenge_window_from_the_reveal(cast_v2):
    w = cast_v2
    jid = w.committed_job()
    p1 = w.providers[0]
    result = w.reveal(jid, p1, trace_of("a"))
    replay = w.settlement.allowances_of(w.opened[jid]).replay
    challenge_by = w.chain.now() + replay
    assert result.events == (TraceRevealed(jid, p1, trace_root(trace_of("a")), challenge_by, tuple(trace_of("a"))),)
    seat = w.settlement.seat(jid, p1)
    assert (seat.status, seat.trace_root, seat.challenge_by) == (SeatStatus.REVEALED, trace_root(trace_of("a")),
                                                                 challenge_by)
    assert w.settlement.deadlines(jid).challenge_end == challenge_by


def test_no_trace_is_revealed_before_every_commitment_is_fixed(cast_v2):
    w = cast_v2
    jid = w.seated_job()
    p1 = w.providers[0]
    w.commit(jid, p1, trace_of("a"))
    commit_by = w.settlement.job(jid).commit_by
    with reverts("JobTooEarly", notBefore=commit_by):
        w.reveal(jid, p1, trace_of("a"))
    # With a seat that never commits, reveals open at commitBy for Δ.
    w.mine_at(commit_by - 1)
    w.reveal(jid, p1, trace_of("a"))


def test_reveal_deadline_at_and_one_tick_before(cast_v2):
    w = cast_v2
    jid = w.committed_job()
    reveal_by = w.settlement.deadlines(jid).reveal_by
    w.mine_at(reveal_by - 2)
    w.reveal(jid, w.providers[0], trace_of("a"))
    with reverts("JobDeadlinePassed", deadline=reveal_by):
        w.reveal(jid, w.providers[1], trace_of("b"))


def test_reveal_guards(cast_v2):
    w = cast_v2
    p1, p2, p3 = w.providers
    jid = w.seated_job()
    w.commit(jid, p1, trace_of("a"))
    w.mine_at(w.settlement.job(jid).commit_by)
    with reverts("JobNotASeat", account=p3):
        w.reveal(jid, p3, trace_of("c"))
    with reverts("JobNotCommitted", seat=p2):
        w.reveal(jid, p2, trace_of("b"))
    with reverts("JobWrongTraceLength", length=STEPS, expected=STEPS + 1):
        w.reveal(jid, p1, trace_of("a")[:-1])
    wrong_start = [UNKNOWN] + trace_of("a")[1:]
    with reverts("JobWrongInitialState", first=UNKNOWN):
        w.reveal(jid, p1, wrong_start)
    with reverts("JobCommitmentMismatch"):
        w.reveal(jid, p1, trace_of("another trace"))
    with reverts("JobCommitmentMismatch"):
        w.as_(p1).reveal(jid, trace_of("a"), salt("another salt"))
    w.reveal(jid, p1, trace_of("a"))
    with reverts("JobAlreadyRevealed", seat=p1):
        w.reveal(jid, p1, trace_of("a"))
    assert trace_of("a")[0] == INITIAL_STATE


# ---------------------------------------------------------------- closeSeat


def test_close_seat_guards_and_deadlines(cast_v2):
    w = cast_v2
    p1, p2, p3 = w.providers
    with reverts("JobNotFound"):
        w.as_(w.keeper).close_seat(UNKNOWN, p1)
    jid = w.seated_job()
    w.commit(jid, p1, trace_of("a"))
    commit_by = w.settlement.job(jid).commit_by
    with reverts("JobNotASeat", account=p3):
        w.as_(w.keeper).close_seat(jid, p3)
    w.mine_at(commit_by - 2)
    with reverts("JobTooEarly", notBefore=commit_by):
        w.as_(w.keeper).close_seat(jid, p2)
    w.as_(w.keeper).close_seat(jid, p2)  # at commitBy: p2 never committed
    assert w.settlement.seat(jid, p2).forfeit == ForfeitReason.NO_COMMIT
    with reverts("JobSeatForfeited", seat=p2):
        w.as_(w.keeper).close_seat(jid, p2)
    reveal_by = w.settlement.deadlines(jid).reveal_by
    w.mine_at(reveal_by - 2)
    with reverts("JobTooEarly", notBefore=reveal_by):
        w.as_(w.keeper).close_seat(jid, p1)
    w.as_(w.keeper).close_seat(jid, p1)
    assert w.settlement.seat(jid, p1).forfeit == ForfeitReason.NO_REVEAL


def test_a_revealed_seat_cannot_be_closed(cast_v2):
    w = cast_v2
    jid = w.revealed_job()
    with reverts("JobNothingToClose", seat=w.providers[0]):
        w.as_(w.keeper).close_seat(jid, w.providers[0])


# ---------------------------------------------------------------- settle


def test_settle_guards(cast_v2):
    w = cast_v2
    with reverts("JobNotFound"):
        w.settlement.settle(UNKNOWN)
    open_job = w.open_job(nonce=5)
    with reverts("JobTooEarly", notBefore=w.settlement.job(open_job).accept_by):
        w.settlement.settle(open_job)
    jid = w.revealed_job()
    d = w.settlement.deadlines(jid)
    w.mine_at(d.reveal_by - 2)
    with reverts("JobTooEarly", notBefore=d.reveal_by):
        w.settlement.settle(jid)
    w.mine_at(d.challenge_end - 2)
    with reverts("JobTooEarly", notBefore=d.challenge_end):
        w.settlement.settle(jid)
    w.settlement.settle(jid)  # at challengeEnd
    with reverts("JobWrongStatus", status=int(JobStatus.FINALIZED)):
        w.settlement.settle(jid)
    with reverts("JobWrongStatus", status=int(JobStatus.FINALIZED)):
        w.as_(w.keeper).close_seat(jid, w.providers[0])


def test_a_revealed_trace_is_read_back_from_its_event(cast_v2):
    # The log carries the trace, so a seat revealing through a contract of its own hides nothing.
    w = cast_v2
    jid = w.committed_job()
    w.reveal(jid, w.providers[0], trace_of("a"))
    (logged,) = [e for e in w.settlement.events() if isinstance(e.event, TraceRevealed)]
    assert w.settlement.revealed_trace(logged) == tuple(trace_of("a"))
    forged = replace(logged, event=replace(logged.event, trace=tuple(trace_of("b"))))
    with pytest.raises(ValueError, match="does not hash to the event's root"):
        w.settlement.revealed_trace(forged)
