"""The version-2 keeper on the real contract: it learns its jobs from the chain follower, sends
nothing before a deadline, closes a seat that never committed, settles, withdraws, and the
money is what docs/economics.md §5 says (the silent seat forfeits its lock, w·S of it and its
pay go to the client)."""
from __future__ import annotations

import os

import trio

from contracts import Role, Withdrawn
from contracts.settlement_v2 import ForfeitReason, JobOpened, JobStatus, commitment_of, trace_root
from node.config import Settings
from node.roles.chain import DEV_WINNER_SHARE_BPS, open_binding_sync
from node.roles.v2.follower import ChainFollower
from node.roles.v2.keeper import KeeperV2
from node.storage import Storage

from ..conftest import trio_test
from ...contracts.settlement_world_v2 import SPEC, default_terms, trace_of
from .test_follower import Bound, fresh_contract

NODE_STAKE = 5 * 10**18
CLIENT_KEY = b"\x0c" * 32
GRACE = 5


class Job:
    """A client node's job with two seats on a contract of its own, driven directly."""

    def __init__(self, label: str, *, seats: int = 2, **terms) -> None:
        settings = Settings(settlement="2", contract=fresh_contract())
        self.client = open_binding_sync(settings, f"{label} client".encode())
        self.providers = [open_binding_sync(settings, f"{label} provider {i}".encode()) for i in range(seats)]
        self.client.ensure_registered_sync(CLIENT_KEY, Role.CLIENT, 0)
        for i, p in enumerate(self.providers):
            p.ensure_registered_sync(bytes([i + 1]) * 32, Role.PROVIDER, NODE_STAKE)
        self.terms = default_terms(CLIENT_KEY, client_referees=False, **terms)
        self.job_id = self.client.settlement.open_job(self.terms, SPEC).one(JobOpened).job_id
        self.chain = self.client.chain

    def at(self, timestamp: int) -> None:
        """The chain's clock moved to at least ``timestamp`` (the next transaction lands after it).

        The shared embedded chain follows the wall clock: on a slow machine it may be there already."""
        if self.chain.now() < timestamp:
            self.chain.mine(timestamp)

    def withdrawn_by(self, account: str) -> int:
        return sum(e.event.amount for e in self.client.settlement.events(0)
                   if isinstance(e.event, Withdrawn) and e.event.account == account)


async def keeper_of_client(job: Job, storage: Storage, nursery) -> tuple[KeeperV2, ChainFollower]:
    bound = Bound(job.client, storage)
    follower = ChainFollower(bound, poll=0.05)
    keeper = KeeperV2(bound, poll=0.05, grace=GRACE)
    keeper.subscribe(follower)
    nursery.start_soon(follower.run)
    await follower.wait_caught_up()
    return keeper, follower


@trio_test(timeout=60)
async def test_the_keeper_closes_a_seat_that_never_committed_settles_and_the_money_follows_the_design(tmp_path):
    job = Job("keeper silent")
    honest, silent = job.providers
    s, jid, price, stake = job.client.settlement, job.job_id, job.terms.price, job.terms.provider_stake
    with Storage(tmp_path / "db") as storage:
        async with trio.open_nursery() as nursery:
            keeper, follower = await keeper_of_client(job, storage, nursery)
            for p in job.providers:
                p.settlement.accept(jid)
            trace, salt = trace_of("honest"), os.urandom(32)
            honest.settlement.commit(jid, commitment_of(jid, honest.account, trace_root(trace), salt))
            await follower.wait_caught_up()
            assert await keeper.keep_once() == 0  # before commitBy: nothing may be sent
            commit_by = s.job(jid).commit_by
            job.at(commit_by)
            honest.settlement.reveal(jid, trace, salt)  # the reveal window opened at commitBy
            assert await keeper.keep_once() == 0  # within the grace the parties have
            job.at(commit_by + GRACE)
            assert await keeper.keep_once() == 1  # closeSeat: the silent seat never committed
            assert keeper.closed == [(jid, silent.account)]
            assert s.seat(jid, silent.account).forfeit == ForfeitReason.NO_COMMIT
            assert await keeper.keep_once() == 0 and keeper.settled == []  # the honest trace's replay window runs
            job.at(s.job(jid).challenge_end + GRACE)
            assert await keeper.keep_once() == 1
            assert keeper.settled == [jid] and s.job(jid).status == JobStatus.FINALIZED
            await keeper.keep_once()  # seen final
            assert storage.party_jobs_not_final() == []
            nursery.cancel_scope.cancel()
    assert keeper.refused == 0  # it sent nothing that reverted
    pay = price // 2
    winner_share = stake * DEV_WINNER_SHARE_BPS // 10_000
    # The client put in P: it paid one seat's pay and got back the rest, and w·S of the silent lock.
    assert job.withdrawn_by(job.client.account) == price - pay + winner_share
    assert s.credit_of(job.client.account) == 0
    # The silent seat ends with less than it put in: its lock is gone, it earned nothing.
    assert s.node(silent.account).stake == NODE_STAKE - stake and s.credit_of(silent.account) == 0
    # The honest seat keeps its stake and is owed its pay.
    assert s.node(honest.account).stake == NODE_STAKE and s.credit_of(honest.account) == pay


@trio_test(timeout=60)
async def test_an_unfilled_job_is_refunded_from_acceptby_and_nothing_is_sent_before(tmp_path):
    job = Job("keeper unfilled")
    s, jid, price = job.client.settlement, job.job_id, job.terms.price
    with Storage(tmp_path / "db") as storage:
        async with trio.open_nursery() as nursery:
            keeper, follower = await keeper_of_client(job, storage, nursery)
            job.providers[0].settlement.accept(jid)  # one seat of two
            await follower.wait_caught_up()
            accept_by = s.job(jid).accept_by
            job.at(accept_by - 2)
            assert await keeper.keep_once() == 0
            job.at(accept_by + GRACE)
            assert await keeper.keep_once() == 1 and s.job(jid).status == JobStatus.REFUNDED
            nursery.cancel_scope.cancel()
    assert keeper.refused == 0
    assert job.withdrawn_by(job.client.account) == price
    taken = job.providers[0].account
    assert s.node(taken).stake == NODE_STAKE and s.credit_of(taken) == 0  # its lock unlocked, nothing lost
