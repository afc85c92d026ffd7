"""A seat's items, served and fetched after its reveal and never before (docs/economics.md §7).

Items, as the demands number them: 0 the job bundle, c + 1 checkpoint c (c = 0..C; item
C + 1 is the result). Version 1's provider hands its trace to anyone before every root is
in, which lets a seat copy another's root; here a node serves a job's items only once its
own seat's reveal is on chain, and hands no blob id before.

Wire (``/gavel/job-data/2.0.0``, request/response, `node.streams`; msgpack maps):

  → {"job": <32 bytes>, "item": n, "seat": <account>}   ("seat" may be left out: the server's own)
  ← {"blob": <32-byte blob id>}      or refused with a reason

A node serves the items of its own seat, and those it relays as a demand's witness (`relay`,
§7): an item of another seat that it fetched, checked and attested served.

Steps lists (``/gavel/steps/2.0.0``, request/response, msgpack maps; economics §10), what a sampler
of interval c may ask the seat besides checkpoint c, up to STEPS_PER_ASK intervals in one ask (an
auditor's own run checks every interval at once, and one stream per interval, from every auditor,
timed the seats' connections out in the full v2 testnet):

  → {"job": <32 bytes>, "intervals": [c, ...]}   (distinct)
  ← {"lists": [{"steps": [k_c + 1 hashes], "signature": <65 bytes>}, ...]}   in the order asked,
                                                                            or refused with a reason

The signature is the seat's account key's over the EIP-712 `SeatStatement` (job, seat, STEPS, c,
list_root(steps)) (`protocol.statements`): a list handed off chain is evidence against the seat if it
is ever contradicted. The fetcher rebuilds the statement from the list and refuses an answer whose
signature does not recover to the seat (`StatementRefused`); what it keeps is the caller's
(`statements_keeper`).

The blob itself then moves by the blob protocol (`node.blobs`, checked chunk by chunk);
a checkpoint's blob id is a hash of its bytes, so nobody can ask for it before being told.

The fetcher checks what it got before anyone uses it: a checkpoint's state hash
(`repops_cupy.checkpoint.load_checkpoint`) against the seat's revealed ``trace[c]``, read
from its ``TraceRevealed`` event (`SettlementV2.revealed_trace`, checked against the
event's root); the bundle against the job's ``spec`` from
``JobOpened`` (its keccak is the terms' ``specHash``; the signed protocol terms, as
`v2.offer` encodes them): every commitment of those terms rebuilt from the bundle
(`jobfiles.check_terms`), and only then installed as the job's directory. A wrong item is the serving peer's fault (`BlobCorrupt`), never ours.

Demands: when a ``DataDemanded`` names one of this node's seats, the item is made ready
to serve at once; when it names this node as the demander, the node fetches the item from
the seat, checks it, and calls ``releaseDemand`` (its bond back) while the demand is open.
When the seat did not deliver and a witness attested it served (``DemandAttested``), the
demander fetches the item from that witness instead, checked the same way (`received`).

After a restart the follower hands no old event again: a reveal or a spec not handed in this run
is read back from the contract's events, and the relays are kept in ``relays.json``
(`duty_state`) until their job settles.
"""
from __future__ import annotations

import logging
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import trio
from libp2p.peer.id import ID

from ...errors import BadMessage, BlobCorrupt, LocalError, PeerError, PeerUnreachable
from ...framing import pack, unpack
from ...streams import RequestRefused, StreamLimits
from ..chain import chain_failures, describe_chain_error
from ..jobfiles import JOB_FILE, BundleError, check_terms, decode_bundle, install_job, job_dir, load_training
from .duty_state import DutyState

log = logging.getLogger(__name__)

DATA_PROTOCOL = "/gavel/job-data/2.0.0"
DATA_LIMITS = StreamLimits(max_frame=4096, read_timeout=10.0, write_timeout=10.0, idle_timeout=60.0)
STEPS_PROTOCOL = "/gavel/steps/2.0.0"
STEPS_PER_ASK = 16
STEPS_LIMITS = StreamLimits(max_frame=256 * 1024, read_timeout=10.0, write_timeout=10.0, idle_timeout=60.0)
BUNDLE_ITEM = 0
HASH = 32
WITNESS_FETCH_ATTEMPTS = 4  # a witness relays before it attests: a failure here is the network's
WITNESS_FETCH_RETRY = 1.0  # seconds, times the attempt number
STATE_FILE = "relays.json"


def checkpoint_of(item: int) -> int:
    """The checkpoint an item number names (item c + 1 is checkpoint c)."""
    return item - 1


@dataclass(frozen=True)
class DataRequest:
    job_id: bytes
    item: int
    seat: str = ""  # the seat whose item is asked for; "" is the serving node's own

    def to_wire(self) -> dict:
        wire: dict[str, Any] = {"job": self.job_id, "item": self.item}
        if self.seat:
            wire["seat"] = self.seat
        return wire

    @classmethod
    def from_wire(cls, obj: Any, peer: object) -> "DataRequest":
        if not isinstance(obj, dict) or not isinstance(obj.get("job"), bytes) or len(obj["job"]) != HASH \
                or type(obj.get("item")) is not int or obj["item"] < 0 or not isinstance(obj.get("seat", ""), str):
            raise BadMessage("a job-data request is {job: 32 bytes, item: n >= 0, seat: account}", peer=peer)
        return cls(obj["job"], obj["item"], obj.get("seat", ""))


class StatementRefused(BadMessage):
    """A seat's signed answer whose signature is missing, malformed or not its account's."""


@dataclass(frozen=True)
class ToldSteps:
    """A steps list a seat handed us, with its signed statement (the evidence of what it told)."""

    steps: tuple[bytes, ...]
    signed: Any  # protocol.statements.SignedStatement


def statement_domain(chain: Any) -> Any:
    """The EIP-712 domain of a binding's settlement: its ``block.chainid`` and contract (blocking on an RPC
    chain the first time: the id is cached by the chain)."""
    from protocol.statements import StatementDomain

    from .offer import chain_id_sync

    return StatementDomain(chain_id_sync(chain.chain), chain.address)


def steps_statement(job_id: bytes, seat: str, c: int, steps: Any) -> Any:
    """The `SeatStatement` a steps list of interval c is: its list root, in the contract's tree."""
    from protocol.listtree import list_root
    from protocol.statements import STEPS, SeatStatement

    return SeatStatement(job_id, seat, STEPS, c, list_root(list(steps)))


def told_steps_of_answer(obj: Any, job_id: bytes, seat: str, c: int, domain: Any, peer: object) -> ToldSteps:
    """A steps answer checked: a list of hashes, signed by ``seat``'s account (StatementRefused otherwise)."""
    from protocol.statements import SignedStatement

    if not isinstance(obj, dict) or not isinstance(obj.get("steps"), list) or len(obj["steps"]) < 2 \
            or any(not isinstance(h, bytes) or len(h) != HASH for h in obj["steps"]):
        raise BadMessage("a steps answer is {steps: at least 2 hashes of 32 bytes, signature: 65 bytes}", peer=peer)
    signature = obj.get("signature")
    if not isinstance(signature, bytes) or len(signature) != 65:
        raise StatementRefused(f"the steps list of interval {c} comes without the seat's 65-byte signature",
                               peer=peer)
    signed = SignedStatement(steps_statement(job_id, seat, c, obj["steps"]), signature)
    if not signed.verify(domain):
        raise StatementRefused(f"the steps list of interval {c} is not signed by seat {seat}", peer=peer)
    return ToldSteps(tuple(obj["steps"]), signed)


def _blob_of_answer(obj: Any, peer: object) -> bytes:
    if not isinstance(obj, dict) or not isinstance(obj.get("blob"), bytes) or len(obj["blob"]) != HASH:
        raise BadMessage("a job-data answer is {blob: 32 bytes}", peer=peer)
    return obj["blob"]


def signed_spec(spec: bytes) -> Any:
    """The `SignedJobTerms` a job's on-chain ``spec`` encodes (`v2.offer`: version 1's encoding)."""
    from protocol import RemoteProtocolError, SignedJobTerms
    from protocol.wire import decode_struct

    try:
        return decode_struct(SignedJobTerms, spec)
    except RemoteProtocolError as error:
        raise BundleError(f"the job's spec does not decode as signed terms: {error}") from None


class JobDataService:
    """One per settlement-2 node (`RoleContext.job_data`): serves this node's revealed seats'
    items and fetches, checks and releases the items it demanded."""

    def __init__(self, ctx: Any) -> None:
        self.ctx = ctx
        self._revealed: set[bytes] = set()  # jobs whose reveal by our seat we read on chain
        self._blobs: dict[tuple[bytes, int], bytes] = {}  # (job, item) -> blob id, once stored
        self._reveals: dict[tuple[bytes, str], Any] = {}  # (job, seat) -> its TraceRevealed (LoggedEvent)
        self._specs: dict[bytes, bytes] = {}  # job -> its spec, from JobOpened
        self._relays: dict[tuple[bytes, str, int], bytes] = {}  # (job, seat, item) -> blob id we witnessed
        self.state = DutyState(ctx.config.data_dir, STATE_FILE)
        self.state.restore(self._restore_relays)
        self._own_demands: dict[bytes, Any] = {}  # demand id -> our DataDemanded, until we hold the item
        self.released: list[bytes] = []  # demands this node released, in order
        self.received: dict[bytes, Path] = {}  # demand id -> the item we demanded, checked (from seat or witness)
        self._steps_asked: dict[tuple[bytes, int], list[ID]] = {}  # (job, c) -> peers told its steps list, in order
        # job -> held while its bundle is checked and installed: the auditor, a referee duty and a
        # demand may fetch one job's bundle at once, and all install in the one `.checking` directory
        self._installing: dict[bytes, trio.Lock] = {}
        ctx.host.handle_requests(DATA_PROTOCOL, self.serve, DATA_LIMITS)
        ctx.host.handle_requests(STEPS_PROTOCOL, self.serve_steps, STEPS_LIMITS)

    def subscribe(self, follower: Any) -> None:
        from contracts.settlement_v2 import JobOpened, JobSettled, TraceRevealed
        from contracts.settlement_v2_demands import DataDemanded, DemandAttested

        follower.subscribe(JobOpened, self._on_opened)
        follower.subscribe(TraceRevealed, self._on_revealed)
        follower.subscribe(JobSettled, self._on_settled)
        follower.subscribe(DataDemanded, self._on_demanded)
        follower.subscribe(DemandAttested, self._on_attested)

    # -- what the chain says ---------------------------------------------------------------

    async def _on_opened(self, logged: Any) -> None:
        await trio.lowlevel.checkpoint()
        self._specs[logged.event.job_id] = bytes(logged.event.spec)

    async def _on_revealed(self, logged: Any) -> None:
        await trio.lowlevel.checkpoint()
        self._reveals[(logged.event.job_id, logged.event.seat)] = logged

    async def _on_settled(self, logged: Any) -> None:
        """A settled job's items are owed to nobody: its relays are dropped."""
        job_id = logged.event.job_id
        if not any(key[0] == job_id for key in self._relays):
            await trio.lowlevel.checkpoint()
            return
        self._relays = {key: blob for key, blob in self._relays.items() if key[0] != job_id}
        await self._save_relays()

    async def _read_back(self) -> None:
        """Reveals and specs from the contract's events: those handed before a restart are not
        handed again, and one may be asked for before the follower reached it."""
        from contracts.settlement_v2 import JobOpened, TraceRevealed

        chain = self.ctx.chain
        for found in await chain.run(chain.settlement.events, 0, None):
            if isinstance(found.event, TraceRevealed):
                self._reveals.setdefault((found.event.job_id, found.event.seat), found)
            elif isinstance(found.event, JobOpened):
                self._specs.setdefault(found.event.job_id, bytes(found.event.spec))

    async def _on_demanded(self, logged: Any) -> None:
        demand = logged.event
        account = self.ctx.chain.account
        if demand.seat == account:
            trained = self.ctx.trained.get(demand.job_id)
            if trained is None:
                log.warning("job %s: item %d demanded of our seat, and no run of it is here", demand.job_id.hex()[:12],
                            demand.item)
                return
            await self._blob_of(trained, demand.item)  # ready before the demander asks
            log.info("job %s: item %d demanded of our seat by %s; serving it", demand.job_id.hex()[:12], demand.item,
                     demand.demander)
        elif demand.demander == account:
            self._own_demands[demand.demand_id] = demand
            self.ctx.start_soon(self.serve_own_demand, logged, name=f"demand {demand.demand_id.hex()[:12]}")
        else:
            await trio.lowlevel.checkpoint()

    async def _on_attested(self, logged: Any) -> None:
        attested = logged.event
        demand = self._own_demands.get(attested.demand_id)
        if demand is None or not attested.served:
            await trio.lowlevel.checkpoint()
            return
        self.ctx.start_soon(self._fetch_from_witness, demand, attested.witness,
                            name=f"demand {demand.demand_id.hex()[:12]} from its witness")

    async def revealed_trace(self, job_id: bytes, seat: str) -> tuple[bytes, ...]:
        """The trace ``seat`` revealed for ``job_id``, read from its ``TraceRevealed`` event and checked
        against the root its event carries; LocalError when the chain holds no such reveal."""
        from contracts.settlement_v2 import trace_root

        logged = self._reveals.get((job_id, seat))
        if logged is None:
            await self._read_back()
            logged = self._reveals.get((job_id, seat))
        if logged is None:
            raise LocalError(f"job {job_id.hex()[:12]}: no reveal of seat {seat} seen on chain")
        chain = self.ctx.chain
        trace = await chain.run(chain.settlement.revealed_trace, logged)
        if trace_root(list(trace)) != logged.event.trace_root:
            raise LocalError(f"job {job_id.hex()[:12]}: seat {seat}'s revealed trace is not its root's list")
        return trace

    # -- serving -----------------------------------------------------------------------------

    async def relay(self, job_id: bytes, seat: str, item: int, blob_id: bytes) -> None:
        """Serve ``item`` of ``seat`` (fetched and checked here as its demand's witness) from now on,
        across a restart: written before the witness attests it served."""
        self._relays[(job_id, seat.lower(), item)] = blob_id
        await self._save_relays()

    async def _save_relays(self) -> None:
        await self.state.save(lambda: {"relays": sorted([job.hex(), seat, item, blob.hex()]
                                                        for (job, seat, item), blob in self._relays.items())})

    def _restore_relays(self, state: dict) -> None:
        for job, seat, item, blob in state["relays"]:
            self._relays[(bytes.fromhex(job), str(seat).lower(), int(item))] = bytes.fromhex(blob)

    async def serve(self, peer: ID, request: bytes) -> bytes:
        """Answer one job-data request: an item of our revealed seat, or one we relay as a witness."""
        wanted = DataRequest.from_wire(unpack(request, peer=peer), peer)
        ours = self.ctx.chain.account.lower() if self.ctx.chain is not None else ""
        if wanted.seat and wanted.seat.lower() != ours:
            relayed = self._relays.get((wanted.job_id, wanted.seat.lower(), wanted.item))
            if relayed is None:
                raise RequestRefused(f"item {wanted.item} of seat {wanted.seat} in job {wanted.job_id.hex()} is not "
                                     f"relayed here")
            await trio.lowlevel.checkpoint()
            return pack({"blob": relayed})
        trained = self.ctx.trained.get(wanted.job_id)
        if trained is None:
            raise RequestRefused(f"no seat of job {wanted.job_id.hex()} here")
        if not await self._revealed_by_us(wanted.job_id):
            raise RequestRefused(f"our seat of job {wanted.job_id.hex()} has not revealed its trace: nothing is "
                                 f"served before the reveal")
        if wanted.item > len(trained.trace):
            raise RequestRefused(f"job {wanted.job_id.hex()} has items 0..{len(trained.trace)}, not {wanted.item}")
        return pack({"blob": await self._blob_of(trained, wanted.item)})

    async def serve_steps(self, peer: ID, request: bytes) -> bytes:
        """Our seat's steps lists of the intervals asked, after its reveal, each signed with our account key."""
        from protocol import claim_lists
        from protocol.statements import sign_statement

        from ..chain import account_key
        from .adversaries import HONEST

        obj = unpack(request, peer=peer)
        job_id, intervals = (obj.get("job"), obj.get("intervals")) if isinstance(obj, dict) else (None, None)
        if not isinstance(job_id, bytes) or len(job_id) != HASH or not isinstance(intervals, list) \
                or not 1 <= len(intervals) <= STEPS_PER_ASK or len(set(intervals)) != len(intervals) \
                or any(type(c) is not int or c < 0 for c in intervals):
            raise BadMessage(f"a steps request is {{job: 32 bytes, intervals: 1 to {STEPS_PER_ASK} distinct c >= 0}}",
                             peer=peer)
        trained = self.ctx.trained.get(job_id)
        if trained is None:
            raise RequestRefused(f"no seat of job {job_id.hex()} here")
        if not await self._revealed_by_us(job_id):
            raise RequestRefused(f"our seat of job {job_id.hex()} has not revealed its trace: nothing is served "
                                 f"before the reveal")
        if max(intervals) >= trained.intervals:
            raise RequestRefused(f"job {job_id.hex()} has intervals 0..{trained.intervals - 1}, not {max(intervals)}")
        oracle = await trained.oracle()
        lists = await trio.to_thread.run_sync(lambda: [claim_lists.steps_list(oracle, c) for c in intervals])
        adversary = getattr(self.ctx.roles.get("provider"), "adversary", HONEST)
        chain, answers = self.ctx.chain, []
        for c, steps in zip(intervals, lists):
            asked = self._steps_asked.setdefault((job_id, c), [])
            if peer not in asked:
                asked.append(peer)
            steps = adversary.steps_told(steps, asked.index(peer))
            signed = sign_statement(steps_statement(job_id, chain.account, c, steps), account_key(self.ctx.seed),
                                    statement_domain(chain))
            answers.append({"steps": steps, "signature": signed.signature})
        return pack({"lists": answers})

    async def _revealed_by_us(self, job_id: bytes) -> bool:
        if job_id in self._revealed:
            await trio.lowlevel.checkpoint()
            return True
        chain = self.ctx.chain
        try:
            seat = await chain.run(chain.settlement.seat, job_id, chain.account)
        except chain_failures() as error:
            raise RequestRefused(f"reading our seat on chain: {describe_chain_error(error)}") from None
        if seat.trace_root == bytes(HASH):
            return False
        self._revealed.add(job_id)
        return True

    async def _blob_of(self, trained: Any, item: int) -> bytes:
        """The blob id of a seat's item, the checkpoint stored as a blob on first use."""
        key = (trained.job_id, item)
        if key not in self._blobs:
            if item == BUNDLE_ITEM:
                if not self.ctx.blobs.store.has(trained.bundle_id):
                    raise RequestRefused(f"the bundle of job {trained.job_id.hex()} is not here")
                self._blobs[key] = trained.bundle_id
            else:
                self._blobs[key] = await self.ctx.blobs.store.put_file(trained.checkpoint_path(checkpoint_of(item)))
        return self._blobs[key]

    # -- fetching ----------------------------------------------------------------------------

    async def peer_of_seat(self, seat: str) -> ID:
        """The libp2p peer of an account (a seat, a witness, a referee: its registered node key), reached."""
        chain = self.ctx.chain
        peer = self.ctx.peer_of(await chain.run(chain.key_of_sync, seat))
        known = await self.ctx.storage.run(self.ctx.storage.get_peer, str(peer))
        # the peers table's, then what the host learnt (adverts, connections): a node may record no peers
        addrs = list(dict.fromkeys((known.addrs if known is not None else []) + self.ctx.host.known_addrs(peer)))
        await self.ctx.reach(peer, addrs)
        return peer

    async def fetch_item(self, job_id: bytes, seat: str, item: int, *, peer: ID | None = None) -> Path:
        """Item ``item`` of ``seat`` in ``job_id``, fetched from the seat (or ``peer``: its witness)
        and checked: a checkpoint's path, or the bundle installed as the job's directory."""
        return (await self.fetch_checked(job_id, seat, item, peer=peer))[0]

    async def fetch_checked(self, job_id: bytes, seat: str, item: int, *, peer: ID | None = None) -> tuple[Path, bytes]:
        """`fetch_item`, with the blob id the item came as (what a witness relays)."""
        peer = peer if peer is not None else await self.peer_of_seat(seat)
        timeout = self.ctx.config.request_timeout
        answer = await self.ctx.host.request(peer, DATA_PROTOCOL, pack(DataRequest(job_id, item, seat).to_wire()),
                                             timeout=timeout, limits=DATA_LIMITS)
        blob_id = _blob_of_answer(unpack(answer, peer=peer), peer)
        return await self._checked(job_id, seat, item, await self.ctx.blobs.fetch(peer, blob_id), peer), blob_id

    async def fetch_steps(self, job_id: bytes, seat: str, intervals: Sequence[int], *,
                          peer: ID | None = None) -> list[ToldSteps]:
        """``seat``'s steps lists of ``intervals`` (at most STEPS_PER_ASK, distinct), each with its signed
        statement, in that order (StatementRefused when a signature is not the seat's); whether a list is
        true is the sampler's replay to say."""
        peer = peer if peer is not None else await self.peer_of_seat(seat)
        intervals = list(intervals)
        answer = await self.ctx.host.request(peer, STEPS_PROTOCOL, pack({"job": job_id, "intervals": intervals}),
                                             timeout=self.ctx.config.request_timeout, limits=STEPS_LIMITS)
        obj = unpack(answer, peer=peer)
        if not isinstance(obj, dict) or not isinstance(obj.get("lists"), list) or len(obj["lists"]) != len(intervals):
            raise BadMessage(f"a steps answer is {{lists: one per interval asked ({len(intervals)})}}", peer=peer)
        domain = statement_domain(self.ctx.chain)
        return [told_steps_of_answer(one, job_id, seat, c, domain, peer) for c, one in zip(intervals, obj["lists"])]

    async def _checked(self, job_id: bytes, seat: str, item: int, path: Path, peer: ID) -> Path:
        if item == BUNDLE_ITEM:
            return await self._check_bundle(job_id, path, peer)
        trace = await self.revealed_trace(job_id, seat)
        c = checkpoint_of(item)
        if c >= len(trace):
            raise LocalError(f"job {job_id.hex()[:12]} has checkpoints 0..{len(trace) - 1}, not {c}")
        digest = await trio.to_thread.run_sync(_state_hash_of, path)
        if digest != trace[c]:
            raise BlobCorrupt(f"checkpoint {c} of job {job_id.hex()[:12]} does not hash to the revealed trace[{c}]",
                              peer=peer)
        return path

    async def _check_bundle(self, job_id: bytes, path: Path, peer: ID) -> Path:
        spec = self._specs.get(job_id)
        if spec is None:
            await self._read_back()
            spec = self._specs.get(job_id)
        if spec is None:
            raise LocalError(f"job {job_id.hex()[:12]}: no JobOpened on chain")
        target = job_dir(self.ctx.config.data_dir, job_id)
        async with self._installing.setdefault(job_id, trio.Lock()):
            if (target / JOB_FILE).exists():
                await trio.lowlevel.checkpoint()
                return target
            return await self._install_bundle(job_id, path, peer, spec, target)

    async def _install_bundle(self, job_id: bytes, path: Path, peer: ID, spec: bytes, target: Path) -> Path:
        try:
            toml_text, files = decode_bundle(await trio.to_thread.run_sync(path.read_bytes))
        except BundleError as error:
            raise BadMessage(f"job {job_id.hex()[:12]}: the bundle: {error}", peer=peer) from None
        paths = {name: await self.ctx.blobs.fetch(peer, blob_id) for name, blob_id in files.items()}
        checking = target.with_name(target.name + ".checking")
        try:
            await trio.to_thread.run_sync(install_checked, checking, toml_text, paths, spec)
        except BundleError as error:
            raise BlobCorrupt(f"job {job_id.hex()[:12]}: the bundle does not match the job's spec: {error}",
                              peer=peer) from None
        finally:
            if checking.exists():
                shutil.rmtree(checking, ignore_errors=True)
        return target

    async def serve_own_demand(self, logged: Any) -> None:
        """Fetch what this node demanded, check it and release the demand's bond."""
        from contracts.settlement_v2_demands import DemandStage

        demand = logged.event
        chain = self.ctx.chain
        try:
            path = await self.fetch_item(demand.job_id, demand.seat, demand.item)
        except (PeerError, PeerUnreachable, LocalError) as error:
            log.warning("demand %s: item %d of seat %s not received: %s", demand.demand_id.hex()[:12], demand.item,
                        demand.seat, error)
            return
        self._got(demand, path)
        try:
            if (await chain.run(chain.settlement.demand, demand.demand_id)).stage != DemandStage.OPEN:
                return  # a witness was called, or it ended otherwise: nothing to release
            await chain.run(chain.settlement.release_demand, demand.demand_id)
        except chain_failures() as error:
            log.warning("demand %s: releasing: %s", demand.demand_id.hex()[:12], describe_chain_error(error))
            return
        self.released.append(demand.demand_id)
        log.info("demand %s: item %d of seat %s arrived and checked; released", demand.demand_id.hex()[:12],
                 demand.item, demand.seat)

    async def _fetch_from_witness(self, demand: Any, witness: str) -> None:
        """The witness attested the seat served it: fetch the item from the witness, checked against
        the seat's reveal as from the seat itself."""
        if demand.demand_id in self.received:
            await trio.lowlevel.checkpoint()
            return
        for attempt in range(WITNESS_FETCH_ATTEMPTS):
            if attempt:
                await trio.sleep(WITNESS_FETCH_RETRY * attempt)
            try:
                path = await self.fetch_item(demand.job_id, demand.seat, demand.item,
                                             peer=await self.peer_of_seat(witness))
            except (PeerError, LocalError) as error:
                log.info("demand %s: item %d from witness %s: %s", demand.demand_id.hex()[:12], demand.item, witness,
                         error)
                continue
            self._got(demand, path)
            log.info("demand %s: item %d of seat %s received from witness %s and checked",
                     demand.demand_id.hex()[:12], demand.item, demand.seat, witness)
            return
        log.warning("demand %s: witness %s attested item %d served and did not relay it", demand.demand_id.hex()[:12],
                    witness, demand.item)

    def _got(self, demand: Any, path: Path) -> None:
        self.received[demand.demand_id] = path
        self._own_demands.pop(demand.demand_id, None)


def _state_hash_of(path: Path) -> bytes:
    from repops_cupy.checkpoint import CheckpointError, load_checkpoint

    try:
        return load_checkpoint(path)[2]
    except (CheckpointError, OSError, ValueError) as error:
        return b"not a checkpoint: " + str(error).encode()[:64]


def install_checked(directory: Path, toml_text: str, files: dict[str, Path], spec: bytes) -> Path:
    """Install a bundle in ``directory`` (a name ending ``.checking``), check it against the job's
    ``spec`` (BundleError when it does not match), then move it to the job's place; returns that."""
    if directory.exists():
        shutil.rmtree(directory)
    install_job(directory, toml_text, files)
    check_terms(signed_spec(spec), load_training(directory / JOB_FILE))
    target = directory.with_name(directory.name[: -len(".checking")])
    if not target.exists():
        directory.rename(target)
    return target


__all__ = ["BUNDLE_ITEM", "DATA_LIMITS", "DATA_PROTOCOL", "DataRequest", "JobDataService", "STATE_FILE",
           "STEPS_LIMITS", "STEPS_PER_ASK", "STEPS_PROTOCOL", "StatementRefused", "ToldSteps", "checkpoint_of", "install_checked",
           "signed_spec", "statement_domain", "steps_statement", "told_steps_of_answer"]
