"""Refereeing: a dispute of a job this node referees, from its opening to the verdict on chain.

The referee of a job is named in its terms and on chain; today it is the job's client,
which hands its jobs to a `RefereeDuty` as `RefereedJob`s (the terms, how to load the
training program, and where the verdicts go). For each dispute the duty

  opens    checks the challenger's ``OpenDispute`` (``/gavel/dispute/1.0.0``) against the
           chain: the dispute is open, of this job, between these two parties, over the
           roots they committed; else the request is refused;
  runs     the game to its verdict (`disputes.RefereeSession`, the trio shell of
           `protocol.Referee`), every accepted move logged in the dispute's row;
  records  the verdict on chain with ``rule`` (slashing the loser), announces it on the
           verdicts topic, and hands its summary to the job's owner (``on_ruled``).

A restarted node resumes the sessions whose verdict is not recorded (`resume`); a dispute
nobody ruled by its deadline is closed on chain (`lapse_overdue`).

The duty knows no client: it asks ``jobs(job_id)`` for what it referees. Drawn referees
(docs/economics.md §9 and §14.2 step 3: ``ROLE_REFEREE``, appeals, first-level rulings
when the client cannot rule) are a second source of jobs, from chain events, handed to
the same duty; the on-chain checks of `_check_on_chain`, the recording of `_record` and
`lapse_overdue` are where the claim game's ``rule``, transcripts and referee timeouts go.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

import trio
from libp2p.peer.id import ID

from protocol import Envelope, OpenDispute, Referee, RemoteProtocolError, SignedJobTerms, dispute_id_of

from ..framing import unpack
from ..streams import RequestRefused
from .chain import chain_failures, describe_chain_error
from .context import RoleContext
from .disputes import RefereeSession, first_seq, outcome_of
from .job_protocols import TOPIC_VERDICTS

log = logging.getLogger(__name__)


@dataclass
class RefereedJob:
    """A job as its owner hands it to the referee."""

    terms: SignedJobTerms
    sessions: list[RefereeSession]  # the job's games, in the order opened: the owner's list, the duty adds to it
    training: Callable[[], Awaitable[Any]]  # the job's training program (loaded on first need)
    on_ruled: Callable[[dict], Awaitable[None]]  # a verdict's summary, once recorded on chain (or not)
    changed: Callable[[], None]  # a game of the job ended, one way or another

    @property
    def job_id(self) -> bytes:
        return self.terms.job_id


class RefereeDuty:
    """The disputes this node referees, for every job ``jobs`` hands it."""

    def __init__(self, ctx: RoleContext, jobs: Callable[[bytes], RefereedJob | None]) -> None:
        self.ctx = ctx
        self.jobs = jobs

    # -- opening -----------------------------------------------------------------------

    async def on_open(self, peer: ID, envelope: Envelope, chain_dispute: int) -> None:
        """A challenger opened a dispute of one of our jobs: check it on chain and referee it."""
        job = self.jobs(envelope.job_id)
        if job is None or self.ctx.chain is None:
            raise RequestRefused("not a job of this client")
        body: OpenDispute = envelope.body
        dispute_id = dispute_id_of(envelope)
        sessions = job.sessions
        for session in sessions:
            if session.chain_dispute == chain_dispute:
                if session.dispute_id == dispute_id:
                    return  # a repeat
                raise RequestRefused("that chain dispute is refereed already")
        await self._check_on_chain(job, envelope, chain_dispute)
        session = await self._session(job, first_seq(len(sessions) + 1), chain_dispute)
        try:
            await trio.to_thread.run_sync(session.open_sync, envelope.encode(), session.clock.now())
        except RemoteProtocolError as error:
            raise RequestRefused(f"dispute refused: {error}") from None
        sessions.append(session)
        await self._save_session(session)
        log.info("job %s: refereeing dispute %s (chain #%d): %s challenges %s", job.job_id.hex()[:12],
                 dispute_id.hex()[:12], chain_dispute, envelope.sender.hex()[:8], body.defender_root.signer.hex()[:8])
        self.ctx.start_soon(self._referee, job, session, name=f"referee {dispute_id.hex()[:12]}")

    async def _check_on_chain(self, job: RefereedJob, envelope: Envelope, chain_dispute: int) -> None:
        """RequestRefused unless chain dispute ``chain_dispute`` is the open dispute ``envelope`` opens."""
        from contracts import DisputeStatus

        body: OpenDispute = envelope.body
        chain, s = self.ctx.chain, self.ctx.chain.settlement
        try:
            d = await chain.run(s.dispute, chain_dispute)
            challenger_key = await chain.run(chain.key_of_sync, d.challenger)
            respondent_key = await chain.run(chain.key_of_sync, d.respondent)
            respondent_seat = await chain.run(s.seat, job.job_id, d.respondent)
            challenger_seat = await chain.run(s.seat, job.job_id, d.challenger)
        except chain_failures() as error:
            raise RequestRefused(f"chain dispute #{chain_dispute}: {describe_chain_error(error)}") from None
        if d.job_id != job.job_id or d.status != DisputeStatus.OPEN:
            raise RequestRefused(f"chain dispute #{chain_dispute} is not an open dispute of this job")
        if challenger_key != envelope.sender or respondent_key != body.defender_root.signer:
            raise RequestRefused("the chain dispute names other parties")
        if respondent_seat.trace_root != body.defender_root.root:
            raise RequestRefused("the defender's root is not the one it committed")
        if challenger_seat.accepted and challenger_seat.trace_root != body.challenger_root.root:
            raise RequestRefused("the challenger's root is not the one it committed")

    async def _machine(self, job: RefereedJob, seq: int) -> Referee:
        from ..training_oracle import batch_hashes

        training = await job.training()
        return Referee(identity=self.ctx.identity, terms=job.terms, batch_hashes=batch_hashes(training), first_seq=seq)

    async def _session(self, job: RefereedJob, seq: int, chain_dispute: int) -> RefereeSession:
        return RefereeSession(host=self.ctx.host, referee=await self._machine(job, seq), seq=seq,
                              chain_dispute=chain_dispute, save=self._save_session, on_verdict=self._record)

    # -- resuming ----------------------------------------------------------------------

    async def resume(self, job_id: bytes) -> None:
        """Pick up the job's games whose verdict is not recorded (after a restart)."""
        storage = self.ctx.storage
        for row in await storage.run(lambda: storage.disputes(job_id=job_id)):
            if unpack(row.state).get("kind") == "referee" and row.status != "recorded":
                self.ctx.start_soon(self._resume_session, job_id, row.state, name="referee (resumed)")

    async def _resume_session(self, job_id: bytes, record: bytes) -> None:
        job = self.jobs(job_id)
        if job is None:
            return
        referee = await self._machine(job, unpack(record)["seq"])
        session = await trio.to_thread.run_sync(lambda: RefereeSession.restore(
            record, host=self.ctx.host, referee=referee, save=self._save_session, on_verdict=self._record))
        job.sessions.append(session)
        log.info("job %s: resuming dispute %s", job_id.hex()[:12], session.dispute_id.hex()[:12])
        await self._referee(job, session)

    # -- running and recording -----------------------------------------------------------

    async def _referee(self, job: RefereedJob, session: RefereeSession) -> None:
        try:
            await session.run()
        finally:
            job.changed()

    async def _save_session(self, session: RefereeSession) -> None:
        await self.ctx.storage.run(self.ctx.storage.put_dispute, session.row())

    async def _record(self, session: RefereeSession) -> None:
        """Record the verdict on chain (slashing the loser), hand it to the job's owner, announce it."""
        from contracts import Outcome

        ctx = self.ctx
        verdict = session.verdict
        job_id = session.job_id
        outcome = outcome_of(verdict)
        summary = {
            "dispute": session.dispute_id.hex(), "chain_dispute": session.chain_dispute,
            "challenger": verdict.challenger.hex(), "defender": verdict.defender.hex(), "winner": outcome,
            "faults": [{"party": f.party.hex(), "reason": f.reason, "detail": f.detail} for f in verdict.faults],
            "depth": verdict.depth, "checkpoint": verdict.checkpoint, "step": verdict.step, "node": verdict.node,
            "rounds": verdict.rounds, "transcript": verdict.transcript_hash.hex(), "refused_moves": session.refused,
        }
        log.info("job %s: verdict in dispute %s: %s wins (%s)", job_id.hex()[:12], session.dispute_id.hex()[:12],
                 outcome, "; ".join(f"{f.party.hex()[:8]} {f.reason}" for f in verdict.faults) or "no fault")
        chain = ctx.chain
        outcomes = {"challenger": Outcome.CHALLENGER_WINS, "defender": Outcome.RESPONDENT_WINS,
                    "both-lose": Outcome.BOTH_LOSE}
        if outcome in outcomes:
            try:
                await chain.run(lambda: chain.settlement.rule(
                    session.chain_dispute, outcomes[outcome], step=verdict.step, node=verdict.node,
                    transcript_hash=verdict.transcript_hash))
                summary["recorded"] = True
                log.info("job %s: verdict recorded on chain (dispute #%d)", job_id.hex()[:12], session.chain_dispute)
            except chain_failures() as error:
                summary["recorded"] = False
                log.warning("job %s: recording the verdict: %s", job_id.hex()[:12], describe_chain_error(error))
        session.recorded = True
        await self._save_session(session)
        job = self.jobs(job_id)
        if job is not None:
            await job.on_ruled(summary)
        await ctx.publish(TOPIC_VERDICTS, {"verdict": session.verdict_envelope.encode()})


    # -- deadlines nobody met -------------------------------------------------------------

    async def lapse_overdue(self, job_id: bytes) -> None:
        """Close the job's disputes whose ruling deadline passed without a verdict (``lapse``:
        the locks stay as they were before the dispute)."""
        from contracts import DisputeOpened, DisputeStatus

        chain = self.ctx.chain
        s = chain.settlement
        try:
            events = await chain.run(s.events)
            now = max(await chain.run(chain.chain.now), int(time.time()))
            for entry in events:
                event = entry.event
                if isinstance(event, DisputeOpened) and event.job_id == job_id and now >= event.rule_by:
                    if (await chain.run(s.dispute, event.dispute_id)).status == DisputeStatus.OPEN:
                        await chain.run(s.lapse, event.dispute_id)
                        log.info("job %s: chain dispute #%d lapsed without a verdict", job_id.hex()[:12],
                                 event.dispute_id)
        except chain_failures() as error:
            log.info("job %s: lapsing disputes: %s", job_id.hex()[:12], describe_chain_error(error))


__all__ = ["RefereeDuty", "RefereedJob"]
