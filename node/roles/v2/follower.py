"""The chain follower: one per node with settlement "2" (`RoleContext.follower`).

It reads the settlement contract's events in block and log order, in ranges of at most
BLOCKS_PER_READ blocks every FOLLOW_POLL seconds, and hands each to the handlers
subscribed to its type, once: ``follower.subscribe(TraceRevealed, handler)`` with
``async def handler(logged: LoggedEvent)``. A handler that raises is logged in one line
naming the event and not called again for it; the follower goes on.

Where it stands (the next block and log to hand) is stored in the node's database per
contract, after each event handed and each range read, so a restarted node resumes where
it stopped and hands no event twice; a new node starts at block 0, so its roles see every
event from the deployment on. The stored position keeps the hash of the block it was
reached in: a node that finds another block there when it starts (the chain was reset or
reorganised while it was down, or a process's embedded chain is a new one) starts again at 0.

Handlers must be idempotent. On a reorganisation (the chain watch's ``on_reorg``) the
follower rewinds to the first replaced block and hands again what the new branch holds
from there, and on a lost chain (``on_lost``) it starts again at block 0 of the new one;
either way a handler may see an event it already saw, or one that differs from it.

A handler subscribed after the follower began reading (a role that started late) is first
handed the events from where this run of the follower started, then the new ones with
everybody else's.
"""
from __future__ import annotations

import logging
from typing import Any, Awaitable, Callable

import trio

from ...errors import LocalError
from ..chain import chain_failures, describe_chain_error

log = logging.getLogger(__name__)

FOLLOW_POLL = 1.0  # seconds between two reads of the chain's new blocks
BLOCKS_PER_READ = 2_000  # at most this many blocks per eth_getLogs

Handler = Callable[[Any], Awaitable[None]]
Position = tuple[int, int]  # (block, log index): the next event to hand


class ChainFollower:
    """Hands the settlement contract's events to their subscribers; ``run`` keeps reading.

    ``ctx`` gives ``chain`` (a `ChainBinding`, None until connected), ``wait_chain()`` and
    ``storage``: the node's `RoleContext`."""

    def __init__(self, ctx: Any, *, poll: float = FOLLOW_POLL, span: int = BLOCKS_PER_READ) -> None:
        self.ctx = ctx
        self.poll = poll
        self.span = span
        self._handlers: dict[type, list[Handler]] = {}
        self._late: list[tuple[type, Handler]] = []  # subscribed after handing began: caught up first
        self.position: Position | None = None  # None until `run` resumed
        self.started_from: Position | None = None  # where this run began handing
        self.read_through = -1  # the last block read to its end
        self.handed = 0  # events handed to at least one handler (for tools and tests)
        self._restart: int | None = None  # a rewind asked by the chain watch: the first block to read again
        self._began = False  # events were read: a handler subscribed from now on is caught up first
        self._wake = trio.Event()
        self._progress = trio.Event()

    # -- subscribing -------------------------------------------------------------------------

    def subscribe(self, event_type: type, handler: Handler) -> None:
        """Hand every later event of ``event_type`` (a `contracts` event class) to ``handler``."""
        if self._began:
            self._late.append((event_type, handler))
            self._wake.set()
        else:
            self._handlers.setdefault(event_type, []).append(handler)

    # -- waiting -----------------------------------------------------------------------------

    async def wait_caught_up(self) -> None:
        """Return once every event up to the chain's head at the time of the call was handed."""
        binding = await self.ctx.wait_chain()
        head = await binding.run(binding.chain.block_number)
        while self.read_through < head or self._late or self._restart is not None:
            self._wake.set()
            await self._progress.wait()

    # -- the chain watch's news --------------------------------------------------------------

    async def on_reorg(self, first: int) -> None:
        """Blocks from ``first`` on were replaced: read them again."""
        await trio.lowlevel.checkpoint()
        if self.position is not None and first <= max(self.position[0], self.read_through):
            self._restart = first if self._restart is None else min(self._restart, first)
            self._wake.set()

    async def on_lost(self, old: Any, new: Any) -> None:
        """The chain is another one: read the new one from its first block."""
        await trio.lowlevel.checkpoint()
        self._restart = 0
        self._wake.set()

    # -- reading -----------------------------------------------------------------------------

    async def run(self) -> None:
        binding = await self.ctx.wait_chain()
        await self._resume(binding)
        silent = False
        while True:
            try:
                await self._read_new()
                if silent:
                    log.info("chain follower: the chain answers again")
                    silent = False
            except chain_failures() + (LocalError, OSError) as error:
                if not silent:
                    log.warning("chain follower: reading events: %s; trying again", describe_chain_error(error))
                    silent = True
            with trio.move_on_after(self.poll):
                await self._wake.wait()
            self._wake = trio.Event()

    async def _resume(self, binding: Any) -> None:
        storage = self.ctx.storage
        stored = await storage.run(storage.follower_position, binding.address)
        position: Position = (0, 0)
        if stored is not None:
            block, index, anchor = stored
            at = block if index else block - 1
            if at < 0 or await self._hash_of(binding, at) == anchor:
                position = (block, index)
            else:
                log.warning("chain follower: block %d is not the one this node read last time; reading the "
                            "contract's events again from block 0", at)
        self.position = self.started_from = position
        self.read_through = position[0] - 1
        self._progressed()  # a waiter that came before the resume may already be caught up (no new block)

    async def _read_new(self) -> None:
        binding = self.ctx.chain
        if binding is None or binding.stale:  # the chain watch is joining a new chain
            await trio.lowlevel.checkpoint()
            return
        await self._apply_restart(binding)
        await self._catch_up_late(binding)
        head = await binding.run(binding.chain.block_number)
        assert self.position is not None
        while self.position[0] <= head and self._restart is None:
            first = self.position[0]
            last = min(first + self.span - 1, head)
            self._began = True
            for logged in await binding.run(binding.settlement.events, first, last):
                if (logged.block_number, logged.log_index) < self.position:
                    continue
                if self._restart is not None:
                    return  # the chain watch saw these blocks replaced: the next pass reads again
                if await self._hand(logged, self._handlers):
                    await self._store(binding, (logged.block_number, logged.log_index + 1))
            if self._restart is not None:
                return
            await self._store(binding, (last + 1, 0))
            self.read_through = last
            self._progressed()

    async def _apply_restart(self, binding: Any) -> None:
        if self._restart is None:
            return
        first, self._restart = self._restart, None
        log.info("chain follower: reading the contract's events again from block %d", first)
        await self._store(binding, (first, 0))
        self.read_through = min(self.read_through, first - 1)
        if self.started_from is not None and self.started_from > (first, 0):
            self.started_from = (first, 0)

    async def _catch_up_late(self, binding: Any) -> None:
        """Hand a late subscriber what this run handed before it came."""
        if not self._late:
            return
        late = list(self._late)  # left in ``_late`` until handed: `wait_caught_up` waits for them
        assert self.started_from is not None and self.position is not None
        handlers: dict[type, list[Handler]] = {}
        for event_type, handler in late:
            handlers.setdefault(event_type, []).append(handler)
        first, end = self.started_from, self.position
        end_block = end[0] if end[1] else end[0] - 1  # the last block holding an event handed
        for block in range(first[0], end_block + 1, self.span):
            last = min(block + self.span - 1, end_block)
            for logged in await binding.run(binding.settlement.events, block, last):
                if first <= (logged.block_number, logged.log_index) < end:
                    await self._hand(logged, handlers)
        for event_type, found in handlers.items():
            self._handlers.setdefault(event_type, []).extend(found)
        del self._late[:len(late)]
        self._progressed()

    async def _hand(self, logged: Any, handlers: dict[type, list[Handler]]) -> bool:
        """Hand one event to its handlers; True when it had any."""
        found = handlers.get(type(logged.event), ())
        for handler in list(found):
            name = getattr(handler, "__qualname__", "handler")
            try:
                await handler(logged)
            except chain_failures() as error:
                log.warning("chain follower: %s on %s (block %d): %s", name, logged.event.EVENT_NAME,
                            logged.block_number, describe_chain_error(error))
            except Exception as error:  # broad: a role's bug on one event must not stop the node following its chain
                log.warning("chain follower: %s on %s (block %d) failed: %s: %s", name, logged.event.EVENT_NAME,
                            logged.block_number, type(error).__name__, error)
                log.debug("chain follower: the failure's traceback", exc_info=True)
        if found:
            self.handed += 1
        return bool(found)

    async def _store(self, binding: Any, position: Position) -> None:
        block, index = position
        at = block if index else block - 1
        anchor = await self._hash_of(binding, at) if at >= 0 else ""
        storage = self.ctx.storage
        await storage.run(storage.set_follower_position, binding.address, block, index, anchor)
        self.position = position

    @staticmethod
    async def _hash_of(binding: Any, number: int) -> str:
        try:
            return (await binding.run(binding.block_sync, number))[1]
        except LocalError:  # the chain is shorter than that
            return ""

    def _progressed(self) -> None:
        self._progress.set()
        self._progress = trio.Event()


__all__ = ["BLOCKS_PER_READ", "FOLLOW_POLL", "ChainFollower"]
