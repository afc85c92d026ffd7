"""libp2p's Yamux ``open_stream``, made to give its backlog slot back when it is cancelled.

A Yamux connection lets 256 outbound streams be open at once (``stream_backlog_semaphore``).
libp2p 0.8's ``open_stream`` takes a slot, then waits for the streams lock and the write lock
to send the stream's SYN, and gives the slot back only on an ``Exception``: a caller's timeout
(trio's ``Cancelled``, a ``BaseException``) that strikes while it waits keeps the slot for the
life of the connection. Every node bounds its stream openings by a timeout, so on a loaded
host the slots of a busy connection ran out one timeout at a time, and from then on no stream
opened on it at all: in a full settlement-2 testnet 311 openings "took over 14.2 s", most of
them to the few providers everyone fetched checkpoints from, and the auditors' and clients'
replays came too late for the challenge window. Here a cancelled opening releases its slot
and forgets the stream, and the SYN, once it is being written, is written whole (a frame half
written would break every stream of the connection).

The swarm's ``SwarmConn.new_stream`` has the same gap one step up: cancelled after the muxer
opened the stream, while it wraps it, it drops the stream with its slot; `new_stream` resets it.
libp2p builds every Yamux connection from its own class, whatever muxer the host is given
(``muxer_multistream`` names ``Yamux`` itself), so `install` replaces the two methods on their
classes; `node.host` installs them on import.
"""
from __future__ import annotations

import struct

import trio
from libp2p.network.connection.swarm_connection import SwarmConn
from libp2p.network.stream.net_stream import NetStream
from libp2p.stream_muxer.exceptions import MuxedStreamError
from libp2p.stream_muxer.yamux.yamux import (
    FLAG_SYN, TYPE_WINDOW_UPDATE, YAMUX_HEADER_FORMAT, Yamux, YamuxStream,
)


async def open_stream(self: Yamux) -> YamuxStream:
    """A new outbound stream, its SYN sent; cancelled or failed, it holds no slot and no entry."""
    await self.stream_backlog_semaphore.acquire()
    stream: YamuxStream | None = None
    try:
        async with self.streams_lock:
            if self.event_shutting_down.is_set():
                raise MuxedStreamError("Connection is shutting down")
            stream_id = self.next_stream_id
            self.next_stream_id += 2
            stream = YamuxStream(stream_id, self, True)
            stream._owns_backlog_slot = True
            self.streams[stream_id] = stream
            self.stream_buffers[stream_id] = bytearray()
            self.stream_events[stream_id] = trio.Event()
        syn = struct.pack(YAMUX_HEADER_FORMAT, 0, TYPE_WINDOW_UPDATE, FLAG_SYN, stream_id, 0)
        async with self._write_lock:
            with trio.CancelScope(shield=True):
                await self.secured_conn.write(syn)
    except BaseException as error:
        with trio.CancelScope(shield=True):
            if stream is None:
                self.stream_backlog_semaphore.release()
            else:  # never announced, or its SYN failed: its slot back, its entries gone
                await self._finalize_stream(stream, fully_closed=True)
        if isinstance(error, Exception) and not isinstance(error, MuxedStreamError):
            raise MuxedStreamError(f"Failed to send SYN: {error}") from error
        raise
    return stream


async def new_stream(self: SwarmConn) -> NetStream:
    """The swarm's stream on a new muxed stream; cut short while wrapping it, the stream is reset."""
    muxed_stream = await self.muxed_conn.open_stream()
    try:
        return await self._add_stream(muxed_stream)
    except BaseException:
        with trio.CancelScope(shield=True):
            await muxed_stream.reset()
        raise


def install() -> None:
    """Every connection of this process opens its streams with `open_stream` and `new_stream` (idempotent)."""
    Yamux.open_stream = open_stream  # type: ignore[method-assign]
    SwarmConn.new_stream = new_stream  # type: ignore[method-assign]
