"""Length-prefixed frames over one libp2p stream, with our own buffer and timeouts.

A frame is a 4-byte big-endian length followed by that many bytes. The length is
checked against the protocol's maximum before a byte of the body is buffered, so a
peer cannot make us allocate what it announces. Every read and write is bounded by a
timeout; every libp2p failure comes out as one of the typed ``PeerError``s.

Why not libp2p's ``read_exactly`` or varint helpers: ``read_exactly`` gives up after
100 partial reads, which a large frame over Yamux easily needs.

Bodies of control messages are msgpack (``send_obj``/``receive_obj``); bulk data
(blob chunks) goes as raw frames.
"""
from __future__ import annotations

import logging
import struct
from typing import Any, Protocol

import msgpack
import trio
from libp2p.exceptions import BaseLibp2pError
from libp2p.network.stream.exceptions import StreamEOF

from .errors import BadMessage, FrameTooLarge, PeerTimeout, StreamClosed

log = logging.getLogger(__name__)

HEADER = struct.Struct(">I")
DEFAULT_MAX_FRAME = 1 << 20
DEFAULT_READ_TIMEOUT = 10.0
DEFAULT_WRITE_TIMEOUT = 10.0
# Ask the muxer for at least this much at a time; the surplus waits in our buffer.
READ_SIZE = 64 * 1024
# Closing a stream writes a FIN; a peer that never drains must not hold us.
CLOSE_TIMEOUT = 2.0

_STREAM_ERRORS = (BaseLibp2pError, trio.BrokenResourceError, trio.ClosedResourceError)


class Traffic(Protocol):
    """Receives byte counts; ``node.metrics.NodeMetrics`` is one."""

    def count_in(self, n: int) -> None: ...

    def count_out(self, n: int) -> None: ...


def pack(obj: Any) -> bytes:
    return msgpack.packb(obj, use_bin_type=True)


def unpack(data: bytes, *, peer: object = None) -> Any:
    """Decode a msgpack body; any failure is the peer's fault."""
    try:
        return msgpack.unpackb(data, raw=False, strict_map_key=True)
    except Exception as error:  # broad: msgpack documents that unpacking may raise any type; all are garbage
        raise BadMessage(f"undecodable message: {type(error).__name__}", peer=peer) from None


class FramedStream:
    """A libp2p stream read and written in frames. Create one per stream.

    ``receive`` must not be called from two tasks at once; ``send`` may (writes are
    serialised by a lock).
    """

    def __init__(
        self,
        stream: Any,
        *,
        max_frame: int = DEFAULT_MAX_FRAME,
        read_timeout: float = DEFAULT_READ_TIMEOUT,
        write_timeout: float = DEFAULT_WRITE_TIMEOUT,
        traffic: Traffic | None = None,
    ) -> None:
        self.stream = stream
        # The identity key of the peer lives on the muxed connection; the secured
        # connection's remote key is the Noise X25519 key, not the identity.
        self.peer_id = stream.muxed_conn.peer_id
        self.protocol = stream.get_protocol()
        self.max_frame = max_frame
        self.read_timeout = read_timeout
        self.write_timeout = write_timeout
        self._traffic = traffic
        self._buf = bytearray()
        self._send_lock = trio.Lock()
        self._closed = False

    # -- receiving ---------------------------------------------------------------

    async def _fill(self, want: int, *, at_boundary: bool, first_timeout: float | None = None) -> None:
        """Read until the buffer holds ``want`` bytes.

        ``first_timeout`` replaces the read timeout while waiting for the first byte
        of a frame: a kept stream may idle between requests, not inside one.
        """
        while len(self._buf) < want:
            timeout = self.read_timeout
            if first_timeout is not None and at_boundary and not self._buf:
                timeout = first_timeout
            with trio.move_on_after(timeout) as scope:
                try:
                    data = await self.stream.read(max(want - len(self._buf), READ_SIZE))
                except StreamEOF:
                    if at_boundary and not self._buf:
                        raise StreamClosed("stream ended", peer=self.peer_id, clean=True) from None
                    raise StreamClosed(
                        f"stream ended inside a frame ({len(self._buf)} of {want} bytes)",
                        peer=self.peer_id,
                    ) from None
                except _STREAM_ERRORS as error:
                    raise StreamClosed(
                        f"stream failed while reading: {type(error).__name__}", peer=self.peer_id
                    ) from None
            if scope.cancelled_caught:
                raise PeerTimeout(f"no data for {timeout:g} s", peer=self.peer_id)
            if not data:
                raise StreamClosed("stream ended", peer=self.peer_id, clean=at_boundary and not self._buf)
            self._buf += data
            if self._traffic is not None:
                self._traffic.count_in(len(data))

    async def receive(self, *, max_frame: int | None = None, first_timeout: float | None = None) -> bytes:
        """The next frame's body. Raises ``StreamClosed(clean=True)`` at a clean end."""
        limit = self.max_frame if max_frame is None else max_frame
        await self._fill(HEADER.size, at_boundary=True, first_timeout=first_timeout)
        (length,) = HEADER.unpack_from(self._buf)
        if length > limit:
            raise FrameTooLarge(f"frame of {length} bytes, limit {limit}", peer=self.peer_id)
        await self._fill(HEADER.size + length, at_boundary=False)
        body = bytes(self._buf[HEADER.size : HEADER.size + length])
        del self._buf[: HEADER.size + length]
        return body

    async def receive_obj(self, *, max_frame: int | None = None) -> Any:
        return unpack(await self.receive(max_frame=max_frame), peer=self.peer_id)

    async def receive_map(self, *required: str) -> dict[str, Any]:
        """A msgpack map carrying at least the ``required`` keys."""
        obj = await self.receive_obj()
        if not isinstance(obj, dict) or any(k not in obj for k in required):
            raise BadMessage(f"expected a map with keys {list(required)}", peer=self.peer_id)
        return obj

    async def receive_next(self, *, first_timeout: float | None = None) -> bytes | None:
        """The next frame's body, or None when the peer closed its side at a frame boundary."""
        try:
            return await self.receive(first_timeout=first_timeout)
        except StreamClosed as closed:
            if closed.clean:
                return None
            raise

    # -- sending -----------------------------------------------------------------

    async def send(self, body: bytes) -> None:
        if len(body) > self.max_frame:
            raise ValueError(f"frame of {len(body)} bytes exceeds this stream's limit {self.max_frame}")
        data = HEADER.pack(len(body)) + body
        async with self._send_lock:
            with trio.move_on_after(self.write_timeout) as scope:
                try:
                    await self.stream.write(data)
                except _STREAM_ERRORS as error:
                    # Yamux gives up after 5 s without a window update from a peer
                    # that stopped reading; that is a timeout, not a clean close.
                    text = f"{error} {error.__cause__ or ''}"
                    if "Timed out" in text:
                        raise PeerTimeout("peer stopped reading", peer=self.peer_id) from None
                    raise StreamClosed(
                        f"stream failed while writing: {type(error).__name__}", peer=self.peer_id
                    ) from None
            if scope.cancelled_caught:
                raise PeerTimeout(f"could not write for {self.write_timeout:g} s", peer=self.peer_id)
        if self._traffic is not None:
            self._traffic.count_out(len(data))

    async def send_obj(self, obj: Any) -> None:
        await self.send(pack(obj))

    # -- ending ------------------------------------------------------------------

    async def close(self) -> None:
        """Close both directions. Safe to call twice; never raises; bounded."""
        await self._finish(reset=False)

    aclose = close

    async def reset(self) -> None:
        """Abort the stream (the peer sees a reset). Safe after ``close``."""
        await self._finish(reset=True)

    async def _finish(self, *, reset: bool) -> None:
        if self._closed:
            await trio.lowlevel.checkpoint()
            return
        self._closed = True
        with trio.move_on_after(CLOSE_TIMEOUT) as scope:
            scope.shield = True
            try:
                if reset:
                    await self.stream.reset()
                else:
                    await self.stream.close()
            except _STREAM_ERRORS as error:
                log.debug("closing stream to %s: %r", self.peer_id, error)

    async def __aenter__(self) -> "FramedStream":
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()
