"""The provider role: sells training, commits its trace, defends it.

Life of a job at a provider (the row's state in storage):

  accepted   the offer checked (terms against the bundle, the job on chain, price and
             capacity) and a seat taken on chain, locking the job's stake
  trained    the run finished (resumed from its last checkpoint after a restart)
  committed  the signed trace root stored, then committed on chain
  delivered  the client acknowledged the trace report; the root is also gossiped
  settled    the job settled on chain (paid, or slashed after a lost dispute)
  failed     the job cannot go on (a deadline passed, the chain refused a move)
  abandoned  before its root was committed, the job left the states in which our work can
             still be paid (refunded, settled, expired, unknown to the chain): the run is
             stopped, the reason kept in the row's record (``abandoned``) and no transaction
             that must revert is sent. Read when a restarted node reconciles its rows with
             the chain (`_reconcile`, before any work), before (re)starting work, every
             ``WATCH_POLL`` seconds while training, and before committing.
  lost       the chain restarted and the new one does not know the job (the chain watch)

Disputes: the referee's first request for one of our delivered jobs makes this node the
defender (`RoleContext`); the client may also ask it to challenge another provider whose
root differs (op ``challenge``). Either way the answers come from the run's checkpoint
files (`runner.StoredRunOracle`), or from the deviating run of a ``--cheat`` provider.
"""
from __future__ import annotations

import logging
import random
import threading
import time
from typing import Any

import trio
from libp2p.peer.id import ID

from protocol import NEVER, Commitment, Envelope, JobOffer, RemoteProtocolError, commit_trace, decode_envelope
from repops_cupy.memory import describe as describe_bytes
from repops_cupy.memory import peak_bytes

from ..errors import BadMessage, BlobNotFound, PeerError
from ..framing import pack
from ..streams import RequestRefused
from .chain import chain_failures, describe_chain_error, format_ether, parse_ether, withdraw_credit
from .chain_watch import forget_lost_jobs
from .context import PartySpec, RoleContext, terms_of
from .jobfiles import RUN_DIR, BundleError, job_dir
from .job_protocols import (
    JOB_LIMITS, JOB_PROTOCOL, TOPIC_COMMITMENTS, TOPIC_PROVIDERS, Advert, Challenge, CommitmentNotice, Offer,
    TraceReport, parse_trace_request,
)
from .runner import JobRun, RunFailed, RunStopped, checkpoint_paths, resolve_device, trace_hashes

log = logging.getLogger(__name__)

ROLE = "provider"
ACTIVE_STATES = ("accepted", "trained", "committed", "delivered")
COMMITMENT_SEQ = 1  # a provider's commitment is its first message in a job; disputes use later blocks
DELIVERY_RETRY_MAX = 10.0
SETTLE_POLL = 3.0
SEATS_POLL = 1.0
WATCH_POLL = 5.0  # how often a training run asks the chain whether its job is still alive


class JobGone(Exception):
    """The job can no longer pay for our work; the message says why."""


class ProviderRole:
    active_states = ACTIVE_STATES  # the job rows a restart resumes and a lost chain forgets
    SEATED_STATES = ("committed", "delivered")  # a restart reads how these jobs ended from the chain

    def __init__(self, ctx: RoleContext) -> None:
        self.ctx = ctx
        self.config = ctx.config
        self.price_per_step = parse_ether(self.config.price_per_step, "price_per_step")
        self.working: set[bytes] = set()  # jobs holding a capacity slot
        self.runs: dict[bytes, JobRun] = {}
        self.traces: dict[bytes, Any] = {}
        self.reports: dict[bytes, dict] = {}  # trace reports of committed jobs, as served
        self.watch_poll = WATCH_POLL
        ctx.roles[ROLE] = self

    @property
    def device(self) -> str:
        return resolve_device(self.config.device)

    async def run(self) -> None:
        ctx = self.ctx
        self._install()
        await ctx.wait_chain()
        ctx.chain_watch.on_lost.append(self._forget)
        await self._before_jobs()
        for job in await ctx.storage.run(lambda: ctx.storage.jobs(role=ROLE)):
            if job.state in self.active_states and await self._reconcile(job.job_id, job.state):
                self.working.add(job.job_id)
                ctx.start_soon(self.work, job.job_id, name=f"provider job {job.job_id.hex()[:12]}")
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._advertise)
            nursery.start_soon(self._collect)

    def _install(self) -> None:
        """The requests this role answers (before the chain is joined)."""
        ctx = self.ctx
        ctx.job_ops["offer"] = self.on_offer
        ctx.job_ops["trace"] = self.on_trace
        ctx.job_ops["challenge"] = self.on_challenge
        ctx.party_sources.append(self.party_spec)

    async def _before_jobs(self) -> None:
        """What must run once the chain is joined and before the stored jobs resume."""
        await trio.lowlevel.checkpoint()

    async def _forget(self, old: Any, new: Any) -> None:
        """The chain changed: our jobs it does not know are lost, their runs stopped."""
        for job_id in await forget_lost_jobs(self.ctx, ROLE, self.active_states, old, new):
            self.working.discard(job_id)
            self.runs.pop(job_id, None)

    async def _reconcile(self, job_id: bytes, state: str) -> bool:
        """After a restart, before any work: move the job by what the chain did while we were
        away (over: settled or slashed once committed, else abandoned; unknown: lost). True
        when there is work left. A chain that cannot answer now is no verdict: the work
        reads it again."""
        chain = self.ctx.chain
        try:
            if state in self.SEATED_STATES:
                info = await chain.run(chain.settlement.job, job_id)
                if not self._over(info):
                    return True
                await self._ended(job_id, info, f"{info.status.name} on chain while this provider was away")
                return False
            reason = await self._job_gone(job_id)
        except chain_failures() as error:
            log.info("job %s: reconciling with the chain: %s", job_id.hex()[:12], describe_chain_error(error))
            return True
        if reason is None:
            return True
        await self._abandon(job_id, reason, found=" (found on restart, before resuming its run)")
        return False

    @staticmethod
    def _over(info: Any) -> bool:
        """Whether the job as the chain holds it is over (its money moved)."""
        from contracts import JobStatus

        return info.status in (JobStatus.FINALIZED, JobStatus.REFUNDED)

    async def _ended(self, job_id: bytes, info: Any, how: str) -> None:
        """The job is over on chain: the row says how our seat ended."""
        chain = self.ctx.chain
        await self._settled(job_id, await chain.run(chain.settlement.seat, job_id, chain.account), how)

    async def _settled(self, job_id: bytes, seat: Any, how: str) -> None:
        """Our committed job is over on chain: the row says whether we were paid or slashed."""
        outcome = "slashed" if seat.forfeited else "settled"
        await self.ctx.storage.run(self.ctx.storage.set_job_state, job_id, outcome)
        self.working.discard(job_id)
        log.info("job %s: %s (%s)", job_id.hex()[:12], how, "slashed" if seat.forfeited else "paid")

    # -- adverts -------------------------------------------------------------------------

    async def _advertise(self) -> None:
        ctx = self.ctx
        # The first advert waits a random part of the interval: in a network started all at
        # once, every advert reaching every node together is a flood (200 in-process nodes:
        # the loop was still delivering start-up adverts minutes after the last node started).
        await trio.sleep(random.uniform(0, self.config.advert_interval))
        while True:
            advert = Advert(str(ctx.host.peer_id), ctx.host.listen_addrs, self.price_per_step,
                            max(0, self.config.capacity - len(self.working)), ctx.chain.account, ctx.chain.address)
            await ctx.publish(TOPIC_PROVIDERS, advert.to_wire())
            await trio.sleep(self.config.advert_interval)

    # -- taking a job --------------------------------------------------------------------

    async def on_offer(self, peer: ID, obj: dict) -> dict:
        ctx = self.ctx
        offer = Offer.from_wire(obj, peer)
        try:
            envelope = decode_envelope(offer.offer)
        except RemoteProtocolError as error:
            raise BadMessage(f"job offer: {error}", peer=peer) from None
        if not isinstance(envelope.body, JobOffer):
            raise BadMessage("an offer carries a JobOffer", peer=peer)
        signed = envelope.body.terms
        job_id = envelope.job_id
        if ctx.chain is None:
            raise RequestRefused("not connected to the settlement chain yet")
        stored = await ctx.load_job(job_id)
        if stored is not None:
            if stored[0].role == ROLE and stored[0].state in ACTIVE_STATES + ("settled",):
                return {"account": ctx.chain.account}  # a repeated offer: we already took it
            raise RequestRefused(f"job already known here ({stored[0].role}, {stored[0].state})")
        if offer.contract.lower() != ctx.chain.address.lower():
            raise RequestRefused(f"this provider settles on {ctx.chain.address}")
        if job_id in self.working:
            raise RequestRefused("this offer is being checked already")
        if len(self.working) >= self.config.capacity:
            raise RequestRefused("no capacity left")
        terms = signed.terms
        if terms.payment < self.price_per_step * terms.steps:
            raise RequestRefused(f"price below {format_ether(self.price_per_step)} ether per step")
        self.working.add(job_id)
        try:
            await self._check_chain_job(job_id, terms, offer)
            try:
                training, _ = await ctx.prepare_job(job_id, signed, offer.bundle, [peer])
            except BundleError as error:
                raise RequestRefused(f"job bundle refused: {error}") from None
            except BlobNotFound as error:
                raise RequestRefused(f"job bundle not delivered: {error}") from None
            await self._check_memory(training)
            record = {"terms": signed.encode(), "bundle": offer.bundle, "contract": offer.contract,
                      "client_account": offer.client_account, "client_addrs": offer.client_addrs}
            s = ctx.chain.settlement
            try:
                await ctx.chain.run(s.accept, job_id)
            except chain_failures() as error:
                raise RequestRefused(f"taking a seat failed: {describe_chain_error(error)}") from None
            await ctx.save_job(job_id, ROLE, "accepted", record)
        except BaseException:
            self.working.discard(job_id)
            raise
        log.info("job %s: accepted from %s (%d steps, %s ether)", job_id.hex()[:12], peer, terms.steps,
                 format_ether(terms.payment))
        ctx.start_soon(self.work, job_id, name=f"provider job {job_id.hex()[:12]}")
        return {"account": ctx.chain.account}

    async def _check_memory(self, training: Any) -> None:
        """Refuse a job whose step needs more memory than this provider has (the estimate
        from its step graph; 0 MiB configured: no limit)."""
        limit = self.config.memory_capacity_mb
        if limit <= 0:
            return
        need = await trio.to_thread.run_sync(step_peak_bytes, training)
        if need is not None and need > limit * 2**20:
            raise RequestRefused(f"the job needs about {describe_bytes(need)} per step (peak estimate from its "
                                 f"step graph); this provider takes at most {limit:g} MiB")

    async def _check_chain_job(self, job_id: bytes, terms: Any, offer: Offer) -> None:
        from contracts import JobStatus

        chain = self.ctx.chain
        s = chain.settlement
        job = await chain.run(s.job, job_id)
        if job.status != JobStatus.OPEN:
            raise RequestRefused(f"the job is {job.status.name} on chain, not OPEN")
        if job.price != terms.payment or job.provider_stake != terms.stake or job.challenge_by != terms.deadline:
            raise RequestRefused("the job on chain does not escrow what its terms say")
        if job.client.lower() != offer.client_account.lower():
            raise RequestRefused("the job on chain was opened by another account")
        if job.accept_by <= time.time() + 1:
            raise RequestRefused("the job's acceptance deadline has passed")
        me = await chain.run(s.node, chain.account)
        if me.free_stake < job.provider_stake:
            raise RequestRefused(f"free stake {format_ether(me.free_stake)} below the job's {format_ether(job.provider_stake)}")

    # -- doing a job ---------------------------------------------------------------------

    async def work(self, job_id: bytes) -> None:
        """Train, commit and deliver one job, from whatever state it is in."""
        ctx = self.ctx
        try:
            loaded = await ctx.load_job(job_id)
            if loaded is None:
                return
            job, record = loaded
            signed = terms_of(record)
            training, program = await ctx.prepare_job(job_id, signed, record["bundle"], [ctx.peer_of(signed.terms.client)])
            run = self.runs.get(job_id) or JobRun(training, program, job_dir(self.config.data_dir, job_id) / RUN_DIR,
                                                  job_id=job_id, cheat=self.config.cheat, cheats=self.ctx.node.cheats,
                                                  device=self.device, workers=self.config.train_workers)
            self.runs[job_id] = run
            state = job.state
            if state in ("accepted", "trained"):
                await self._check_alive(job_id)
            trace = await self._train_watched(job_id, run)
            self.traces[job_id] = trace
            if state == "accepted":
                state = "trained"
                await ctx.save_job(job_id, ROLE, state, record)
                rate = f", {run.trained_steps} steps in {run.train_seconds:.1f} s" if run.trained_steps else ""
                log.info("job %s: trained%s, trace root %s", job_id.hex()[:12], rate, trace.root.hex()[:16])
            if state == "trained":
                record["report"] = await self._commit(job_id, signed, run, trace)
                state = "committed"
                await ctx.save_job(job_id, ROLE, state, record)
            if state == "committed":
                await self._deliver(job_id, signed, record)
                state = "delivered"
                await ctx.save_job(job_id, ROLE, state, record)
        except (RunFailed, BundleError) as error:
            log.error("job %s failed: %s", job_id.hex()[:12], error)
            await ctx.storage.run(ctx.storage.set_job_state, job_id, "failed")
            self.working.discard(job_id)
        except RunStopped:
            pass
        except JobGone as gone:
            await self._abandon(job_id, str(gone))

    async def _job_gone(self, job_id: bytes) -> str | None:
        """Why the job can no longer pay for a root we have not committed yet; None while it can."""
        from contracts import JobStatus

        chain = self.ctx.chain
        s = chain.settlement
        info = await chain.run(s.job, job_id)
        if info.status == JobStatus.NONE:
            return "the chain does not know the job"
        if info.status in (JobStatus.FINALIZED, JobStatus.REFUNDED):
            return f"the job is {info.status.name} on chain"
        now = max(await chain.run(chain.chain.now), int(time.time()))
        if info.status == JobStatus.OPEN:
            return "its seats were not all taken by the acceptance deadline" if now >= info.accept_by else None
        seat = await chain.run(s.seat, job_id, chain.account)
        if not seat.accepted:
            return "this account holds no seat in the job"
        if not seat.committed and now >= info.commit_by:
            return "its commit deadline passed before our root was committed"
        return None

    async def _check_alive(self, job_id: bytes) -> None:
        """JobGone when the job is dead on chain; a chain that cannot answer now is no verdict."""
        try:
            reason = await self._job_gone(job_id)
        except chain_failures() as error:
            log.info("job %s: reading its status on chain: %s", job_id.hex()[:12], describe_chain_error(error))
            return
        if reason is not None:
            raise JobGone(reason)

    async def _train_watched(self, job_id: bytes, run: JobRun) -> Any:
        """Train (or load the finished run), stopping the run if the job dies on chain meanwhile."""
        stop = threading.Event()
        gone: list[str] = []

        async def watch() -> None:
            while True:
                await trio.sleep(self.watch_poll)
                try:
                    await self._check_alive(job_id)
                except JobGone as error:
                    gone.append(str(error))
                    stop.set()
                    return

        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(watch)
                try:
                    return await trio.to_thread.run_sync(run.train_sync, stop, abandon_on_cancel=True)
                finally:
                    stop.set()
                    nursery.cancel_scope.cancel()
        except* RunStopped:
            if gone:
                raise JobGone(gone[0]) from None
            raise RunStopped("the node stopped the run") from None

    async def _abandon(self, job_id: bytes, reason: str, *, found: str = "") -> None:
        ctx = self.ctx
        loaded = await ctx.load_job(job_id)
        if loaded is not None and loaded[0].state != "lost":  # lost with an old chain: that says it
            record = dict(loaded[1], abandoned=reason)
            await ctx.save_job(job_id, ROLE, "abandoned", record)
        self.working.discard(job_id)
        self.runs.pop(job_id, None)
        log.warning("job %s: stopped working on it: %s%s", job_id.hex()[:12], reason, found)

    async def _commit(self, job_id: bytes, signed: Any, run: JobRun, trace: Any) -> dict:
        ctx = self.ctx
        hashes = trace_hashes(trace)
        root = commit_trace(ctx.identity, job_id=job_id, role=ROLE, checkpoint_states=hashes)
        envelope = Envelope.seal(Commitment(root), identity=ctx.identity, job_id=job_id, seq=COMMITMENT_SEQ,
                                 deadline=NEVER)
        checkpoints = [await ctx.blobs.store.put_file(p) for p in checkpoint_paths(run.run_dir, trace)]
        trace_file = await ctx.blobs.store.put_file(run.run_dir / "trace.json")
        # Stored before it leaves this node: a restart must not sign a different root.
        from ..storage import Commitment as StoredCommitment

        await ctx.storage.run(ctx.storage.add_commitment, StoredCommitment(
            job_id, ROLE, ctx.identity.node_id, root.sequence, root.root, root.signature, envelope.encode()))
        s = ctx.chain.settlement
        await self._wait_for_seats(job_id)
        await self._check_alive(job_id)  # a commit to a dead job would only revert
        try:
            await ctx.chain.run(s.commit, job_id, root.root)
        except chain_failures() as error:  # JobAlreadyCommitted after a restart is fine if the root is ours
            seat = await ctx.chain.run(s.seat, job_id, ctx.chain.account)
            if not (seat.committed and seat.trace_root == root.root):
                raise RunFailed(f"committing on chain failed: {describe_chain_error(error)}") from None
        log.info("job %s: committed trace root %s on chain", job_id.hex()[:12], root.root.hex()[:16])
        return TraceReport(envelope.encode(), hashes, checkpoints, trace_file, ctx.chain.account).to_wire("trace")

    async def _wait_for_seats(self, job_id: bytes) -> None:
        """Roots are committed once every seat of the job is taken (the contract's order)."""
        from contracts import JobStatus

        chain = self.ctx.chain
        while True:
            info = await chain.run(chain.settlement.job, job_id)
            if info.status != JobStatus.OPEN:
                return
            now = max(await chain.run(chain.chain.now), int(time.time()))
            if now >= info.accept_by:
                raise RunFailed("the job's other seats were never taken")
            await trio.sleep(SEATS_POLL)

    async def _deliver(self, job_id: bytes, signed: Any, record: dict) -> None:
        """Send the trace report to the client until it acknowledges, and gossip the commitment."""
        ctx = self.ctx
        report = dict(record["report"], op="commitment")
        ctx.start_soon(self._gossip_commitment, report["commitment"], signed.terms.deadline,
                       name=f"gossip commitment {job_id.hex()[:12]}")
        client = ctx.peer_of(signed.terms.client)
        delay = 0.5
        while time.time() < signed.terms.deadline:
            try:
                await ctx.reach(client, record["client_addrs"])
                await ctx.host.request(client, JOB_PROTOCOL, pack(report), limits=JOB_LIMITS)
                log.info("job %s: trace report delivered to the client", job_id.hex()[:12])
                return
            except PeerError as error:
                log.info("job %s: delivering the trace report: %s; retrying", job_id.hex()[:12], error)
            await trio.sleep(delay)
            delay = min(delay * 2, DELIVERY_RETRY_MAX)
        log.warning("job %s: the client never took the trace report", job_id.hex()[:12])

    async def _gossip_commitment(self, commitment: bytes, until: int) -> None:
        """Gossip the commitment for auditors until the challenge window closes (repeats are
        cheap; a lost gossip message is not)."""
        ctx = self.ctx
        notice = CommitmentNotice(commitment, ctx.chain.account, ctx.host.listen_addrs).to_wire()
        while time.time() < until:
            await ctx.publish(TOPIC_COMMITMENTS, notice)
            await trio.sleep(ctx.config.regossip_interval)

    # -- serving -------------------------------------------------------------------------

    async def on_trace(self, peer: ID, obj: dict) -> dict:
        job_id = parse_trace_request(obj, peer)
        report = self.reports.get(job_id)
        if report is None:
            loaded = await self.ctx.load_job(job_id)
            if loaded is None or loaded[0].role != ROLE or "report" not in loaded[1]:
                raise RequestRefused("no committed trace for this job here")
            report = self.reports[job_id] = loaded[1]["report"]
        await trio.lowlevel.checkpoint()
        return report

    async def party_spec(self, job_id: bytes) -> PartySpec | None:
        loaded = await self.ctx.load_job(job_id)
        if loaded is None or loaded[0].role != ROLE or "report" not in loaded[1]:
            return None
        job, record = loaded
        signed = terms_of(record)
        training, program = await self.ctx.prepare_job(job_id, signed, record["bundle"], [])
        run = self.runs.get(job_id) or JobRun(training, program, job_dir(self.config.data_dir, job_id) / RUN_DIR,
                                              job_id=job_id, cheat=self.config.cheat, cheats=self.ctx.node.cheats,
                                              device=self.device, workers=self.config.train_workers)
        self.runs[job_id] = run
        trace = self.traces.get(job_id) or run.finished_trace()
        if trace is None:
            return None
        if self.config.cheat:  # the rewrite exists once the deviating run was made
            await trio.to_thread.run_sync(run.oracle, trace)
        return PartySpec(signed, ROLE, lambda: run.oracle(trace), run.rewrite)

    async def on_challenge(self, peer: ID, obj: dict) -> dict:
        """The client saw our root differ from another provider's: open the dispute."""
        ctx = self.ctx
        challenge = Challenge.from_wire(obj, peer)
        try:
            envelope = decode_envelope(challenge.respondent)
        except RemoteProtocolError as error:
            raise BadMessage(f"challenge: {error}", peer=peer) from None
        if not isinstance(envelope.body, Commitment) or envelope.job_id != challenge.job:
            raise BadMessage("a challenge names the other provider's commitment in this job", peer=peer)
        spec = await self.party_spec(challenge.job)
        if spec is None:
            raise RequestRefused("no committed trace of this job here")
        defender_root = envelope.body.root
        record = (await ctx.load_job(challenge.job))[1]
        mine = decode_envelope(record["report"]["commitment"]).body.root
        if defender_root.statement == mine.statement:
            raise RequestRefused("our roots agree")
        chain, s = ctx.chain, ctx.chain.settlement
        if await chain.run(chain.key_of_sync, challenge.account) != defender_root.signer:
            raise RequestRefused("that account is not the signer's")
        seat = await chain.run(s.seat, challenge.job, challenge.account)
        if not (seat.committed and seat.trace_root == defender_root.root):
            raise RequestRefused("that root is not the one committed on chain")
        from contracts import DisputeOpened

        try:
            opened = await chain.run(s.open_dispute, challenge.job, challenge.account)
        except chain_failures() as error:
            raise RequestRefused(f"opening the dispute on chain failed: {describe_chain_error(error)}") from None
        chain_dispute = opened.one(DisputeOpened).dispute_id
        ctx.start_soon(ctx.challenge, spec, defender_root, chain_dispute, record["client_addrs"],
                       name=f"challenge in job {challenge.job.hex()[:12]}")
        return {"chain_dispute": chain_dispute}

    # -- after the job ---------------------------------------------------------------------

    async def _collect(self) -> None:
        """Settle our jobs once their challenge window closed, and withdraw what we earned."""
        from contracts import JobStatus

        ctx = self.ctx
        chain = ctx.chain
        s = chain.settlement
        first_pass = True
        while True:
            await trio.sleep(SETTLE_POLL)
            if not self.working and not first_pass:
                continue  # nothing to settle or be paid for: no chain reads (a busy chain serves many nodes)
            first_pass = False
            chain = ctx.chain  # a new one after the chain changed
            s = chain.settlement
            if chain.stale:
                continue  # the chain watch is joining the new chain
            for job in await ctx.storage.run(lambda: ctx.storage.jobs(role=ROLE)):
                if job.state not in ("committed", "delivered"):
                    continue
                try:
                    info = await chain.run(s.job, job.job_id)
                    if info.status == JobStatus.COMMITTED and time.time() > info.challenge_by + 5:
                        await chain.run(s.settle, job.job_id)  # the client has not: anyone may
                        info = await chain.run(s.job, job.job_id)
                    if info.status in (JobStatus.FINALIZED, JobStatus.REFUNDED):
                        seat = await chain.run(s.seat, job.job_id, chain.account)
                        await self._settled(job.job_id, seat, "settled on chain")
                except chain_failures() as error:
                    log.info("job %s: checking settlement: %s", job.job_id.hex()[:12], describe_chain_error(error))
                except Exception:  # broad: the settle loop outlives any one job's failure: the next pass retries
                    log.exception("job %s: checking settlement failed", job.job_id.hex()[:12])
            await withdraw_credit(ctx)


def step_peak_bytes(training: Any) -> int | None:
    """The peak-bytes estimate of a job's step graph; None for a program without one."""
    if not isinstance(getattr(type(training), "graph", None), property):
        return None  # rounding-log jobs train torch modules: no step graph to estimate from
    return peak_bytes(training.graph)


__all__ = ["ProviderRole"]
