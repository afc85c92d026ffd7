"""The seat statements this node was handed, kept as evidence and taken to the contract (economics §10).

A sampler (the client's own sampling, the auditor) hands the keeper each `SeatStatement` a seat
signed for it (`data.JobDataService.fetch_steps`); the keeper shares it on ``gavel/statements/2``
(so that two samplers told different lists meet) and takes in what others share, checked the
same way. It reports:

  equivocation   two statements of one seat for one (job, kind, index) with different values:
                 ``slashEquivocation(a, sigA, b, sigB)``
  contradiction  a statement the chain contradicts, mirroring the contract's `_chainValue`: a
                 TRACE value that is not the seat's revealed root, a STEPS value of interval c
                 that is not the list the seat answered in game (job, root, c):
                 ``slashContradiction(a, sig)``; looked at when the statement arrives and when
                 the chain changes what it holds (`TraceRevealed`, `ListPosted`, `ListEndorsed`)

The contract slashes a seat once, while its job runs: a seat already forfeited is not reported
(anyone's slash, ours or another reporter's, is final), and a settled job's statements are dropped.
NODES statements are kept and compared with each other, not with the chain (no role hands a node
list off chain yet). What is held is written to ``statements.json`` (`duty_state`) before the
statement is shared, so a restart keeps the evidence.
"""
from __future__ import annotations

import logging
import weakref
from typing import Any, Callable

import trio

from contracts.settlement_v2 import ForfeitReason, JobSettled, TraceRevealed
from contracts.settlement_v2_games import ListEndorsed, ListPosted
from protocol.claims import game_id as game_id_of
from protocol.errors import LocalProtocolError
from protocol.statements import STEPS, TRACE, SeatStatement, SignedStatement, StatementDomain

from ...errors import BadMessage
from ..chain import chain_failures, describe_chain_error
from .duty_state import DutyState

log = logging.getLogger(__name__)

STATE_FILE = "statements.json"
ZERO = bytes(32)
# Seconds between two shares of the statements a node took in first-hand, while their job runs (gossip
# meshes form late; gossip can lose one); a node's `regossip_interval` when it runs one. What gossip
# brought is not shared again: its sharer repeats it. (Every node re-sharing everything it held every 5 s
# was the v2 testnet's gossip storm: 28 nodes, ~100 statements, the one event loop saturated.)
REPUBLISH = 10.0

Slot = tuple[bytes, str, int, int]  # (job, seat, kind, index)


def statement_to_wire(signed: SignedStatement) -> dict:
    s = signed.statement
    return {"job": s.job_id, "seat": s.seat, "kind": s.kind, "index": s.index, "value": s.value,
            "signature": signed.signature}


def statement_from_wire(obj: Any, peer: object = None) -> SignedStatement:
    """A shared statement as it came (its signature is checked by `StatementsKeeper.add`)."""
    try:
        return SignedStatement(SeatStatement(obj["job"], obj["seat"], obj["kind"], obj["index"], obj["value"]),
                               obj["signature"])
    except (KeyError, TypeError, LocalProtocolError) as error:
        raise BadMessage(f"malformed seat statement: {error}", peer=peer) from None


def _to_record(signed: SignedStatement) -> dict:
    s = signed.statement
    return {"job": s.job_id.hex(), "seat": s.seat, "kind": s.kind, "index": s.index, "value": s.value.hex(),
            "signature": signed.signature.hex()}


def _from_record(record: dict) -> SignedStatement:
    return SignedStatement(SeatStatement(bytes.fromhex(record["job"]), str(record["seat"]), int(record["kind"]),
                                         int(record["index"]), bytes.fromhex(record["value"])),
                           bytes.fromhex(record["signature"]))


class StatementsKeeper:
    """Holds the seat statements this node saw and slashes the seats they convict.

    `publish(signed)` shares a statement (None: kept here only); what must still be acted on is kept
    in ``data_dir`` (None: in memory only)."""

    def __init__(self, chain: Any, domain: StatementDomain, *, data_dir: Any = None,
                 publish: Callable[[SignedStatement], Any] | None = None, share_every: float = REPUBLISH) -> None:
        self.chain = chain  # node.roles.chain.ChainBinding
        self.domain = domain
        self.publish = publish
        self.share_every = share_every
        self.held: dict[Slot, dict[bytes, SignedStatement]] = {}  # slot -> value -> its signed statement
        self.first_hand: set[tuple[Slot, bytes]] = set()  # (slot, value) a sampler of ours handed us: we re-share it
        self.slashed: list[tuple[str, Slot]] = []  # ("equivocation" | "contradiction", slot) sent by us, in order
        self._checking = trio.Lock()  # one check at a time: a second finds the seat forfeited, sends nothing
        self.settled: set[bytes] = set()  # jobs settled while we ran: what others still share of them is dropped
        self.state = DutyState(data_dir, STATE_FILE)
        self.state.restore(self._restore)

    def subscribe(self, follower: Any) -> None:
        follower.subscribe(TraceRevealed, self._on_seat_changed)
        follower.subscribe(ListPosted, self._on_seat_changed)
        follower.subscribe(ListEndorsed, self._on_seat_changed)
        follower.subscribe(JobSettled, self._on_settled)

    def _restore(self, state: dict) -> None:
        for record in state["statements"]:
            signed = _from_record(record)
            self.held.setdefault(signed.statement.slot, {})[signed.statement.value] = signed
            self.first_hand.add((signed.statement.slot, signed.statement.value))  # unknown after a restart: shared

    async def _save(self) -> None:
        await self.state.save(lambda: {"statements": [_to_record(signed) for values in self.held.values()
                                                      for signed in values.values()]})

    # -- taking statements in ---------------------------------------------------------------

    async def add(self, signed: SignedStatement, *, share: bool = True) -> bool:
        """Keep a seat's signed statement (False when it is known already or not signed by its seat),
        share it, and report what it convicts."""
        statement = signed.statement
        known = isinstance(statement, SeatStatement) and statement.value in self.held.get(statement.slot, {})
        if known or getattr(statement, "job_id", None) in self.settled:  # shared again: no ecrecover for it
            await trio.lowlevel.checkpoint()
            return False
        if not isinstance(statement, SeatStatement) or not signed.verify(self.domain):
            log.info("statements: refusing a statement not signed by its seat (%s)", getattr(statement, "seat", "?"))
            await trio.lowlevel.checkpoint()
            return False
        self.held.setdefault(statement.slot, {})[statement.value] = signed
        if share:
            self.first_hand.add((statement.slot, statement.value))
        await self._save()  # evidence first: a crash after sharing must not lose it
        log.info("statements: kept seat %s's statement (job %s, kind %d, index %d)", statement.seat,
                 statement.job_id.hex()[:12], statement.kind, statement.index)
        if share and self.publish is not None:
            await self.publish(signed)
        await self.check(statement.slot)
        return True

    async def on_gossip(self, message: Any) -> None:
        from ...framing import unpack

        await self.add(statement_from_wire(unpack(message.data, peer=message.origin), message.origin), share=False)

    async def republish(self) -> None:
        """Share again, every `share_every` seconds, the statements held that we took in first-hand (a
        sampler that joined the mesh late still meets them); gossip's are their sharers' to repeat."""
        if self.publish is None:
            return
        while True:
            await trio.sleep(self.share_every)
            for slot, values in list(self.held.items()):
                for value, signed in list(values.items()):
                    if (slot, value) in self.first_hand:
                        await self.publish(signed)

    # -- what the chain says ----------------------------------------------------------------

    async def _on_seat_changed(self, logged: Any) -> None:
        seat = logged.event.seat
        for slot in [s for s in self.held if s[1] == seat]:
            await self.check(slot)
        await trio.lowlevel.checkpoint()

    async def _on_settled(self, logged: Any) -> None:
        """A settled job's seats hold no lock to slash: its statements are dropped."""
        job_id = logged.event.job_id
        self.settled.add(job_id)
        if any(slot[0] == job_id for slot in self.held):
            self.held = {slot: v for slot, v in self.held.items() if slot[0] != job_id}
            self.first_hand = {(slot, value) for slot, value in self.first_hand if slot[0] != job_id}
            await self._save()
        await trio.lowlevel.checkpoint()

    async def check(self, slot: Slot) -> None:
        """Report the slot's statements if they equivocate or the chain contradicts one."""
        async with self._checking:
            values = list(self.held.get(slot, {}).values())
            try:
                if not values or not await self._slashable(slot):
                    return
                if len(values) >= 2:
                    await self._send("equivocation", slot, self.chain.settlement.slash_equivocation, values[0],
                                     values[1])
                    return
                on_chain = await self._chain_value(values[0].statement)
            except chain_failures() as error:  # the statement stays held: the next event or restart checks again
                log.warning("statements: reading seat %s in job %s: %s", slot[1], slot[0].hex()[:12],
                            describe_chain_error(error))
                return
            if on_chain != ZERO and on_chain != values[0].statement.value:
                await self._send("contradiction", slot, self.chain.settlement.slash_contradiction, values[0])

    async def _slashable(self, slot: Slot) -> bool:
        """The seat still holds its lock (the contract's `StatementNothingToSlash` otherwise)."""
        from contracts.settlement_v2 import JobStatus, SeatStatus

        s = self.chain.settlement
        job_id, seat, _, _ = slot
        info = await self.chain.run(s.seat, job_id, seat)
        if info.status == SeatStatus.NONE or info.forfeit != ForfeitReason.NONE:
            return False
        return (await self.chain.run(s.job, job_id)).status == JobStatus.RUNNING

    async def _chain_value(self, statement: SeatStatement) -> bytes:
        """What the chain holds for a statement's slot (ZERO: nothing to compare with yet)."""
        s = self.chain.settlement
        root = (await self.chain.run(s.seat, statement.job_id, statement.seat)).trace_root
        if statement.kind == TRACE or root == ZERO:
            return root
        if statement.kind == STEPS:
            game = game_id_of(statement.job_id, root, statement.index)
            return await self.chain.run(s.answer_of, game, statement.seat)
        return ZERO

    async def _send(self, what: str, slot: Slot, send: Callable[..., Any], *statements: SignedStatement) -> None:
        job_id, seat, kind, index = slot
        try:
            await self.chain.run(send, *statements)
        except chain_failures() as error:  # another reporter's slash came first, or the job ended
            log.warning("statements: %s of seat %s in job %s refused: %s", what, seat, job_id.hex()[:12],
                        describe_chain_error(error))
            return
        self.slashed.append((what, slot))
        log.warning("statements: seat %s slashed for %s (job %s, kind %d, index %d)", seat, what, job_id.hex()[:12],
                    kind, index)


_started: "weakref.WeakKeyDictionary[Any, StatementsKeeper]" = weakref.WeakKeyDictionary()


async def start_statements_keeper(ctx: Any) -> StatementsKeeper:
    """The node's one keeper of statements (a role context's), subscribed to its follower and to the
    statements topic; every role that collects statements calls this, the first starts it."""
    from ..job_protocols import TOPIC_STATEMENTS
    from .data import statement_domain

    if ctx not in _started:
        async def publish(signed: SignedStatement) -> None:
            await ctx.publish(TOPIC_STATEMENTS, statement_to_wire(signed))

        keeper = _started[ctx] = StatementsKeeper(ctx.chain, statement_domain(ctx.chain),
                                                  data_dir=ctx.config.data_dir, publish=publish,
                                                  share_every=ctx.config.regossip_interval)
        keeper.subscribe(ctx.follower)
        await ctx.on_gossip(TOPIC_STATEMENTS, keeper.on_gossip)
        ctx.start_soon(keeper.republish, name="statements keeper: share")
        for slot in list(keeper.held):  # evidence a previous run kept: the chain may convict it now
            ctx.start_soon(keeper.check, slot, name="statements keeper: check kept")
    return _started[ctx]


__all__ = ["REPUBLISH", "STATE_FILE", "StatementsKeeper", "start_statements_keeper", "statement_from_wire",
           "statement_to_wire"]
