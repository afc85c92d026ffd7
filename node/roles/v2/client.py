"""The client role on settlement version 2 (docs/economics.md §4-6, §11).

A job lives through version 1's table (`client_job.JOB_LIFE`; `ClientJob` and
`ClientRole.drive` do the bookkeeping); what each state does is version 2's:

  submitted  the spec signed (version 1's `SignedJobTerms`), the on-chain `JobTerms` sized for
             the job (`terms_for`: σ from the step estimate, ρ, state and evidence sizes,
             the stake from ``minStake`` and p*), a nonce taken (`NonceFile`, never reused);
             the referee bond staked when the client referees; ``openJob(terms, spec)``
  opened     the signed offer (`offer.SignedOffer`) handed to advertised providers until the
             chain shows every seat taken or ``acceptBy`` passes (the chain is the seat list)
  handed     waiting for every seat's reveal (``TraceRevealed``, from the follower) or
             ``revealBy``; each trace is read from its ``TraceRevealed`` event
  verifying  per revealed seat whose root stands: m = min_samples(C, 1, p*) intervals drawn
             here and replayed from the seat's checkpoints (`data`, after its reveal); a
             mismatch is a dispute for the challenger (the auditor's) or, until that lands,
             "dispute needed" in the summary. The result: the final checkpoint of a seat whose
             root stands, checked against its ``trace[C]``, with a ``trace.json`` written here
             from the chain
             A revealed seat that does not deliver a sampled checkpoint is demanded it on chain
             (§7): it serves (the data service releases the bond) or forfeits (``failDemand``)
             Each sampled interval's steps list is asked of the seat too, signed, and kept by the
             node's `statements_keeper` (§10); an answer without the seat's signature is refused
  verified   waiting for the keeper's ``settle``; then the credit withdrawn and recorded
"""
from __future__ import annotations

import logging
import math
import random
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

import trio
from libp2p.peer.id import ID

from contracts import ClientRefunded, ContractRevert, LoggedEvent
from contracts.settlement_v2_demands import DataDemanded
from contracts.settlement_v2 import (
    ForfeitReason, JobOpened, JobStatus, JobTerms, SeatStatus, TraceRevealed, trace_root,
)
from protocol import DisputeRules, LocalProtocolError
from protocol.economics import HARDWARE_SLACK, client_samples, job_min_stake, referee_bond
from protocol.settings import CLIENT_SETTINGS

from ...atomic_file import write_atomic
from ...errors import BlobCorrupt, LocalError, PeerError, RemoteError
from ...framing import pack, unpack
from ..chain import describe_chain_error, format_ether, withdraw_credit
from ..client import ROLE, ClientRole
from ..client_job import (
    JOB_FINALIZED, JOB_MISSING, JOB_OPENED, JOB_REFUNDED, REPORTS_IN, RESULT_CHECKED, SEATS_FILLED,
    REFUNDED, SEATS_UNFILLED, SETTLED, SUBMITTED, ClientJob, SubmitOptions, ended, step_seconds,
)
from ..client_result import WEIGHTS_FILE, _write_result, result_dir, write_summary
from ..jobfiles import JOB_FILE, BundleError, bundle_of_file, encode_bundle, install_job, job_dir, load_training, verified_trace
from ..job_protocols import Offer
from .offer import SignedOffer, chain_id_sync, element_specs_of, job_id_of, spec_hash

log = logging.getLogger(__name__)

CATCH_BPS = 9_000  # p* the client asks for when none is given
GAS_PRICE_CAP = 10**9  # γ: 1 gwei, what the bonds pre-pay gas at
NONCE_FILE = "v2-nonce"
POLL = 1.0
OFFER_TIMEOUT = 180.0
FETCH_ATTEMPTS = 4
FETCH_RETRY_DELAY = 0.5
DISPUTE_NEEDED = "dispute needed"


class NonceFile:
    """The client's next job nonce, in its data directory: taken numbers are never handed out again
    (the file is advanced and synced before the number is used)."""

    def __init__(self, data_dir: Path) -> None:
        self.path = Path(data_dir) / NONCE_FILE
        self._lock = threading.Lock()  # two jobs submitted at once take two nonces, one file write each

    def take_sync(self) -> int:
        with self._lock:
            return self._take_sync()

    def _take_sync(self) -> int:
        current = int(self.path.read_text()) if self.path.exists() else 1
        write_atomic(self.path, str(current + 1))
        return current


def evidence_bytes_of(training: Any, state_bytes: int) -> int:
    """Y: the most one node's evidence (its inputs, 8 bytes an element at most, and its entry) takes."""
    graph = getattr(training, "graph", None)
    if graph is None:
        return 2 * state_bytes
    largest = max((sum(math.prod(graph.nodes[i].shape) for i in node.inputs) for node in graph.nodes), default=0)
    return 8 * largest + 4096


def terms_for(training: Any, signed: Any, *, nonce: int, providers: int, price: int, stake: int, catch_bps: int,
              accept_window: int, settings: Any, client_referees: bool = True, on_chain_step: bool = False,
              step_cost_scale: float = 1.0) -> JobTerms:
    """The on-chain terms of a job: σ from the step estimate (times `step_cost_scale`), ρ ≤ σ (one
    node never costs more than its step), X the checkpoint's bytes, Y a node's evidence, S at least
    minStake for p*; with `on_chain_step`, the step graph's element spec root (zero otherwise, and for
    a job with no step graph: no fourth level)."""
    from repops_cupy._backend import to_numpy

    p = signed.terms
    specs = element_specs_of(training) if on_chain_step and getattr(training, "graph", None) is not None else bytes(32)
    step_millis = max(1, math.ceil(step_seconds(training) * step_cost_scale * 1000))
    state_bytes = max(1, sum(to_numpy(v).nbytes for v in training.initial_state().values()))
    terms = JobTerms(
        nonce=nonce, client_key=p.client, client_referees=client_referees, spec_hash=spec_hash(signed.encode()),
        initial_state=p.initial_state, steps=p.steps, checkpoint_every=p.checkpoint_every, graph_nodes=p.graph_nodes,
        step_millis=step_millis, node_millis=step_millis, state_bytes=state_bytes,
        evidence_bytes=evidence_bytes_of(training, state_bytes), providers_wanted=providers, catch_bps=catch_bps,
        accept_window=accept_window, price=price, provider_stake=stake, gas_price_cap=GAS_PRICE_CAP,
        referee_fee=0, witness_fee=0, element_spec_root=specs)
    least = job_min_stake(terms.economic_terms(), settings)
    return terms if stake >= least else replace(terms, provider_stake=least)


def replay_interval_sync(training: Any, checkpoint: Path, c: int, trace: tuple[bytes, ...], every: int) -> bool:
    """Replay interval c from the seat's checkpoint c (checked against trace[c] first): True when
    the state after it is trace[c + 1]."""
    from repops_cupy.checkpoint import load_checkpoint

    state, _, digest = load_checkpoint(checkpoint)
    if digest != trace[c]:
        return False
    steps = min(every, training.spec.steps - c * every)
    return training.state_hashes(state, steps)[-1] == trace[c + 1]


class ClientRoleV2(ClientRole):
    def __init__(self, ctx: Any) -> None:
        super().__init__(ctx)
        self.nonces = NonceFile(ctx.config.data_dir)
        self.reveals: dict[bytes, dict[str, LoggedEvent]] = {}  # job -> seat account -> its TraceRevealed
        self.statements: Any = None  # the node's StatementsKeeper, once the chain is up

    async def run(self) -> None:
        from ..job_protocols import TOPIC_PROVIDERS

        ctx = self.ctx
        ctx.follower.subscribe(TraceRevealed, self._on_revealed)
        await ctx.on_gossip(TOPIC_PROVIDERS, self._on_advert)
        await ctx.wait_chain()
        from .game_keeper import start_game_keeper
        from .referee import start_referee
        from .statements_keeper import start_statements_keeper

        self.statements = await start_statements_keeper(ctx)
        start_referee(ctx)  # the client rules its jobs' node claims (clientReferees)
        start_game_keeper(ctx)
        for job in await ctx.storage.run(lambda: ctx.storage.jobs(role=ROLE)):
            cj = ClientJob(job.job_id, unpack(job.spec), job.state)
            self.jobs[job.job_id] = cj
            if cj.state in ("settled", "refunded", "failed", "lost"):
                cj.done.set()
            else:
                ctx.start_soon(self.drive, cj, name=f"client job {job.job_id.hex()[:12]}")
        self.ready.set()
        await trio.sleep_forever()

    async def _on_revealed(self, logged: LoggedEvent) -> None:
        event = logged.event
        if event.job_id in self.jobs:
            self.reveals.setdefault(event.job_id, {})[event.seat.lower()] = logged
            self.jobs[event.job_id].notify()
        await trio.lowlevel.checkpoint()

    def _start_announcing(self, cj: ClientJob) -> None:
        """Auditors of version 2 learn jobs from ``JobOpened`` on chain: nothing to gossip."""

    # -- submitting -------------------------------------------------------------------

    async def submit(self, job_file: Path, options: SubmitOptions,
                     on_open: Callable[[ClientJob], None] | None = None) -> bytes:
        """Open the job on chain and hand it to providers; returns its id once its seats are taken
        (or acceptance closed). The rest goes on in the background: `wait`."""
        from ...training_oracle import job_terms

        ctx = self.ctx
        chain = await ctx.wait_chain()
        await self.ready.wait()
        s = chain.settlement
        try:
            toml_text, files = await trio.to_thread.run_sync(bundle_of_file, Path(job_file))
            training = await trio.to_thread.run_sync(load_training, Path(job_file))
            settings = options.job_settings(training.spec.steps * step_seconds(training))
        except BundleError as error:
            raise LocalError(str(error)) from None
        except LocalProtocolError as error:
            raise LocalError(str(error)) from None
        options = replace(options, **{name: getattr(settings, name) for name in CLIENT_SETTINGS})
        file_ids = {name: await ctx.blobs.store.put_file(path) for name, path in files.items()}
        bundle = await ctx.blobs.store.put(encode_bundle(toml_text, file_ids))
        nonce = await trio.to_thread.run_sync(self.nonces.take_sync)
        rules: DisputeRules = settings.rules
        signed = await trio.to_thread.run_sync(lambda: job_terms(
            training, ctx.identity, rules=rules, payment=options.price, stake=options.stake, nonce=nonce))
        chain_settings = await chain.run(s.chain_settings)
        try:
            started = time.monotonic()
            terms = await trio.to_thread.run_sync(lambda: terms_for(
                training, signed, nonce=nonce, providers=options.providers, price=options.price, stake=options.stake,
                catch_bps=CATCH_BPS, accept_window=int(settings.accept_within), settings=chain_settings,
                on_chain_step=options.on_chain_step, step_cost_scale=options.step_cost_scale))
        except LocalProtocolError as error:
            raise LocalError(f"the job's terms: {error}") from None
        if terms.element_spec_root != bytes(32):
            # a provider traces the same element specs before it answers the offer: the accept window
            # allows for that on top of what it was given (tiny-gpt's take 30 s on this machine)
            checks = math.ceil(HARDWARE_SLACK * (time.monotonic() - started))
            terms = replace(terms, accept_window=terms.accept_window + checks)
        chain_id = await chain.run(chain_id_sync, chain.chain)
        offer = SignedOffer.sign(ctx.identity, spec=signed.encode(), terms=terms, chain_id=chain_id,
                                 contract=chain.address, client_account=chain.account)
        job_id = job_id_of(chain_id, chain.address, chain.account, nonce)
        await trio.to_thread.run_sync(install_job, job_dir(ctx.config.data_dir, job_id), toml_text,
                                      {name: ctx.blobs.store.path(i) for name, i in file_ids.items()})
        record = {"terms": signed.encode(), "offer": offer.encode(), "bundle": bundle, "contract": chain.address,
                  "client_account": chain.account, "client_addrs": ctx.host.listen_addrs, "options": options.__dict__,
                  "deadlines": {"accept_by": 0, "commit_by": 0, "challenge_by": 0}, "seats": {}, "verdicts": []}
        cj = ClientJob(job_id, record, SUBMITTED, training=training)
        self.jobs[job_id] = cj
        await ctx.save_job(job_id, ROLE, SUBMITTED, record)
        self.opening.add(job_id)
        try:
            await chain.run(chain.ensure_funds_sync, terms.price)
            # a refereeing client locks its referee bond P + w·S·n at open
            bond = referee_bond(terms.economic_terms(), chain_settings) if terms.client_referees else 0
            opened = await chain.with_free_stake(bond, s.open_job, terms, signed.encode())
        finally:
            self.opening.discard(job_id)
        if opened.one(JobOpened).job_id != job_id:
            raise LocalError("the contract opened the job under another id than jobIdOf computes")
        await self._read_deadlines(cj)
        if on_open is not None:
            on_open(cj)
        log.info("job %s: opened on chain, %s ether for %d provider(s), stake %s", job_id.hex()[:12],
                 format_ether(terms.price), terms.providers_wanted, format_ether(terms.provider_stake))
        await self._advance(cj, JOB_OPENED)
        await self._advance(cj, await self._hand_over(cj))
        ctx.start_soon(self.drive, cj, name=f"client job {job_id.hex()[:12]}")
        return job_id

    async def _read_deadlines(self, cj: ClientJob) -> Any:
        chain = self.ctx.chain
        d = await chain.run(chain.settlement.deadlines, cj.job_id)
        cj.record["deadlines"] = {"accept_by": d.accept_by, "commit_by": d.commit_by, "reveal_by": d.reveal_by,
                                  "challenge_by": d.challenge_end, "final_by": d.final_by}
        return d

    def _offer(self, cj: ClientJob) -> Offer:
        r = cj.record
        return Offer(r["offer"], r["bundle"], r["contract"], r["client_account"], r["client_addrs"])

    # -- the states' work -------------------------------------------------------------

    async def _find_on_chain(self, cj: ClientJob) -> str:
        info = await self.ctx.chain.run(self.ctx.chain.settlement.job, cj.job_id)
        return JOB_OPENED if info.status != JobStatus.NONE else JOB_MISSING

    async def _hand_over(self, cj: ClientJob) -> str:
        """Offer seats to advertised providers until the chain shows them all taken or acceptance closes."""
        chain = self.ctx.chain
        options = SubmitOptions(**cj.record["options"])
        offer = pack(self._offer(cj).to_wire())
        asked: dict[ID, float] = {}
        while True:
            info = await chain.run(chain.settlement.job, cj.job_id)
            await self._seats_from_chain(cj)
            if info.status != JobStatus.OPEN:
                break
            if await chain.run(chain.chain.now) >= info.accept_by - 1:
                break
            await self._offer_round(cj, options, asked, info.providers_wanted - info.providers_taken, offer,
                                    info.accept_by)
        if info.status == JobStatus.OPEN or info.status == JobStatus.REFUNDED:
            cj.record["unfilled"] = True
            log.warning("job %s: only %d of %d seats were taken", cj.job_id.hex()[:12], info.providers_taken,
                        info.providers_wanted)
            return SEATS_UNFILLED
        await self._read_deadlines(cj)
        log.info("job %s: every seat taken (%d)", cj.job_id.hex()[:12], info.providers_taken)
        return SEATS_FILLED

    async def _seat_accounts(self, cj: ClientJob) -> tuple[str, ...]:
        chain = self.ctx.chain
        return await chain.run(chain.settlement.seats, cj.job_id)

    async def _await_reports(self, cj: ClientJob) -> str:
        """Until every seat revealed or forfeited, or ``revealBy`` passed."""
        chain = self.ctx.chain
        s = chain.settlement
        while True:
            d = await self._read_deadlines(cj)
            seats = [await chain.run(s.seat, cj.job_id, seat["account"]) for seat in cj.record["seats"].values()]
            done = all(x.status == SeatStatus.REVEALED or x.forfeit != ForfeitReason.NONE for x in seats)
            if done or (d.reveal_by and await chain.run(chain.chain.now) >= d.reveal_by):
                await self._save(cj)
                return REPORTS_IN
            with trio.move_on_after(POLL):
                await cj.changed.wait()

    async def _revealed_trace(self, cj: ClientJob, account: str) -> tuple[bytes, ...] | None:
        """The trace a seat revealed, from its ``TraceRevealed`` event, checked against the stored root."""
        chain = self.ctx.chain
        s = chain.settlement
        logged = self.reveals.get(cj.job_id, {}).get(account.lower())
        if logged is None:  # before the follower handed it here (a restart): read the chain's events
            for found in await chain.run(s.events, 0, None):
                e = found.event
                if isinstance(e, TraceRevealed) and e.job_id == cj.job_id and e.seat.lower() == account.lower():
                    logged = found
        if logged is None:
            return None
        trace = await chain.run(s.revealed_trace, logged)
        seat = await chain.run(s.seat, cj.job_id, account)
        return trace if trace_root(trace) == seat.trace_root else None

    async def _resolve(self, cj: ClientJob) -> str:
        """Sample every standing seat's intervals, then fetch and check the result from one of them."""
        chain = self.ctx.chain
        s = chain.settlement
        training = await self._training(cj)
        terms = SignedOffer.decode(cj.record["offer"]).terms
        m = client_samples(terms.economic_terms())
        margin = (await chain.run(s.chain_settings)).margin  # Δ: a demand's transaction lands within it
        standing: dict[str, tuple[bytes, ...]] = {}

        async def sample(key: str, seat: dict) -> None:
            info = await chain.run(s.seat, cj.job_id, seat["account"])
            # a seat the job already paid revealed too (the keepers settled before we got here)
            if info.status not in (SeatStatus.REVEALED, SeatStatus.PAID) or info.forfeit != ForfeitReason.NONE:
                seat["outcome"] = "no reveal" if info.forfeit == ForfeitReason.NONE else f"forfeited {info.forfeit.name}"
                return
            trace = await self._revealed_trace(cj, seat["account"])
            if trace is None:
                seat["outcome"] = "reveal not readable"
                return
            seat["trace"] = [h.hex() for h in trace]
            if info.status == SeatStatus.PAID:  # it stood: samples could not dispute it any more
                seat["outcome"] = "paid before sampled"
                standing[key] = trace
                return
            intervals = sorted(random.SystemRandom().sample(range(len(trace) - 1), min(m, len(trace) - 1)))
            seat["samples"] = await self._replay(cj, training, seat, trace, intervals,
                                                 closes_at=info.challenge_by - margin)
            unserved = [int(c) + 1 for c, v in seat["samples"].items() if v is None]
            if unserved:  # a revealed seat owes its checkpoints (§7): demand one, it serves or forfeits
                await self._demand(cj, seat, unserved[0])
                return
            if any(v is False for v in seat["samples"].values()):
                seat["outcome"] = DISPUTE_NEEDED  # the challenger (the auditor's game) plays it
                log.warning("job %s: %s's interval replays differ from its trace: %s", cj.job_id.hex()[:12],
                            key[:8], DISPUTE_NEEDED)
                return
            standing[key] = trace

        # every seat at once: the challenge window runs for each from its reveal, not one after another
        async with trio.open_nursery() as nursery:
            for key, seat in cj.record["seats"].items():
                nursery.start_soon(sample, key, seat)
        await self._fetch_result(cj, training, {key: standing[key] for key in cj.record["seats"] if key in standing})
        await self._save(cj)
        return RESULT_CHECKED

    async def _replay(self, cj: ClientJob, training: Any, seat: dict, trace: tuple[bytes, ...],
                      intervals: list[int], *, closes_at: int = 0) -> dict[str, bool | None]:
        """Each sampled interval: True (it checks), False (it does not), None (checkpoint not fetched);
        ``closes_at``: the seat's challengeBy less Δ, the last moment a demand of its items is sent in time."""
        every = training.spec.checkpoint_interval
        out: dict[str, bool | None] = {}
        for c in intervals:
            path = await self._fetch_item(cj, seat, c + 1, demand=True, closes_at=closes_at)
            out[str(c)] = None if path is None else await trio.to_thread.run_sync(
                replay_interval_sync, training, path, c, trace, every)
            if path is None:
                break  # one undelivered item is enough to demand
            await self._collect_steps(cj, seat, c)
        return out

    async def _collect_steps(self, cj: ClientJob, seat: dict, c: int) -> None:
        """The seat's signed steps list of a sampled interval, kept as evidence (§10); a refused
        answer (unsigned, or not by the seat) is logged and the sample stands on the replay."""
        peer = ID.from_base58(seat["peer"])
        try:
            (told,) = await self.ctx.job_data.fetch_steps(cj.job_id, seat["account"], [c],
                                                          peer=peer if seat["addrs"] else None)
        except (PeerError, LocalError) as error:
            log.warning("job %s: the steps list of interval %d of %s refused: %s", cj.job_id.hex()[:12], c,
                        seat["account"], error)
            return
        if self.statements is not None:
            await self.statements.add(told.signed)

    async def _demand(self, cj: ClientJob, seat: dict, item: int) -> None:
        """Demand ``item`` of a seat that did not deliver it, locking D (added to the stake if short);
        the data service releases it if the item comes, else the demand keeper fails the demand
        (`demands.py`) and the seat forfeits."""
        if seat.get("demand"):
            return
        chain = self.ctx.chain
        s = chain.settlement
        bond = await chain.run(s.demand_bond_of, cj.job_id)
        try:
            demanded = (await chain.with_free_stake(bond, s.demand_data, cj.job_id, seat["account"], item)
                        ).one(DataDemanded)
        except ContractRevert as refused:  # e.g. the job settled meanwhile: nothing is owed any more
            log.warning("job %s: the demand of item %d of %s refused: %s", cj.job_id.hex()[:12], item,
                        seat["account"], describe_chain_error(refused))
            return
        seat["demand"] = demanded.demand_id.hex()
        await self._save(cj)
        log.warning("job %s: %s did not deliver item %d; demanded it on chain", cj.job_id.hex()[:12],
                    seat["account"], item)

    async def _fetch_item(self, cj: ClientJob, seat: dict, item: int, *, demand: bool = False,
                          closes_at: int = 0) -> Path | None:
        """Item ``item`` of a revealed seat (c + 1: checkpoint c), fetched and checked against its
        revealed trace by the node's data service; None when the seat does not deliver it. With
        `demand`, a seat that answers with a refusal is demanded the item on chain before the retries:
        demands open only in the seat's first window (sent by ``closes_at``, to land by its
        challengeBy), which retries on a loaded network can outlast, and the data service releases
        the demand (D back) when the item comes. A seat that does not answer at all (a congested
        host, a network fault) is retried first and demanded after, or before its next attempt once that attempt could
        outlast the window (`_window_closing`): a demand that comes too late leaves the seat paid."""
        peer = ID.from_base58(seat["peer"])
        refused = False
        for attempt in range(FETCH_ATTEMPTS):
            if attempt:  # a seat's data service serves once it read its own reveal on chain
                if demand and (refused or await self._window_closing(closes_at)):
                    await self._demand(cj, seat, item)
                await trio.sleep(FETCH_RETRY_DELAY * 2 ** (attempt - 1))
            try:
                if seat["addrs"]:
                    await self.ctx.reach(peer, seat["addrs"])
                return await self.ctx.job_data.fetch_item(cj.job_id, seat["account"], item,
                                                          peer=peer if seat["addrs"] else None)
            except BlobCorrupt as error:  # the seat's fault, not the network's: no retry
                log.warning("job %s: item %d of %s: %s", cj.job_id.hex()[:12], item, seat["account"], error)
                return None
            except (PeerError, LocalError) as error:
                refused = isinstance(error, RemoteError)
                log.info("job %s: item %d of %s: %s", cj.job_id.hex()[:12], item, seat["account"], error)
        return None

    async def _window_closing(self, closes_at: int) -> bool:
        """Whether a demand sent after one more fetch attempt could come later than ``closes_at``
        (chain time; 0: no window): an attempt may take two request timeouts (the stream's opening,
        then the transfer)."""
        if not closes_at:
            return False
        chain = self.ctx.chain
        now = max(await chain.run(chain.chain.now), int(time.time()))
        return now + 2 * self.ctx.config.request_timeout >= closes_at

    async def _fetch_result(self, cj: ClientJob, training: Any, standing: dict[str, tuple[bytes, ...]]) -> bool:
        """The final checkpoint of a standing seat, checked against its trace[C]; trace.json from the chain."""
        from repops_cupy.checkpoint import CheckpointError, load_checkpoint

        out = result_dir(self.ctx, cj)
        for key, trace in standing.items():
            seat = cj.record["seats"][key]
            weights = await self._fetch_item(cj, seat, len(trace))
            if weights is None:
                continue
            try:
                _, _, digest = await trio.to_thread.run_sync(load_checkpoint, weights)
            except CheckpointError as error:
                log.warning("job %s: %s's final checkpoint does not load: %s", cj.job_id.hex()[:12], key[:8], error)
                continue
            if digest != trace[-1]:
                log.warning("job %s: %s's final weights are not its revealed trace[C]", cj.job_id.hex()[:12], key[:8])
                continue
            text = verified_trace(training, list(trace), WEIGHTS_FILE)
            await trio.to_thread.run_sync(_write_result, out, weights, text,
                                          job_dir(self.ctx.config.data_dir, cj.job_id) / JOB_FILE)
            cj.record.update(result_from=key, result_dir=str(out), trace_root=trace_root(trace).hex())
            log.info("job %s: result from %s checked against its revealed trace, in %s", cj.job_id.hex()[:12],
                     key[:8], out)
            return True
        log.warning("job %s: no standing seat delivered a result that checks", cj.job_id.hex()[:12])
        return False

    async def _result_of_a_paid_seat(self, cj: ClientJob) -> None:
        """A job finalized without a result in hand (no seat's data reached us within its windows: a
        congested network, or we were away): the final weights of a seat the job paid, checked against
        the trace it revealed, are what its windows stood behind, and the price of that seat was paid."""
        chain = self.ctx.chain
        paid: dict[str, tuple[bytes, ...]] = {}
        for key, seat in cj.record["seats"].items():
            if (await chain.run(chain.settlement.seat, cj.job_id, seat["account"])).status != SeatStatus.PAID:
                continue
            trace = await self._revealed_trace(cj, seat["account"])
            if trace is not None:
                paid[key] = trace
        if paid and await self._fetch_result(cj, await self._training(cj), paid):
            await self._save(cj)

    async def _settle(self, cj: ClientJob) -> str:
        """Wait for the keeper's settle (anyone's), then close the job."""
        chain = self.ctx.chain
        while True:
            info = await chain.run(chain.settlement.job, cj.job_id)
            if info.status in (JobStatus.FINALIZED, JobStatus.REFUNDED):
                return await self._close(cj, info)
            with trio.move_on_after(POLL):
                await cj.changed.wait()

    async def _close(self, cj: ClientJob, info: Any) -> str:
        """Over on chain: the credit withdrawn and recorded, each seat's outcome, result.json written."""
        ctx = self.ctx
        chain = ctx.chain
        credited = sum(found.event.amount for found in await chain.run(chain.settlement.events, 0, None)
                       if isinstance(found.event, ClientRefunded) and found.event.job_id == cj.job_id)
        await withdraw_credit(ctx)
        if info.status == JobStatus.FINALIZED and cj.record.get("result_from") is None:
            await self._result_of_a_paid_seat(cj)
        providers = {}
        for key, seat in cj.record["seats"].items():
            on_chain = await chain.run(chain.settlement.seat, cj.job_id, seat["account"])
            providers[key] = {"peer": seat["peer"], "account": seat["account"],
                              "trace_root": on_chain.trace_root.hex() if on_chain.status >= SeatStatus.REVEALED else None,
                              "outcome": seat.get("outcome") or ("paid" if on_chain.status == SeatStatus.PAID
                                                                 else f"forfeited {on_chain.forfeit.name}"),
                              "samples": seat.get("samples", {})}
        finalized = info.status == JobStatus.FINALIZED
        summary = {"job": cj.job_id.hex(), "status": info.status.name, "providers": providers,
                   "ended": ended(SETTLED if finalized else REFUNDED, cj.record),
                   "credited": credited, "verdicts": cj.record["verdicts"],
                   "disputes_needed": [k for k, p in providers.items() if p["outcome"] == DISPUTE_NEEDED]}
        for name in ("result_from", "result_dir", "trace_root"):
            if cj.record.get(name) is not None:
                summary[name] = cj.record[name]
        cj.record["result"] = summary
        await write_summary(ctx, cj, summary)
        log.info("job %s: settled on chain (%s), %s ether back", cj.job_id.hex()[:12], info.status.name,
                 format_ether(credited))
        return JOB_FINALIZED if finalized else JOB_REFUNDED


__all__ = ["ClientRoleV2", "NonceFile", "terms_for"]
