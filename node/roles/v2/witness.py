"""The witness duty (docs/economics.md §7): a node drawn for a demand fetches the item from the
seat, attests whether it was served, and relays it to the demander.

Who: the contract draws witnesses from its referee registry (active nodes with free stake ≥ D,
no party to the job or the demand); a node of any role runs this duty, so whichever is drawn
answers. Its bond D was locked by the draw itself.

On a ``WitnessDrawn`` naming this node: read ``demand(id)`` (still Witnessing, still ours),
then fetch the item from the seat with the data service's fetcher
(`JobDataService.fetch_checked`: a checkpoint against the seat's revealed trace, the bundle
against the job's spec), again every RETRY seconds while the window leaves time.

  got it        the data service relays it from now on (`JobDataService.relay`), then
                ``attestServed(true)``: the demander's fetcher, told by ``DemandAttested``,
                takes it from here; D pays this node its fee and its gas
  not by        ``attestBy`` − Δ (the last moment a transaction surely lands in the window):
                ``attestServed(false)``; another witness is drawn, or the seat forfeits

A refused attestation is one line and tried again while the window is open; the demand keeper
(`demands.py`) keeps the demand, since a refuser's bond waits for its end.

The draws not yet answered are written to ``witness.json`` in the data directory when they come
(`duty_state`) and dropped once answered or over: a node restarted mid-duty takes them up again
when the duty starts (`resume`), from where the chain says each stands, rather than let its bond
be burned at ``attestBy``.
"""
from __future__ import annotations

import logging
import weakref
from pathlib import Path
from typing import Any

import trio

from contracts.settlement_v2_demands import DemandStage, WitnessDrawn

from ...errors import LocalError, PeerError
from ..chain import chain_failures, describe_chain_error
from .duty_state import DutyState

log = logging.getLogger(__name__)

STATE_FILE = "witness.json"
RETRY = 2.0  # seconds between two fetches from a seat that did not deliver yet


class WitnessDuty:
    """Answers the draws that name this node; ``data`` is the node's `JobDataService`; the draws
    pending are kept in ``data_dir`` (None: in memory only)."""

    def __init__(self, chain: Any, data: Any, spawn: Any, *, data_dir: Path | None = None,
                 retry: float = RETRY) -> None:
        self.chain = chain  # node.roles.chain.ChainBinding
        self.data = data
        self.spawn = spawn  # RoleContext.start_soon
        self.retry = retry
        self.attested: dict[bytes, bool] = {}  # demand id -> what this node attested (for status and tests)
        self.state = DutyState(data_dir, STATE_FILE)
        self.pending: set[bytes] = set()  # demands we were drawn for and have not answered (kept on disk)
        self.state.restore(lambda state: self.pending.update(bytes.fromhex(d) for d in state["pending"]))
        self._busy: set[bytes] = set()

    def subscribe(self, follower: Any) -> None:
        follower.subscribe(WitnessDrawn, self.on_drawn)

    def resume(self) -> None:
        """Take up the draws a previous run of the node left unanswered."""
        for demand_id in sorted(self.pending - self._busy):
            self._start(demand_id)

    async def on_drawn(self, logged: Any) -> None:
        e: WitnessDrawn = logged.event
        if e.witness.lower() != self.chain.account.lower() or e.demand_id in self._busy:
            await trio.lowlevel.checkpoint()
            return
        self.pending.add(e.demand_id)
        await self._save()  # before the follower moves past the draw
        self._start(e.demand_id)

    def _start(self, demand_id: bytes) -> None:
        self._busy.add(demand_id)
        self.spawn(self.witness, demand_id, name=f"witness {demand_id.hex()[:12]}")

    async def _done(self, demand_id: bytes) -> None:
        """The draw is answered, or no longer ours to answer."""
        self._busy.discard(demand_id)
        self.pending.discard(demand_id)
        await self._save()

    async def _save(self) -> None:
        await self.state.save(lambda: {"pending": sorted(d.hex() for d in self.pending)})

    async def witness(self, demand_id: bytes) -> bool | None:
        """Fetch, check, relay and attest one demand's item; returns what was attested (None: nothing)."""
        chain = self.chain
        s = chain.settlement
        try:
            demand = await chain.run(s.demand, demand_id)
            margin = (await chain.run(s.chain_settings)).margin
        except chain_failures() as error:
            log.warning("witness: reading demand %s: %s", demand_id.hex()[:12], describe_chain_error(error))
            self._busy.discard(demand_id)  # still pending: the next start of the duty tries again
            return None
        if demand.stage != DemandStage.WITNESSING or demand.witness.lower() != chain.account.lower():
            await self._done(demand_id)
            return None  # attested already (a re-read event, or before a restart), or timed out
        served = await self._fetch(demand_id, demand, last=demand.deadline - margin)
        return await self._attest(demand_id, demand, served)

    async def _fetch(self, demand_id: bytes, demand: Any, *, last: int) -> bool:
        """Until chain time ``last``: the item from the seat, checked, then relayed; True once relayed.
        An attempt still under way at ``last`` is cancelled: one slow stream (a seat that stalls, a
        loaded machine) must not carry the attestation past attestBy, where the bond burns."""
        while True:
            outcome = await self._attempt_until(demand_id, demand, last)
            if outcome is not None:
                return outcome
            # a seat that refuses at once cancels the attempt's racing read of the clock each time
            # (on a loaded machine that read is the slower): read it to the end between attempts
            if await self._reached(last):
                return False
            await trio.sleep(self.retry)

    async def _reached(self, last: int) -> bool:
        """Whether the chain's clock reached ``last`` (False when it cannot be read now)."""
        chain = self.chain
        try:
            return await chain.run(chain.chain.now) >= last
        except chain_failures() as error:
            log.info("witness: reading the chain's clock: %s", describe_chain_error(error))
            return False

    async def _attempt_until(self, demand_id: bytes, demand: Any, last: int) -> bool | None:
        """One fetch raced against the chain's clock: True relayed, False ``last`` reached, None failed."""
        outcome: list[bool] = []

        async def attempt(cancel: trio.CancelScope) -> None:
            try:
                _, blob_id = await self.data.fetch_checked(demand.job_id, demand.seat, demand.item)
            except (PeerError, LocalError) as error:
                log.info("witness: demand %s: item %d of seat %s: %s", demand_id.hex()[:12], demand.item,
                         demand.seat, error)
            else:
                await self.data.relay(demand.job_id, demand.seat, demand.item, blob_id)
                outcome.append(True)
            cancel.cancel()

        async def clock(cancel: trio.CancelScope) -> None:
            while not await self._reached(last):
                await trio.sleep(self.retry)
            outcome.append(False)
            cancel.cancel()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(attempt, nursery.cancel_scope)
            nursery.start_soon(clock, nursery.cancel_scope)
        return outcome[0] if outcome else None

    async def _attest(self, demand_id: bytes, demand: Any, served: bool) -> bool | None:
        """attestServed, tried again while the demand still waits for our word before attestBy."""
        chain = self.chain
        s = chain.settlement
        while True:
            try:
                await chain.run(s.attest_served, demand_id, served)
                break
            except chain_failures() as error:
                log.warning("witness: attestServed(%s) on demand %s refused: %s", served, demand_id.hex()[:12],
                            describe_chain_error(error))
            try:
                now, again = await chain.run(lambda: (chain.chain.now(), s.demand(demand_id)))
            except chain_failures():
                now, again = demand.deadline, demand
            if again.stage != DemandStage.WITNESSING or again.witness.lower() != chain.account.lower() \
                    or now >= again.deadline:
                await self._done(demand_id)
                return None
            await trio.sleep(self.retry)
        self.attested[demand_id] = served
        await self._done(demand_id)
        log.info("witness: demand %s: item %d of seat %s %s", demand_id.hex()[:12], demand.item, demand.seat,
                 "served and relayed" if served else "not served in the window")
        return served


_started: "weakref.WeakKeyDictionary[Any, WitnessDuty]" = weakref.WeakKeyDictionary()


def start_witness(ctx: Any) -> WitnessDuty:
    """The node's one witness duty (a role context's), subscribed to its follower; the v2 keeper
    starts it in every node with a role."""
    if ctx not in _started:
        duty = _started[ctx] = WitnessDuty(ctx.chain, ctx.job_data, ctx.start_soon, data_dir=ctx.config.data_dir)
        duty.subscribe(ctx.follower)
        duty.resume()
    return _started[ctx]


def witness_of(ctx: Any) -> WitnessDuty | None:
    """The context's witness duty, once started (for tools and tests)."""
    return _started.get(ctx)


__all__ = ["RETRY", "STATE_FILE", "WitnessDuty", "start_witness", "witness_of"]
