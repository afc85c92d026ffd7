"""Framing and hostile peers: garbage, oversized frames, truncation, stalls, non-readers."""
from __future__ import annotations

import logging
import os
import struct

import pytest
import trio

from node.blobs import BLOB_PROTOCOL, BlobService, BlobStore
from node.errors import (
    BadMessage, BlobCorrupt, FrameTooLarge, PeerTimeout, PeerUnreachable, ProtocolNotSupported, RemoteError,
    StreamClosed, is_transient,
)
from node.host import PING_PROTOCOL
from node.streams import StreamLimits

from .conftest import counter_value, read_until_closed, running_hosts, trio_test, wait_until

ECHO = "/gavel-test/echo/1"
BULK = "/gavel-test/bulk/1"


async def _echo(peer, request: bytes) -> bytes:
    await trio.lowlevel.checkpoint()
    return request


async def _raw_stream(client, server, protocol):
    """A libp2p stream without our framing, to send whatever bytes we like."""
    return await client.libp2p.new_stream(server.peer_id, [protocol])


@trio_test()
async def test_large_frames_survive_many_partial_reads():
    async with running_hosts(2) as (a, b):
        limits = StreamLimits(max_frame=4 << 20)
        a.handle_requests(ECHO, _echo, limits)
        payload = os.urandom(3 << 20)  # hundreds of Yamux reads: more than libp2p's read_exactly allows
        assert await b.request(a.peer_id, ECHO, payload, limits=limits) == payload


@pytest.mark.parametrize("protocol", [PING_PROTOCOL, BLOB_PROTOCOL, ECHO])
@trio_test()
async def test_garbage_on_each_protocol_closes_the_stream_and_the_node_keeps_serving(protocol, tmp_path):
    async with running_hosts(3) as (a, b, c):
        a.handle_requests(ECHO, _echo)
        BlobService(BlobStore(tmp_path / "blobs"), a)
        stream = await _raw_stream(b, a, protocol)
        # A frame of 12 bytes that are not msgpack, then a header announcing 2 GiB.
        junk = struct.pack(">I", 12) + b"\xc1\xc1\xc1\xff\x00garbage!" + struct.pack(">I", 1 << 31) + os.urandom(64)
        await stream.write(junk)
        # The bound only stops a hung test: it is longer than every read timeout of
        # these protocols, so a stream dropped after waiting for more bytes closes
        # within it too, and is told apart by its reason below.
        await read_until_closed(stream, timeout=15)
        # The blob protocol decodes its requests; ping and echo take any short
        # request and so fail at the next, oversized, frame. The node counts the
        # reason before it resets the stream: when b sees the stream end, the
        # reason is already there, and it is the bad bytes, not a read timeout.
        kind = "BadMessage" if protocol == BLOB_PROTOCOL else "FrameTooLarge"
        assert counter_value(a.metrics.peer_errors, kind=kind) == 1
        assert counter_value(a.metrics.peer_errors, kind="PeerTimeout") == 0
        # c is served as if nothing happened.
        await c.ping(a.peer_id)


@trio_test()
async def test_oversized_frame_is_refused_before_allocation():
    async with running_hosts(2) as (a, b):
        a.handle_requests(ECHO, _echo, StreamLimits(max_frame=1024))
        stream = await _raw_stream(b, a, ECHO)
        await stream.write(struct.pack(">I", 0xFFFFFFF0) + b"x" * 100)
        # Refused at the header, not after a read timeout: a server waiting for the
        # announced body would drop the stream after its 10 s read timeout, within this
        # (hang-stopping) bound, and count a PeerTimeout instead. The reason is counted
        # before the reset, so it is there when b sees the stream end.
        await read_until_closed(stream, timeout=15)
        assert counter_value(a.metrics.peer_errors, kind="FrameTooLarge") == 1
        assert counter_value(a.metrics.peer_errors, kind="PeerTimeout") == 0
        # The client side of the framing refuses an oversized answer the same way.
        async def big(peer, request):
            await trio.lowlevel.checkpoint()
            return b"y" * 5000

        a.handle_requests("/gavel-test/big/1", big, StreamLimits(max_frame=8192))
        with pytest.raises(FrameTooLarge):
            await b.request(a.peer_id, "/gavel-test/big/1", b"", limits=StreamLimits(max_frame=1024))


@trio_test()
async def test_truncated_frame_is_a_typed_error():
    seen: list[Exception] = []

    async def handler(framed):
        try:
            await framed.receive()
        except StreamClosed as error:
            seen.append(error)
            raise

    async with running_hosts(2) as (a, b):
        a.handle("/gavel-test/recv/1", handler)
        stream = await _raw_stream(b, a, "/gavel-test/recv/1")
        await stream.write(struct.pack(">I", 100) + b"only ten..")
        await stream.close()
        await wait_until(lambda: seen)
        assert not seen[0].clean and "inside a frame" in str(seen[0])


PATIENT = "/gavel-test/patient-echo/1"


@trio_test(timeout=30)
async def test_stalled_peer_times_out_while_another_is_served(caplog):
    caplog.set_level(logging.INFO, logger="node.streams")
    async with running_hosts(3) as (a, b, c):
        a.handle_requests(ECHO, _echo, StreamLimits(read_timeout=0.5, idle_timeout=0.8))
        a.handle_requests(PATIENT, _echo, StreamLimits(read_timeout=60, idle_timeout=60))
        # b opens a stream, sends half a header and goes quiet.
        stalled = await _raw_stream(b, a, ECHO)
        await stalled.write(b"\x00\x00")
        idle = await _raw_stream(b, a, ECHO)  # and another on which it sends nothing at all
        # And one more stalled stream, on a protocol whose timeouts outlast the test:
        # a stream that a stalled peer is sure to hold open while c asks.
        held = await _raw_stream(b, a, PATIENT)
        await held.write(b"\x00\x00")
        closed = []

        async def watch(name, stream, timeout):
            await read_until_closed(stream, timeout=timeout)  # the bound only stops a hung test
            closed.append(name)

        async with trio.open_nursery() as outer:
            outer.start_soon(watch, "held", held, 60)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(watch, "stalled", stalled, 15)
                nursery.start_soon(watch, "idle", idle, 15)
                for i in range(10):  # meanwhile c gets its answers
                    assert await c.request(a.peer_id, ECHO, b"%d" % i, timeout=10) == b"%d" % i
                # ... while a stalled stream was still waiting at a for its bytes.
                assert "held" not in closed
            assert sorted(closed) == ["idle", "stalled"]
            outer.cancel_scope.cancel()
        # Each was dropped by its own bound, reported as the reason: the half header
        # by the read timeout (0.5 s), the silent stream by the idle timeout (0.8 s).
        # The node logs and counts the reason before it resets the stream.
        dropped = f"{ECHO}: dropping stream: "
        reasons = sorted(r.getMessage()[len(dropped):] for r in caplog.records if r.getMessage().startswith(dropped))
        peer = f" (peer {b.peer_id})"
        assert reasons == ["no data for 0.5 s" + peer, "no data for 0.8 s" + peer]
        assert counter_value(a.metrics.peer_errors, kind="PeerTimeout") == 2


@trio_test(timeout=30)
async def test_peer_that_stops_reading_is_dropped_and_others_are_served():
    payload = os.urandom(4 << 20)  # far beyond Yamux's 256 KiB window

    async def bulk(peer, request):
        await trio.lowlevel.checkpoint()
        return payload

    limits = StreamLimits(max_frame=8 << 20, write_timeout=1.0)
    async with running_hosts(3) as (a, b, c):
        a.handle_requests(BULK, bulk, limits)
        a.handle_requests(ECHO, _echo)
        stream = await _raw_stream(b, a, BULK)
        await stream.write(struct.pack(">I", 1) + b"?")  # ask, then never read the answer
        for i in range(5):
            assert await c.request(a.peer_id, ECHO, b"%d" % i, timeout=2) == b"%d" % i
        await wait_until(lambda: counter_value(a.metrics.peer_errors, kind="PeerTimeout") == 1, timeout=8)
        # And a reader that does read gets the whole answer.
        answer = await c.request(a.peer_id, BULK, b"?", limits=limits)
        assert answer == payload


@trio_test()
async def test_client_request_to_a_peer_that_never_answers_is_bounded():
    async def never(peer, request):
        await trio.sleep_forever()

    async with running_hosts(2) as (a, b):
        a.handle_requests("/gavel-test/never/1", never)
        # The request ends on its own bound, which it names; a request that was not
        # bounded would run into this much longer one instead.
        with trio.move_on_after(15) as hung:
            with pytest.raises(PeerTimeout, match="no answer within 0.5 s"):
                await b.request(a.peer_id, "/gavel-test/never/1", b"?", timeout=0.5)
        assert not hung.cancelled_caught
        channel = await b.open_channel(a.peer_id, "/gavel-test/never/1", timeout=0.3)
        async with channel:
            with pytest.raises(PeerTimeout, match="no answer within 0.3 s"):  # the channel's own bound
                await channel.request(b"?")
            with pytest.raises(StreamClosed, match="unusable"):
                await channel.request(b"again")


@trio_test()
async def test_a_failing_handler_resets_only_its_stream(caplog):
    async def buggy(peer, request):
        await trio.lowlevel.checkpoint()
        raise RuntimeError("bug in a handler")

    async with running_hosts(2) as (a, b):
        a.handle_requests("/gavel-test/buggy/1", buggy)
        a.handle_requests(ECHO, _echo)
        with pytest.raises(StreamClosed):
            await b.request(a.peer_id, "/gavel-test/buggy/1", b"?", timeout=2)
        assert await b.request(a.peer_id, ECHO, b"still here") == b"still here"
        assert "bug in a handler" in caplog.text


@trio_test()
async def test_a_slow_answer_within_the_request_timeout_is_not_a_read_timeout():
    async def slow(peer, request):
        await trio.sleep(0.6)
        return b"done"

    async with running_hosts(2) as (a, b):
        limits = StreamLimits(read_timeout=0.2)
        a.handle_requests("/gavel-test/slow/1", slow, limits)
        assert await b.request(a.peer_id, "/gavel-test/slow/1", b"?", timeout=3, limits=limits) == b"done"


def test_only_network_trouble_is_worth_a_second_try():
    assert all(is_transient(e) for e in (PeerUnreachable("x"), PeerTimeout("x"), StreamClosed("x")))
    assert not any(is_transient(e) for e in (
        ProtocolNotSupported("x"), BadMessage("x"), BlobCorrupt("x"), RemoteError("x"), FrameTooLarge("x")))
