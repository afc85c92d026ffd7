"""An open demand after ``serveBy`` (docs/economics.md §7): the seat's side and anyone's push.

The data service (`data.py`) plays a demand's first part: the seat serves, the demander
fetches, checks and releases. What is left when no release came by ``serveBy``:

  the seat   calls a witness in [serveBy, serveBy + Δ) and makes the draw once its seed block
             is mined (anyone may; the seat is the one that wants it), re-arming a draw whose
             seed fell out of reach; meanwhile it serves anyone, the drawn witness included
  anyone     ``failDemand`` once the contract allows it (serveBy + Δ passed with no witness
             called, no draw by ``drawBy``, every witness refused) and ``timeoutWitness``
             once ``attestBy`` passed with no attestation

The client role demands the items its seats do not deliver and leaves failing them to this
keeper (its own call would race this one's).

Which demands: those naming this node as demander or seat, those of a job it is the client
of, and those it was drawn to witness: each of them has money waiting for the demand's end.
Each pass reads every kept demand (``demand(id)``) and sends only what `due_move` says the
contract accepts at the chain's time and block, so no transaction of it must revert; one that
does all the same (another node's move landed first) is one line, and the demand is read
again on the next pass. The seat never fails its own demand and a witness never times itself
out; an ended demand is dropped.

The demands kept are written to ``demands.json`` in the data directory as they are learnt
(`duty_state`): a restarted node keeps them (the follower does not hand their events again) and
its first pass reads where each stands on chain.
"""
from __future__ import annotations

import logging
import weakref
from pathlib import Path
from typing import Any

import trio

from contracts.settlement_v2_demands import DataDemanded, DemandStage, WitnessDrawn
from protocol.economics import DRAW_DELAY

from ..chain import chain_failures, describe_chain_error
from .duty_state import DutyState
from .game_keeper import DRAW_WINDOW

log = logging.getLogger(__name__)

STATE_FILE = "demands.json"
DEMAND_POLL = 2.0  # seconds between two passes: well inside Δ, the seat's window to call a witness

CALL_WITNESS, DRAW_WITNESS, FAIL_DEMAND, TIMEOUT_WITNESS = "callWitness", "drawWitness", "failDemand", "timeoutWitness"
_PYTHON_NAMES = {CALL_WITNESS: "call_witness", DRAW_WITNESS: "draw_witness", FAIL_DEMAND: "fail_demand",
                 TIMEOUT_WITNESS: "timeout_witness"}
_ENDED = (DemandStage.RELEASED, DemandStage.SERVED, DemandStage.FAILED, DemandStage.VOID)


def due_move(demand: Any, *, account: str, now: int, block: int, margin: int) -> str | None:
    """The move on ``demand`` (a `DemandInfo`) that ``account`` sends at chain time ``now`` with
    ``block`` the latest block (a move lands in block + 1), or None: GavelDemandsV2's guards."""
    seat = demand.seat.lower() == account.lower()
    stage = demand.stage
    if stage == DemandStage.OPEN:  # deadline: serveBy
        if now < demand.deadline:
            return None  # the demander may still release
        if now < demand.deadline + margin:
            return CALL_WITNESS if seat else None
        return None if seat else FAIL_DEMAND
    if stage == DemandStage.DRAWING:  # deadline: drawBy
        if now >= demand.deadline:
            return None if seat else FAIL_DEMAND
        armed = demand.armed_block
        if seat and (block + 1 > armed + DRAW_WINDOW or block + 1 > armed + DRAW_DELAY):
            return DRAW_WITNESS
        return None
    if stage == DemandStage.WITNESSING:  # deadline: attestBy
        silent = now >= demand.deadline and demand.witness.lower() != account.lower()
        return TIMEOUT_WITNESS if silent else None
    if stage == DemandStage.REFUSED:  # every witness drawn said "not served"
        return None if seat else FAIL_DEMAND
    return None


class DemandKeeper:
    """Moves the demands this node has money in past their deadlines; ``poll`` in seconds; the demands
    it keeps are in ``data_dir`` (None: kept in memory only)."""

    def __init__(self, chain: Any, *, data_dir: Path | None = None, poll: float = DEMAND_POLL) -> None:
        self.chain = chain  # node.roles.chain.ChainBinding
        self.poll = poll
        self.state = DutyState(data_dir, STATE_FILE)
        self.kept: set[bytes] = set()
        self.state.restore(lambda state: self.kept.update(bytes.fromhex(d) for d in state["kept"]))
        self.sent: list[tuple[str, bytes]] = []  # moves that landed, in order (for status and tests)
        self.refused = 0  # moves the chain refused (another node's landed first)
        self._margin: int | None = None

    # -- what the chain told ----------------------------------------------------------

    def subscribe(self, follower: Any) -> None:
        follower.subscribe(DataDemanded, self.on_demanded)
        follower.subscribe(WitnessDrawn, self.on_witness_drawn)

    async def on_demanded(self, logged: Any) -> None:
        e: DataDemanded = logged.event
        me = self.chain.account.lower()
        if me in (e.demander.lower(), e.seat.lower()) \
                or (await self.chain.run(self.chain.settlement.job, e.job_id)).client.lower() == me:
            await self._keep(e.demand_id)  # the client's p waits for it too: settle does

    async def on_witness_drawn(self, logged: Any) -> None:
        if logged.event.witness.lower() == self.chain.account.lower():
            await self._keep(logged.event.demand_id)  # our bond waits for it (a refuser's until its end)
        else:
            await trio.lowlevel.checkpoint()

    async def _keep(self, demand_id: bytes) -> None:
        if demand_id in self.kept:
            await trio.lowlevel.checkpoint()
            return
        self.kept.add(demand_id)
        await self._save()

    async def _save(self) -> None:
        await self.state.save(lambda: {"kept": sorted(d.hex() for d in self.kept)})

    # -- moving -----------------------------------------------------------------------

    async def run(self) -> None:
        while True:
            await self.keep_once()
            await trio.sleep(self.poll)

    async def keep_once(self) -> list[tuple[str, bytes]]:
        """One pass over the kept demands; returns the moves that landed."""
        s, chain = self.chain.settlement, self.chain.chain
        try:
            if self._margin is None:
                self._margin = (await self.chain.run(s.chain_settings)).margin
            now, block = await self.chain.run(lambda: (chain.now(), chain.block_number()))
        except chain_failures() as error:
            log.info("demand keeper: reading the chain: %s", describe_chain_error(error))
            return []
        landed, ended = [], []
        for demand_id in sorted(self.kept):
            try:
                info = await self.chain.run(s.demand, demand_id)
            except chain_failures() as error:
                log.info("demand keeper: reading demand %s: %s", demand_id.hex()[:12], describe_chain_error(error))
                continue
            if info.stage in _ENDED:
                ended.append(demand_id)
                continue
            move = due_move(info, account=self.chain.account, now=now, block=block, margin=self._margin)
            if move is None:
                continue
            try:
                await self.chain.run(getattr(s, _PYTHON_NAMES[move]), demand_id)
            except chain_failures() as error:  # another node was first, or the state moved: read again next pass
                self.refused += 1
                log.info("demand keeper: %s(%s) refused: %s", move, demand_id.hex()[:12], describe_chain_error(error))
                continue
            landed.append((move, demand_id))
            log.info("demand keeper: %s on demand %s (item %d of seat %s)", move, demand_id.hex()[:12], info.item,
                     info.seat)
        if ended:
            self.kept.difference_update(ended)
            await self._save()
        self.sent += landed
        return landed


_started: "weakref.WeakKeyDictionary[Any, DemandKeeper]" = weakref.WeakKeyDictionary()


def start_demand_keeper(ctx: Any) -> DemandKeeper:
    """The node's one demand keeper (a role context's), subscribed to its follower and running; the
    v2 keeper starts it in every node with a role."""
    if ctx not in _started:
        keeper = _started[ctx] = DemandKeeper(ctx.chain, data_dir=ctx.config.data_dir)
        keeper.subscribe(ctx.follower)
        ctx.start_soon(keeper.run, name="demand keeper")
    return _started[ctx]


def demand_keeper_of(ctx: Any) -> DemandKeeper | None:
    """The context's demand keeper, once started (for tools and tests)."""
    return _started.get(ctx)


__all__ = ["CALL_WITNESS", "DEMAND_POLL", "DRAW_WITNESS", "DemandKeeper", "FAIL_DEMAND", "STATE_FILE",
           "TIMEOUT_WITNESS", "demand_keeper_of", "due_move", "start_demand_keeper"]
