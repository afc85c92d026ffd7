"""The fourth level of a dispute as a node plays it: duels on OneStepVerifier (docs/onchain-step.md).

A claimant of a node claim (its author or a joiner) opens a duel against one seat covering the
claim's node list with ``openStepGame`` (`challenger.Challenger`, the auditor's side); the
settlement announces it with ``StepGameOpened``. Each of the two players plays its own side here,
from what it computed itself: the challenger from its replay of the interval, the defender from the
node values its seat kept for the step. Where those come from is a `DuelSource` per side,
registered by the auditor and the defender (`serve`). Both trace the named element of the node's
program (`protocol.step_programs`) on the node's inputs; a side whose claimed output does not hold
the traced value at that element (a cheat, or a fault of its run) ends its trace in the value it
claimed, so that it can commit at all and the walk finds where its claim leaves the program (it
cannot win, and says so in the log).

OneStepVerifier's events are not the settlement's, so the follower does not hand them. Each pass
(`play_once`, every DUEL_POLL seconds) reads every open duel's phase and clocks from the verifier
and sends the move due from this side, as the contract allows it:

    phase           move                                                when
    Commit          commit: its value at the element, its trace root   it has not moved this round
    Bisect          reveal: the two children of its current node       it has not moved this round
    Commit, Bisect  timeout                                            the other side has not moved
                                                                       and its clock is spent
    Located         rule: the located step and its operands' openings  its own value there is what the
                                                                       program computes on the agreed
                                                                       prefix (the side that wins)
    Done            nothing: the game keeper settles the duel          (also once stepBy passed)

A refused move is logged in one line and the state read again on the next pass; nothing a peer
sends can stop a pass (the other side's moves reach this node only through the verifier, which
checks them).

Kept across a restart (``duels.json``, `duty_state`): each duel this node plays, by its verifier
id, with its side and the block of its ``StepGameOpened`` (the setup is read again from that
event, which carries it whole: a claimant that opens through a contract of its own hides
nothing), until it is Done or its stepBy passed. The player is rebuilt from the
side's source on the first pass.

`SpecRoots` gives each job's elementSpecRoot from its ``JobOpened`` (read back from the chain on
a miss, so a restarted node knows it too): zero when the job offers no fourth level.
"""
from __future__ import annotations

import logging
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Awaitable, Callable

import numpy as np
import trio
from eth_abi import encode as abi_encode
from eth_hash.auto import keccak

from contracts.settlement_v2 import JobOpened, JobSettled
from contracts.settlement_v2_referees import StepGameOpened
from protocol import LocalProtocolError, RemoteProtocolError
from protocol.element_specs import SETUP_ABI, node_element_spec
from protocol.step_game import Commitment, StepPlayer, StepSetup
from protocol.step_programs import trace_element
from protocol.step_trace import TensorInfo, element_bits
from repops_cupy.hashing import canonical_array, hash_tensor

from ...errors import LocalError, PeerError
from ..chain import chain_failures, describe_chain_error
from .duty_state import DutyState

log = logging.getLogger(__name__)

CHALLENGER, DEFENDER = 0, 1
SIDES = ("challenger", "defender")
STATE_FILE = "duels.json"
DUEL_POLL = 1.0
ZERO = bytes(32)


@dataclass(frozen=True)
class DuelCase:
    """What the chain says a duel is about: the node claim, the step claim and game above it."""

    duel: int          # OneStepVerifier's game id
    side: int          # this node's: CHALLENGER or DEFENDER
    claim_id: bytes    # the node claim
    step_claim: bytes
    job_id: bytes
    trace_root: bytes
    interval: int      # c, of the game
    step_index: int    # j, of the picked step in its interval
    node: int          # n, of the picked node


@dataclass(frozen=True)
class DuelMaterial:
    """One side's node as it computed it: the job's step graph, the node's inputs, its claimed output."""

    graph: Any
    inputs: tuple[Any, ...]
    output: Any


DuelSource = Callable[[DuelCase], Awaitable[DuelMaterial]]


@dataclass
class Playing:
    """A duel this node plays, its player built: the moves come from `player`."""

    case: DuelCase
    setup: StepSetup
    player: StepPlayer
    commitment: Commitment
    program: tuple[int, ...]  # the program's own values on the inputs: what a ruling recomputes
    step_by: int

    def wins_at(self, index: int) -> bool:
        """Whether the step located at `index` rules for this side (past the program's end: padding 0)."""
        return index >= len(self.program) or self.player.values[index] == self.program[index]


def build_player(case: DuelCase, setup: StepSetup, material: DuelMaterial, step_by: int) -> Playing:
    """This side's trace of the duel's element and its player (blocking: a long program takes seconds)."""
    inputs = [canonical_array(np.asarray(x)) for x in material.inputs]
    output = canonical_array(np.asarray(material.output))
    where = f"duel {case.duel} ({SIDES[case.side]})"
    if [hash_tensor(x) for x in inputs] != [t.root for t in setup.inputs]:
        log.warning("%s: our inputs of node %d are not the duel's: our openings will not hold", where, case.node)
    if hash_tensor(output) != setup.outputs[case.side].root:
        log.warning("%s: our output of node %d is not the one the duel names for us: we cannot commit", where,
                    case.node)
    node = material.graph.nodes[case.node]
    trace = trace_element(node.op, dict(node.attrs), inputs, setup.element)
    claimed = element_bits(output, setup.element)
    values = trace.values
    if trace.output != claimed:
        log.warning("%s: the program gives %#x at element %d of node %d, our output holds %#x: we cannot win it",
                    where, trace.output, setup.element, case.node, claimed)
        values = values[:-1] + (claimed,)
    player = StepPlayer(setup, case.side, values, output, inputs)
    return Playing(case, setup, player, player.commitment(), trace.values, step_by)


def setup_of(raw: Any, graph: Any, n: int) -> StepSetup:
    """The `StepSetup` of a ``StepGameOpened``'s setup (as ``openStepGame`` took it), its spec node n's of `graph`;
    LocalError when they are not one setup (the contract proved the spec against the job's root, so
    only another job's graph gives another)."""
    node = node_element_spec(graph, n)
    if node is None:
        raise LocalError(f"node {n} of the job's graph has no element program")

    def info(t: Any) -> TensorInfo:
        return TensorInfo(bytes(t[0]), int(t[1]), int(t[2]), int(t[3]))

    setup = StepSetup(node.spec, int(raw[2]), tuple(info(t) for t in raw[4]), (info(raw[7][0]), info(raw[7][1])))
    if keccak(abi_encode([SETUP_ABI], [setup.as_abi()])) != keccak(abi_encode([SETUP_ABI], [raw])):
        raise LocalError(f"the duel's setup is not the job's element spec of node {n}")
    return setup


class SpecRoots:
    """Each job's elementSpecRoot, from its ``JobOpened``; zero: the job offers no fourth level."""

    def __init__(self, chain: Any) -> None:
        self.chain = chain
        self.roots: dict[bytes, bytes] = {}

    def subscribe(self, follower: Any) -> None:
        follower.subscribe(JobOpened, self.on_job_opened)
        follower.subscribe(JobSettled, self.on_job_settled)

    async def on_job_opened(self, logged: Any) -> None:
        self.roots[logged.event.job_id] = bytes(logged.event.terms.element_spec_root)
        await trio.lowlevel.checkpoint()

    async def on_job_settled(self, logged: Any) -> None:
        self.roots.pop(logged.event.job_id, None)
        await trio.lowlevel.checkpoint()

    async def of(self, job_id: bytes) -> bytes:
        """The job's root; a job not handed yet (a restart, or asked before the follower got there) is
        read back from the chain's JobOpened events."""
        if job_id not in self.roots:
            for found in await self.chain.run(self.chain.settlement.events, 0, None):
                if isinstance(found.event, JobOpened):
                    self.roots.setdefault(found.event.job_id, bytes(found.event.terms.element_spec_root))
        return self.roots.get(job_id, ZERO)


class Duels:
    """Plays this node's side of every duel it is in; what it follows is kept in ``data_dir`` (None:
    in memory only). `spawn` starts a background task (a player is built off the follower's task)."""

    def __init__(self, chain: Any, spawn: Callable[..., None], *, data_dir: Path | None = None,
                 poll: float = DUEL_POLL) -> None:
        self.chain = chain  # node.roles.chain.ChainBinding
        self.spawn = spawn
        self.poll = poll
        self.spec_roots = SpecRoots(chain)
        self.sources: dict[int, DuelSource] = {}
        self.open: dict[int, tuple[int, int]] = {}   # duel -> (our side, block of its StepGameOpened)
        self.playing: dict[int, Playing] = {}
        self.opened: set[tuple[bytes, str, str]] = set()  # (claim, challenger, defender) seen opened
        self.moves: list[tuple[str, int]] = []       # moves that landed, in order (status and tests)
        self._preparing: set[int] = set()
        self._verifier: Any = None
        self.state = DutyState(data_dir, STATE_FILE)
        self.state.restore(self._restore)

    def serve(self, side: int, source: DuelSource) -> None:
        """Where this node's material for `side` comes from (the auditor's replay, the seat's run)."""
        self.sources[side] = source

    # -- what is kept across a restart ------------------------------------------------

    def _restore(self, state: dict) -> None:
        for duel, record in state["duels"].items():
            self.open[int(duel)] = (int(record["side"]), int(record["block"]))

    async def _save(self) -> None:
        await self.state.save(lambda: {"duels": {str(d): {"side": side, "block": block}
                                                 for d, (side, block) in self.open.items()}})

    def resume(self) -> None:
        """Build the players of the duels a previous run left open."""
        for duel in list(self.open):
            self.spawn(self.prepare, duel, name=f"duel {duel}: take up")

    # -- what the chain told ----------------------------------------------------------

    def subscribe(self, follower: Any) -> None:
        follower.subscribe(StepGameOpened, self.on_opened)
        self.spec_roots.subscribe(follower)

    async def on_opened(self, logged: Any) -> None:
        e: StepGameOpened = logged.event
        me = self.chain.account
        self.opened.add((e.claim_id, e.challenger, e.defender))
        side = CHALLENGER if e.challenger == me else DEFENDER if e.defender == me else None
        if side is None or e.id in self.open:
            await trio.lowlevel.checkpoint()
            return
        self.open[e.id] = (side, logged.block_number)
        await self._save()  # before the follower moves past it
        log.info("duel %d on claim %s: we are the %s", e.id, e.claim_id.hex()[:12], SIDES[side])
        self.spawn(self.prepare, e.id, name=f"duel {e.id}: trace")

    # -- the player -------------------------------------------------------------------

    async def prepare(self, duel: int) -> Playing | None:
        """Build this side's player: the case and setup from the chain, the material from the side's
        source, the trace off the event loop. None (logged) when it cannot be built now; the next pass
        tries again."""
        if duel in self.playing or duel in self._preparing or duel not in self.open:
            await trio.lowlevel.checkpoint()
            return self.playing.get(duel)
        self._preparing.add(duel)
        try:
            side, block = self.open[duel]
            source = self.sources.get(side)
            if source is None:
                log.info("duel %d: nothing here plays the %s yet", duel, SIDES[side])
                return None
            logged = await self._opened_event(duel, block)
            case = await self._case(logged.event, side)
            material = await source(case)
            setup = await trio.to_thread.run_sync(setup_of, logged.event.setup, material.graph, case.node)
            playing = await trio.to_thread.run_sync(build_player, case, setup, material, logged.event.step_by)
            self.playing[duel] = playing
            log.info("duel %d: our trace of element %d of node %d has %d steps (depth %d)", duel, setup.element,
                     case.node, len(playing.program), setup.depth)
            return playing
        except chain_failures() + (LocalError, PeerError, LocalProtocolError, RemoteProtocolError, LookupError) \
                as error:
            log.warning("duel %d: no player yet: %s", duel, describe_chain_error(error))
            return None
        finally:
            self._preparing.discard(duel)

    async def _opened_event(self, duel: int, block: int) -> Any:
        for found in await self.chain.run(self.chain.settlement.events, block, block):
            if isinstance(found.event, StepGameOpened) and found.event.id == duel:
                return found
        raise LocalError(f"no StepGameOpened of duel {duel} at block {block}")

    async def _case(self, e: StepGameOpened, side: int) -> DuelCase:
        s = self.chain.settlement
        node = await self.chain.run(s.claim, e.claim_id)
        step = await self.chain.run(s.claim, node.parent)
        game = await self.chain.run(s.claim, node.game_id)
        return DuelCase(e.id, side, e.claim_id, node.parent, game.parent, game.list_root, game.index, step.index,
                        node.index)

    # -- moving -----------------------------------------------------------------------

    async def run(self) -> None:
        while True:
            await self.play_once()
            await trio.sleep(self.poll)

    async def play_once(self) -> list[tuple[str, int]]:
        """One pass over the open duels: the move due from this side in each; returns the moves that landed."""
        landed = []
        for duel in sorted(self.open):
            playing = self.playing.get(duel) or await self.prepare(duel)
            if playing is None:
                await self._drop_if_over(duel)
                continue
            try:
                move = await self._move(duel, playing)
            except chain_failures() as error:
                log.info("duel %d: reading the verifier: %s", duel, describe_chain_error(error))
                continue
            if move is not None:
                landed.append((move, duel))
        self.moves += landed
        return landed

    async def _move(self, duel: int, playing: Playing) -> str | None:
        verifier = await self._verifier_of()
        view = await self.chain.run(verifier.game, duel)
        now = await self.chain.run(self.chain.chain.now)
        if view.phase == "Done" or now >= playing.step_by:
            log.info("duel %d: %s (we were the %s)", duel, view.outcome or "past its stepBy", SIDES[playing.case.side])
            await self._drop(duel)
            return None
        side, player, setup = playing.case.side, playing.player, playing.setup
        if view.phase == "Located":
            if not playing.wins_at(view.position):
                return None  # the other side's to rule, or nobody's until stepBy
            instr, proof, openings = await trio.to_thread.run_sync(player.ruling_arguments, view.position)
            return await self._send(duel, "rule", verifier.rule, duel, setup, instr, proof, openings)
        clocks = await self.chain.run(verifier.clocks, duel)
        if not clocks.moved[side]:
            if view.phase == "Commit":
                return await self._send(duel, "commit", verifier.commit, duel, setup, playing.commitment)
            left, right = player.children(view.level, view.position)
            return await self._send(duel, "reveal", verifier.reveal, duel, left, right)
        other = 1 - side
        if not clocks.moved[other] and now >= clocks.turn_start + clocks.clock[other]:  # spent in the next block
            return await self._send(duel, "timeout", verifier.timeout, duel)
        return None

    async def _send(self, duel: int, move: str, send: Callable[..., Any], *args: Any) -> str | None:
        try:
            await self.chain.run(send, *args)
        except chain_failures() as error:
            log.warning("duel %d: %s refused: %s", duel, move, describe_chain_error(error))
            return None
        log.info("duel %d: %s", duel, move)
        return move

    async def _drop_if_over(self, duel: int) -> None:
        """A duel this node could not build a player for is dropped once settled or past its stepBy."""
        try:
            info = await self.chain.run(self.chain.settlement.step_game, duel)
            now = await self.chain.run(self.chain.chain.now)
        except chain_failures() as error:
            log.info("duel %d: reading it: %s", duel, describe_chain_error(error))
            return
        if info.settled or now >= info.step_by:
            log.warning("duel %d: over (settled, or past its stepBy) before we could play it", duel)
            await self._drop(duel)

    async def _drop(self, duel: int) -> None:
        self.open.pop(duel, None)
        self.playing.pop(duel, None)
        await self._save()

    async def _verifier_of(self) -> Any:
        from contracts.step_verifier import StepVerifier

        if self._verifier is None:
            address = await self.chain.run(self.chain.settlement.setting, "STEP_VERIFIER")
            self._verifier = StepVerifier(self.chain.chain, address, self.chain.account)
        return self._verifier


_started: "weakref.WeakKeyDictionary[Any, Duels]" = weakref.WeakKeyDictionary()


def start_duels(ctx: Any) -> Duels:
    """The node's one duel player (a role context's), subscribed to its follower and running; the
    auditor and the defender call this and register their side's source, the first call starts it."""
    if ctx not in _started:
        duels = _started[ctx] = Duels(ctx.chain, ctx.start_soon, data_dir=ctx.config.data_dir)
        duels.subscribe(ctx.follower)
        duels.resume()
        ctx.start_soon(duels.run, name="duels")
    return _started[ctx]


__all__ = ["CHALLENGER", "DEFENDER", "DUEL_POLL", "DuelCase", "DuelMaterial", "DuelSource", "Duels", "Playing",
           "STATE_FILE", "SpecRoots", "build_player", "setup_of", "start_duels"]
