"""The chain watch: one per node, started by `RoleContext` as soon as it joined the chain.

Every CHAIN_WATCH seconds it reads the chain and tells the roles what changed under them:

- lost: the chain is another one (another genesis hash) or our contract has no code any
  more (anvil restarted, a dev chain reset). One warning line; the node joins the new
  chain as at start (`RoleContext.connect_chain`), then every ``on_lost(old, new)``
  handler runs (the roles mark the jobs the new chain does not know as lost).
- reorganised: the same genesis, but a block seen at some number now has another hash,
  or the chain got shorter. One warning line naming the replaced blocks; our nonce count
  forgotten (our transactions in them may be gone); every ``on_reorg(fork)`` handler runs
  with the first replaced block (the keeper reads again the jobs it marked final there).
- a chain that does not answer: one line when it stops, one when it answers again.

It keeps the (number, hash) of the last REORG_WINDOW blocks it saw; a reorganisation
deeper than that is reported from the oldest block it still remembers.

Finality: a job's final status counts (the keeper marks it final, the client closes it)
only once it is CONFIRMATIONS blocks deep (`read_final`): counted from the head at which
it was first seen final, which is at or above the block that made it final.
"""
from __future__ import annotations

import logging
from typing import Any, Awaitable, Callable

import trio

from ..errors import LocalError
from .chain import ChainBinding, chain_failures, describe_chain_error

log = logging.getLogger(__name__)

CHAIN_WATCH = 2.0  # seconds between two looks at the chain
REORG_WINDOW = 64  # blocks whose hash is remembered
BLOCKS_PER_LOOK = 32  # at most this many new blocks read per look (the latest)
# Blocks mined on top of a job's final status before a node acts on it as final. A
# local dev chain (anvil, the embedded EVM) has one miner and no forks: 0. A public
# chain wants its own figure (12 or more).
CONFIRMATIONS = 0

Lost = Callable[[ChainBinding, ChainBinding], Awaitable[None]]
Reorganised = Callable[[int], Awaitable[None]]


class ChainWatch:
    """What a node knows of its chain's history; ``run`` keeps it and calls the handlers."""

    def __init__(self, ctx: Any, *, poll: float = CHAIN_WATCH, confirmations: int = CONFIRMATIONS) -> None:
        self.ctx = ctx
        self.poll = poll
        self.confirmations = confirmations
        self.on_lost: list[Lost] = []
        self.on_reorg: list[Reorganised] = []
        self.blocks: dict[int, str] = {}  # number -> hash, of the last REORG_WINDOW blocks seen
        self.reorgs: list[tuple[int, int]] = []  # (first, last) replaced block of each reorganisation seen
        self._final_since: dict[bytes, int] = {}  # job id -> the head at which its final status was first read

    async def run(self) -> None:
        silent = False
        while True:
            binding = self.ctx.chain
            try:
                change = await binding.run(self._look_sync, binding)
            except chain_failures() + (LocalError, OSError) as error:
                if not silent:  # one line for a chain that went away, not one per look
                    log.warning("the settlement chain does not answer (%s); watching for its return",
                                describe_chain_error(error))
                    silent = True
                await trio.sleep(self.poll)
                continue
            if silent:
                log.info("the settlement chain answers again")
                silent = False
            if isinstance(change, str):
                await self._lost(binding, change)
            elif change is not None:
                await self._reorganised(binding, *change)
            await trio.sleep(self.poll)

    # -- looking (in the chain's worker thread) ------------------------------------------

    def _look_sync(self, binding: ChainBinding) -> str | tuple[int, int, bool] | None:
        """Why the binding no longer holds (a str); or (first, last, deeper) replaced blocks
        of a reorganisation, ``deeper`` when it reaches below the window; or None."""
        reason = binding.changed_sync()
        if reason is not None or hasattr(binding.chain, "tester"):
            return reason  # the embedded EVM cannot reorganise: no blocks to follow
        head, head_hash = binding.block_sync()
        seen = self.blocks
        change = None
        if seen:
            top = max(seen)
            # The highest block seen that is still there: a block's hash commits to all before it.
            agree = None
            for number in sorted((n for n in seen if n <= head), reverse=True):
                current = head_hash if number == head else binding.block_sync(number)[1]
                if current == seen[number]:
                    agree = number
                    break
            if agree != top:
                first = agree + 1 if agree is not None else min(seen)
                change = (first, top, agree is None)
                for number in [n for n in seen if n >= first]:
                    del seen[number]
        start = max(max(seen, default=-1) + 1, head - BLOCKS_PER_LOOK + 1)
        for number in range(start, head):
            seen[number] = binding.block_sync(number)[1]
        seen[head] = head_hash
        for number in sorted(seen)[:-REORG_WINDOW]:
            del seen[number]
        return change

    # -- telling the roles -----------------------------------------------------------------

    async def _lost(self, old: ChainBinding, reason: str) -> None:
        old.stale = reason
        log.warning("%s: joining it as at start, forgetting the jobs it does not know", reason)
        self.blocks.clear()
        self._final_since.clear()
        await self.ctx.connect_chain()
        for handler in list(self.on_lost):
            await self._call(handler, old, self.ctx.chain)
        old.close()

    async def _reorganised(self, binding: ChainBinding, first: int, last: int, deeper: bool) -> None:
        self.reorgs.append((first, last))
        depth = f" (or more: deeper than the {REORG_WINDOW} blocks remembered)" if deeper else ""
        log.warning("the settlement chain reorganised: blocks %d..%d replaced%s; reading again what was "
                    "decided in them", first, last, depth)
        await binding.run(binding.forget_nonces_sync)
        for job_id in [j for j, since in self._final_since.items() if since >= first]:
            del self._final_since[job_id]
        for handler in list(self.on_reorg):
            await self._call(handler, first)

    @staticmethod
    async def _call(handler: Callable[..., Awaitable[None]], *args: Any) -> None:
        """One role's handler; its failure is its own line, never the watch's end."""
        try:
            await handler(*args)
        except chain_failures() as error:
            log.warning("%s: %s", getattr(handler, "__qualname__", "chain handler"), describe_chain_error(error))
        except Exception:  # broad: a bug in one role's handler must not stop the node watching its chain
            log.exception("%s failed", getattr(handler, "__qualname__", "chain handler"))

    # -- finality ------------------------------------------------------------------------

    async def read_final(self, binding: ChainBinding, job_id: bytes) -> tuple[Any, int | None]:
        """The job on chain and, once its status is final (FINALIZED, REFUNDED) and
        ``confirmations`` blocks deep, the block to record that at (the head at which it was
        first seen final: at or above the block that made it so); None until then."""
        info = await binding.run(binding.settlement.job, job_id)
        # By name: the two settlement versions number their job statuses differently.
        if info.status.name not in ("FINALIZED", "REFUNDED"):
            self._final_since.pop(job_id, None)
            return info, None
        head = await binding.run(binding.chain.block_number)
        since = self._final_since.setdefault(job_id, head)
        return info, (since if head >= since + self.confirmations else None)


async def forget_lost_jobs(ctx: Any, role: str, states: tuple[str, ...], old: ChainBinding, new: ChainBinding) -> list[bytes]:
    """Mark ``role``'s jobs in ``states`` that the new chain does not know as ``lost`` (the
    row kept, its record naming the chain it was lost with); returns their ids."""
    from contracts import JobStatus

    lost = []
    for job in await ctx.storage.run(lambda: ctx.storage.jobs(role=role)):
        if job.state not in states or (await new.run(new.settlement.job, job.job_id)).status != JobStatus.NONE:
            continue
        loaded = await ctx.load_job(job.job_id)
        record = dict(loaded[1] if loaded else {}, lost_with_chain=lost_with(old, job.state))
        await ctx.save_job(job.job_id, role, "lost", record)
        lost.append(job.job_id)
    if lost:
        log.warning("%d %s job(s) lost with the old chain: %s", len(lost), role, ", ".join(j.hex()[:12] for j in lost))
    return lost


def lost_with(old: ChainBinding, state: str) -> dict:
    """What a job's record keeps of the chain it was lost with."""
    return {"chain_id": old.identity[0], "genesis": old.identity[1], "state": state}


__all__ = ["CHAIN_WATCH", "CONFIRMATIONS", "ChainWatch", "forget_lost_jobs", "lost_with"]
