"""The claimant's side of the fourth level: duels opened on the node claims this node holds
(docs/onchain-step.md, "The settlement's side"; the auditor's part).

When the auditor's pick of node n lands (a claim of its own, or a join of one) on a job whose terms
carry an elementSpecRoot, and n's operator has an element program for its attributes
(`protocol.element_specs.node_element_spec`), the claimant duels every standing seat covering the
node list (`openStepGame`, B_node of its stake each): the first duel before the claim's evidenceBy
and before any ruling, the others until 2Δ after evidenceBy, as GavelRefereesV2 allows. The setup
names the first element where its own output of n (its replay of the interval) and the defenders'
differ: their tensor is asked of a covering seat (`node_output_protocol`) and taken only when it
hashes to the list's entry n. A claim whose node no program covers, or whose seats serve no output,
stays on the referee path (evidence, a ruling, an appeal): an element named blind loses the duel
when the two outputs agree there, and a seat that withholds its output gains nothing by it, since
the referee recomputes the node from the inputs the seat must post.

What it set out to do is written to ``challenger.json`` before it starts (`duty_state`): a restarted
node opens the duels it did not open yet, while the window lasts (its node list is read again from
its ``ListPosted``). The duels are then `duels.Duels`', for which this module is the
challenger's `DuelSource`: its replay's inputs and output of the node.
"""
from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Awaitable, Callable

import trio

from contracts.settlement_v2 import ForfeitReason
from contracts.settlement_v2_games import ClaimStatus, ListPosted
from protocol.element_specs import duel_proofs, duel_setup, element_spec_leaves, node_element_spec
from protocol.step_game import first_difference
from repops_cupy.hashing import hash_tensor

from ...errors import LocalError, PeerError
from ..chain import chain_failures, describe_chain_error
from .duels import CHALLENGER, DuelCase, DuelMaterial, Duels
from .duty_state import DutyState
from .node_output_protocol import NodeOutputSource

log = logging.getLogger(__name__)

STATE_FILE = "challenger.json"
ZERO = bytes(32)

# (job, root, c, step, n) -> (node n's inputs, its output) in this node's replay of interval c
NodeValues = Callable[[bytes, bytes, int, int, int], Awaitable[tuple[list, Any]]]


@dataclass(frozen=True)
class Intent:
    """A node claim this node holds and means to duel on: where its node is, and its list's block."""

    claim_id: str
    job_id: str
    trace_root: str
    interval: int
    step: int
    node: int
    list_block: int  # of the ListPosted of the node list it picked in

    def key(self) -> bytes:
        return bytes.fromhex(self.claim_id)


class Challenger:
    """Opens duels on the node claims this node holds. `training_of(job)` gives the job's training
    program, `node_values` its replay's values of a node, `output_of` a seat's output over the network;
    `afford(job, bond, need)` and `send(move, claim, fn, *args)` are the auditor's own (free stake read
    from the chain; a transaction logged and counted)."""

    def __init__(self, chain: Any, duels: Duels, training_of: Callable[[bytes], Awaitable[Any]],
                 node_values: NodeValues, output_of: NodeOutputSource, *,
                 afford: Callable[[bytes, str, int], Awaitable[bool]], send: Callable[..., Awaitable[bool]],
                 data_dir: Path | None = None) -> None:
        self.chain = chain
        self.duels = duels
        self.training_of = training_of
        self.node_values = node_values
        self.output_of = output_of
        self.afford, self.send = afford, send
        self.intents: dict[bytes, Intent] = {}
        self._leaves: dict[bytes, list[bytes]] = {}  # job -> its element spec leaves (openStepGame's proof)
        self.state = DutyState(data_dir, STATE_FILE)
        self.state.restore(lambda state: self.intents.update(
            {bytes.fromhex(c): Intent(**record) for c, record in state["intents"].items()}))
        duels.serve(CHALLENGER, self.material)

    async def _save(self) -> None:
        await self.state.save(lambda: {"intents": {i.claim_id: asdict(i) for i in self.intents.values()}})

    def resume(self, spawn: Callable[..., None]) -> None:
        """Open the duels a previous run set out to open and did not."""
        for intent in list(self.intents.values()):
            spawn(self._resume, intent, name=f"challenger: duels on {intent.claim_id[:12]}")

    async def _resume(self, intent: Intent) -> None:
        found = [x for x in await self.chain.run(self.chain.settlement.events, intent.list_block, intent.list_block)
                 if isinstance(x.event, ListPosted)]
        claim = await self.chain.run(self.chain.settlement.claim, intent.key())
        listed = next((x for x in found if (x.event.claim_id, x.event.list_root) == (claim.parent, claim.list_root)),
                      None)
        if listed is None:
            log.warning("challenger: claim %s: its node list is not at block %d", intent.claim_id[:12],
                        intent.list_block)
            await self._done(intent)
            return
        await self._open_duels(intent, listed)

    # -- opening ----------------------------------------------------------------------

    async def claimed(self, claim_id: bytes, job_id: bytes, root: bytes, c: int, step: int, n: int,
                      listed: Any) -> None:
        """Our pick of node n under the node list `listed` (its ListPosted) landed: duel its seats."""
        if await self.duels.spec_roots.of(job_id) == ZERO:
            return  # the terms offer no fourth level: the referee rules
        intent = Intent(claim_id.hex(), job_id.hex(), root.hex(), c, step, n, listed.block_number)
        if claim_id not in self.intents:
            self.intents[claim_id] = intent
            await self._save()
        await self._open_duels(intent, listed)

    async def _open_duels(self, intent: Intent, listed: Any) -> None:
        try:
            await self._open(intent, listed)
        except chain_failures() + (LocalError, PeerError) as error:
            log.warning("challenger: claim %s: no duel: %s", intent.claim_id[:12], describe_chain_error(error))
        await self._done(intent)

    async def _done(self, intent: Intent) -> None:
        if self.intents.pop(intent.key(), None) is not None:
            await self._save()

    async def _open(self, intent: Intent, listed: Any) -> None:
        s, me = self.chain.settlement, self.chain.account
        claim_id, job_id, n = intent.key(), bytes.fromhex(intent.job_id), intent.node
        claim = await self.chain.run(s.claim, claim_id)
        if claim.status != ClaimStatus.OPEN:
            return
        graph = getattr(await self.training_of(job_id), "graph", None)
        node = None if graph is None else await trio.to_thread.run_sync(node_element_spec, graph, n)
        if node is None:
            log.info("challenger: claim %s: node %d has no element program: the referee rules it", intent.claim_id[:12],
                     n)
            return
        posted = list(await self.chain.run(s.posted_list, listed))
        inputs, ours = await self.node_values(job_id, bytes.fromhex(intent.trace_root), intent.interval, intent.step, n)
        if [hash_tensor(x) for x in inputs] != [posted[m] for m in node.input_nodes]:
            log.warning("challenger: claim %s: our inputs of node %d are not the list's: no duel", intent.claim_id[:12], n)
            return
        defenders = [seat for seat in await self.chain.run(s.seats, job_id)
                     if await self.chain.run(s.answer_of, claim.parent, seat) == claim.list_root
                     and (await self.chain.run(s.seat, job_id, seat)).forfeit == ForfeitReason.NONE
                     and (claim_id, me, seat) not in self.duels.opened]
        theirs = await self._their_output(claim_id, defenders, posted[n])
        if theirs is None:
            return
        element = first_difference(ours, theirs)
        if element is None:
            log.warning("challenger: claim %s: the seats' output of node %d is ours: nothing to duel on",
                        intent.claim_id[:12], n)
            return
        setup = duel_setup(node, element, posted, hash_tensor(ours))
        proofs = duel_proofs(node, posted, await self._spec_leaves(job_id, graph))
        margin = (await self.chain.run(s.chain_settings)).margin
        bond = await self.chain.run(s.step_game_bond, job_id, setup.spec.length)
        for seat in defenders:
            duels = await self.chain.run(s.step_claim, claim_id)
            closes = claim.answer_by + (2 * margin if duels.games else 0)
            if await self.chain.run(self.chain.chain.now) >= closes or not await self.afford(job_id, "duel", bond):
                log.warning("challenger: claim %s: no duel against %s (window closed at %d, or no bond)",
                            intent.claim_id[:12], seat, closes)
                return
            if await self.send("openStepGame", claim_id, s.open_step_game, claim_id, setup, proofs, seat):
                log.info("challenger: claim %s: duel against %s on element %d of node %d", intent.claim_id[:12], seat,
                         element, n)

    async def _their_output(self, claim_id: bytes, defenders: list[str], entry: bytes) -> Any:
        """The defenders' output tensor (entry n of their list), from the first of them that serves it."""
        for seat in defenders:
            try:
                return await self.output_of(seat, claim_id, entry)
            except (PeerError, LocalError) as error:
                log.warning("challenger: claim %s: %s served no output: %s", claim_id.hex()[:12], seat, error)
        if defenders:
            log.warning("challenger: claim %s: no seat served its output: the referee rules it", claim_id.hex()[:12])
        return None

    async def _spec_leaves(self, job_id: bytes, graph: Any) -> list[bytes]:
        if job_id not in self._leaves:
            self._leaves[job_id] = await trio.to_thread.run_sync(element_spec_leaves, graph)
        return self._leaves[job_id]

    # -- the challenger's side of a duel ----------------------------------------------

    async def material(self, case: DuelCase) -> DuelMaterial:
        """Our replay's inputs and output of the duel's node (`duels.DuelSource`)."""
        from ...training_oracle import schedule_of

        training = await self.training_of(case.job_id)
        step = schedule_of(training).checkpoint_step(case.interval) + case.step_index
        inputs, output = await self.node_values(case.job_id, case.trace_root, case.interval, step, case.node)
        return DuelMaterial(training.graph, tuple(inputs), output)


__all__ = ["Challenger", "Intent", "NodeValues", "STATE_FILE"]
