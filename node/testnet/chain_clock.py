"""The chain clock of an in-process settlement-2 testnet: the embedded chain moved to the next
deadline that matters as soon as no party has work in flight, so windows that nobody needs
(a reveal nobody will send, a game's appeal window, a job's challenge window) pass in the time
their keepers take to act, not in the chain's seconds.

The embedded chain follows the wall clock, so the clock only ever speeds a run up: a step it
does not take is waited out. It takes one when, for ``quiet`` seconds,

- no block was mined (every transaction and every jump mines one; the parties react to
  blocks through their followers and pollers, and a reaction is a transaction),
- no worker thread call ran ``LONG_WORK`` seconds or more (training, a replay, a judgement,
  the lists of a game: the roles' computations all run in trio's worker threads), and
- no job is still being filled or trained: a job not Running yet, or a seat of it not
  committed before ``commitBy`` (its seats are computing their traces),

and it moves the chain to the earliest of these times still ahead, read from the contract:

  a job      commitBy, revealBy and challengeEnd, each + KEEPER_GRACE (when the keepers close a
             silent seat or settle); finalBy
  a claim    answerBy, pickUntil, ruleBy, appealBy, appealRuleBy, each + 1 (the game keepers'
             timeouts); a referee draw armed and waiting for DRAW_DELAY blocks: one block
  a demand   its deadline + Δ while it is open (failDemand), + 1 in the witness stages

A party that waits on purpose for the last seconds of a window (the late revealer, at
revealBy − LATE_BY) has no work in flight: the clock passes the deadline under it.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

import trio

log = logging.getLogger(__name__)

QUIET = 2.0      # seconds without a block or a long computation before the chain is moved
LONG_WORK = 0.5  # seconds a worker thread call runs before it counts as work in flight
SAMPLE = 0.1     # seconds between two looks at the worker threads


@dataclass
class Stop:
    """A time the clock may move the chain to, and why (for the run's log and report)."""

    at: int
    why: str


@dataclass
class ChainClock:
    """Moves the embedded chain of ``network`` (an `InProcessNetwork` on settlement 2)."""

    network: Any
    quiet: float = QUIET
    jumps: list[dict[str, Any]] = field(default_factory=list)  # each move: when, how far, why

    async def run(self) -> None:
        while True:
            await self.wait_quiet()
            stop = await self.next_stop()
            if stop is None:
                continue
            now = await self._read(lambda: self._chain().now())
            if stop.at <= now:
                continue
            await self._read(lambda: self._chain().advance_time(stop.at - now))
            self.jumps.append({"at_s": round(self.network.now(), 2), "seconds": stop.at - now, "why": stop.why})
            log.info("chain clock: %+d s to %s", stop.at - now, stop.why)

    # -- work in flight ------------------------------------------------------------------------

    async def wait_quiet(self) -> None:
        """Until ``quiet`` seconds passed with no block, no long computation and no job in training."""
        limiter = trio.to_thread.current_default_thread_limiter()
        seen: dict[Any, float] = {}  # a worker thread call -> when it was first seen running
        block = await self._read(lambda: self._chain().block_number())
        since = time.monotonic()
        while True:
            await trio.sleep(SAMPLE)
            now = time.monotonic()
            running = set(limiter.statistics().borrowers)
            seen = {call: seen.get(call, now) for call in running}
            head = await self._read(lambda: self._chain().block_number())
            if head != block or any(now - first >= LONG_WORK for first in seen.values()):
                block, since = head, now
            elif now - since >= self.quiet and not await self._training():
                return

    async def _training(self) -> bool:
        """Whether a job is still being filled, or a seat of it computes its trace before ``commitBy``."""
        from contracts.settlement_v2 import JobStatus, SeatStatus

        s = self.network._settlement

        def read() -> bool:
            now = s.chain.now()
            for job in self.network.ledger.jobs.values():
                if job.settled:
                    continue
                info = s.job(job.job_id)
                if info.status == JobStatus.OPEN and now < info.accept_by:
                    return True
                if info.status == JobStatus.RUNNING and now < info.commit_by and any(
                        s.seat(job.job_id, seat).status == SeatStatus.TAKEN for seat in job.seats):
                    return True
            return False

        return await self._read(read)

    # -- deadlines -----------------------------------------------------------------------------

    async def next_stop(self) -> Stop | None:
        """The earliest time ahead at which a party's move becomes due, or None."""
        return await self._read(self.next_stop_sync)

    def next_stop_sync(self) -> Stop | None:
        stops = self.stops_sync()
        now = self._chain().now()
        ahead = [stop for stop in stops if stop.at > now]
        return min(ahead, key=lambda stop: stop.at) if ahead else None

    def stops_sync(self) -> list[Stop]:
        """Every deadline of the open jobs, claims and demands, as the time its move is due."""
        from contracts.settlement_v2 import JobStatus, SeatStatus, ForfeitReason
        from contracts.settlement_v2_demands import DemandStage
        from contracts.settlement_v2_games import ClaimStatus
        from contracts.settlement_v2_referees import AppealStage
        from protocol.economics import DRAW_DELAY

        from ..roles.keeper import KEEPER_GRACE

        s = self.network._settlement
        ledger = self.network.ledger
        margin = s.chain_settings().margin
        stops: list[Stop] = []
        for job in ledger.jobs.values():
            if job.settled:
                continue
            info = s.job(job.job_id)
            if info.status not in (JobStatus.OPEN, JobStatus.RUNNING):
                continue
            name = job.job_id.hex()[:12]
            if info.status == JobStatus.OPEN:
                stops.append(Stop(info.accept_by + KEEPER_GRACE, f"job {name}: acceptBy"))
                continue
            deadlines = s.deadlines(job.job_id)
            seats = [s.seat(job.job_id, seat) for seat in job.seats]
            waiting = [x.status for x in seats if x.forfeit == ForfeitReason.NONE]
            if SeatStatus.TAKEN in waiting:
                stops.append(Stop(info.commit_by + KEEPER_GRACE, f"job {name}: commitBy"))
            if SeatStatus.COMMITTED in waiting:
                stops.append(Stop(deadlines.reveal_by + KEEPER_GRACE, f"job {name}: revealBy"))
            settle_at = max(deadlines.reveal_by, info.challenge_end) + KEEPER_GRACE
            stops += [Stop(settle_at, f"job {name}: challengeEnd"), Stop(info.final_by, f"job {name}: finalBy")]
        head = self._chain().block_number()
        for claim_id in ledger.open_claims:
            claim = s.claim(claim_id)
            if claim.status != ClaimStatus.OPEN:
                continue
            name = claim_id.hex()[:12]
            for label in ("answer_by", "pick_until", "rule_by"):
                if getattr(claim, label):
                    stops.append(Stop(getattr(claim, label) + 1, f"claim {name}: {label}"))
            ruling = s.ruling(claim_id)
            if ruling.appeal_by:
                stops.append(Stop(ruling.appeal_by + 1, f"claim {name}: appeal_by"))
            if ruling.appeal == AppealStage.OPEN and ruling.appeal_rule_by:
                stops.append(Stop(ruling.appeal_rule_by + 1, f"claim {name}: appeal_rule_by"))
            if ruling.armed_block and head < ruling.armed_block + DRAW_DELAY:
                stops.append(Stop(self._chain().now() + 1, f"claim {name}: a block for its referee draw"))
        for demand in ledger.demands.values():
            if demand.outcome != "open":
                continue
            info = s.demand(demand.demand_id)
            if info.stage in (DemandStage.NONE, DemandStage.RELEASED, DemandStage.SERVED, DemandStage.FAILED,
                              DemandStage.VOID):
                continue
            due = info.deadline + (margin if info.stage == DemandStage.OPEN else 0) + 1
            stops.append(Stop(due, f"demand {demand.demand_id.hex()[:12]}: {info.stage.name.lower()} deadline"))
        return stops

    # -- the chain -----------------------------------------------------------------------------

    def _chain(self) -> Any:
        return self.network._binding.chain

    async def _read(self, fn: Any) -> Any:
        return await self.network._binding.run(fn)


async def run_chain_clock(network: Any) -> None:
    """An in-process network's ``clock`` task: a `ChainClock` kept on the network for its report."""
    network.chain_clock = ChainClock(network)
    await network.chain_clock.run()


__all__ = ["ChainClock", "LONG_WORK", "QUIET", "Stop", "run_chain_clock"]
