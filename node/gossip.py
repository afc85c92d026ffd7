"""Gossip: publish/subscribe over GossipSub, with the traps of ``notes/libp2p.md`` handled.

GossipSub v1.1 only (v1.2 queues an IDONTWANT per message), a 1 s heartbeat, spam
protection and adaptive gossip off (each silently drops or delays messages). Gossip
carries hashes, roots and signatures, never tensors: an item is at most
``MAX_GOSSIP_BYTES``, and publishing is paced because ``publish()`` has no
backpressure. A subscription's 32-message buffer is always drained into our own
queue, and a topic's handler runs one message at a time.

The host builds one ``Gossip`` over its libp2p host, runs its services with
``async with gossip.services():`` and attaches the nursery that runs the topics' tasks.

Every RPC py-libp2p's pubsub sends carries the sender's signed peer record, and every one received
is parsed and its Ed25519 signature checked again, though a peer's record changes only with its
addresses: a tenth of a busy in-process testnet's event loop. `_remember_peer_records` lets a record
already accepted from that peer pass unchecked for RECORD_RECHECK seconds.
"""
from __future__ import annotations

import logging
import time
import weakref
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, AsyncIterator, Awaitable, Callable

import trio
import libp2p.pubsub.gossipsub as libp2p_gossipsub
import libp2p.pubsub.pubsub as libp2p_pubsub
from libp2p.peer.id import ID
from libp2p.pubsub.gossipsub import PROTOCOL_ID as GOSSIP_V10, PROTOCOL_ID_V11 as GOSSIP_V11, GossipSub
from libp2p.pubsub.pubsub import Pubsub
from libp2p.pubsub.utils import maybe_consume_signed_record
from libp2p.tools.anyio_service import background_trio_service

from .errors import LocalError
from .metrics import NodeMetrics
from .peer_identity import public_key_of

log = logging.getLogger(__name__)

# The largest gossip item we publish or accept: gossip carries hashes, roots and
# signatures; tensors go over streams (GossipSub drops > 1 MiB without a word).
MAX_GOSSIP_BYTES = 64 * 1024
RECORD_RECHECK = 600.0  # seconds an accepted signed peer record passes unchecked (its peerstore TTL is 2 h)
RECORDS_KEPT = 4096  # accepted records remembered per host; beyond, the memory starts afresh


def _remember_peer_records(check: Callable[..., bool]) -> Callable[..., bool]:
    """``check`` (libp2p's `maybe_consume_signed_record`), run once per (peer, record bytes) and host in
    RECORD_RECHECK seconds: a record it accepted, sent again unchanged, is accepted again unchecked.
    A record it refused, or any other bytes, is checked."""
    accepted: "weakref.WeakKeyDictionary[Any, dict[tuple[bytes, bytes], float]]" = weakref.WeakKeyDictionary()

    def consume(msg: Any, host: Any, peer_id: ID) -> bool:
        if not msg.HasField("senderRecord"):
            return check(msg, host, peer_id)
        seen = accepted.setdefault(host, {})
        key, now = (peer_id.to_bytes(), bytes(msg.senderRecord)), time.monotonic()
        if now - seen.get(key, -RECORD_RECHECK) < RECORD_RECHECK:
            return True
        ok = check(msg, host, peer_id)
        if ok:
            if len(seen) >= RECORDS_KEPT:
                seen.clear()
            seen[key] = now
        return ok

    consume.remembers = True  # type: ignore[attr-defined]
    return consume


if not getattr(libp2p_pubsub.maybe_consume_signed_record, "remembers", False):
    # Both modules imported the function by name; one remembering wrapper serves both.
    libp2p_pubsub.maybe_consume_signed_record = libp2p_gossipsub.maybe_consume_signed_record = \
        _remember_peer_records(maybe_consume_signed_record)


@dataclass(frozen=True)
class GossipSettings:
    heartbeat: float = 1.0
    degree: int = 6
    degree_low: int = 4
    degree_high: int = 12
    # Minimum gap between two of our publishes: publish() has no backpressure and a
    # peer's outbound queue drops beyond 32 pending messages.
    publish_interval: float = 0.005
    max_message: int = MAX_GOSSIP_BYTES
    # Messages waiting for a topic's handler; beyond this they are dropped and counted.
    handler_queue: int = 1024

    @classmethod
    def of_degree(cls, degree: int, **settings: Any) -> "GossipSettings":
        """GossipSub's proportions around mesh degree ``degree``: low 2/3 of it, high twice it."""
        degree = max(1, degree)
        return cls(degree=degree, degree_low=max(1, 2 * degree // 3), degree_high=2 * degree, **settings)


@dataclass(frozen=True)
class GossipMessage:
    """One gossip item. ``origin`` published it and signed it with its key (libp2p's
    strict signing, checked before delivery). ``forwarder`` is the neighbour that
    relayed it, known to validators only."""

    topic: str
    data: bytes
    origin: ID
    forwarder: ID | None
    seqno: bytes

    @property
    def origin_public_key(self) -> bytes:
        return public_key_of(self.origin)


GossipHandler = Callable[[GossipMessage], Awaitable[None]]
GossipValidator = Callable[[GossipMessage], bool]


class Gossip:
    """Publish/subscribe over GossipSub with the note's traps handled.

    Each subscription gets a reader task that always drains libp2p's 32-message
    buffer into our own queue (a slow consumer would otherwise lose messages
    silently) and a worker that calls the handler; own publishes come back on our
    own subscription and are skipped unless asked for.
    """

    def __init__(self, libp2p_host: Any, my_id: ID, settings: GossipSettings, metrics: NodeMetrics) -> None:
        self._router = GossipSub(
            protocols=[GOSSIP_V11, GOSSIP_V10],  # v1.2 queues an IDONTWANT per message
            degree=settings.degree,
            degree_low=settings.degree_low,
            degree_high=settings.degree_high,
            heartbeat_interval=settings.heartbeat,
            spam_protection_enabled=False,
            adaptive_gossip_enabled=False,
        )
        self._pubsub = Pubsub(libp2p_host, self._router)
        self._my_id = my_id
        self.settings = settings
        self._metrics = metrics
        self._nursery: trio.Nursery | None = None
        self._publish_lock = trio.Lock()
        self._next_publish = 0.0
        self._topics: dict[str, trio.CancelScope] = {}

    @asynccontextmanager
    async def services(self) -> AsyncIterator[None]:
        """GossipSub's pubsub and router services, running and ready, inside the block."""
        async with background_trio_service(self._pubsub), background_trio_service(self._router):
            await self._pubsub.wait_until_ready()
            yield

    def attach(self, nursery: trio.Nursery | None) -> None:
        """The nursery that runs the topics' tasks (the host's); ``None`` once it stops."""
        self._nursery = nursery

    def _message(self, forwarder: ID, msg: Any) -> GossipMessage:
        return GossipMessage(
            topic=msg.topicIDs[0] if msg.topicIDs else "",
            data=bytes(msg.data),
            origin=ID(msg.from_id),
            forwarder=forwarder,
            seqno=bytes(msg.seqno),
        )

    def set_validator(self, topic: str, validate: GossipValidator) -> None:
        """``validate`` decides, synchronously and quickly, whether a message is
        delivered and forwarded. It also sees our own publishes. Raising counts as no."""
        limit = self.settings.max_message

        def libp2p_validator(forwarder: ID, msg: Any) -> bool:
            if len(msg.data) > limit:
                return False
            try:
                return bool(validate(self._message(forwarder, msg)))
            except Exception:  # broad: a validator's bug must not reach libp2p's validation; it says no
                log.exception("gossip validator for %s failed; rejecting the message", topic)
                return False

        self._pubsub.set_topic_validator(topic, libp2p_validator, is_async_validator=False)

    async def subscribe(self, topic: str, handler: GossipHandler, *, deliver_own: bool = False) -> None:
        """Deliver every valid message on ``topic`` to ``handler``, one at a time, in the
        order libp2p hands them over (not necessarily publication order)."""
        if self._nursery is None:
            raise LocalError("the host is not running")
        if topic in self._topics:
            raise LocalError(f"already subscribed to {topic!r}")
        subscription = await self._pubsub.subscribe(topic)
        scope = trio.CancelScope()
        self._topics[topic] = scope
        self._nursery.start_soon(self._run_topic, topic, subscription, handler, deliver_own, scope)

    async def unsubscribe(self, topic: str) -> None:
        scope = self._topics.pop(topic, None)
        if scope is not None:
            scope.cancel()
            await self._pubsub.unsubscribe(topic)
        else:
            await trio.lowlevel.checkpoint()

    async def _run_topic(self, topic, subscription, handler, deliver_own, scope) -> None:
        send, receive = trio.open_memory_channel[GossipMessage](self.settings.handler_queue)
        with scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._read_subscription, topic, subscription, send, deliver_own)
                nursery.start_soon(self._dispatch, topic, receive, handler)

    async def _read_subscription(self, topic, subscription, send, deliver_own) -> None:
        with send:
            while True:
                msg = await subscription.get()
                origin = ID(msg.from_id)
                if origin == self._my_id and not deliver_own:
                    continue
                item = GossipMessage(topic, bytes(msg.data), origin, None, bytes(msg.seqno))
                try:
                    send.send_nowait(item)
                except trio.WouldBlock:
                    self._metrics.gossip_dropped.labels(topic).inc()
                    log.warning("gossip handler for %s is behind; dropped a message", topic)

    async def _dispatch(self, topic, receive, handler) -> None:
        with receive:
            async for item in receive:
                self._metrics.gossip_in.labels(topic).inc()
                try:
                    await handler(item)
                except Exception:  # broad: a handler's bug must not end the topic's delivery
                    log.exception("gossip handler for %s failed", topic)

    async def publish(self, topic: str, data: bytes) -> None:
        """Publish one small item (at most ``settings.max_message`` bytes), paced."""
        if len(data) > self.settings.max_message:
            raise LocalError(
                f"gossip item of {len(data)} bytes; the limit is {self.settings.max_message}"
                " (send large data over a stream)"
            )
        async with self._publish_lock:
            wait = self._next_publish - trio.current_time()
            if wait > 0:
                await trio.sleep(wait)
            try:
                await self._pubsub.publish(topic, bytes(data))
            finally:
                self._next_publish = trio.current_time() + self.settings.publish_interval
        self._metrics.gossip_out.labels(topic).inc()

    def peers_on(self, topic: str) -> list[ID]:
        """Peers known to be subscribed to ``topic``."""
        return list(self._pubsub.peer_topics.get(topic, ()))
