"""The provider role on settlement version 2 (docs/economics.md §4-6).

Life of a job at a provider (its row's state):

  accepted   the signed offer checked (`offer.check_offer`: the job on chain, the client's
             key, the referee mode, pay, stake and this node's measured step time;
             `offer.check_element_specs`: an elementSpecRoot is the bundle's graph's) and a seat
             taken with `accept`, locking the stake
  trained    the run finished, every step's state hash recorded (`step_hashes`)
  committed  the salt and trace stored in the row, then `commit(keccak(job, seat, root, salt))`
  revealed   the whole trace and the salt revealed once every seat committed (`RevealOpened`
             from the follower, or the chain's own deadlines on a restart), before `revealBy`;
             `ctx.trained[job_id]` filled for the defender and the data service
  settled    the job is final on chain and this seat was paid (``paid`` in the record)
  forfeited  final on chain and this seat forfeited (its reason in the record)
  failed / abandoned   as version 1: the run cannot go on, or the job died before our commit

Nothing of a job is served before its reveal: this role answers only offers; the data
service (`data.py`) serves a seat's items after its reveal. Settling is the keeper's; this
role records how each job ended and withdraws its credit. It is version 1's `ProviderRole`
(adverts, the watched training run, abandoning) with the chain's questions asked of
version 2.
"""
from __future__ import annotations

import logging
import math
import os
import time
from typing import Any

import trio
from libp2p.peer.id import ID

from contracts.settlement_v2 import ForfeitReason, JobStatus, RevealOpened, SeatStatus, TraceRevealed, commitment_of, trace_root

from ...errors import BlobNotFound
from ...streams import RequestRefused
from ..chain import chain_failures, describe_chain_error, parse_ether, withdraw_credit
from ..jobfiles import RUN_DIR, BundleError, job_dir
from ..job_protocols import Offer
from ..provider import JobGone, ProviderRole
from ..runner import RunFailed, RunStopped, checkpoint_paths, trace_hashes
from .adversaries import adversary_of
from .offer import OfferRefused, ProviderTerms, SignedOffer, check_element_specs, check_offer, check_signed, read_view_sync
from .step_hashes import STEP_HASHES_FILE, RecordedRun

log = logging.getLogger(__name__)

ROLE = "provider"
ACTIVE_STATES = ("accepted", "trained", "committed", "revealed")
OVER = (JobStatus.FINALIZED, JobStatus.REFUNDED)
CHAIN_POLL = 2.0  # seconds between two reads of a job's deadlines while waiting on the chain


def measure_step_millis_sync(training: Any) -> int:
    """The job's second step, timed here (whole milliseconds, rounded up): the first one warms
    caches and compiled kernels, which a run pays once, not every step."""
    state = training.run_step(training.initial_state()).state
    started = time.perf_counter()
    training.run_step(state)
    return max(1, math.ceil((time.perf_counter() - started) * 1000))


class ProviderRoleV2(ProviderRole):
    active_states = ACTIVE_STATES
    SEATED_STATES = ("committed", "revealed")

    def __init__(self, ctx: Any) -> None:
        super().__init__(ctx)
        self.terms = ProviderTerms(parse_ether(self.config.price_per_step, "price_per_step"))
        self.reveal_open: dict[bytes, trio.Event] = {}
        # how this seat plays (honest unless a test's `cheat` setting says otherwise); a bad name refuses offers
        self.adversary_error = ""
        try:
            self.adversary = adversary_of(self.config.cheat, ctx.node.cheats)
        except ValueError as error:
            self.adversary, self.adversary_error = adversary_of("", None), str(error)

    def _install(self) -> None:
        # version 2 serves no trace before the reveal (data.py does after it) and plays the claim game
        self.ctx.job_ops["offer"] = self.on_offer
        self.ctx.follower.subscribe(RevealOpened, self._on_reveal_opened)

    async def _before_jobs(self) -> None:
        from .defender import start_defender
        from .game_keeper import start_game_keeper

        ctx = self.ctx
        await trio.to_thread.run_sync(ctx.trained.load_sync, self._oracle_factory)
        if self.adversary.serves:  # a stonewaller answers for nothing, games included
            start_defender(ctx)
        start_game_keeper(ctx)

    async def _on_reveal_opened(self, logged: Any) -> None:
        self.reveal_open.setdefault(logged.event.job_id, trio.Event()).set()
        await trio.lowlevel.checkpoint()

    # -- taking a job --------------------------------------------------------------------

    async def on_offer(self, peer: ID, obj: dict) -> dict:
        ctx = self.ctx
        wire = Offer.from_wire(obj, peer)
        offer = SignedOffer.decode(wire.offer, peer)
        if ctx.chain is None:
            raise RequestRefused("not connected to the settlement chain yet")
        if self.adversary_error:
            raise RequestRefused(self.adversary_error)
        try:
            signed = check_signed(offer)
        except OfferRefused as refused:
            raise RequestRefused(f"offer refused: {refused}") from None
        job_id = offer.job_id
        stored = await ctx.load_job(job_id)
        if stored is not None:
            if stored[0].role == ROLE and stored[0].state in ACTIVE_STATES:
                return {"account": ctx.chain.account}  # a repeated offer: we already took it
            raise RequestRefused(f"job already known here ({stored[0].role}, {stored[0].state})")
        if job_id in self.working:
            raise RequestRefused("this offer is being checked already")
        if len(self.working) >= self.config.capacity:
            raise RequestRefused("no capacity left")
        self.working.add(job_id)
        try:
            try:
                training, _ = await ctx.prepare_job(job_id, signed, wire.bundle, [peer])
            except BundleError as error:
                raise RequestRefused(f"job bundle refused: {error}") from None
            except BlobNotFound as error:
                raise RequestRefused(f"job bundle not delivered: {error}") from None
            await self._check_memory(training)
            try:  # the graph was checked against the program root: the element specs derive from it
                await trio.to_thread.run_sync(check_element_specs, offer.terms, training)
            except OfferRefused as refused:
                raise RequestRefused(f"offer refused: {refused}") from None
            measured = await trio.to_thread.run_sync(measure_step_millis_sync, training)
            s = ctx.chain.settlement
            view = await ctx.chain.run(read_view_sync, s, offer)
            try:
                check_offer(offer, view, self.terms, measured)
            except OfferRefused as refused:
                raise RequestRefused(f"offer refused: {refused}") from None
            try:
                await ctx.chain.run(s.accept, job_id)
            except chain_failures() as error:
                raise RequestRefused(f"taking a seat failed: {describe_chain_error(error)}") from None
            record = {"offer": wire.offer, "terms": signed.encode(), "bundle": wire.bundle,
                      "client_addrs": wire.client_addrs, "step_millis": measured}
            await ctx.save_job(job_id, ROLE, "accepted", record)
        except BaseException:
            self.working.discard(job_id)
            raise
        log.info("job %s: accepted (%d steps, a step measured %d ms of the %d declared)", job_id.hex()[:12],
                 offer.terms.steps, measured, offer.terms.step_millis)
        ctx.start_soon(self.work, job_id, name=f"provider job {job_id.hex()[:12]}")
        return {"account": ctx.chain.account}

    # -- doing a job ---------------------------------------------------------------------

    def _run_of(self, job_id: bytes, training: Any, program: Any) -> RecordedRun:
        run = self.runs.get(job_id)
        if run is None:
            run = self.runs[job_id] = RecordedRun(
                training, program, job_dir(self.config.data_dir, job_id) / RUN_DIR, job_id=job_id,
                cheat=self.adversary.run_cheat, cheats=self.ctx.node.cheats, device=self.device)
        return run

    async def work(self, job_id: bytes) -> None:
        """Train, commit and reveal one job, from whatever state its row is in."""
        ctx = self.ctx
        try:
            loaded = await ctx.load_job(job_id)
            if loaded is None:
                return
            job, record = loaded
            offer = SignedOffer.decode(record["offer"])
            training, program = await ctx.prepare_job(job_id, offer.signed_spec, record["bundle"],
                                                      [ctx.peer_of(offer.terms.client_key)])
            run = self._run_of(job_id, training, program)
            state = job.state
            adversary = self.adversary
            if state in ("accepted", "trained"):
                await self._check_alive(job_id)
            trace = await self._train_watched(job_id, run) if adversary.trains else None
            if trace is not None:
                self.traces[job_id] = trace
            if state == "accepted":
                if trace is not None:
                    await adversary.pace_training(run.schedule.steps, offer.terms.step_millis, run.train_seconds)
                state = "trained"
                await ctx.save_job(job_id, ROLE, state, record)
                log.info("job %s: trained, %d steps recorded", job_id.hex()[:12], run.schedule.steps)
            if state == "trained":
                # the salt is in the database before the commitment leaves: a restart reveals the same
                record.setdefault("salt", os.urandom(32))
                if trace is not None:
                    record["trace"] = trace_hashes(trace)
                else:  # an adversary that computes nothing commits to noise
                    record.setdefault("trace", adversary.junk_trace(offer.terms.initial_state,
                                                                    run.schedule.checkpoints))
                await ctx.save_job(job_id, ROLE, state, record)
                await self._commit(job_id, record)
                state = "committed"
                await ctx.save_job(job_id, ROLE, state, record)
            if not adversary.reveals:
                log.warning("job %s: committed and never revealing (%s)", job_id.hex()[:12], adversary.name)
                return  # the row stays committed: `_collect` records the forfeit once the job is final
            if state == "committed":
                await self._reveal(job_id, record)
                state = "revealed"
                await ctx.save_job(job_id, ROLE, state, record)
            if not adversary.serves:
                log.warning("job %s: revealed and serving nobody (%s)", job_id.hex()[:12], adversary.name)
                return
            await self._register_trained(job_id, record, run, trace)
        except (RunFailed, BundleError) as error:
            log.error("job %s failed: %s", job_id.hex()[:12], error)
            await ctx.storage.run(ctx.storage.set_job_state, job_id, "failed")
            self.working.discard(job_id)
        except RunStopped:
            pass
        except JobGone as gone:
            await self._abandon(job_id, str(gone))

    async def _commit(self, job_id: bytes, record: dict) -> None:
        chain = self.ctx.chain
        s = chain.settlement
        commitment = commitment_of(job_id, chain.account, trace_root(record["trace"]), record["salt"])
        await self._wait_filled(job_id)
        await self._check_alive(job_id)  # a commit to a dead job would only revert
        if self.adversary.copies:
            commitment = await self._copied_commitment(job_id)
        try:
            await chain.run(s.commit, job_id, commitment)
        except chain_failures() as error:  # committed already (a restart) is fine if it is ours
            seat = await chain.run(s.seat, job_id, chain.account)
            if seat.commitment != commitment:
                raise RunFailed(f"committing on chain failed: {describe_chain_error(error)}") from None
        log.info("job %s: committed (root %s)", job_id.hex()[:12], trace_root(record["trace"]).hex()[:16])

    async def _copied_commitment(self, job_id: bytes) -> bytes:
        """(copy-root) Another seat's commitment, once one is on chain."""
        chain = self.ctx.chain
        s = chain.settlement
        while True:
            for account in await chain.run(s.seats, job_id):
                seat = await chain.run(s.seat, job_id, account)
                if account != chain.account and seat.commitment != bytes(32):
                    return seat.commitment
            await self._check_alive(job_id)
            await trio.sleep(CHAIN_POLL)

    async def _copied_reveal(self, job_id: bytes, record: dict) -> bool:
        """(copy-root) Once another seat revealed, its trace and salt as ours; False before."""
        s = self.ctx.chain.settlement

        def revealed() -> list:
            return [e for e in s.events(0, None) if isinstance(e.event, TraceRevealed) and e.event.job_id == job_id]

        found = await self.ctx.chain.run(revealed)
        if not found:
            return False
        record["trace"] = list(await self.ctx.chain.run(s.revealed_trace, found[0]))
        record["salt"] = bytes((await self.ctx.chain.run(s.call_of, found[0]))[1][2])
        return True

    async def _wait_filled(self, job_id: bytes) -> None:
        """Commitments are taken once every seat is (the contract's order)."""
        chain = self.ctx.chain
        while True:
            info = await chain.run(chain.settlement.job, job_id)
            if info.status != JobStatus.OPEN:
                return
            if await chain.run(chain.chain.now) >= info.accept_by:
                raise JobGone("the job's other seats were never taken")
            await trio.sleep(CHAIN_POLL)

    async def _reveal(self, job_id: bytes, record: dict) -> None:
        """Reveal once the window opened (every seat committed, or commitBy passed) and before revealBy."""
        chain = self.ctx.chain
        s = chain.settlement
        opened = self.reveal_open.setdefault(job_id, trio.Event())
        while True:
            seat = await chain.run(s.seat, job_id, chain.account)
            if seat.status == SeatStatus.REVEALED or seat.forfeit != ForfeitReason.NONE:
                break
            info = await chain.run(s.job, job_id)
            if info.status in OVER:
                raise JobGone(f"the job is {info.status.name} on chain before our reveal")
            deadlines = await chain.run(s.deadlines, job_id)
            now = await chain.run(chain.chain.now)
            if info.commitments == info.providers_taken or now >= info.commit_by:
                if now >= deadlines.reveal_by:
                    raise JobGone("the reveal window closed before our reveal")
                if now < self.adversary.reveal_at(deadlines.reveal_by):
                    await trio.sleep(CHAIN_POLL / 4)  # a late revealer waits for the window's end
                    continue
                if self.adversary.copies and not await self._copied_reveal(job_id, record):
                    await trio.sleep(CHAIN_POLL)
                    continue
                try:
                    await chain.run(s.reveal, job_id, record["trace"], record["salt"])
                except chain_failures() as error:
                    log.info("job %s: revealing: %s", job_id.hex()[:12], describe_chain_error(error))
                    await trio.sleep(CHAIN_POLL)
                continue
            with trio.move_on_after(CHAIN_POLL):
                await opened.wait()
        if seat.forfeit != ForfeitReason.NONE:
            raise JobGone(f"our seat forfeited ({seat.forfeit.name}) before the reveal")
        log.info("job %s: revealed the trace", job_id.hex()[:12])

    async def _register_trained(self, job_id: bytes, record: dict, run: RecordedRun, trace: Any) -> None:
        from .trained import TrainedJob

        if job_id in self.ctx.trained:
            return
        files = tuple(p.name for p in checkpoint_paths(run.run_dir, trace))
        job = TrainedJob(job_id, job_dir(self.config.data_dir, job_id), tuple(record["trace"]), record["salt"],
                         record["bundle"], files, STEP_HASHES_FILE)
        job.oracle_factory = self._oracle_factory(job)
        await self.ctx.trained.add(job)

    def _oracle_factory(self, job: Any) -> Any:
        """The defender's `TraceOracle` over this seat's own run of ``job``."""
        async def make() -> Any:
            loaded = await self.ctx.load_job(job.job_id)
            if loaded is None:
                raise RunFailed(f"job {job.job_id.hex()[:12]}: no row for this trained job")
            offer = SignedOffer.decode(loaded[1]["offer"])
            training, program = await self.ctx.prepare_job(job.job_id, offer.signed_spec, job.bundle_id, [])
            run = self._run_of(job.job_id, training, program)
            trace = self.traces.get(job.job_id) or run.finished_trace()
            if trace is None:
                raise RunFailed(f"job {job.job_id.hex()[:12]}: its run has no finished trace")
            return await trio.to_thread.run_sync(run.oracle, trace)

        return make

    # -- what the chain says -------------------------------------------------------------

    async def _job_gone(self, job_id: bytes) -> str | None:
        """Why the job can no longer pay for a root we have not committed yet; None while it can."""
        chain = self.ctx.chain
        s = chain.settlement
        info = await chain.run(s.job, job_id)
        if info.status == JobStatus.NONE:
            return "the chain does not know the job"
        if info.status in OVER:
            return f"the job is {info.status.name} on chain"
        now = await chain.run(chain.chain.now)
        if info.status == JobStatus.OPEN:
            return "its seats were not all taken by the acceptance deadline" if now >= info.accept_by else None
        seat = await chain.run(s.seat, job_id, chain.account)
        if seat.status == SeatStatus.NONE:
            return "this account holds no seat in the job"
        if seat.forfeit != ForfeitReason.NONE:
            return f"our seat forfeited ({seat.forfeit.name})"
        if seat.status == SeatStatus.TAKEN and now >= info.commit_by:
            return "its commit deadline passed before our root was committed"
        return None

    @staticmethod
    def _over(info: Any) -> bool:
        return info.status in OVER

    async def _ended(self, job_id: bytes, info: Any, how: str) -> None:
        """The job is final on chain: the row says whether this seat was paid or forfeited."""
        ctx = self.ctx
        seat = await ctx.chain.run(ctx.chain.settlement.seat, job_id, ctx.chain.account)
        loaded = await ctx.load_job(job_id)
        record = dict(loaded[1]) if loaded is not None else {}
        forfeited = seat.forfeit != ForfeitReason.NONE
        record["ended"] = {"status": info.status.name, "forfeit": seat.forfeit.name,
                           "paid": 0 if forfeited or seat.status != SeatStatus.PAID else info.price // info.providers_wanted}
        await ctx.save_job(job_id, ROLE, "forfeited" if forfeited else "settled", record)
        self.working.discard(job_id)
        log.info("job %s: %s (%s)", job_id.hex()[:12], how, "forfeited " + seat.forfeit.name if forfeited else "paid")

    async def _collect(self) -> None:
        """Record how our revealed jobs ended once the keeper settled them, and withdraw."""
        ctx = self.ctx
        while True:
            await trio.sleep(self.watch_poll)
            chain = ctx.chain
            if chain.stale:
                continue
            for job in await ctx.storage.run(lambda: ctx.storage.jobs(role=ROLE)):
                if job.state not in ("committed", "revealed"):
                    continue
                try:
                    info = await chain.run(chain.settlement.job, job.job_id)
                    if info.status in OVER:
                        await self._ended(job.job_id, info, "settled on chain")
                except chain_failures() as error:
                    log.info("job %s: checking settlement: %s", job.job_id.hex()[:12], describe_chain_error(error))
            await withdraw_credit(ctx)


__all__ = ["ProviderRoleV2", "measure_step_millis_sync"]
