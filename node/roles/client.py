"""The client role: submits a job, escrows its price, hands it out, checks the results, settles.

A job's life is the table of `client_job.JOB_LIFE` (submitted, opened, handed, verifying,
verified, unfilled; settled, refunded, failed or lost); `ClientRole.drive` does the work of
each state and moves the job on by the event that work ended in. The disputes of the
client's jobs are refereed by its `referee.RefereeDuty`; what result is handed over is
`client_result`'s rule. Every state is resumable: a restarted client first reconciles each
job's row with the chain (`_reconcile`), then picks it up where it stands.
"""
from __future__ import annotations

import logging
import random
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

import trio
from libp2p.peer.id import ID

from protocol import (
    Commitment, Envelope, JobOffer, LocalProtocolError, RemoteProtocolError, decode_envelope, hash_tree,
)
from protocol.settings import CLIENT_SETTINGS

from ..errors import BadMessage, LocalError, PeerError
from ..framing import pack, unpack
from ..streams import RequestRefused
from .chain import chain_failures, describe_chain_error, format_ether, withdraw_credit
from .context import RoleContext
from .client_result import fetch_result, job_summary, settle_result, standing_reports, write_summary
from .jobfiles import JOB_FILE, BundleError, bundle_of_file, encode_bundle, install_job, job_dir, load_training
from .job_protocols import (
    JOB_LIMITS, JOB_PROTOCOL, TOPIC_JOBS, TOPIC_PROVIDERS, Advert, Challenge, JobAnnouncement, Offer,
    TraceReport, trace_request,
)
from .client_job import (
    DONE_STATES, HANDED, JOB_FINALIZED, JOB_MISSING, JOB_OPENED,
    JOB_REFUNDED, OPENED, REPORTS_IN, RESULT_CHECKED, SEATS_FILLED, SEATS_UNFILLED, SUBMITTED, UNFILLED, VERIFIED,
    VERIFYING, ClientJob, Phase, SubmitOptions, default_windows, ended, phase_of, step_seconds,
    verified_summary,
)
from .referee import RefereedJob, RefereeDuty

log = logging.getLogger(__name__)

ROLE = "client"
OFFER_TIMEOUT = 180.0  # a provider fetches the bundle and builds the program before answering
# An advert counts for this long, or for three of the network's advert intervals if longer
# (a large network advertises less often: every advert reaches every node).
ADVERT_FRESH = 30.0
ADVERTS_KEPT = 3
POLL = 1.0
CHAIN_RETRY = 5.0  # seconds before a state's work that the chain failed is tried again
WAIT_UNTIL = ("verified", "settled")  # where `ClientRole.wait` may stop
ANNOUNCED = (HANDED, VERIFYING, VERIFIED)  # a job is announced to auditors from the time it is handed out


class ClientRole:
    def __init__(self, ctx: RoleContext) -> None:
        self.ctx = ctx
        self.jobs: dict[bytes, ClientJob] = {}
        self.adverts: dict[ID, tuple[float, Advert]] = {}
        self.ready = trio.Event()
        self.opening: set[bytes] = set()  # jobs whose openJob is in flight: it may land on a new chain (same URL)
        self.referee = RefereeDuty(ctx, self._refereed)
        ctx.roles[ROLE] = self

    async def run(self) -> None:
        ctx = self.ctx
        ctx.job_ops["commitment"] = self.on_commitment
        ctx.open_handler = self.referee.on_open
        await ctx.on_gossip(TOPIC_PROVIDERS, self._on_advert)
        await ctx.wait_chain()
        ctx.chain_watch.on_lost.append(self._on_chain_lost)
        for job in await ctx.storage.run(lambda: ctx.storage.jobs(role=ROLE)):
            cj = ClientJob(job.job_id, unpack(job.spec), job.state)
            self.jobs[job.job_id] = cj
            for seat in cj.record.get("seats", {}).values():
                ctx.remember(ID.from_base58(seat["peer"]), seat["addrs"])
            if job.state not in DONE_STATES:
                await self._reconcile(cj)
            if cj.state in DONE_STATES:
                cj.done.set()
            else:
                if cj.state in ANNOUNCED:
                    self._start_announcing(cj)
                ctx.start_soon(self.drive, cj, name=f"client job {job.job_id.hex()[:12]}")
            await self.referee.resume(job.job_id)
        self.ready.set()
        await trio.sleep_forever()

    # -- finding providers ------------------------------------------------------------

    async def _on_advert(self, message: Any) -> None:
        advert = Advert.from_wire(unpack(message.data, peer=message.origin), message.origin)
        if advert.peer != str(message.origin):
            return
        self.adverts[message.origin] = (time.time(), advert)
        self.ctx.remember(message.origin, advert.addrs)
        await trio.lowlevel.checkpoint()

    def _candidates(self, cj: ClientJob, options: SubmitOptions, skip: set[ID]) -> list[tuple[ID, list[str]]]:
        out: list[tuple[ID, list[str]]] = []
        for addr in options.provider_addrs:
            peer = ID.from_base58(addr.rsplit("/p2p/", 1)[1])
            if peer not in skip:
                out.append((peer, [addr]))
        terms = cj.terms.terms
        fresh_for = max(ADVERT_FRESH, ADVERTS_KEPT * self.ctx.config.advert_interval)
        fresh = sorted(((a.price_per_step, str(p), p, a) for p, (seen, a) in self.adverts.items()
                        if time.time() - seen < fresh_for), key=lambda x: (x[0], x[1]))
        for price, _, peer, advert in fresh:
            if peer in skip or peer == self.ctx.host.peer_id or any(peer == p for p, _ in out):
                continue
            if advert.capacity < 1 or price * terms.steps > terms.payment:
                continue
            if advert.contract.lower() != self.ctx.chain.address.lower():
                continue
            out.append((peer, advert.addrs))
        return out

    # -- submitting -------------------------------------------------------------------

    async def submit(self, job_file: Path, options: SubmitOptions,
                     on_open: Callable[[ClientJob], None] | None = None) -> bytes:
        """Open the job on chain and hand it to providers; returns its id once they took it.
        The rest (results, disputes, settlement) goes on in the background: `wait`.
        ``on_open`` is called with the job as soon as its deadlines are fixed (to follow it)."""
        from ..training_oracle import job_terms

        ctx = self.ctx
        chain = await ctx.wait_chain()
        await self.ready.wait()
        try:
            toml_text, files = await trio.to_thread.run_sync(bundle_of_file, Path(job_file))
            training = await trio.to_thread.run_sync(load_training, Path(job_file))
        except BundleError as error:
            raise LocalError(str(error)) from None
        file_ids = {name: await ctx.blobs.store.put_file(path) for name, path in files.items()}
        bundle = await ctx.blobs.store.put(encode_bundle(toml_text, file_ids))
        try:
            settings = options.job_settings(training.spec.steps * step_seconds(training))
        except LocalProtocolError as error:
            raise LocalError(str(error)) from None
        options = replace(options, **{name: getattr(settings, name) for name in CLIENT_SETTINGS})
        now = max(await chain.run(chain.chain.now), int(time.time()))
        accept_by = now + int(settings.accept_within)
        commit_by = accept_by + int(settings.commit_within)
        challenge_by = commit_by + int(settings.challenge_within)
        rules = settings.rules
        signed = await trio.to_thread.run_sync(lambda: job_terms(
            training, ctx.identity, rules=rules, payment=options.price, stake=options.stake, deadline=challenge_by,
            nonce=random.getrandbits(63)))
        job_id = signed.job_id
        directory = job_dir(ctx.config.data_dir, job_id)
        await trio.to_thread.run_sync(install_job, directory, toml_text,
                                      {name: ctx.blobs.store.path(i) for name, i in file_ids.items()})
        record = {
            "terms": signed.encode(), "bundle": bundle, "contract": chain.address, "client_account": chain.account,
            "client_addrs": ctx.host.listen_addrs, "options": options.__dict__,
            "deadlines": {"accept_by": accept_by, "commit_by": commit_by, "challenge_by": challenge_by},
            "seats": {}, "verdicts": [],
        }
        cj = ClientJob(job_id, record, SUBMITTED, training=training)
        self.jobs[job_id] = cj
        await ctx.save_job(job_id, ROLE, SUBMITTED, record)
        if on_open is not None:
            on_open(cj)
        s = chain.settlement
        await chain.run(chain.ensure_funds_sync, options.price)
        self.opening.add(job_id)
        try:
            await chain.run(lambda: s.open_job(job_id, price=options.price, providers_wanted=options.providers,
                                               provider_stake=options.stake, accept_by=accept_by, commit_by=commit_by,
                                               challenge_by=challenge_by, ruling_period=rules.ruling_period))
        finally:
            self.opening.discard(job_id)
        log.info("job %s: opened on chain, %s ether for %d provider(s)", job_id.hex()[:12],
                 format_ether(options.price), options.providers)
        await self._advance(cj, JOB_OPENED)
        await self._advance(cj, await self._hand_over(cj))  # before returning: the job is handed out or unfilled
        ctx.start_soon(self.drive, cj, name=f"client job {job_id.hex()[:12]}")
        return job_id

    async def wait(self, job_id: bytes, until: str = "settled") -> dict:
        """The job's result summary, once it is settled (or failed); with ``until="verified"``,
        as soon as a checked result is in hand (the job goes on: see `verified_summary`)."""
        if until not in WAIT_UNTIL:
            raise ValueError(f"wait until one of {', '.join(WAIT_UNTIL)}, not {until!r}")
        cj = self.jobs[job_id]
        if until == "verified":
            while cj.state != VERIFIED and not cj.done.is_set():
                with trio.move_on_after(POLL):
                    await cj.changed.wait()
            if not cj.done.is_set():
                return verified_summary(cj)
        await cj.done.wait()
        return cj.record.get("result") or {"job": job_id.hex(), "state": cj.state, "ended": ended(cj.state, cj.record)}

    def _offer(self, cj: ClientJob) -> Offer:
        envelope = Envelope.seal(JobOffer(cj.terms), identity=self.ctx.identity, job_id=cj.job_id, seq=1,
                                 deadline=cj.record["deadlines"]["accept_by"] * 1000)
        r = cj.record
        return Offer(envelope.encode(), r["bundle"], r["contract"], r["client_account"], r["client_addrs"])

    async def _save(self, cj: ClientJob) -> None:
        await self.ctx.save_job(cj.job_id, ROLE, cj.state, cj.record)
        cj.notify()

    # -- a job's life: one state's work at a time, each ending in an event of JOB_LIFE ----------

    async def drive(self, cj: ClientJob) -> None:
        """Do each state's work and move the job on by the event it ends in, to the job's end."""
        work = {SUBMITTED: self._find_on_chain, OPENED: self._hand_over, HANDED: self._await_reports,
                VERIFYING: self._resolve, VERIFIED: self._settle, UNFILLED: self._settle}
        failing = False  # the chain failed the last try: one line per outage, not one per try
        # Cancelled by the chain watch when the job is lost with its chain (`_on_chain_lost`).
        with trio.CancelScope() as cj.drive_scope:
            try:
                await self._training(cj)
                while not cj.done.is_set():
                    try:
                        event = await work[cj.state](cj)
                    except chain_failures() as error:
                        log.log(logging.DEBUG if failing else logging.INFO, "job %s: %s: %s; trying again in %g s",
                                cj.job_id.hex()[:12], cj.state, describe_chain_error(error), CHAIN_RETRY)
                        failing = True
                        await trio.sleep(CHAIN_RETRY)
                        continue
                    failing = False
                    await self._advance(cj, event)
            finally:
                cj.drive_scope = None
                if cj.state in DONE_STATES:
                    cj.done.set()

    async def _on_chain_lost(self, old: Any, new: Any) -> None:
        """The chain restarted under us (the chain watch joined the new one): our jobs that
        the new chain does not know are over, lost with the old chain (failed if never opened)."""
        from contracts import JobStatus

        from .chain_watch import lost_with

        lost = []
        for cj in list(self.jobs.values()):
            if cj.done.is_set() or cj.job_id in self.opening:
                continue  # an openJob in flight goes on: on the new chain if it lands there, else submit fails
            if (await new.run(new.settlement.job, cj.job_id)).status != JobStatus.NONE:
                continue
            if cj.drive_scope is not None:
                cj.drive_scope.cancel()
            cj.record["lost_with_chain"] = lost_with(old, cj.state)
            await self._advance(cj, JOB_MISSING)
            lost.append(cj.job_id)
        if lost:
            log.warning("%d client job(s) lost with the old chain, their escrow with it: %s", len(lost),
                        ", ".join(j.hex()[:12] for j in lost))

    async def _advance(self, cj: ClientJob, event: str) -> None:
        """The job's state moves on by ``event`` (in `ClientJob.apply`, the only place it
        changes), the row is saved, and what starts or ends with the new state does."""
        over = cj.apply(event)
        await self._save(cj)
        if event == SEATS_FILLED:
            self._start_announcing(cj)
        if over:
            cj.done.set()

    async def _reconcile(self, cj: ClientJob) -> None:
        """After a restart, before any work: move the job by what the chain did while we were
        away (closed: refunded, or finalized once verified; gone: lost). A chain that cannot
        answer now is no verdict: the job's work reads it again."""
        from contracts import JobStatus

        chain = self.ctx.chain
        try:
            info, final_at = await self.ctx.chain_watch.read_final(chain, cj.job_id)
            if info.status in (JobStatus.FINALIZED, JobStatus.REFUNDED) and final_at is None:
                return  # not deep enough yet: the job's work waits for it
            if info.status == JobStatus.NONE and cj.state != SUBMITTED:
                log.warning("job %s: the chain does not know the job (%s here): lost", cj.job_id.hex()[:12], cj.state)
                await self._advance(cj, JOB_MISSING)
            elif info.status == JobStatus.REFUNDED or info.status == JobStatus.FINALIZED and cj.state in (VERIFIED, UNFILLED):
                log.info("job %s: %s on chain while this client was away", cj.job_id.hex()[:12], info.status.name)
                await self._training(cj)
                await self._advance(cj, await self._close(cj, info))
        except chain_failures() as error:
            log.info("job %s: reconciling with the chain: %s", cj.job_id.hex()[:12], describe_chain_error(error))

    async def _find_on_chain(self, cj: ClientJob) -> str:
        """A job stopped before or while it was opened on chain: did the chain get it?"""
        from contracts import JobStatus

        info = await self.ctx.chain.run(self.ctx.chain.settlement.job, cj.job_id)
        return JOB_OPENED if info.status != JobStatus.NONE else JOB_MISSING

    async def _hand_over(self, cj: ClientJob) -> str:
        """Offer seats until the wanted number of providers took one or acceptance closes."""
        options = SubmitOptions(**cj.record["options"])
        accept_by = cj.record["deadlines"]["accept_by"]
        offer = pack(self._offer(cj).to_wire())
        asked: dict[ID, float] = {}
        lead = await self._clock_lead()
        while len(cj.record["seats"]) < options.providers and time.time() + lead < accept_by - 2:
            await self._offer_round(cj, options, asked, options.providers - len(cj.record["seats"]), offer, accept_by)
        # a seat taken while we were down (killed between a provider's accept and our record of
        # it) is the chain's: the provider trains and is paid for it, so we want its result
        await self._seats_from_chain(cj, {str(peer): addrs for peer, addrs in self._candidates(cj, options, set())})
        if len(cj.record["seats"]) < options.providers:
            cj.record["unfilled"] = True  # refunded, then: ended unfilled
            log.warning("job %s: only %d of %d providers took it", cj.job_id.hex()[:12], len(cj.record["seats"]),
                        options.providers)
            return SEATS_UNFILLED
        log.info("job %s: handed to %d provider(s)", cj.job_id.hex()[:12], len(cj.record["seats"]))
        return SEATS_FILLED

    async def _offer_round(self, cj: ClientJob, options: SubmitOptions, asked: dict[ID, float], wanted: int,
                           offer: bytes, accept_by: int) -> None:
        """Offer the job to up to ``wanted`` fresh candidates at once (none asked in the last 10 s,
        none seated); with none to ask, wait a moment for adverts."""
        skip = {p for p, t in asked.items() if time.time() - t < 10} | {
            ID.from_base58(seat["peer"]) for seat in cj.record["seats"].values()}
        batch = self._candidates(cj, options, skip)[:wanted]
        if not batch:
            await trio.sleep(0.5)
            return
        async with trio.open_nursery() as nursery:
            for peer, addrs in batch:
                asked[peer] = time.time()
                nursery.start_soon(self._offer_to, cj, peer, addrs, offer, accept_by)

    async def _offer_to(self, cj: ClientJob, peer: ID, addrs: list[str], offer: bytes, accept_by: int) -> None:
        """Offer the job to ``peer``; what it says it took counts only as the chain's seats show it."""
        ctx = self.ctx
        try:
            await ctx.reach(peer, addrs)
            answer = unpack(await ctx.host.request(peer, JOB_PROTOCOL, offer, timeout=min(
                OFFER_TIMEOUT, max(1.0, accept_by - time.time())), limits=JOB_LIMITS), peer=peer)
            if not isinstance(answer, dict) or not isinstance(answer.get("account"), str):
                raise BadMessage("offer answer without an account", peer=peer)
        except PeerError as error:
            log.info("job %s: offer to %s: %s", cj.job_id.hex()[:12], peer, error)
            return
        ctx.remember(peer, addrs)
        try:
            await self._seats_from_chain(cj, {str(peer): list(addrs)})
        except chain_failures() as error:  # the next round reads the seats again
            log.info("job %s: reading its seats: %s", cj.job_id.hex()[:12], describe_chain_error(error))

    async def _seats_from_chain(self, cj: ClientJob, addrs: dict[str, list[str]] | None = None) -> None:
        """The job's seats as the chain lists them, each with the peer of its registered key."""
        chain = self.ctx.chain
        for account in await self._seat_accounts(cj):
            key = await chain.run(chain.key_of_sync, account)
            peer = str(self.ctx.peer_of(key))
            seat = cj.record["seats"].setdefault(key.hex(), {"account": account, "peer": peer, "addrs": [],
                                                             "report": None})
            if addrs and peer in addrs:
                seat["addrs"] = addrs[peer]
        await self._save(cj)

    async def _seat_accounts(self, cj: ClientJob) -> tuple[str, ...]:
        chain = self.ctx.chain
        return await chain.run(chain.settlement.providers, cj.job_id)

    # -- the work of the later states -----------------------------------------------------

    def _start_announcing(self, cj: ClientJob) -> None:
        self.ctx.start_soon(self._announce, cj, name=f"announce {cj.job_id.hex()[:12]}")

    async def _announce(self, cj: ClientJob) -> None:
        """Announce the job to auditors until its challenge window closes. Gossip may lose
        a message; a repeat costs little and auditors drop what they know."""
        ctx = self.ctx
        announcement = JobAnnouncement(self._offer(cj).offer, cj.record["bundle"], cj.record["contract"],
                                       ctx.host.listen_addrs).to_wire()
        while time.time() < cj.record["deadlines"]["challenge_by"] and cj.state not in DONE_STATES:
            await ctx.publish(TOPIC_JOBS, announcement)
            await trio.sleep(ctx.config.regossip_interval)

    async def _await_reports(self, cj: ClientJob) -> str:
        """Until every seat delivered its trace report or the commit deadline passed."""
        commit_by = cj.record["deadlines"]["commit_by"]
        last_poll = 0.0
        lead = await self._clock_lead()
        while any(seat["report"] is None for seat in cj.record["seats"].values()) and time.time() + lead < commit_by:
            if time.time() - last_poll > 5:
                last_poll = time.time()
                await self._fetch_missing_reports(cj)
            with trio.move_on_after(POLL):
                await cj.changed.wait()
        return REPORTS_IN

    async def _clock_lead(self) -> float:
        """Seconds the chain's clock runs ahead of ours (never less than 0): the deadlines
        are chain time, and a wait measured on our clock alone would outlast them."""
        chain = self.ctx.chain
        try:
            return max(0.0, await chain.run(chain.chain.now) - time.time())
        except chain_failures() as error:
            log.info("reading the chain's clock: %s", describe_chain_error(error))
            return 0.0

    async def _fetch_missing_reports(self, cj: ClientJob) -> None:
        """Ask providers that committed on chain but whose report never came."""
        chain = self.ctx.chain
        for key, seat in cj.record["seats"].items():
            if seat["report"] is not None:
                continue
            try:
                info = await chain.run(chain.settlement.seat, cj.job_id, seat["account"])
                if not info.committed:
                    continue
                peer = ID.from_base58(seat["peer"])
                if not seat["addrs"] and peer in self.adverts:  # a seat read from the chain: its advert's
                    seat["addrs"] = list(self.adverts[peer][1].addrs)
                await self.ctx.reach(peer, seat["addrs"])
                answer = await self.ctx.host.request(peer, JOB_PROTOCOL, pack(trace_request(cj.job_id)), limits=JOB_LIMITS)
                await self._take_report(cj, peer, unpack(answer, peer=peer))
            except (PeerError, LocalError) as error:
                log.info("job %s: fetching a trace report: %s", cj.job_id.hex()[:12], error)
            except chain_failures() as error:
                log.info("job %s: checking a seat: %s", cj.job_id.hex()[:12], describe_chain_error(error))

    async def on_commitment(self, peer: ID, obj: dict) -> dict:
        report = TraceReport.from_wire(obj, peer)
        try:
            envelope = decode_envelope(report.commitment)
        except RemoteProtocolError as error:
            raise BadMessage(f"trace report: {error}", peer=peer) from None
        cj = self.jobs.get(envelope.job_id)
        if cj is None:
            raise RequestRefused("not a job of this client")
        await self._take_report(cj, peer, obj)
        return {}

    async def _take_report(self, cj: ClientJob, peer: ID, obj: Any) -> None:
        """Check a trace report against its signed root and keep it for its seat."""
        from ..storage import Commitment as StoredCommitment

        report = TraceReport.from_wire(obj, peer)
        try:
            envelope = decode_envelope(report.commitment)
        except RemoteProtocolError as error:
            raise BadMessage(f"trace report: {error}", peer=peer) from None
        if not isinstance(envelope.body, Commitment) or envelope.job_id != cj.job_id:
            raise BadMessage("a trace report carries a commitment of its job", peer=peer)
        root = envelope.body.root
        seat = cj.record["seats"].get(root.signer.hex())
        if seat is None or root.role != "provider":
            raise RequestRefused("the signer holds no seat in this job")
        schedule = cj.terms.terms.schedule
        if root.leaf_count != schedule.checkpoints or root.sequence != schedule.checkpoints - 1:
            raise BadMessage("the commitment does not cover every checkpoint of the job", peer=peer)
        if hash_tree(report.trace).root != root.root or len(report.trace) != schedule.checkpoints:
            raise BadMessage("the reported state hashes do not hash to the signed root", peer=peer)
        conflict = await self.ctx.storage.run(self.ctx.storage.add_commitment, StoredCommitment(
            cj.job_id, root.role, root.signer, root.sequence, root.root, root.signature, envelope.encode()))
        if conflict is not None:
            log.warning("job %s: provider %s signed two different roots", cj.job_id.hex()[:12], root.signer.hex()[:8])
        if seat["report"] is None:
            seat["report"] = report.to_wire("trace")
            await self._save(cj)
            log.info("job %s: trace report of %s received, root %s", cj.job_id.hex()[:12], root.signer.hex()[:8],
                     root.root.hex()[:16])

    async def _resolve(self, cj: ClientJob) -> str:
        """Dispute differing roots, wait for every dispute's verdict, fetch and check the result."""
        chain = self.ctx.chain
        valid: dict[str, TraceReport] = {}
        for key, seat in cj.record["seats"].items():
            if seat["report"] is None:
                continue
            report = TraceReport.from_wire(seat["report"], None)
            root = decode_envelope(report.commitment).body.root
            info = await chain.run(chain.settlement.seat, cj.job_id, seat["account"])
            if info.committed and info.trace_root == root.root:
                valid[key] = report
            else:
                log.warning("job %s: %s's report is not what it committed on chain", cj.job_id.hex()[:12], key[:8])
        groups: dict[bytes, list[str]] = {}
        for key, report in valid.items():
            groups.setdefault(decode_envelope(report.commitment).body.root.root, []).append(key)
        if len(groups) > 1:
            log.info("job %s: %d different trace roots; starting disputes", cj.job_id.hex()[:12], len(groups))
            first, *others = [members[0] for members in groups.values()]
            asked = cj.record.setdefault("challenges", [])
            for other in others:
                if [first, other] not in asked:  # asked once, even across a restart
                    asked.append([first, other])
                    await self._save(cj)
                    await self._start_dispute(cj, first, other)
        await self._await_disputes(cj, until=cj.record["deadlines"]["challenge_by"] if len(groups) > 1 else 0)
        await fetch_result(self.ctx, cj, await standing_reports(self.ctx, cj))
        return RESULT_CHECKED

    async def _start_dispute(self, cj: ClientJob, a: str, b: str) -> None:
        """Ask provider ``a`` to challenge ``b`` (or ``b`` to challenge ``a``, if ``a`` will not)."""
        ctx = self.ctx
        seats = cj.record["seats"]
        for challenger, respondent in ((a, b), (b, a)):
            peer = ID.from_base58(seats[challenger]["peer"])
            report = TraceReport.from_wire(seats[respondent]["report"], None)
            ask = Challenge(cj.job_id, report.commitment, seats[respondent]["account"])
            try:
                await ctx.reach(peer, seats[challenger]["addrs"])
                answer = unpack(await ctx.host.request(peer, JOB_PROTOCOL, pack(ask.to_wire()), limits=JOB_LIMITS,
                                                       timeout=60.0), peer=peer)
                log.info("job %s: %s challenged %s (chain dispute #%s)", cj.job_id.hex()[:12], challenger[:8],
                         respondent[:8], answer.get("chain_dispute") if isinstance(answer, dict) else "?")
                return
            except PeerError as error:
                log.info("job %s: asking %s to challenge %s: %s", cj.job_id.hex()[:12], challenger[:8], respondent[:8], error)
        log.warning("job %s: neither provider would dispute the other", cj.job_id.hex()[:12])

    async def _await_disputes(self, cj: ClientJob, *, until: float) -> None:
        """Until every dispute of the job is over: ours recorded, none open on chain. With
        ``until``, also wait (up to then) for the disputes we asked for to appear."""
        from contracts import JobStatus

        chain = self.ctx.chain
        while True:
            info = await chain.run(chain.settlement.job, cj.job_id)
            running = [s for s in cj.sessions if not s.recorded]
            if not running and info.status != JobStatus.DISPUTED and (cj.sessions or time.time() >= until):
                return
            if info.status == JobStatus.DISPUTED and not running:
                await self.referee.lapse_overdue(cj.job_id)
            with trio.move_on_after(POLL):
                await cj.changed.wait()

    async def _settle(self, cj: ClientJob) -> str:
        from contracts import JobStatus

        ctx = self.ctx
        chain = ctx.chain
        s = chain.settlement
        challenge_by = cj.record["deadlines"]["challenge_by"]
        accept_by = cj.record["deadlines"]["accept_by"]
        ready_at = accept_by if cj.state == UNFILLED else challenge_by
        while True:
            info, final_at = await ctx.chain_watch.read_final(chain, cj.job_id)
            if final_at is not None:
                break  # over on chain, and deep enough to hand over what follows from it
            if info.status in (JobStatus.FINALIZED, JobStatus.REFUNDED):
                with trio.move_on_after(POLL):
                    await cj.changed.wait()
                continue
            now = max(await chain.run(chain.chain.now), int(time.time()))
            running = [x for x in cj.sessions if not x.recorded]
            if info.status == JobStatus.DISPUTED and not running and now >= challenge_by:
                await self.referee.lapse_overdue(cj.job_id)
            elif now >= ready_at and not running and info.status != JobStatus.DISPUTED:
                try:
                    await chain.run(s.settle, cj.job_id)
                    continue
                except chain_failures() as error:
                    log.info("job %s: settling: %s", cj.job_id.hex()[:12], describe_chain_error(error))
            with trio.move_on_after(POLL):
                await cj.changed.wait()
        return await self._close(cj, info)

    async def _close(self, cj: ClientJob, info: Any) -> str:
        """The job is over on chain: our credit withdrawn, the result kept only if its root
        stood (`client_result.settle_result`), the summary kept and written to result.json."""
        from contracts import JobStatus

        await withdraw_credit(self.ctx)
        finalized = info.status == JobStatus.FINALIZED
        await settle_result(self.ctx, cj, finalized)
        cj.record["result"] = await job_summary(self.ctx, cj, info)
        await write_summary(self.ctx, cj, cj.record["result"])
        log.info("job %s: settled on chain (%s)", cj.job_id.hex()[:12], info.status.name)
        return JOB_FINALIZED if finalized else JOB_REFUNDED

    # -- refereeing: the duty's, this client hands it its jobs ----------------------------

    def _refereed(self, job_id: bytes) -> RefereedJob | None:
        cj = self.jobs.get(job_id)
        if cj is None:
            return None
        return RefereedJob(cj.terms, cj.sessions, training=lambda: self._training(cj),
                           on_ruled=lambda summary: self._on_ruled(cj, summary), changed=cj.notify)

    async def _training(self, cj: ClientJob) -> Any:
        if cj.training is None:
            cj.training = await trio.to_thread.run_sync(
                load_training, job_dir(self.ctx.config.data_dir, cj.job_id) / JOB_FILE)
        return cj.training

    async def _on_ruled(self, cj: ClientJob, summary: dict) -> None:
        cj.record["verdicts"] = [v for v in cj.record["verdicts"] if v["dispute"] != summary["dispute"]] + [summary]
        await self._save(cj)


__all__ = ["ClientRole", "Phase", "SubmitOptions", "default_windows", "phase_of", "verified_summary"]
