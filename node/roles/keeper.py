"""The keeper: every node pushes the jobs it knows of to their end on chain.

Every path out of a job must return every coin, and not only through the job's client:
a client that exited, crashed or lost its disk would leave its price and its providers'
stakes locked. The v1 contract lets anyone move a job on once its deadline passed:
``settle`` an Open job after ``acceptBy`` (unfilled: everyone refunded), an Accepted one
after ``commitBy`` (seated providers that never committed slashed, the client refunded),
a Committed one after ``challengeBy`` (honest providers paid); ``lapse`` a dispute whose
ruling deadline passed, after which the job can settle.

So every node runs a keeper (`run_keeper`, started by `node.runtime` with the roles):
each KEEPER_POLL seconds it reads the status on chain of each job in its database (any
role's row) not yet known final, and once the deadline of that status passed by
KEEPER_GRACE seconds (the job's own parties move first) it lapses the overdue disputes
and settles the job. A job found final, once that is `chain_watch.CONFIRMATIONS` blocks
deep (`ChainWatch.read_final`), is remembered with the block it was seen final at
(`Storage.mark_final`) and not read again, unless the chain reorganises from that block
or below (the watch's ``on_reorg``: `Storage.unmark_final_from`, and the job is kept
again). A job the chain does not know (lost with a restarted chain) is read again after
NONE_RECHECK seconds. After a pass that settled a job the node withdraws its own credit.
A restarted node's first pass is its reconciliation of which jobs are over.

Settings are module constants for now (not in the node's config).
"""
from __future__ import annotations

import logging
import time
import weakref
from typing import Any

import trio

from .chain import chain_failures, describe_chain_error, withdraw_credit
from .context import RoleContext, context_of
from .referee import RefereeDuty

log = logging.getLogger(__name__)

KEEPER_POLL = 5.0
KEEPER_GRACE = 5  # seconds after a deadline left to the job's own parties
NONE_RECHECK = 60  # seconds before a job the chain does not know is read again


_keepers: "weakref.WeakKeyDictionary[Any, Keeper]" = weakref.WeakKeyDictionary()


async def run_keeper(node: Any) -> None:
    """A node's keeper, for as long as the node runs: once its roles' context and chain are up."""
    while (ctx := context_of(node)) is None:
        await trio.sleep(0.2)
    await ctx.wait_chain()
    keeper = _keepers[node] = Keeper(ctx)
    ctx.chain_watch.on_reorg.append(keeper.on_reorg)
    await keeper.run()


def keeper_of(node: Any) -> "Keeper | None":
    """The node's keeper, once started (for tools and tests)."""
    return _keepers.get(node)


class Keeper:
    """Settles the node's jobs whose deadline passed; ``poll`` and ``grace`` in seconds."""

    def __init__(self, ctx: RoleContext, *, poll: float = KEEPER_POLL, grace: int = KEEPER_GRACE) -> None:
        self.ctx = ctx
        self.poll = poll
        self.grace = grace
        self.next_look: dict[bytes, float] = {}  # job id -> chain time before which nothing can be done
        self.settled: list[bytes] = []  # the jobs this keeper settled, in order
        self.passes = 0  # passes over the jobs done (for tools and tests: "a pass after X")

    async def run(self) -> None:
        while True:
            await self.keep_once()
            await trio.sleep(self.poll)

    async def keep_once(self) -> list[bytes]:
        """One pass over the jobs not known final; returns those it settled."""
        ctx = self.ctx
        chain = ctx.chain
        if chain is None or chain.stale:  # the chain watch is joining a new chain
            await trio.lowlevel.checkpoint()
            return []
        storage = ctx.storage
        try:
            now = max(await chain.run(chain.chain.now), int(time.time()))
        except chain_failures() as error:
            log.info("keeper: reading the chain's clock: %s", describe_chain_error(error))
            return []
        settled = []
        for job_id in await storage.run(storage.jobs_not_final):
            if self.next_look.get(job_id, 0) > now:
                continue
            try:
                if await self._keep(chain, job_id, now):
                    settled.append(job_id)
            except chain_failures() as error:
                log.info("keeper: job %s: %s", job_id.hex()[:12], describe_chain_error(error))
        if settled:
            await withdraw_credit(ctx)
        self.passes += 1
        return settled

    async def on_reorg(self, first: int) -> None:
        """Blocks from ``first`` on were replaced: what we saw final in them is read again."""
        storage = self.ctx.storage
        again = await storage.run(storage.unmark_final_from, first)
        for job_id in again:
            self.next_look.pop(job_id, None)
        if again:
            log.info("keeper: %d job(s) seen final in the replaced blocks kept again: %s", len(again),
                     ", ".join(j.hex()[:12] for j in again))

    async def _keep(self, chain: Any, job_id: bytes, now: int) -> bool:
        """Move one job on if its deadline passed; True when this call settled it."""
        from contracts import JobStatus

        s = chain.settlement
        storage = self.ctx.storage
        watch = self.ctx.chain_watch
        info, final_at = await watch.read_final(chain, job_id)
        if final_at is not None:
            await storage.run(storage.mark_final, job_id, info.status.name, final_at)
            return False
        if info.status in (JobStatus.FINALIZED, JobStatus.REFUNDED):
            return False  # not deep enough yet: read again next pass
        if info.status == JobStatus.NONE:
            self.next_look[job_id] = now + NONE_RECHECK
            return False
        # Every dispute is opened before challengeBy, so every ruling deadline is passed
        # by challengeBy + the ruling period: from then on, lapsing the rest is anyone's move.
        deadline = {JobStatus.OPEN: info.accept_by, JobStatus.ACCEPTED: info.commit_by,
                    JobStatus.COMMITTED: info.challenge_by,
                    JobStatus.DISPUTED: info.challenge_by + info.ruling_period}[info.status]
        if now < deadline + self.grace:
            self.next_look[job_id] = deadline + self.grace
            return False
        if info.status == JobStatus.DISPUTED:
            await RefereeDuty(self.ctx, lambda _: None).lapse_overdue(job_id)
            if (await chain.run(s.job, job_id)).status == JobStatus.DISPUTED:
                return False
        await chain.run(s.settle, job_id)
        # Said before the final status is stored: whoever sees it stored sees this too.
        self.settled.append(job_id)
        after, final_at = await watch.read_final(chain, job_id)
        final = after.status
        if final_at is not None:
            await storage.run(storage.mark_final, job_id, final.name, final_at)
        log.info("keeper: job %s settled on chain (%s): its %s deadline passed and nobody had settled it",
                 job_id.hex()[:12], final.name, info.status.name.lower())
        return True


__all__ = ["KEEPER_GRACE", "KEEPER_POLL", "Keeper", "keeper_of", "run_keeper"]
