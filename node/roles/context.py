"""What the roles of one node share: identity, chain binding, stream protocols, gossip, disputes.

A node runs any combination of roles, each started by `node.runtime` as its own task;
they share one `RoleContext` (created by the first role to start, in `run_role`),
which owns everything there must be one of per node: the ``/gavel/job/1.0.0`` and
``/gavel/dispute/1.0.0`` handlers (each role registers the operations it serves), the
gossip subscriptions (each role adds handlers), the dispute party sessions, and the
binding to the settlement contract.

Job records: the ``jobs`` table's opaque ``spec`` column holds a msgpack map per job:
the signed terms, the bundle's blob id, the client's addresses and account, and what the
role that owns the row adds (a provider's trace report, a client's seats and verdicts).
"""
from __future__ import annotations

import logging
import re
import weakref
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

import trio
from libp2p.peer.id import ID
from multiaddr import Multiaddr
from multiaddr.exceptions import Error as MultiaddrError

from protocol import (
    CHALLENGER, DEFENDER, Identity, OpenDispute, RemoteProtocolError, RevealRequest, SignedJobTerms,
    Verdict, decode_envelope,
)

from ..errors import BadMessage, LocalError, PeerError, PeerUnreachable
from ..framing import pack, unpack
from ..gossip import GossipMessage
from ..peer_identity import peer_id_of_key, public_key_of
from ..storage import Job
from ..streams import RequestRefused
from .chain import ChainBinding, open_binding_sync, parse_ether
from .chain_watch import ChainWatch
from .disputes import PartySession, first_seq
from .jobfiles import JOB_FILE, check_terms, decode_bundle, install_job, job_dir, load_training
from .job_protocols import (
    DISPUTE_LIMITS, DISPUTE_PROTOCOL, GOSSIP_VALIDATORS, JOB_LIMITS, JOB_PROTOCOL, DisputeMessage, request_op,
)

log = logging.getLogger(__name__)

CHAIN_RETRY_MIN, CHAIN_RETRY_MAX = 1.0, 30.0
# A chain started alongside the node (anvil in a walkthrough) may take a few seconds to
# answer: failed attempts in this first while are logged at INFO, later ones as warnings.
CHAIN_QUIET = 10.0
ADDR_TTL = 3600

JobOp = Callable[[ID, dict], Awaitable[dict]]
OpenHandler = Callable[[ID, Any, int], Awaitable[None]]


@dataclass
class PartySpec:
    """What a role hands the dispute service to answer a dispute of one of its jobs."""

    terms: SignedJobTerms
    role: str  # the commitment role: provider or auditor
    oracle: Callable[[], Any]  # blocking: builds the oracle
    rewrite: Any = None


PartySource = Callable[[bytes], Awaitable["PartySpec | None"]]


class ChainUnreachable(LocalError):
    """No settlement chain answered within a one-shot command's bound."""


def short_reason(text: str) -> str:
    """The gist of a connection failure: the OS's words (``Connection refused``) when an
    HTTP library buried them in its own, else the text, cut short."""
    found = re.search(r"\[Errno -?\d+\] ([^'\")\]]+)", text)
    if found:
        return found.group(1).strip()
    return text if len(text) <= 200 else text[:197] + "..."


async def _ignore(message: GossipMessage) -> None:
    await trio.lowlevel.checkpoint()


def encode_record(record: dict) -> bytes:
    return pack(record)


def decode_record(raw: bytes) -> dict:
    return unpack(raw)


def terms_of(record: dict) -> SignedJobTerms:
    """The signed job terms a job's record holds."""
    from protocol.wire import decode_struct

    return decode_struct(SignedJobTerms, record["terms"])


class RoleContext:
    def __init__(self, node: Any) -> None:
        self.node = node
        self.config = node.config
        self.host = node.host
        self.storage = node.storage
        self.blobs = node.blobs
        self.metrics = node.metrics
        self.identity = Identity(bytes(node.host.signing_key))
        self.seed = bytes(node.host.signing_key)
        self.chain: ChainBinding | None = None
        self.chain_ready = trio.Event()
        self.chain_error = ""  # why the last connection attempt failed, while it does
        self.chain_watch = ChainWatch(self)  # the roles add their handlers to its on_lost and on_reorg
        # Settlement version 2: the contract's events in order (roles subscribe), what this node trained.
        self.follower: Any = None
        self.trained: Any = None
        self.job_data: Any = None
        if getattr(self.config, "settlement", "1") == "2":
            from .v2.data import JobDataService
            from .v2.follower import ChainFollower
            from .v2.trained import TrainedJobs

            self.follower = ChainFollower(self)
            self.trained = TrainedJobs(self.config.data_dir)
            self.job_data = JobDataService(self)  # serves our seats' items after their reveal
            self.job_data.subscribe(self.follower)
            self.chain_watch.on_reorg.append(self.follower.on_reorg)
            self.chain_watch.on_lost.append(self.follower.on_lost)
        self.started = trio.Event()
        self.roles: dict[str, Any] = {}
        self.trainings: dict[bytes, tuple[Any, Any]] = {}
        self._prepare_locks: dict[bytes, trio.Lock] = {}
        self.job_ops: dict[str, JobOp] = {}
        self.open_handler: OpenHandler | None = None
        self.party_sources: list[PartySource] = []
        self.parties: dict[tuple[bytes, bytes], PartySession] = {}
        self._party_locks: dict[bytes, trio.Lock] = {}
        self._gossip: dict[str, list[Callable[[GossipMessage], Awaitable[None]]]] = {}
        self._nursery: trio.Nursery | None = None
        self.job_locks: dict[bytes, trio.Lock] = {}
        self.host.handle_requests(JOB_PROTOCOL, self._serve_job, JOB_LIMITS)
        self.host.handle_requests(DISPUTE_PROTOCOL, self._serve_dispute, DISPUTE_LIMITS)

    # -- life cycle --------------------------------------------------------------------

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Connect to the chain (retrying while it is unreachable) and keep serving."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            self.started.set()
            task_status.started(self)
            # GossipSub forwards a topic only through nodes subscribed to it: every node of
            # the network relays every gavel topic, whether or not a role of it reads them.
            for topic, valid in GOSSIP_VALIDATORS.items():
                self.host.gossip.set_validator(topic, valid)
                await self.on_gossip(topic, _ignore)
            await self.connect_chain()
            if self.follower is not None:
                nursery.start_soon(self.follower.run, name="chain follower")
            await self.chain_watch.run()  # every node, client-only ones too

    def start_soon(self, fn: Callable[..., Awaitable[Any]], *args: Any, name: str | None = None) -> None:
        """Run a background task of the roles; its failure is logged, never the node's end."""
        assert self._nursery is not None

        async def guarded() -> None:
            try:
                await fn(*args)
            except (PeerError, LocalError, RemoteProtocolError) as error:
                log.warning("%s: %s", name or getattr(fn, "__name__", "task"), error)
            except Exception:  # broad: a bug in one job's task is logged with its traceback, the node goes on
                log.exception("%s failed", name or getattr(fn, "__name__", "task"))

        self._nursery.start_soon(guarded, name=name)

    async def connect_chain(self) -> None:
        from contracts import Role

        roles = Role(0)
        for name, bit in (("provider", Role.PROVIDER), ("auditor", Role.AUDITOR), ("client", Role.CLIENT)):
            if name in self.config.roles:
                roles |= bit
        if self.config.settlement == "2" and roles & Role.AUDITOR:
            # Draws of referees and witnesses probe ROLE_REFEREE nodes; a version-2 auditor runs both
            # duties (AuditorRoleV2 starts the referee's, every node the witness's).
            roles |= Role.REFEREE
        stake = parse_ether(self.config.stake, "stake") if roles & (Role.PROVIDER | Role.AUDITOR) else 0
        delay = CHAIN_RETRY_MIN
        quiet_until = trio.current_time() + CHAIN_QUIET
        while True:
            try:
                # Abandoned when cancelled: a chain that does not answer holds the thread for
                # the RPC timeout, and a one-shot command that gave up must not wait for it.
                binding = await trio.to_thread.run_sync(open_binding_sync, self.config, self.seed,
                                                        abandon_on_cancel=True)
                await binding.run(binding.ensure_registered_sync, self.identity.node_id, roles, stake)
                break
            except (LocalError, OSError) as error:
                self.chain_error = f"no chain answers at {self.config.chain} ({short_reason(str(error))})"
            except Exception as error:  # a revert or an RPC error: the chain answered, badly
                self.chain_error = f"settlement chain {self.config.chain}: {type(error).__name__}: {error}"
            level = logging.INFO if trio.current_time() < quiet_until else logging.WARNING
            log.log(level, "%s; retrying in %.0f s", self.chain_error, delay)
            await trio.sleep(delay)
            delay = min(delay * 2, CHAIN_RETRY_MAX)
        self.chain_error = ""
        self.chain = binding
        self.host.info["contract"] = binding.address
        self.host.info["account"] = binding.account
        log.info("settlement contract %s, account %s", binding.address, binding.account)
        self.chain_ready.set()

    async def wait_chain(self, timeout: float | None = None) -> ChainBinding:
        """The chain binding, once connected. A daemon waits as long as it takes (the
        connection is retried); a one-shot command passes ``timeout`` and gets
        ChainUnreachable, naming the last error, when the chain is still failing by then.
        An attempt under way at the bound (a slow RPC, a registration being mined) is
        let finish: its failure ends the wait, its success ends it well."""
        if timeout is None:
            await self.chain_ready.wait()
        else:
            with trio.move_on_after(timeout):
                await self.chain_ready.wait()
            while self.chain is None:
                if self.chain_error:
                    raise ChainUnreachable(f"{self.chain_error}; gave up after {timeout:g} s")
                await trio.sleep(0.1)
        assert self.chain is not None
        return self.chain

    # -- gossip ------------------------------------------------------------------------

    async def on_gossip(self, topic: str, handler: Callable[[GossipMessage], Awaitable[None]]) -> None:
        handlers = self._gossip.get(topic)
        if handlers is None:
            self._gossip[topic] = handlers = []

            async def dispatch(message: GossipMessage) -> None:
                for h in list(handlers):
                    try:
                        await h(message)
                    except (PeerError, RemoteProtocolError) as error:
                        log.info("gossip on %s from %s: %s", topic, message.origin, error)

            await self.host.gossip.subscribe(topic, dispatch)
        handlers.append(handler)

    async def publish(self, topic: str, obj: dict) -> None:
        try:
            await self.host.gossip.publish(topic, pack(obj))
        except Exception as error:  # broad: gossip is best effort, what must arrive also goes by stream
            log.info("publishing on %s: %s: %s", topic, type(error).__name__, error)

    # -- peers -------------------------------------------------------------------------

    def remember(self, peer: ID, addrs: list[str]) -> None:
        """Keep a peer's addresses, so a stream to it can dial it."""
        try:
            mas = [Multiaddr(a.split("/p2p/")[0]) for a in addrs]
        except (MultiaddrError, ValueError) as error:  # a peer's address that does not parse
            log.info("peer %s: an address that does not parse (%s): %s", peer, error, addrs)
            return
        if mas:
            self.host.libp2p.get_peerstore().add_addrs(peer, mas, ADDR_TTL)

    async def reach(self, peer: ID, addrs: list[str]) -> None:
        """Connect to ``peer`` unless connected, trying ``addrs``; PeerUnreachable when none works."""
        if self.host.is_connected(peer):
            await trio.lowlevel.checkpoint()
            return
        self.remember(peer, addrs)
        errors = []
        for addr in addrs:
            full = addr if "/p2p/" in addr else f"{addr}/p2p/{peer}"
            try:
                await self.host.connect(full)
                return
            except (PeerError, LocalError) as error:
                errors.append(str(error))
        if not addrs:
            await trio.lowlevel.checkpoint()
        raise PeerUnreachable(f"no address of {peer} answers: {'; '.join(errors) or 'none known'}", peer=peer)

    @staticmethod
    def key_of(peer: ID) -> bytes:
        return public_key_of(peer)

    @staticmethod
    def peer_of(key: bytes) -> ID:
        return peer_id_of_key(key)

    # -- jobs in storage ---------------------------------------------------------------

    def job_lock(self, job_id: bytes) -> trio.Lock:
        return self.job_locks.setdefault(job_id, trio.Lock())

    async def load_job(self, job_id: bytes) -> tuple[Job, dict] | None:
        job = await self.storage.run(self.storage.get_job, job_id)
        if job is None:
            return None
        return job, decode_record(job.spec)

    async def save_job(self, job_id: bytes, role: str, state: str, record: dict) -> None:
        await self.storage.run(self.storage.put_job, Job(job_id, encode_record(record), role, state))

    async def prepare_job(self, job_id: bytes, terms: SignedJobTerms, bundle_id: bytes, peers: list[ID]) -> tuple[Any, Any]:
        """The job's training program and committed step program, from its bundle (fetched
        from ``peers`` when missing) once the terms are checked against it. Raises
        BundleError when they do not match, BlobNotFound when no peer has the bundle."""
        cached = self.trainings.get(job_id)
        if cached is not None:
            await trio.lowlevel.checkpoint()
            return cached
        async with self._prepare_locks.setdefault(job_id, trio.Lock()):
            if job_id in self.trainings:
                return self.trainings[job_id]
            directory = job_dir(self.config.data_dir, job_id)
            job_file = directory / JOB_FILE
            if not job_file.exists():
                store = self.blobs.store
                path = store.path(bundle_id) if store.has(bundle_id) else await self.blobs.fetch_from_any(peers, bundle_id)
                toml_text, files = decode_bundle(await trio.to_thread.run_sync(path.read_bytes))
                paths = {}
                for name, blob_id in files.items():
                    paths[name] = store.path(blob_id) if store.has(blob_id) else await self.blobs.fetch_from_any(peers, blob_id)
                await trio.to_thread.run_sync(install_job, directory, toml_text, paths)
            training = await trio.to_thread.run_sync(load_training, job_file)
            program = await trio.to_thread.run_sync(check_terms, terms, training)
            self.trainings[job_id] = (training, program)
            return training, program

    # -- /gavel/job/1.0.0 --------------------------------------------------------------

    async def _serve_job(self, peer: ID, request: bytes) -> bytes:
        obj = unpack(request, peer=peer)
        op = request_op(obj, peer)
        handler = self.job_ops.get(op)
        if handler is None:
            if op in ("offer", "commitment", "trace", "challenge"):
                raise RequestRefused(f"this node does not serve {op!r}")
            raise BadMessage(f"unknown job operation {op[:32]!r}", peer=peer)
        return pack(await handler(peer, obj))

    # -- /gavel/dispute/1.0.0 ----------------------------------------------------------

    async def _serve_dispute(self, peer: ID, request: bytes) -> bytes:
        message = DisputeMessage.from_wire(unpack(request, peer=peer), peer)
        try:
            envelope = decode_envelope(message.envelope, max_size=len(message.envelope))
        except RemoteProtocolError as error:
            raise BadMessage(f"dispute message: {error}", peer=peer) from None
        body = envelope.body
        if isinstance(body, OpenDispute):
            if self.open_handler is None:
                raise RequestRefused("this node referees no job")
            await self.open_handler(peer, envelope, message.chain_dispute)
            return b""
        dispute_id = getattr(body, "dispute_id", None)
        if dispute_id is None:
            raise BadMessage(f"{envelope.type} is not a dispute move", peer=peer)
        session = await self._party_session(envelope.job_id, dispute_id, envelope)
        if session is None:
            if isinstance(body, Verdict):
                return b""  # a verdict of a dispute we never took part in: nothing to do
            raise RequestRefused("no such dispute here")
        async with session.lock:
            try:
                answer = await trio.to_thread.run_sync(session.answer_sync, message.envelope, session.clock.now())
            except RemoteProtocolError as error:
                raise RequestRefused(f"move refused: {error}") from None
            await self.storage.run(self.storage.put_dispute, session.row())
        if session.verdict is not None:
            log.info("dispute %s of job %s: verdict received, this node %s", dispute_id.hex()[:12],
                     envelope.job_id.hex()[:12], session.status)
        if answer is None:
            raise RequestRefused("no answer")  # a cheat that stays silent: its clock runs on
        return answer

    async def _party_session(self, job_id: bytes, dispute_id: bytes, envelope: Any) -> PartySession | None:
        """The session of this dispute; a defender's is created on the referee's first request."""
        key = (job_id, dispute_id)
        lock = self._party_locks.setdefault(job_id, trio.Lock())
        async with lock:
            session = self.parties.get(key)
            if session is not None:
                return session
            stored = await self.storage.run(self.storage.get_dispute, dispute_id)
            spec = await self._party_spec(job_id)
            if spec is None or envelope.sender != spec.terms.terms.client:
                return None
            if stored is not None:
                record = decode_record(stored.state)
                if record.get("kind") != "party":
                    return None
                session = await trio.to_thread.run_sync(self._restore_party, stored.state, spec)
            else:
                body = envelope.body
                if not (isinstance(body, RevealRequest) and body.level == 1):
                    return None  # a defender joins on the first reveal, nothing else
                index = len(await self.storage.run(lambda: self.storage.disputes(job_id=job_id))) + 1
                oracle = await trio.to_thread.run_sync(spec.oracle)
                session = PartySession(identity=self.identity, terms=spec.terms, oracle=oracle, role=spec.role,
                                       side=DEFENDER, seq=first_seq(index), rewrite=spec.rewrite)
                log.info("job %s: challenged in dispute %s; defending", job_id.hex()[:12], dispute_id.hex()[:12])
            self.parties[key] = session
            return session

    def _restore_party(self, record: bytes, spec: PartySpec) -> PartySession:
        return PartySession.restore(record, identity=self.identity, terms=spec.terms, oracle=spec.oracle(),
                                    rewrite=spec.rewrite)

    async def _party_spec(self, job_id: bytes) -> PartySpec | None:
        for source in self.party_sources:
            spec = await source(job_id)
            if spec is not None:
                return spec
        return None

    async def challenge(self, spec: PartySpec, defender_root: Any, chain_dispute: int, client_addrs: list[str]) -> None:
        """Open a dispute as the challenger at the job's referee (already opened on chain)."""
        job_id = spec.terms.job_id
        index = len(await self.storage.run(lambda: self.storage.disputes(job_id=job_id))) + 1
        oracle = await trio.to_thread.run_sync(spec.oracle)
        session = PartySession(identity=self.identity, terms=spec.terms, oracle=oracle, role=spec.role,
                               side=CHALLENGER, seq=first_seq(index), rewrite=spec.rewrite,
                               chain_dispute=chain_dispute)
        envelope = await trio.to_thread.run_sync(session.open_sync, defender_root, session.clock.now())
        self.parties[(job_id, session.dispute_id)] = session
        await self.storage.run(self.storage.put_dispute, session.row())
        referee = self.peer_of(spec.terms.terms.client)
        await self.reach(referee, client_addrs)
        timeout = max(self.config.request_timeout, 30.0)
        await self.host.request(referee, DISPUTE_PROTOCOL, pack(DisputeMessage(envelope.encode(), chain_dispute).to_wire()),
                                timeout=timeout, limits=DISPUTE_LIMITS)
        log.info("job %s: opened dispute %s (chain #%d) against %s", job_id.hex()[:12], session.dispute_id.hex()[:12],
                 chain_dispute, defender_root.signer.hex()[:8])


_contexts: "weakref.WeakKeyDictionary[Any, RoleContext]" = weakref.WeakKeyDictionary()


async def run_role(node: Any, make_role: Callable[[RoleContext], Any]) -> None:
    """A role runner's body: the first role of a node also runs the shared context."""
    context = _contexts.get(node)
    if context is None:
        context = _contexts[node] = RoleContext(node)
        async with trio.open_nursery() as nursery:
            await nursery.start(context.run)
            await make_role(context).run()
    else:
        await context.started.wait()
        await make_role(context).run()


def context_of(node: Any) -> RoleContext | None:
    """The node's role context, once its first role started (for tools and tests)."""
    return _contexts.get(node)


__all__ = ["ChainUnreachable", "PartySpec", "RoleContext", "context_of", "run_role", "terms_of"]
