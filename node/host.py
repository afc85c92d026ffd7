"""The node's libp2p host: transports, stream protocols, bootstrap and peer target.

Configuration follows what was measured on this project (``notes/libp2p.md``):
TCP + Noise only (a default host would also accept plaintext), Yamux, one connection
per peer (without it every dial stalls 250 ms), explicit bootstrap addresses and no
mDNS. The host keeps a small peer target itself instead of libp2p's auto-connector,
which aims at 200 connections. Gossip (GossipSub and its settings) is ``node.gossip``,
run by the host as ``host.gossip``; the identity one seed gives is ``node.peer_identity``.

Start-up follows trio's convention::

    async with trio.open_nursery() as nursery:
        host = await nursery.start(NodeHost(seed, bootstrap=[...]).run)
        ...
        await host.aclose()

or ``async with open_host(seed, ...) as host:``.
"""
from __future__ import annotations

import logging
import os
import random
import socket
import time
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Awaitable, Callable, Sequence

import trio
from libp2p import new_host
from libp2p.abc import INotifee
from libp2p.crypto.x25519 import create_new_key_pair as new_x25519_key_pair
from libp2p.exceptions import BaseLibp2pError
from libp2p.network.auto_connector import AutoConnector
from libp2p.network.config import ConnectionConfig, RetryConfig
from libp2p.peer.id import ID
from libp2p.peer.peerinfo import info_from_p2p_addr
from libp2p.peer.peerstore import PeerStoreError
from libp2p.security.noise.transport import PROTOCOL_ID as NOISE_ID, Transport as NoiseTransport
from libp2p.stream_muxer.yamux.yamux import PROTOCOL_ID as YAMUX_ID, Yamux
from multiaddr import Multiaddr
from multiaddr.exceptions import Error as MultiaddrError, ProtocolLookupError

from .errors import BadMessage, LocalError, PeerError, PeerUnreachable
from .framing import FramedStream, pack, unpack
from .gossip import Gossip, GossipSettings
from .metrics import NodeMetrics
from .peer_identity import identity_from_seed
from .streams import (
    RequestChannel,
    RequestHandler,
    StreamHandler,
    StreamLimits,
    exchange,
    guarded_handler,
    open_framed,
    request_handler,
)
from . import yamux

log = logging.getLogger(__name__)

# py-libp2p's yamux answers every read with a window update (one more frame each way for every gossip
# message on a connection); its switch for go-yamux's rule, an update once half the window is used:
os.environ.setdefault("PY_YAMUX_RELEASE_ON_READ", "0")
yamux.install()  # a stream opening cut short by its timeout gives its slot of the connection back

DEFAULT_LISTEN = "/ip4/127.0.0.1/tcp/0"
NEGOTIATION_FLOOR = 10.0  # seconds: libp2p's own default for negotiations and upgrades
PING_PROTOCOL = "/gavel/ping/1.0.0"
PING_LIMITS = StreamLimits(max_frame=16 * 1024, read_timeout=5.0, write_timeout=5.0, idle_timeout=30.0)
# The peer loops wake on every connect and disconnect; this bounds the wait for an
# event that libp2p failed to report.
PEER_CHECK_INTERVAL = 10.0
# The peer-target loop leaves a peer alone this long after a failed dial or a
# disconnect (no redial loops against a peer that closes on us).
PEER_DIAL_COOLDOWN = 60.0


# -- host --------------------------------------------------------------------------


@dataclass
class PeerInfoCard:
    """What a ping returns: who the node is and what it runs."""

    peer_id: str
    addrs: list[str]
    roles: list[str]
    version: str
    peers: int
    info: dict[str, Any] = field(default_factory=dict)


class NodeHost:
    """A running libp2p host with gavel's settings; see the module docstring."""

    def __init__(
        self,
        seed: bytes,
        *,
        listen: str = DEFAULT_LISTEN,
        bootstrap: Sequence[str] = (),
        metrics: NodeMetrics | None = None,
        gossip: GossipSettings = GossipSettings(),
        dial_timeout: float = 5.0,
        request_timeout: float = 10.0,
        reconnect_min: float = 0.25,
        reconnect_max: float = 10.0,
        peer_target: int = 8,
        roles: Sequence[str] = (),
        version: str = "",
    ) -> None:
        self.signing_key, self._key_pair = identity_from_seed(seed)
        self.peer_id = ID.from_pubkey(self._key_pair.public_key)
        self.public_key = bytes(self.signing_key.verify_key)
        self.metrics = metrics or NodeMetrics()
        self.dial_timeout = dial_timeout
        self.request_timeout = request_timeout
        self.roles = list(roles)
        self.version = version
        self.info: dict[str, Any] = {}  # extra fields the ping answer carries
        self._listen = Multiaddr(listen)
        self._bootstrap = [self._parse_peer_addr(a) for a in bootstrap]
        self._reconnect = (reconnect_min, reconnect_max)
        self.peer_target = peer_target
        self._connections_changed = trio.Event()
        self._left_alone_until: dict[ID, float] = {}  # peer-target loop: monotonic time
        self._gossip_settings = gossip
        self._handlers: dict[str, Callable[[Any], Awaitable[None]]] = {}
        self._scope = trio.CancelScope()
        self._stopped = trio.Event()
        self._running = False
        self.libp2p: Any = None
        self.gossip: Gossip | None = None
        self.handle_requests(PING_PROTOCOL, self._answer_ping, PING_LIMITS)

    # -- life cycle ------------------------------------------------------------

    def _parse_peer_addr(self, addr: str) -> tuple[Multiaddr, ID]:
        try:
            ma = Multiaddr(addr)
            info = info_from_p2p_addr(ma)
        except (MultiaddrError, ValueError) as error:  # a bad address; a bad or missing peer id
            raise LocalError(f"{addr!r} is not a multiaddr ending in /p2p/<peer id>: {error}") from None
        return ma, info.peer_id

    def _build(self) -> None:
        noise = NoiseTransport(self._key_pair, noise_privkey=new_x25519_key_pair().private_key)
        self.libp2p = new_host(
            key_pair=self._key_pair,
            sec_opt={NOISE_ID: noise},  # Noise only: no plaintext fallback
            muxer_opt={YAMUX_ID: Yamux},
            # libp2p's 10 s for a stream's protocol negotiation fails first on a loaded host
            # (200 testnet nodes in one loop: thousands of identify/meshsub/job streams timed
            # out there); negotiation and upgrades get the host's own request and dial budgets.
            connection_config=ConnectionConfig(
                max_connections_per_peer=1,
                outbound_stream_protocol_negotiation_timeout=max(NEGOTIATION_FLOOR, self.request_timeout),
                inbound_stream_protocol_negotiation_timeout=max(NEGOTIATION_FLOOR, self.request_timeout),
                outbound_upgrade_timeout=max(NEGOTIATION_FLOOR, self.dial_timeout),
                inbound_upgrade_timeout=max(NEGOTIATION_FLOOR, self.dial_timeout),
            ),
            enable_mDNS=False,
        )
        network = self.libp2p.get_network()
        # Our bootstrap loop owns retries and backoff; the swarm's own retries
        # would only stretch each failed dial.
        network.retry_config = RetryConfig(max_retries=0)
        # The host keeps its own peer target (_keep_peer_target).
        network.auto_connector = _IdleAutoConnector(network)
        network.register_notifee(_ConnectionEvents(self))
        self.metrics.peers.set_function(lambda: len(self.connected_peers()))
        self.gossip = Gossip(self.libp2p, self.peer_id, self._gossip_settings, self.metrics)
        for protocol, handler in self._handlers.items():
            self.libp2p.set_stream_handler(protocol, handler)

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Listen, keep bootstrap peers connected and serve until cancelled or closed."""
        if self._running or self._stopped.is_set():
            raise LocalError("a NodeHost runs once")
        self._running = True
        try:
            with self._scope:
                self._check_port_free()
                self._build()
                async with self.libp2p.run([self._listen]):
                    async with self.gossip.services():
                        async with trio.open_nursery() as nursery:
                            self.gossip.attach(nursery)
                            for addr, peer in self._bootstrap:
                                nursery.start_soon(self._keep_connected, addr, peer)
                            nursery.start_soon(self._keep_peer_target)
                            log.info("host %s listening on %s", self.peer_id, ", ".join(self.listen_addrs))
                            task_status.started(self)
                            await trio.sleep_forever()
        finally:
            if self.gossip is not None:
                self.gossip.attach(None)
            await self._close_swarm()
            self._running = False
            self._stopped.set()

    def _check_port_free(self) -> None:
        # libp2p binds with SO_REUSEPORT, so a second node on a busy port starts
        # "fine" and the kernel splits incoming dials between the two. A plain bind
        # (no SO_REUSEPORT) fails against any live listener: probe with one first.
        try:
            port = int(self._listen.value_for_protocol("tcp"))
        except ProtocolLookupError:  # not a TCP address: nothing to probe
            return
        if port == 0:
            return
        for proto, family in (("ip4", socket.AF_INET), ("ip6", socket.AF_INET6)):
            try:
                ip = self._listen.value_for_protocol(proto)
            except ProtocolLookupError:
                continue
            with socket.socket(family, socket.SOCK_STREAM) as probe:
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                try:
                    probe.bind((ip, port))
                except OSError as error:
                    raise LocalError(f"cannot listen on {self._listen}: {error.strerror}") from None

    async def _close_swarm(self) -> None:
        # Leaving libp2p's run() by cancellation skips the swarm's own clean-up and
        # leaves the TCP listening socket open (SO_REUSEPORT): the kernel keeps
        # accepting on it, and a host restarted on the same port shares incoming
        # dials with the dead socket. Close it ourselves (idempotent).
        if self.libp2p is None:
            return
        with trio.move_on_after(2) as scope:
            scope.shield = True
            try:
                await self.libp2p.get_network().close()
            except Exception:  # broad: clean-up in a finally must not mask why we stopped
                log.debug("closing the swarm failed", exc_info=True)

    async def aclose(self) -> None:
        """Stop the host and wait (bounded) until it has shut down. Safe to call twice."""
        self._scope.cancel()
        if self._running:
            with trio.move_on_after(5) as scope:
                scope.shield = True
                await self._stopped.wait()
        else:
            await trio.lowlevel.checkpoint()

    @property
    def listen_addrs(self) -> list[str]:
        """Full addresses, ``/p2p/<id>`` included, to give to other nodes."""
        if self.libp2p is None:
            return []
        return [str(a) for a in self.libp2p.get_addrs()]

    # -- peers -----------------------------------------------------------------

    async def connect(self, addr: str) -> ID:
        """Dial ``addr`` (with /p2p/<id>), bounded by ``dial_timeout``; return the peer."""
        ma, peer = self._parse_peer_addr(addr)
        if peer == self.peer_id:
            raise LocalError("refusing to dial ourselves")
        await self._dial(ma, peer)
        return peer

    async def _dial(self, ma: Multiaddr, peer: ID) -> None:
        await trio.lowlevel.checkpoint()  # libp2p's connect() may return without one
        info = info_from_p2p_addr(ma)
        network = self.libp2p.get_network()
        stale = network.get_connections(peer)
        if stale and all(conn.is_closed for conn in stale):
            # A dead connection can linger in the swarm's table; connect() would then
            # return at once without dialing.
            with trio.move_on_after(2):
                try:
                    await network.close_peer(peer)
                except BaseLibp2pError as error:
                    log.debug("dropping dead connections to %s: %r", peer, error)
        # A failed dial bans the peer for 60 s, even after it restarts; a deliberate
        # dial should always really try.
        network.unblock_peer(peer)
        with trio.move_on_after(self.dial_timeout) as scope:
            try:
                await self.libp2p.connect(info)
            except (BaseLibp2pError, OSError) as error:
                raise PeerUnreachable(f"dial {ma} failed: {error}", peer=peer) from None
        if scope.cancelled_caught:
            raise PeerUnreachable(f"dial {ma} took over {self.dial_timeout:g} s", peer=peer)
        if not self.is_connected(peer):
            raise PeerUnreachable(f"connection to {ma} closed right after the dial", peer=peer)

    def is_connected(self, peer: ID) -> bool:
        if self.libp2p is None:
            return False
        return any(not conn.is_closed for conn in self.libp2p.get_network().get_connections(peer))

    def connected_peers(self) -> list[ID]:
        return [] if self.libp2p is None else list(self.libp2p.get_connected_peers())

    async def disconnect(self, peer: ID) -> None:
        # Left alone from now, not from libp2p's disconnect event: libp2p drops the
        # connection from its table 0.1 s or more before it reports the disconnect, and
        # the peer-target loop, waking in between, would redial the peer it just dropped.
        self._left_alone_until[peer] = time.monotonic() + PEER_DIAL_COOLDOWN
        with trio.move_on_after(2):
            try:
                await self.libp2p.disconnect(peer)
            except BaseLibp2pError as error:
                log.debug("disconnect %s: %r", peer, error)

    async def _keep_connected(self, addr: Multiaddr, peer: ID) -> None:
        low, high = self._reconnect
        delay = low
        while True:
            if self.is_connected(peer):
                await self._wait_connections_changed()
                continue
            try:
                await self._dial(addr, peer)
                log.info("connected to bootstrap peer %s", peer)
                delay = low
            except PeerError as error:
                log.info("bootstrap %s: %s; retrying in %.2g s", addr, error, delay)
                await trio.sleep(delay)
                delay = min(delay * 2, high)

    async def _keep_peer_target(self) -> None:
        """Dial peers heard of from others while fewer than ``peer_target`` are connected,
        one at a time, so that losing the bootstrap peers does not cut the node off."""
        peerstore = self.libp2p.get_peerstore()
        while True:
            if len(self.connected_peers()) >= self.peer_target:
                await self._wait_connections_changed()
                continue
            now = time.monotonic()
            self._left_alone_until = {p: t for p, t in self._left_alone_until.items() if t > now}
            candidates = [
                peer for peer in peerstore.peers_with_addrs()
                if peer != self.peer_id and not self.is_connected(peer)
                and peer not in self._left_alone_until
            ]
            if not candidates:
                await self._wait_connections_changed()
                continue
            peer = random.choice(candidates)
            try:
                await self._dial_known(peer)
            except PeerError as error:
                self._left_alone_until[peer] = time.monotonic() + PEER_DIAL_COOLDOWN
                log.debug("peer target: %s", error)

    def known_addrs(self, peer: ID) -> list[str]:
        """The addresses the peerstore holds for ``peer`` (learnt from adverts, connections, bootstrap)."""
        try:
            return [str(a) for a in self.libp2p.get_peerstore().addrs(peer)]
        except PeerStoreError:  # unknown, or its record expired
            return []

    async def _dial_known(self, peer: ID) -> None:
        addrs = self.libp2p.get_peerstore().addrs(peer)
        if not addrs:
            raise PeerUnreachable("no address known", peer=peer)
        await self._dial(addrs[0].encapsulate(Multiaddr(f"/p2p/{peer}")), peer)

    async def _wait_connections_changed(self) -> None:
        """Until a connection opens or closes (or PEER_CHECK_INTERVAL passes)."""
        with trio.move_on_after(PEER_CHECK_INTERVAL):
            await self._connections_changed.wait()

    def _connection_event(self, lost: ID | None = None) -> None:
        if lost is not None:
            self._left_alone_until[lost] = time.monotonic() + PEER_DIAL_COOLDOWN
        self._connections_changed.set()
        self._connections_changed = trio.Event()

    def _on_peer_error(self, peer: ID, error: PeerError) -> None:
        self.metrics.peer_error(error)

    # -- stream protocols ------------------------------------------------------

    def handle(self, protocol: str, handler: StreamHandler, limits: StreamLimits = StreamLimits()) -> None:
        """Serve ``protocol``: each inbound stream runs ``handler(FramedStream)``;
        the stream is closed afterwards and peer errors reset it."""
        wrapped = guarded_handler(
            protocol, handler, limits, traffic=self.metrics, on_peer_error=self._on_peer_error
        )
        self._handlers[protocol] = wrapped
        if self.libp2p is not None:
            self.libp2p.set_stream_handler(protocol, wrapped)

    def handle_requests(self, protocol: str, respond: RequestHandler, limits: StreamLimits = StreamLimits()) -> None:
        """Serve ``protocol`` as request/response: ``await respond(peer_id, request) -> answer``;
        raise ``streams.RequestRefused(reason)`` to answer with an error."""
        self.handle(protocol, request_handler(respond, limits), limits)

    async def open_stream(
        self, peer: ID, protocol: str, limits: StreamLimits = StreamLimits(), *, timeout: float | None = None
    ) -> FramedStream:
        """A new framed stream to ``peer``; close it with ``aclose()`` (or ``async with``)."""
        if self.libp2p is None:
            raise LocalError("the host is not running")
        try:
            return await open_framed(
                self.libp2p, peer, protocol, limits, timeout=timeout or self.request_timeout, traffic=self.metrics
            )
        except PeerUnreachable:
            # A connection on which no stream opens is dead, though the swarm may still list it
            # (seen in long testnet sweeps): drop it, so the next attempt dials afresh.
            await self.disconnect(peer)
            raise

    async def request(
        self,
        peer: ID,
        protocol: str,
        payload: bytes,
        *,
        timeout: float | None = None,
        limits: StreamLimits = StreamLimits(),
    ) -> bytes:
        """One request on a fresh stream; the answer's body, or a typed PeerError."""
        timeout = timeout or self.request_timeout
        framed = await self.open_stream(peer, protocol, limits, timeout=timeout)
        async with framed:
            try:
                return await exchange(framed, payload, timeout=timeout)
            except PeerError:
                await framed.reset()
                raise

    async def open_channel(
        self, peer: ID, protocol: str, *, timeout: float | None = None, limits: StreamLimits = StreamLimits()
    ) -> RequestChannel:
        """A kept stream for many requests (``async with await host.open_channel(...) as ch``)."""
        timeout = timeout or self.request_timeout
        framed = await self.open_stream(peer, protocol, limits, timeout=timeout)
        return RequestChannel(framed, timeout=timeout)

    # -- ping / identify -------------------------------------------------------

    def card(self) -> PeerInfoCard:
        return PeerInfoCard(
            peer_id=str(self.peer_id),
            addrs=self.listen_addrs,
            roles=self.roles,
            version=self.version,
            peers=len(self.connected_peers()),
            info=dict(self.info),
        )

    async def _answer_ping(self, peer: ID, request: bytes) -> bytes:
        await trio.lowlevel.checkpoint()
        if len(request) > 64:
            raise BadMessage("ping request too long", peer=peer)
        return pack({"nonce": request, **self.card().__dict__})

    async def ping(self, peer: ID, *, timeout: float = 5.0) -> tuple[float, PeerInfoCard]:
        """Round trip in seconds and the peer's card."""
        nonce = int(time.monotonic_ns()).to_bytes(8, "big")
        start = time.perf_counter()
        answer = unpack(await self.request(peer, PING_PROTOCOL, nonce, timeout=timeout, limits=PING_LIMITS), peer=peer)
        rtt = time.perf_counter() - start
        if not isinstance(answer, dict) or answer.get("nonce") != nonce:
            raise BadMessage("ping answer does not echo the nonce", peer=peer)
        try:
            card = PeerInfoCard(**{k: answer[k] for k in PeerInfoCard.__dataclass_fields__})
        except (KeyError, TypeError):
            raise BadMessage("malformed ping answer", peer=peer) from None
        if card.peer_id != str(peer):
            raise BadMessage(f"ping answer names {card.peer_id}", peer=peer)
        return rtt, card


@asynccontextmanager
async def open_host(seed: bytes, **options: Any) -> AsyncIterator[NodeHost]:
    """``async with open_host(seed, listen=..., bootstrap=[...]) as host:`` — running inside."""
    async with trio.open_nursery() as nursery:
        host: NodeHost = await nursery.start(NodeHost(seed, **options).run)
        try:
            yield host
        finally:
            await host.aclose()


class _IdleAutoConnector(AutoConnector):
    """libp2p's auto-connector dials every peer it hears of until it holds the midpoint of
    its watermarks, 200 connections: a 200-node testnet became a full mesh, and one
    100-node loop spent a core on it (0.34 cores without). It never starts here."""

    async def start(self) -> None:
        return None


class _ConnectionEvents(INotifee):
    """Wakes the host's peer loops on every connect and disconnect."""

    def __init__(self, host: NodeHost) -> None:
        self._host = host

    async def connected(self, network: Any, conn: Any) -> None:
        self._host._connection_event()

    async def disconnected(self, network: Any, conn: Any) -> None:
        self._host._connection_event(lost=conn.muxed_conn.peer_id)

    async def opened_stream(self, network: Any, stream: Any) -> None:
        return None

    async def closed_stream(self, network: Any, stream: Any) -> None:
        return None

    async def listen(self, network: Any, multiaddr: Multiaddr) -> None:
        return None

    async def listen_close(self, network: Any, multiaddr: Multiaddr) -> None:
        return None
