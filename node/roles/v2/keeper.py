"""The version-2 keeper: every node with settlement "2" pushes the jobs it is party to on
to their end (docs/economics.md §5), instead of version 1's keeper.

Which jobs: those the chain follower shows this node in, as the client (``JobOpened``), a
seat (``SeatTaken``), a game's opener (``GameOpened``) or a demand's demander or seat
(``DataDemanded``). They are kept in the database (`Storage.add_party_job`), so a
restarted node, whose follower resumes past those events, still keeps them.

What: each KEEPER_POLL seconds, for each such job not known final, by the chain's time
(never the wall clock) and KEEPER_GRACE seconds after a deadline (the job's own parties
move first):

- ``closeSeat`` for a seat that did not commit by ``commitBy`` or reveal by ``revealBy``;
- ``settle`` an Open job from ``acceptBy``, a Running one once it has no open item
  (game, claim, appeal, demand), its reveal window closed and every ``challengeBy`` passed;
- then withdraw this node's credit (`chain.withdraw_credit`).

It reads the job and its seats first and sends only what the contract allows then, so no
transaction of it must revert; a revert all the same (another node's settle mined first)
is one line and the job is read again next pass. A job seen Finalized or Refunded is
marked final once `chain_watch.CONFIRMATIONS` blocks deep (`Storage.mark_final`) and not
read again unless a reorganisation replaces the block it was seen final at.

It also starts the node's demand keeper (`demands.py`: a seat's witness call and draw,
anyone's ``failDemand`` and ``timeoutWitness``) and witness duty (`witness.py`), so every node
with a role plays its part of §7 whatever its roles.
"""
from __future__ import annotations

import logging
import weakref
from typing import Any

import trio

from ..chain import chain_failures, describe_chain_error, withdraw_credit
from ..chain_watch import CONFIRMATIONS
from ..context import context_of
from ..keeper import KEEPER_GRACE, KEEPER_POLL, NONE_RECHECK
from .demands import start_demand_keeper
from .witness import start_witness

log = logging.getLogger(__name__)

_keepers: "weakref.WeakKeyDictionary[Any, KeeperV2]" = weakref.WeakKeyDictionary()


async def run_keeper_v2(node: Any) -> None:
    """A settlement-2 node's keeper, for as long as the node runs."""
    while (ctx := context_of(node)) is None:
        await trio.sleep(0.2)
    keeper = _keepers[node] = KeeperV2(ctx)
    keeper.subscribe(ctx.follower)
    ctx.chain_watch.on_reorg.append(keeper.on_reorg)
    await ctx.wait_chain()
    start_demand_keeper(ctx)  # every node: the seat's and anyone's side of open demands (§7)
    start_witness(ctx)  # every node may be drawn to witness a demand
    await keeper.run()


def keeper_v2_of(node: Any) -> "KeeperV2 | None":
    """The node's version-2 keeper, once started (for tools and tests)."""
    return _keepers.get(node)


class KeeperV2:
    """Closes silent seats and settles the jobs this node is party to; ``poll`` and ``grace`` in seconds."""

    def __init__(self, ctx: Any, *, poll: float = KEEPER_POLL, grace: int = KEEPER_GRACE,
                 confirmations: int = CONFIRMATIONS) -> None:
        self.ctx = ctx
        self.poll = poll
        self.grace = grace
        self.confirmations = confirmations
        self.next_look: dict[bytes, int] = {}  # job id -> chain time before which nothing can be done
        self.closed: list[tuple[bytes, str]] = []  # (job, seat) this keeper closed, in order
        self.settled: list[bytes] = []  # the jobs this keeper settled, in order
        self.refused = 0  # transactions the chain refused (a race with another keeper)
        self.passes = 0
        self._final_since: dict[bytes, int] = {}  # job id -> the head at which it was first read final

    # -- learning the jobs -------------------------------------------------------------------

    def subscribe(self, follower: Any) -> None:
        from contracts.settlement_v2 import JobOpened, SeatTaken
        from contracts.settlement_v2_demands import DataDemanded
        from contracts.settlement_v2_games import GameOpened

        follower.subscribe(JobOpened, self._if_ours(lambda e: (e.client,)))
        follower.subscribe(SeatTaken, self._if_ours(lambda e: (e.seat,)))
        follower.subscribe(GameOpened, self._if_ours(lambda e: (e.opener,)))
        follower.subscribe(DataDemanded, self._if_ours(lambda e: (e.demander, e.seat)))

    def _if_ours(self, parties: Any) -> Any:
        async def remember(logged: Any) -> None:
            chain = self.ctx.chain
            if chain is not None and chain.account in parties(logged.event):
                storage = self.ctx.storage
                await storage.run(storage.add_party_job, logged.event.job_id, logged.block_number)
                self.next_look.pop(logged.event.job_id, None)
            else:
                await trio.lowlevel.checkpoint()
        remember.__qualname__ = "KeeperV2.remember"
        return remember

    # -- the loop ----------------------------------------------------------------------------

    async def run(self) -> None:
        while True:
            await self.keep_once()
            await trio.sleep(self.poll)

    async def keep_once(self) -> int:
        """One pass over the party jobs not known final; returns the transactions it sent."""
        chain = self.ctx.chain
        if chain is None or chain.stale:  # the chain watch is joining a new chain
            await trio.lowlevel.checkpoint()
            return 0
        storage = self.ctx.storage
        try:
            now = await chain.run(chain.chain.now)
        except chain_failures() as error:
            log.info("keeper: reading the chain's clock: %s", describe_chain_error(error))
            return 0
        sent, ended = 0, False
        for job_id in await storage.run(storage.party_jobs_not_final):
            if self.next_look.get(job_id, 0) > now:
                continue
            try:
                done, over = await self._keep(chain, job_id, now)
                sent, ended = sent + done, ended or over
            except chain_failures() as error:
                self.refused += 1
                log.info("keeper: job %s: %s", job_id.hex()[:12], describe_chain_error(error))
        if sent or ended:
            await withdraw_credit(self.ctx)
        self.passes += 1
        return sent

    async def on_reorg(self, first: int) -> None:
        """Blocks from ``first`` on were replaced: what we saw final in them is read again."""
        storage = self.ctx.storage
        for job_id in await storage.run(storage.unmark_final_from, first):
            self.next_look.pop(job_id, None)
        for job_id in [j for j, since in self._final_since.items() if since >= first]:
            del self._final_since[job_id]

    # -- one job -----------------------------------------------------------------------------

    async def _keep(self, chain: Any, job_id: bytes, now: int) -> tuple[int, bool]:
        """Move one job on where its deadlines passed: (transactions sent, whether it is over)."""
        from contracts.settlement_v2 import JobStatus

        s = chain.settlement
        info = await chain.run(s.job, job_id)
        if info.status == JobStatus.NONE:  # not (or no longer) on this chain
            self.next_look[job_id] = now + NONE_RECHECK
            return 0, False
        if info.status in (JobStatus.FINALIZED, JobStatus.REFUNDED):
            return 0, await self._final(chain, job_id, info.status)
        if info.status == JobStatus.OPEN:
            if now < info.accept_by + self.grace:
                self.next_look[job_id] = info.accept_by + self.grace
                return 0, False
            return await self._settle(chain, job_id, "acceptance closed unfilled"), False
        sent = await self._close_silent_seats(chain, job_id, info, now)
        deadlines = await chain.run(s.deadlines, job_id)
        ends = max(deadlines.reveal_by, info.challenge_end) + self.grace
        if info.open_items:  # a game, claim, appeal or demand first: its own keepers end it
            return sent, False
        if now < ends:
            upcoming = [t + self.grace for t in (info.commit_by, deadlines.reveal_by) if now < t + self.grace]
            self.next_look[job_id] = min(upcoming + [ends])
            return sent, False
        return sent + await self._settle(chain, job_id, "every window passed"), False

    async def _close_silent_seats(self, chain: Any, job_id: bytes, info: Any, now: int) -> int:
        from contracts.settlement_v2 import ForfeitReason, SeatStatus

        s = chain.settlement
        if now < info.commit_by + self.grace:
            return 0
        reveal_by = (await chain.run(s.deadlines, job_id)).reveal_by
        sent = 0
        for seat in await chain.run(s.seats, job_id):
            state = await chain.run(s.seat, job_id, seat)
            if state.forfeit != ForfeitReason.NONE:
                continue
            missed = {SeatStatus.TAKEN: "commit", SeatStatus.COMMITTED: "reveal"}.get(state.status)
            if missed is None or (missed == "reveal" and now < reveal_by + self.grace):
                continue
            await chain.run(s.close_seat, job_id, seat)
            self.closed.append((job_id, seat))
            sent += 1
            log.info("keeper: job %s: closed seat %s, which did not %s in time", job_id.hex()[:12], seat, missed)
        return sent

    async def _settle(self, chain: Any, job_id: bytes, why: str) -> int:
        await chain.run(chain.settlement.settle, job_id)
        self.settled.append(job_id)
        log.info("keeper: job %s settled on chain: %s", job_id.hex()[:12], why)
        return 1

    async def _final(self, chain: Any, job_id: bytes, status: Any) -> bool:
        """Mark the job final once its status is ``confirmations`` blocks deep; True when marked."""
        head = await chain.run(chain.chain.block_number)
        since = self._final_since.setdefault(job_id, head)
        if head < since + self.confirmations:
            return False
        storage = self.ctx.storage
        await storage.run(storage.mark_final, job_id, status.name, since)
        self._final_since.pop(job_id, None)
        return True


__all__ = ["KeeperV2", "keeper_v2_of", "run_keeper_v2"]
