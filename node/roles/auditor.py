"""The auditor role: replays providers' work, challenges what does not replay, earns from slashes.

It learns jobs from the clients' announcements and commitments from the providers'
gossip. For each audited job (a fraction ``audit_jobs`` of those announced) and each
provider that committed, it fetches the provider's trace report (``op: trace``) and
checks it against the signed root and the root committed on chain, then replays:

- ``audit_rate`` 1: the whole job, its own run from the initial state, compared
  checkpoint by checkpoint;
- below 1: ``ceil(rate * C)`` of the C checkpoint intervals, drawn at random, each
  replayed from the provider's own checkpoint (fetched as a blob and checked against
  the provider's state hash). By `protocol.sampling`, a provider that corrupted j
  intervals escapes one auditor with probability C(C-j, m) / C(C, m).

A mismatch (or a provider that cannot serve its own checkpoints) leads to the auditor's
own full run; if its trace root differs, it opens a dispute on chain with a bond of the
job's provider stake and plays the game as the challenger, with its own run as its oracle.
Audit results live in the job's row: ``audits[provider key] = {state, ...}``. A restarted
auditor first reconciles its jobs with the chain: the audits of a job already over there
are dropped (the row ``closed``), those of a job the chain does not know too (``lost``).
"""
from __future__ import annotations

import logging
import random
import threading
import time
from typing import Any

import trio
from libp2p.peer.id import ID

from protocol import Commitment, JobOffer, RemoteProtocolError, decode_envelope, hash_tree
from protocol.sampling import sample_size

from ..errors import LocalError, PeerError, is_transient
from ..framing import pack, unpack
from .chain import chain_failures, describe_chain_error, withdraw_credit
from .chain_watch import forget_lost_jobs
from .context import PartySpec, RoleContext, terms_of
from .jobfiles import BundleError, job_dir
from .job_protocols import JOB_LIMITS, JOB_PROTOCOL, TOPIC_COMMITMENTS, TOPIC_JOBS, CommitmentNotice, JobAnnouncement, TraceReport, trace_request
from .runner import JobRun, RunFailed, RunStopped, resolve_device, trace_hashes

log = logging.getLogger(__name__)

ROLE = "auditor"
AUDIT_DIR = "audit-run"
FINAL = ("ok", "challenged", "mismatch", "failed", "dropped")  # dropped: the job was over on chain first
LIVE = ("watching", "auditing")  # a job's states while audits may still come or run
PENDING_NOTICES = 256
COLLECT_POLL = 5.0
# An audit cut off by the network (provider or client out of reach, slow, stream reset) is
# tried again after 5 and 10 s; one that found the provider wrong is not.
AUDIT_ATTEMPTS = 3
AUDIT_RETRY_DELAY = 5.0


class AuditorRole:
    def __init__(self, ctx: RoleContext) -> None:
        self.ctx = ctx
        self.config = ctx.config
        self.rng = random.Random()
        self._queue_send, self._queue = trio.open_memory_channel[tuple[bytes, str]](1024)
        self._early: dict[bytes, list[tuple[str, dict]]] = {}  # commitments seen before their job
        self.runs: dict[bytes, tuple[JobRun, Any]] = {}
        # One own run per job: two providers' audits share it, and two runs in one
        # directory would resume from each other's half-written checkpoints.
        self._run_locks: dict[bytes, trio.Lock] = {}
        self._tries: dict[tuple[bytes, str], int] = {}  # failed attempts of each audit
        ctx.roles[ROLE] = self

    async def run(self) -> None:
        ctx = self.ctx
        ctx.party_sources.append(self.party_spec)
        await ctx.on_gossip(TOPIC_JOBS, self._on_job)
        await ctx.on_gossip(TOPIC_COMMITMENTS, self._on_commitment)
        await ctx.wait_chain()
        ctx.chain_watch.on_lost.append(lambda old, new: forget_lost_jobs(ctx, ROLE, LIVE, old, new))
        for job in await ctx.storage.run(lambda: ctx.storage.jobs(role=ROLE)):
            if job.state not in LIVE or not await self._reconcile(job.job_id):
                continue
            record = unpack(job.spec)
            for key, entry in record.get("audits", {}).items():
                if entry["state"] not in FINAL:
                    self._queue_send.send_nowait((job.job_id, key))
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._collect)
            async for job_id, key in self._queue:
                try:
                    await self.audit(job_id, key)
                except (PeerError, LocalError, RemoteProtocolError, BundleError, RunFailed) as error:
                    tries = self._tries[(job_id, key)] = self._tries.get((job_id, key), 0) + 1
                    if is_transient(error) and tries < AUDIT_ATTEMPTS:
                        delay = AUDIT_RETRY_DELAY * 2 ** (tries - 1)
                        log.info("audit of %s in job %s: %s; trying again in %g s", key[:8], job_id.hex()[:12],
                                 error, delay)
                        nursery.start_soon(self._requeue, job_id, key, delay)
                        continue
                    log.warning("audit of %s in job %s failed: %s", key[:8], job_id.hex()[:12], error)
                    await self._mark(job_id, key, "failed", str(error)[:200])
                except RunStopped:
                    return
                self._tries.pop((job_id, key), None)  # the audit reached its end

    async def _reconcile(self, job_id: bytes) -> bool:
        """After a restart, before any audit: a job already over on chain has nothing left to
        audit (its audits dropped, the row ``closed``); one the chain does not know is ``lost``.
        True when the job is still open. A chain that cannot answer now is no verdict."""
        from contracts import JobStatus

        ctx = self.ctx
        chain = ctx.chain
        try:
            status = (await chain.run(chain.settlement.job, job_id)).status
        except chain_failures() as error:
            log.info("job %s: reconciling with the chain: %s", job_id.hex()[:12], describe_chain_error(error))
            return True
        if status not in (JobStatus.FINALIZED, JobStatus.REFUNDED, JobStatus.NONE):
            return True
        async with ctx.job_lock(job_id):
            job, record = await ctx.load_job(job_id)
            why = f"the job was {status.name} on chain before the audit ended" if status != JobStatus.NONE \
                else "the chain does not know the job"
            dropped = [key for key, entry in record["audits"].items() if entry["state"] not in FINAL]
            for key in dropped:
                record["audits"][key].update(state="dropped", detail=why)
            await ctx.save_job(job_id, ROLE, "closed" if status != JobStatus.NONE else "lost", record)
        log.info("job %s: %s (found on restart): %d audit(s) dropped", job_id.hex()[:12], why, len(dropped))
        return False

    async def _requeue(self, job_id: bytes, key: str, delay: float) -> None:
        await trio.sleep(delay)
        await self._queue_send.send((job_id, key))

    async def _collect(self) -> None:
        while True:
            await trio.sleep(COLLECT_POLL)
            await withdraw_credit(self.ctx)

    # -- learning of jobs and commitments ------------------------------------------------

    async def _on_job(self, message: Any) -> None:
        ctx = self.ctx
        announcement = JobAnnouncement.from_wire(unpack(message.data, peer=message.origin), message.origin)
        envelope = decode_envelope(announcement.offer)
        if not isinstance(envelope.body, JobOffer) or envelope.sender != ctx.key_of(message.origin):
            return  # only a job's client announces it
        job_id = envelope.job_id
        if await ctx.load_job(job_id) is not None or ctx.chain is None:
            return  # known already (or one of our own jobs in another role)
        if announcement.contract.lower() != ctx.chain.address.lower():
            return
        audited = self.rng.random() < self.config.audit_jobs
        record = {"terms": envelope.body.terms.encode(), "bundle": announcement.bundle,
                  "contract": announcement.contract, "client_addrs": announcement.client_addrs, "audits": {}}
        await ctx.save_job(job_id, ROLE, "watching" if audited else "skipped", record)
        ctx.remember(message.origin, announcement.client_addrs)
        log.info("job %s announced: %s", job_id.hex()[:12], "auditing it" if audited else "not audited (sampled out)")
        for key, entry in self._early.pop(job_id, []):
            await self._add_audit(job_id, key, entry)

    async def _on_commitment(self, message: Any) -> None:
        ctx = self.ctx
        notice = CommitmentNotice.from_wire(unpack(message.data, peer=message.origin), message.origin)
        envelope = decode_envelope(notice.commitment)
        if not isinstance(envelope.body, Commitment) or envelope.sender != ctx.key_of(message.origin):
            return
        ctx.remember(message.origin, notice.addrs)
        entry = {"state": "queued", "account": notice.account, "addrs": notice.addrs, "commitment": notice.commitment}
        job_id, key = envelope.job_id, envelope.sender.hex()
        if await ctx.load_job(job_id) is None:
            if len(self._early) < PENDING_NOTICES:
                self._early.setdefault(job_id, []).append((key, entry))
            return
        await self._add_audit(job_id, key, entry)

    async def _add_audit(self, job_id: bytes, key: str, entry: dict) -> None:
        ctx = self.ctx
        async with ctx.job_lock(job_id):
            job, record = await ctx.load_job(job_id)
            if job.role != ROLE or job.state in ("skipped", "closed", "lost") or key in record["audits"]:
                return
            record["audits"][key] = entry
            await ctx.save_job(job_id, ROLE, "auditing", record)
        self._queue_send.send_nowait((job_id, key))

    async def _mark(self, job_id: bytes, key: str, state: str, detail: str = "", **extra: Any) -> None:
        ctx = self.ctx
        async with ctx.job_lock(job_id):
            job, record = await ctx.load_job(job_id)
            record["audits"][key].update(state=state, detail=detail, **extra)
            done = all(a["state"] in FINAL for a in record["audits"].values())
            await ctx.save_job(job_id, ROLE, "audited" if done else "auditing", record)

    # -- one audit -----------------------------------------------------------------------

    async def audit(self, job_id: bytes, key: str) -> None:
        ctx = self.ctx
        job, record = await ctx.load_job(job_id)
        entry = record["audits"][key]
        signed = terms_of(record)
        terms = signed.terms
        provider = ctx.peer_of(bytes.fromhex(key))
        client = ctx.peer_of(terms.client)
        ctx.remember(client, record["client_addrs"])
        await ctx.reach(provider, entry["addrs"])
        training, program = await ctx.prepare_job(job_id, signed, record["bundle"], [provider, client])
        answer = await ctx.host.request(provider, JOB_PROTOCOL, pack(trace_request(job_id)), limits=JOB_LIMITS)
        report = TraceReport.from_wire(unpack(answer, peer=provider), provider)
        envelope = decode_envelope(report.commitment)
        root = envelope.body.root if isinstance(envelope.body, Commitment) else None
        gossiped = decode_envelope(entry["commitment"]).body.root
        if root is None or root.statement != gossiped.statement or envelope.sender != gossiped.signer:
            raise RemoteProtocolError("the provider's trace report is not the commitment it gossiped")
        if hash_tree(report.trace).root != root.root or len(report.trace) != terms.schedule.checkpoints:
            raise RemoteProtocolError("the provider's state hashes do not hash to its signed root")
        chain = ctx.chain
        seat = await chain.run(chain.settlement.seat, job_id, report.account)
        if await chain.run(chain.key_of_sync, report.account) != root.signer or not seat.committed \
                or seat.trace_root != root.root:
            raise RemoteProtocolError("the provider's root is not the one committed on chain")
        from ..storage import Commitment as StoredCommitment

        conflict = await ctx.storage.run(ctx.storage.add_commitment, StoredCommitment(
            job_id, root.role, root.signer, root.sequence, root.root, root.signature, report.commitment))
        if conflict is not None:
            log.warning("job %s: provider %s signed two different roots", job_id.hex()[:12], key[:8])
        schedule = terms.schedule
        intervals = schedule.intervals
        sample = sorted(self.rng.sample(range(intervals), sample_size(self.config.audit_rate, intervals)))
        suspect = report.trace[0] != terms.initial_state
        if not suspect and len(sample) < intervals:
            suspect = await self._replay_sample(job_id, training, provider, report, sample)
            if not suspect:
                log.info("job %s: provider %s passes %d sampled interval(s) %s", job_id.hex()[:12], key[:8],
                         len(sample), sample)
                await self._mark(job_id, key, "ok", f"replayed intervals {sample}")
                return
        run, trace = await self._own_run(job_id, training, program)
        own = trace_hashes(trace)
        if own == report.trace:
            log.info("job %s: provider %s matches this auditor's own run", job_id.hex()[:12], key[:8])
            await self._mark(job_id, key, "ok", "whole job replayed")
            return
        first = next(c for c, (a, b) in enumerate(zip(own, report.trace)) if a != b)
        log.warning("job %s: provider %s departs from the job at checkpoint %d; challenging", job_id.hex()[:12],
                    key[:8], first)
        await self._mark(job_id, key, "mismatch", f"first differing checkpoint {first}")
        from contracts import DisputeOpened

        try:
            opened = await chain.run(chain.settlement.open_dispute, job_id, report.account)
        except chain_failures() as error:
            await self._mark(job_id, key, "mismatch", f"first differing checkpoint {first}; not challenged: "
                                                     f"{describe_chain_error(error)}")
            log.info("job %s: not challenging %s: %s", job_id.hex()[:12], key[:8], describe_chain_error(error))
            return
        chain_dispute = opened.one(DisputeOpened).dispute_id
        spec = PartySpec(signed, ROLE, lambda: run.oracle(trace))
        await ctx.challenge(spec, root, chain_dispute, record["client_addrs"])
        await self._mark(job_id, key, "challenged", f"first differing checkpoint {first}", chain_dispute=chain_dispute)

    async def _replay_sample(self, job_id: bytes, training: Any, provider: ID, report: TraceReport,
                             sample: list[int]) -> bool:
        """Replay sampled intervals from the provider's checkpoints; True at the first that does not match."""
        from repops_cupy.checkpoint import CheckpointError, load_checkpoint, state_hash

        schedule = _terms_schedule(training)

        def replay(path: Any, c: int) -> bool:
            state, _, digest = load_checkpoint(path)
            if digest != report.trace[c]:
                return True
            for _ in schedule.interval_steps(c):
                state = training.run_step(state).state
            return state_hash(state) != report.trace[c + 1]

        for c in sample:
            try:
                path = await self.ctx.blobs.fetch(provider, report.checkpoints[c])
                if await trio.to_thread.run_sync(replay, path, c):
                    log.warning("job %s: interval %d does not replay", job_id.hex()[:12], c)
                    return True
            except (PeerError, LocalError, CheckpointError) as error:
                log.warning("job %s: the provider cannot serve checkpoint %d: %s", job_id.hex()[:12], c, error)
                return True
        return False

    async def _own_run(self, job_id: bytes, training: Any, program: Any) -> tuple[JobRun, Any]:
        async with self._run_locks.setdefault(job_id, trio.Lock()):
            if job_id in self.runs:
                await trio.lowlevel.checkpoint()
                return self.runs[job_id]
            return await self._train_own_run(job_id, training, program)

    async def _train_own_run(self, job_id: bytes, training: Any, program: Any) -> tuple[JobRun, Any]:
        run = JobRun(training, program, job_dir(self.config.data_dir, job_id) / AUDIT_DIR, job_id=job_id,
                     device=resolve_device(self.config.device))
        stop = threading.Event()
        started = time.perf_counter()
        try:
            trace = await trio.to_thread.run_sync(run.train_sync, stop, abandon_on_cancel=True)
        finally:
            stop.set()
        log.info("job %s: own run done in %.1f s, root %s", job_id.hex()[:12], time.perf_counter() - started,
                 trace.root.hex()[:16])
        self.runs[job_id] = (run, trace)
        return run, trace

    async def party_spec(self, job_id: bytes) -> PartySpec | None:
        loaded = await self.ctx.load_job(job_id)
        if loaded is None or loaded[0].role != ROLE:
            return None
        signed = terms_of(loaded[1])
        training, program = await self.ctx.prepare_job(job_id, signed, loaded[1]["bundle"], [])
        run, trace = await self._own_run(job_id, training, program)
        return PartySpec(signed, ROLE, lambda: run.oracle(trace))


def _terms_schedule(training: Any) -> Any:
    from ..training_oracle import schedule_of

    return schedule_of(training)


__all__ = ["AuditorRole"]
