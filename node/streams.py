"""Stream protocols on top of frames: handler wrapping and request/response.

Every inbound stream runs its handler inside ``guarded_handler``: the stream is
closed in ``finally``, a misbehaving peer (any ``PeerError``) gets its stream reset
and a log line, and a bug in a handler is logged with its traceback and resets only
that stream. Nothing a peer sends can take the node down.

Request/response: a request is one frame, the answer one frame whose first byte says
ok (0) or refused (1, followed by a UTF-8 reason). ``request`` opens a stream per
exchange; ``RequestChannel`` keeps one stream for many, one request in flight at a
time, so the answer is always being read while the next request waits (a Yamux
writer whose peer does not read for 5 s has its stream reset).
"""
from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

import trio
from libp2p.exceptions import BaseLibp2pError
from libp2p.host.exceptions import StreamFailure
from libp2p.peer.id import ID

from .errors import (
    BadMessage,
    LocalError,
    PeerError,
    PeerTimeout,
    PeerUnreachable,
    ProtocolNotSupported,
    RemoteError,
    StreamClosed,
)
from .framing import (
    DEFAULT_MAX_FRAME,
    DEFAULT_READ_TIMEOUT,
    DEFAULT_WRITE_TIMEOUT,
    FramedStream,
    Traffic,
)

log = logging.getLogger(__name__)

_OK = b"\x00"
_REFUSED = b"\x01"
MAX_REASON = 1024


@dataclass(frozen=True)
class StreamLimits:
    """Per-protocol bounds: frame size and how long each wait may last."""

    max_frame: int = DEFAULT_MAX_FRAME
    read_timeout: float = DEFAULT_READ_TIMEOUT
    write_timeout: float = DEFAULT_WRITE_TIMEOUT
    # How long a kept request stream may sit without a new request.
    idle_timeout: float = 60.0


StreamHandler = Callable[[FramedStream], Awaitable[None]]
RequestHandler = Callable[[ID, bytes], Awaitable[bytes]]
PeerErrorHook = Callable[[ID, PeerError], None]


class RequestRefused(LocalError):
    """Raised by a request handler to answer with a reason instead of a result."""


def guarded_handler(
    protocol: str,
    handler: StreamHandler,
    limits: StreamLimits,
    *,
    traffic: Traffic | None = None,
    on_peer_error: PeerErrorHook | None = None,
) -> Callable[[Any], Awaitable[None]]:
    """Turn ``handler(FramedStream)`` into a libp2p stream handler that cannot crash the node."""

    async def run(stream: Any) -> None:
        framed = FramedStream(
            stream,
            max_frame=limits.max_frame,
            read_timeout=limits.read_timeout,
            write_timeout=limits.write_timeout,
            traffic=traffic,
        )
        try:
            await handler(framed)
        except PeerError as error:
            if isinstance(error, StreamClosed) and error.clean:
                log.debug("%s: %s", protocol, error)
            else:
                log.info("%s: dropping stream: %s", protocol, error)
                if on_peer_error is not None:
                    on_peer_error(framed.peer_id, error)
            await framed.reset()
        except Exception:  # broad: a handler's bug resets its stream only, never the node
            log.exception("%s: handler failed on a stream from %s", protocol, framed.peer_id)
            await framed.reset()
        finally:
            await framed.close()

    return run


def request_handler(respond: RequestHandler, limits: StreamLimits) -> StreamHandler:
    """A stream handler answering framed requests until the peer closes the stream.

    A peer idle longer than ``limits.idle_timeout`` between requests gets a
    ``PeerTimeout`` and its stream closed, like one that stalls inside a frame.
    """

    async def serve(framed: FramedStream) -> None:
        while True:
            request = await framed.receive_next(first_timeout=limits.idle_timeout)
            if request is None:
                return
            try:
                answer = _OK + await respond(framed.peer_id, request)
            except RequestRefused as refused:
                answer = _REFUSED + str(refused).encode()[:MAX_REASON]
            await framed.send(answer)

    return serve


def _decode_answer(framed: FramedStream, answer: bytes) -> bytes:
    if answer[:1] == _OK:
        return answer[1:]
    if answer[:1] == _REFUSED:
        reason = answer[1 : 1 + MAX_REASON].decode("utf-8", "replace")
        raise RemoteError(f"request refused: {reason}", peer=framed.peer_id)
    raise BadMessage("answer without a status byte", peer=framed.peer_id)


async def open_framed(
    host: Any,
    peer_id: ID,
    protocol: str,
    limits: StreamLimits,
    *,
    timeout: float,
    traffic: Traffic | None = None,
) -> FramedStream:
    """Open a stream to a connected (or dialable) peer, bounded by ``timeout``."""
    with trio.move_on_after(timeout) as scope:
        try:
            stream = await host.new_stream(peer_id, [protocol])
        except StreamFailure as error:
            # libp2p raises StreamFailure both when the peer answers "na" and when the
            # negotiation stalls or breaks; only its message tells them apart.
            cause = error.__cause__ or error
            if "not supported" in str(cause):
                raise ProtocolNotSupported(f"{protocol} is not supported: {cause}", peer=peer_id) from None
            raise PeerUnreachable(f"cannot open {protocol}: {cause}", peer=peer_id) from None
        except BaseLibp2pError as error:
            raise PeerUnreachable(f"cannot open {protocol}: {error}", peer=peer_id) from None
    if scope.cancelled_caught:
        raise PeerTimeout(f"opening {protocol} took over {timeout:g} s", peer=peer_id)
    return FramedStream(
        stream,
        max_frame=limits.max_frame,
        read_timeout=limits.read_timeout,
        write_timeout=limits.write_timeout,
        traffic=traffic,
    )


async def exchange(framed: FramedStream, request: bytes, *, timeout: float) -> bytes:
    """Send one request on an open stream and wait for its answer, within ``timeout``."""
    with trio.move_on_after(timeout) as scope:
        await framed.send(request)
        # The peer may think for a while before answering: the wait for the first
        # byte is bounded by ``timeout``, the bytes after it by the read timeout.
        answer = await framed.receive(first_timeout=math.inf)
        return _decode_answer(framed, answer)
    assert scope.cancelled_caught
    raise PeerTimeout(f"no answer within {timeout:g} s", peer=framed.peer_id)


class RequestChannel:
    """One kept stream for many requests to one peer; one request in flight at a time."""

    def __init__(self, framed: FramedStream, *, timeout: float) -> None:
        self.framed = framed
        self.peer_id = framed.peer_id
        self.timeout = timeout
        self._lock = trio.Lock()
        self._broken: PeerError | None = None

    async def request(self, payload: bytes, *, timeout: float | None = None) -> bytes:
        async with self._lock:
            if self._broken is not None:
                raise StreamClosed(f"channel unusable after: {self._broken}", peer=self.peer_id)
            try:
                return await exchange(self.framed, payload, timeout=timeout or self.timeout)
            except RemoteError:
                raise  # a refusal leaves the stream in step
            except PeerError as error:
                # A timed-out or half-read answer leaves the stream out of step.
                self._broken = error
                await self.framed.reset()
                raise

    async def aclose(self) -> None:
        await self.framed.close()

    async def __aenter__(self) -> "RequestChannel":
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
