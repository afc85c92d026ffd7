"""Helpers for node tests: real libp2p hosts on loopback inside ``trio.run``."""
from __future__ import annotations

import functools
import os
from contextlib import AsyncExitStack, asynccontextmanager

import pytest
import trio
from libp2p.exceptions import BaseLibp2pError

from node.host import NodeHost, open_host
from node.logs import configure_logging

configure_logging("warning")


def trio_test(timeout: float = 20.0):
    """Run an async test in its own trio loop, failing it after ``timeout`` seconds."""

    def decorate(fn):
        @functools.wraps(fn)
        def run(*args, **kwargs):
            async def main():
                with trio.fail_after(timeout):
                    await fn(*args, **kwargs)

            trio.run(main)

        return run

    return decorate


@asynccontextmanager
async def running_hosts(n: int, *, connect: bool = True, **options):
    """``n`` hosts; with ``connect`` each later one dials every earlier one."""
    async with AsyncExitStack() as stack:
        hosts: list[NodeHost] = []
        for _ in range(n):
            hosts.append(await stack.enter_async_context(open_host(os.urandom(32), **options)))
        if connect:
            for i, host in enumerate(hosts):
                for other in hosts[:i]:
                    await host.connect(other.listen_addrs[0])
        yield hosts


async def wait_until(predicate, *, timeout: float = 5.0, interval: float = 0.02) -> None:
    with trio.fail_after(timeout):
        while not predicate():
            await trio.sleep(interval)


def counter_value(counter, **labels) -> float:
    return (counter.labels(**labels) if labels else counter)._value.get()


async def read_until_closed(stream, *, timeout: float) -> bytes:
    """Everything a peer sends on a raw libp2p stream until it closes or resets it."""
    data = b""
    with trio.fail_after(timeout):
        while True:
            try:
                chunk = await stream.read(65536)
            except BaseLibp2pError:
                return data
            if not chunk:
                return data
            data += chunk


@pytest.fixture
def thread_limits_restored(monkeypatch):
    """For a test that runs `gavel testnet` in this process: the command limits the process to one
    compute thread, and the tests after it get theirs back."""
    import numba

    from node.testnet.threads import THREAD_ENV

    for name in THREAD_ENV:
        if name in os.environ:
            monkeypatch.setenv(name, os.environ[name])
        else:
            monkeypatch.delenv(name, raising=False)
    threads = numba.get_num_threads()
    yield
    numba.set_num_threads(threads)
