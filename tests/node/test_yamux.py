"""A Yamux stream opening cut short by its caller's timeout gives its slot of the connection back
(`node.yamux`): libp2p's own kept it, so a busy connection's 256 slots ran out one timeout at a
time and then no stream opened on it at all."""
from __future__ import annotations

from contextlib import asynccontextmanager

import trio

from .conftest import running_hosts, trio_test

ECHO = "/gavel-test/echo/1"


async def _echo(peer, request: bytes) -> bytes:
    await trio.lowlevel.checkpoint()
    return request


def _muxer(a, b):
    (conn,) = a.libp2p.get_network().get_connections(b.peer_id)
    return conn.muxed_conn


@asynccontextmanager
async def held_by_another_task(lock: trio.Lock):
    """``lock`` held by a task of its own (a trio lock refuses its holder), for the block's length."""
    release = trio.Event()

    async def hold(task_status=trio.TASK_STATUS_IGNORED) -> None:
        async with lock:
            task_status.started()
            await release.wait()

    async with trio.open_nursery() as nursery:
        await nursery.start(hold)
        try:
            yield
        finally:
            release.set()


@trio_test()
async def test_an_opening_cancelled_while_it_waits_to_send_its_syn_gives_its_slot_back():
    async with running_hosts(2) as (a, b):
        b.handle_requests(ECHO, _echo)
        assert await a.request(b.peer_id, ECHO, b"first") == b"first"
        muxer = _muxer(a, b)
        free, first_id = muxer.stream_backlog_semaphore.value, muxer.next_stream_id
        # Another frame is being written (the write lock held): each opening waits for it, then its
        # caller's timeout strikes. libp2p's own open_stream kept a slot for each (free - 20).
        async with held_by_another_task(muxer._write_lock):
            for _ in range(20):
                with trio.move_on_after(0.01) as scope:
                    await muxer.open_stream()
                assert scope.cancelled_caught
        assert muxer.stream_backlog_semaphore.value == free
        ours = range(first_id, muxer.next_stream_id, 2)
        assert len(ours) == 20 and not set(ours) & set(muxer.streams)  # none left behind, never announced
        # Likewise while another opening holds the streams lock.
        async with held_by_another_task(muxer.streams_lock):
            with trio.move_on_after(0.01) as scope:
                await muxer.open_stream()
            assert scope.cancelled_caught
        assert muxer.stream_backlog_semaphore.value == free
        # The connection still carries requests: nothing half written broke it.
        assert await a.request(b.peer_id, ECHO, b"after") == b"after"
        assert _muxer(a, b) is muxer


@trio_test()
async def test_a_connection_whose_slots_all_timed_out_once_still_opens_streams():
    async with running_hosts(2) as (a, b):
        b.handle_requests(ECHO, _echo)
        assert await a.request(b.peer_id, ECHO, b"first") == b"first"
        muxer = _muxer(a, b)
        async with held_by_another_task(muxer._write_lock):  # more cancelled openings than the connection has slots
            for _ in range(muxer.stream_backlog_limit + 10):
                with trio.move_on_after(0.001):
                    await muxer.open_stream()
        with trio.fail_after(10):  # with the slots kept, this waits for one forever
            assert await a.request(b.peer_id, ECHO, b"still") == b"still"
