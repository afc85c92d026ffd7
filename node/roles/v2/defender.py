"""The defender: a seat's side of every game on the root this node revealed (docs/economics.md §8.2).

The follower hands it the game's events in block order. For each claim against a list this
seat covers it owes one answer before the claim's deadline:

    GameOpened (interval c)      -> the interval's steps list            postSteps  before stepsBy
    ClaimPicked, step j          -> step j's node list                   postNodes  before nodesBy
    ClaimPicked, node n          -> evidence for node n                  postEvidence before evidenceBy,
                                    then the evidence itself to the claim's referee over libp2p
    RefereeDrawn                 -> the evidence again, to the referee drawn (first level or appeal)
    StepGameOpened against it    -> the duel's moves on OneStepVerifier (`duels.Duels`, from this
                                    seat's node values: `duel_material`); no evidence is owed then

A claimant asks the seat for its output of a picked node (`node_output`, over
/gavel/node-output/2.0.0) to name the element a duel is about.

Lists come from the job's `TraceOracle` over this node's own checkpoints (`ctx.trained`),
through `protocol.claim_lists`. When a co-seat already posted the same list (same root) this
seat endorses it instead (no calldata). Answers are computed off the follower's task (a
recompute takes an interval's steps), one job at a time.

evidenceBy allows no recompute (§8.4), and the oracle keeps only the interval it recomputed
last: so the seat keeps, per step claim it answers with a node list, that step's node values
(`KeptStep`) and builds every node claim's evidence under it from them, without the job's
lock. They are dropped once no node claim can still need them: the step claim's pick window
closed with every node claim under it ended (a duel may open until 2Δ after a claim's evidenceBy
and needs the node's inputs and output; looked at as each node claim resolves), or the step claim
resolved.

What the seat did is read back from the chain before every move (`answerOf(claim, seat)`):
a restarted node, handed the same events again, repeats nothing and misses nothing whose
deadline has not passed (evidence is rebuilt, the same bytes, and sent again to the
claim's referee). The moves that landed are also written to ``defender.json`` in
the node's data directory, the record `gavel status` and an operator read.
"""
from __future__ import annotations

import functools
import heapq
import itertools
import json
import logging
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Awaitable, Callable, Mapping

import trio

from contracts.settlement_v2_games import (NODE, STEP, ClaimPicked, ClaimResolved, ClaimStatus, GameOpened,
                                           ListEndorsed, ListPosted)
from contracts.settlement_v2_referees import AppealStage, RefereeDrawn
from contracts.settlement_v2 import trace_root
from protocol import claim_lists
from protocol.claim_evidence import ClaimEvidence, build_evidence, evidence_hash
from protocol.listtree import list_root
from protocol.program import NodeSpec

from ...atomic_file import write_atomic
from ...errors import LocalError, PeerError
from ..chain import chain_failures, describe_chain_error

log = logging.getLogger(__name__)

ZERO = bytes(32)
ZERO_ADDRESS = "0x" + "00" * 20
RECORD_FILE = "defender.json"
SEND_RETRY_DELAY = 1.0   # a referee that does not answer is tried again after 1, 2, 4, 8, 8, ... s
SEND_RETRY_MAX = 8.0

# (referee account, evidence) -> delivered; raises the host's PeerError when it was not
EvidenceSender = Callable[[str, ClaimEvidence], Awaitable[None]]


@dataclass(frozen=True)
class Defended:
    """A claim this seat answers: its game's job, the interval, and the step (node claims) it is under."""

    job_id: bytes
    game_id: bytes
    interval: int
    step_index: int | None = None  # j, 1..k_c, of the picked step (step and node claims)
    node: int | None = None        # n, of the picked node (node claims)
    step_claim: bytes | None = None  # the step claim a node claim is under


class KeptStep:
    """One step of a run, as far as its node list and the evidence for any of its nodes need it (a
    `TraceOracle` of that step alone), taken from the oracle while it holds the step's interval.

    It holds every operator's output and every tensor an operator of the step reads, each once (a
    duel of the fourth level opens an element of a node's output, its trace reads the inputs): for
    a large model that is all the step's intermediate tensors (activations, their gradients, the
    optimizer's temporaries) and the new state, several times the model's state in host memory
    (tens of GB for billions of parameters). The
    defender holds one per open step claim it answered, so a flood of games costs one such step per
    picked step, never a replay's worth."""

    def __init__(self, oracle: Any, step: int) -> None:
        self.step = step
        self._program = oracle.program()
        self._outputs = [bytes(h) for h in oracle.node_outputs(step)]
        self._state_hashes = {s: dict(oracle.state_tensor_hashes(s)) for s in (step - 1, step)}
        self._values: dict[int, Any] = {}  # node m -> its output: every operator's, and what they read
        for n in range(self._program.size):
            spec = self._program.entry(n)
            if isinstance(spec, NodeSpec) and not spec.is_leaf:
                for m, value in zip(spec.inputs, oracle.node_inputs(step, n)):
                    self._values.setdefault(m, value)
                if n not in self._values:  # read by no operator of the step (a new state tensor, the loss)
                    self._values[n] = oracle.node_value(step, n)

    def _check(self, step: int) -> None:
        if step != self.step:
            raise LookupError(f"step {step} asked of the kept step {self.step}")

    def program(self) -> Any:
        return self._program

    def node_outputs(self, step: int) -> list[bytes]:
        self._check(step)
        return self._outputs

    def state_tensor_hashes(self, step: int) -> dict[str, bytes]:
        if step not in self._state_hashes:
            raise LookupError(f"the state after step {step} asked of the kept step {self.step}")
        return self._state_hashes[step]

    def node_inputs(self, step: int, node: int) -> list[Any]:
        self._check(step)
        return [self._values[m] for m in self._program.entry(node).inputs]

    def node_value(self, step: int, node: int) -> Any:
        """An operator node's output (what a duel of the fourth level opens an element of)."""
        self._check(step)
        return self._values[node]


class RecomputeQueue:
    """The step answers of one job, one at a time, earliest nodesBy first (ties in pick order). The
    contract queues a root's recomputes (busyUntil, §8.4): a game's first step pick is due after the
    picks queued before it; a later pick in the same game shares that game's nodesBy, and answered
    right after it costs no replay (the oracle still holds the interval). The job's lock alone would
    let trio wake the answers in any order. `join` when the pick is handed over (in event order), then
    wait for the event it returns; `leave` when done or cancelled."""

    def __init__(self) -> None:
        self._waiting: list[tuple[int, int, trio.Event]] = []  # (nodesBy, pick order, go)
        self._order = itertools.count()
        self._running: trio.Event | None = None

    def join(self, nodes_by: int) -> trio.Event:
        go = trio.Event()
        heapq.heappush(self._waiting, (nodes_by, next(self._order), go))
        self._start_next()
        return go

    def leave(self, go: trio.Event) -> None:
        if go is self._running:
            self._running = None
        else:
            self._waiting = [turn for turn in self._waiting if turn[2] is not go]
            heapq.heapify(self._waiting)
        self._start_next()

    def _start_next(self) -> None:
        if self._running is None and self._waiting:
            self._running = heapq.heappop(self._waiting)[2]
            self._running.set()


class Defender:
    """Answers the claims on this seat's revealed roots.

    `trained` is `ctx.trained` (job id -> `TrainedJob`: `.trace`, `await .oracle()`); `spawn`
    starts a background task (`RoleContext.start_soon` in a node); `send_evidence` hands a node
    claim's evidence to a referee's account (`evidence_protocol.evidence_sender(ctx)` in a node)."""

    def __init__(self, chain: Any, trained: Mapping[bytes, Any], data_dir: Path,
                 spawn: Callable[..., None], send_evidence: EvidenceSender | None = None) -> None:
        self.chain = chain  # node.roles.chain.ChainBinding
        self.trained = trained
        self.record_path = Path(data_dir) / RECORD_FILE
        self.spawn = spawn
        self.send_evidence = send_evidence
        self.evidence: dict[bytes, ClaimEvidence] = {}     # node claim -> the evidence this seat posted
        self.delivered: dict[bytes, set[str]] = {}          # node claim -> referees that took its evidence
        self.claims: dict[bytes, Defended] = {}            # claims against lists this seat covers (or will)
        self.posted: dict[bytes, set[bytes]] = {}           # claim -> list roots posted under it
        self.done: dict[str, dict] = self._load()           # claim hex -> the move that landed
        self.kept: dict[bytes, KeptStep] = {}               # step claim -> its step's node values
        self.unanswered: dict[bytes, set[bytes]] = {}      # step claim -> node claims under it not ended yet
        self._recompute: dict[bytes, RecomputeQueue] = {}  # job -> its step answers
        self._oracles: dict[bytes, Any] = {}
        self._job_locks: dict[bytes, trio.Lock] = {}

    # -- the record -------------------------------------------------------------------

    def _load(self) -> dict[str, dict]:
        try:
            return json.loads(self.record_path.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as error:  # a torn file: the chain still says what we answered
            log.warning("defender: ignoring unreadable %s: %s", self.record_path, error)
            return {}

    def _record(self, claim_id: bytes, move: str, value: bytes) -> None:
        self.done[claim_id.hex()] = {"move": move, "value": value.hex()}
        write_atomic(self.record_path, json.dumps(self.done, indent=1, sort_keys=True))

    # -- events -------------------------------------------------------------------------

    def subscribe(self, follower: Any) -> None:
        follower.subscribe(GameOpened, self.on_game_opened)
        follower.subscribe(ClaimPicked, self.on_claim_picked)
        follower.subscribe(ListPosted, self.on_list_posted)
        follower.subscribe(ListEndorsed, self.on_list_posted)
        follower.subscribe(RefereeDrawn, self.on_referee_drawn)
        follower.subscribe(ClaimResolved, self.on_claim_resolved)

    async def on_game_opened(self, logged: Any) -> None:
        e: GameOpened = logged.event
        seat = self.trained.get(e.job_id)
        if seat is None or trace_root(list(seat.trace)) != e.trace_root:  # not a root this node revealed
            await trio.lowlevel.checkpoint()
            return
        self.claims[e.game_id] = Defended(e.job_id, e.game_id, e.interval)
        self.spawn(self.answer_interval, e.game_id, e.steps_by, name="defender: postSteps")

    async def on_list_posted(self, logged: Any) -> None:
        self.posted.setdefault(logged.event.claim_id, set()).add(logged.event.list_root)
        await trio.lowlevel.checkpoint()

    async def on_claim_picked(self, logged: Any) -> None:
        e: ClaimPicked = logged.event
        parent = self.claims.get(e.parent)
        if parent is None:
            await trio.lowlevel.checkpoint()
            return
        # Only a pick on the list this seat covers is its to answer (a co-seat's other list is not).
        covered = await self.chain.run(self.chain.settlement.answer_of, e.parent, self.chain.account)
        if covered != e.list_root:
            return
        if e.level == STEP:
            self.claims[e.claim_id] = Defended(parent.job_id, parent.game_id, parent.interval, e.index)
            turn = self._recompute.setdefault(parent.job_id, RecomputeQueue()).join(e.answer_by)
            self.spawn(self.answer_step, e.claim_id, e.answer_by, turn, name="defender: postNodes")
        elif e.level == NODE and parent.step_index is not None:
            self.claims[e.claim_id] = Defended(parent.job_id, parent.game_id, parent.interval, parent.step_index,
                                               e.index, e.parent)
            self.unanswered.setdefault(e.parent, set()).add(e.claim_id)
            self.spawn(self.answer_node, e.claim_id, e.answer_by, name="defender: postEvidence")

    async def on_referee_drawn(self, logged: Any) -> None:
        """A referee drawn for a claim this seat gave evidence for needs it too (it has no other source)."""
        e: RefereeDrawn = logged.event
        if e.claim_id in self.evidence and e.referee not in self.delivered.get(e.claim_id, ()):
            self.spawn(self.deliver, e.claim_id, e.referee, name="defender: evidence to a drawn referee")
        await trio.lowlevel.checkpoint()

    async def on_claim_resolved(self, logged: Any) -> None:
        """A resolved step claim takes no more node picks: its kept values go (a game ends after its
        claims). A resolved node claim needs them no more: a look at whether its step's pick window closed."""
        claim_id = logged.event.claim_id
        if claim_id in self.kept:
            self._forget(claim_id)
        elif claim_id in self.claims and self.claims[claim_id].step_claim is not None:
            step_claim = self.claims[claim_id].step_claim
            self.unanswered.get(step_claim, set()).discard(claim_id)
            await self._forget_when_unneeded(step_claim)
        await trio.lowlevel.checkpoint()

    # -- answers --------------------------------------------------------------------------

    async def answer_interval(self, game_id: bytes, steps_by: int) -> None:
        """postSteps (or endorse) the interval's steps list."""
        claim = self.claims[game_id]
        if not await self._owed(game_id, steps_by):
            return
        steps = await self._compute(claim.job_id, claim_lists.steps_list, claim.interval)
        trace = list(self.trained[claim.job_id].trace)
        proof_from, proof_to = claim_lists.steps_proofs(trace, claim.interval)
        await self._answer(game_id, steps, lambda s: s.post_steps(game_id, steps, proof_from.siblings,
                                                                  proof_to.siblings), "postSteps")

    async def answer_step(self, claim_id: bytes, nodes_by: int, turn: trio.Event) -> None:
        """postNodes (or endorse) the picked step's node list, recomputed from the interval's checkpoint
        and kept for the evidence of the node picks to come; when its `turn` in the job's queue comes."""
        claim = self.claims[claim_id]
        try:
            await turn.wait()
            if not await self._owed(claim_id, nodes_by):
                return
            steps = await self._compute(claim.job_id, claim_lists.steps_list, claim.interval)
            kept = await self._kept_of(claim_id)
            nodes = claim_lists.node_list(kept, kept.step)
            proof = claim_lists.node_list_proof(steps, claim.step_index)
            await self._answer(claim_id, nodes, lambda s: s.post_nodes(claim_id, nodes, proof.siblings), "postNodes")
        finally:
            self._recompute[claim.job_id].leave(turn)

    async def answer_node(self, claim_id: bytes, evidence_by: int) -> None:
        """postEvidence for the picked node, then the evidence to the claim's referee; none once a duel
        plays the claim on chain (no evidence is owed then, and no referee moves on it).

        A restarted seat that already posted rebuilds the same evidence (the operators are exact,
        so its hash is the posted one) and sends it again: the referee may never have had it. The
        step's kept values stay until the claim ends: a duel may ask them until evidenceBy + 2Δ."""
        claim = self.claims[claim_id]
        s = self.chain.settlement
        if (await self.chain.run(s.step_claim, claim_id)).games:
            log.info("defender: claim %s is played on chain: no evidence owed", claim_id.hex()[:12])
            return
        evidence = await self._evidence_of(claim_id, claim)
        digest = evidence_hash(evidence)
        posted = await self.chain.run(s.answer_of, claim_id, self.chain.account)
        if posted == ZERO:
            if not await self._owed(claim_id, evidence_by):
                return
            try:
                await self.chain.run(s.post_evidence, claim_id, digest)
            except chain_failures() as error:
                log.warning("defender: postEvidence on claim %s refused: %s", claim_id.hex()[:12],
                            describe_chain_error(error))
                return
            self._record(claim_id, "postEvidence", digest)
            log.info("defender: postEvidence on claim %s (evidence %s)", claim_id.hex()[:12], digest.hex()[:12])
        elif posted != digest:  # not this node's evidence: a referee would refuse ours
            log.warning("defender: claim %s holds evidence %s of ours, we rebuilt %s", claim_id.hex()[:12],
                        posted.hex()[:12], digest.hex()[:12])
            return
        self.evidence[claim_id] = evidence
        await self.deliver(claim_id, await self._referee_of(claim_id, claim))

    async def deliver(self, claim_id: bytes, referee: str | None) -> None:
        """Send the claim's evidence to `referee` (None: nobody holds the claim yet, a draw will
        name one), retried while the referee may still rule on it; a failure is logged, never raised.

        The referee rules on what it holds Δ before its deadline (`referee.rule_overdue`), and an
        honest one that holds nothing then rules the defenders wrong: on a congested network a few
        quick retries gave up tens of seconds before that, and the ruling was lost."""
        if referee is None or self.send_evidence is None or referee in self.delivered.get(claim_id, ()):
            await trio.lowlevel.checkpoint()
            return
        for attempt in itertools.count(1):
            try:
                await self.send_evidence(referee, self.evidence[claim_id])
            except (PeerError, LocalError) as error:
                log.info("defender: evidence of claim %s to referee %s: %s", claim_id.hex()[:12], referee, error)
            else:
                self.delivered.setdefault(claim_id, set()).add(referee)
                log.info("defender: evidence of claim %s delivered to referee %s", claim_id.hex()[:12], referee)
                return
            if not await self._referee_may_rule_on(claim_id, referee):
                break
            await trio.sleep(min(SEND_RETRY_DELAY * 2 ** (attempt - 1), SEND_RETRY_MAX))
        log.warning("defender: referee %s took no evidence of claim %s in %d attempts", referee,
                    claim_id.hex()[:12], attempt)

    async def _referee_may_rule_on(self, claim_id: bytes, referee: str) -> bool:
        """Whether evidence sent now may still be ruled on by `referee`: the claim is open, it holds
        it (drawn, on appeal, or the refereeing client before any ruling), and its deadline less Δ is ahead."""
        s = self.chain.settlement
        try:
            claim = await self.chain.run(s.claim, claim_id)
            ruling = await self.chain.run(s.ruling, claim_id)
            now, margin = await self.chain.run(lambda: (self.chain.chain.now(), s.chain_settings().margin))
        except chain_failures() as error:
            log.info("defender: claim %s: %s", claim_id.hex()[:12], describe_chain_error(error))
            return False
        if claim.status != ClaimStatus.OPEN:
            return False
        if ruling.appeal == AppealStage.OPEN:
            deadline = ruling.appeal_rule_by if ruling.appeal_referee == referee else 0
        else:
            held = ruling.ruler == ZERO_ADDRESS and ruling.referee in (referee, ZERO_ADDRESS)
            deadline = claim.rule_by if held else 0
        return now < deadline - margin

    async def _referee_of(self, claim_id: bytes, claim: Defended) -> str | None:
        """Who holds the claim now: its drawn (appeal) referee, else the job's client when it referees."""
        s = self.chain.settlement
        ruling = await self.chain.run(s.ruling, claim_id)
        for referee in (ruling.appeal_referee, ruling.referee):
            if referee != ZERO_ADDRESS:
                return referee
        job = await self.chain.run(s.job, claim.job_id)
        return job.client if job.client_referees else None

    async def _evidence_of(self, claim_id: bytes, claim: Defended) -> ClaimEvidence:
        """From the step's kept values, off the job's lock: another game's recompute may hold it."""
        if claim_id not in self.evidence:
            kept = await self._kept_of(claim.step_claim)
            build = functools.partial(build_evidence, kept, claim_id=claim_id, step=kept.step, node=claim.node,
                                      node_list=claim_lists.node_list(kept, kept.step))
            self.evidence[claim_id] = await trio.to_thread.run_sync(build)
        return self.evidence[claim_id]

    async def node_output(self, claim_id: bytes) -> Any:
        """Our output of the node picked in `claim_id`, an open node claim on a node list this seat
        covers, read from the chain (a claimant may ask before the follower handed the pick); LookupError
        for any other claim (`node_output_protocol`)."""
        s = self.chain.settlement
        info = await self.chain.run(s.claim, claim_id)
        if info.level != NODE or info.status != ClaimStatus.OPEN or info.parent not in self.claims:
            raise LookupError(f"claim {claim_id.hex()[:12]} is no open node claim under a step this seat answered")
        if await self.chain.run(s.answer_of, info.parent, self.chain.account) != info.list_root:
            raise LookupError(f"claim {claim_id.hex()[:12]} picked a node list this seat does not cover")
        kept = await self._kept_of(info.parent)
        return kept.node_value(kept.step, info.index)

    async def duel_material(self, case: Any) -> Any:
        """Our run's inputs and output of a duel's node (`duels.DuelSource`): from the step's kept values,
        or, after a restart, recomputed from the seat's own run."""
        from .duels import DuelMaterial

        if case.step_claim in self.kept:
            kept = self.kept[case.step_claim]
        else:
            oracle = await self._oracle(case.job_id)
            step = oracle.schedule.checkpoint_step(case.interval) + case.step_index
            kept = await self._compute(case.job_id, KeptStep, step)
        oracle = await self._oracle(case.job_id)
        return DuelMaterial(oracle.training.graph, tuple(kept.node_inputs(kept.step, case.node)),
                            kept.node_value(kept.step, case.node))

    async def _kept_of(self, step_claim: bytes) -> KeptStep:
        """The step claim's kept values; recomputed only where the seat did not answer the step claim
        itself since it started (a restart)."""
        if step_claim not in self.kept:
            claim = self.claims[step_claim]
            oracle = await self._oracle(claim.job_id)
            step = oracle.schedule.checkpoint_step(claim.interval) + claim.step_index
            self.kept[step_claim] = await self._compute(claim.job_id, KeptStep, step)
        return self.kept[step_claim]

    async def _forget_when_unneeded(self, step_claim: bytes) -> None:
        """Drop the step's kept values once its node pick window closed and every node claim under
        it was answered (until then another pick may come)."""
        if step_claim not in self.kept or self.unanswered.get(step_claim):
            await trio.lowlevel.checkpoint()
            return
        pick_until = (await self.chain.run(self.chain.settlement.claim, step_claim)).pick_until
        if await self.chain.run(self.chain.chain.now) >= pick_until:
            self._forget(step_claim)

    def _forget(self, step_claim: bytes) -> None:
        self.kept.pop(step_claim, None)
        self.unanswered.pop(step_claim, None)

    # -- plumbing ---------------------------------------------------------------------------

    async def _owed(self, claim_id: bytes, deadline: int) -> bool:
        """True while this seat has not answered the claim and its deadline has not passed."""
        s, chain = self.chain.settlement, self.chain.chain
        answered = await self.chain.run(s.answer_of, claim_id, self.chain.account)
        if answered != ZERO:
            return False
        now = await self.chain.run(chain.now)
        if now >= deadline:
            log.warning("defender: claim %s passed its deadline %d unanswered", claim_id.hex()[:12], deadline)
            return False
        return True

    async def _answer(self, claim_id: bytes, entries: list[bytes], post: Callable[[Any], Any], move: str) -> None:
        root = list_root(entries)
        s = self.chain.settlement
        endorse = root in self.posted.get(claim_id, ())
        try:
            if endorse:
                await self.chain.run(s.endorse, claim_id, root)
            else:
                await self.chain.run(post, s)
        except chain_failures() as error:
            log.warning("defender: %s on claim %s refused: %s", "endorse" if endorse else move, claim_id.hex()[:12],
                        describe_chain_error(error))
            return
        self._record(claim_id, "endorse" if endorse else move, root)
        log.info("defender: %s on claim %s (list %s)", "endorsed" if endorse else move, claim_id.hex()[:12],
                 root.hex()[:12])

    async def _oracle(self, job_id: bytes) -> Any:
        if job_id not in self._oracles:
            self._oracles[job_id] = await self.trained[job_id].oracle()
        return self._oracles[job_id]

    async def _compute(self, job_id: bytes, fn: Callable[..., Any], *args: Any) -> Any:
        """fn(oracle, *args) off the event loop; one computation per job at a time (the oracle keeps
        the interval it last recomputed, so a step's nodes after its interval's list cost no replay)."""
        oracle = await self._oracle(job_id)
        async with self._job_locks.setdefault(job_id, trio.Lock()):
            return await trio.to_thread.run_sync(fn, oracle, *args)


_started: "weakref.WeakKeyDictionary[Any, Defender]" = weakref.WeakKeyDictionary()


def start_defender(ctx: Any) -> Defender:
    """The node's one defender (a role context's), answering for the seats in ``ctx.trained``, handing
    evidence to referees and its node outputs to claimants over libp2p, and playing the defender's
    side of the node's duels; the provider role calls this, the first call starts it."""
    from .duels import DEFENDER, start_duels
    from .evidence_protocol import evidence_sender, serve_evidence_of
    from .node_output_protocol import serve_node_outputs

    if ctx not in _started:
        defender = _started[ctx] = Defender(ctx.chain, ctx.trained, ctx.config.data_dir, ctx.start_soon,
                                            evidence_sender(ctx))
        defender.subscribe(ctx.follower)
        serve_node_outputs(ctx.host, defender.node_output)
        serve_evidence_of(ctx.host, defender.evidence.get)  # a referee the pushes did not reach asks
        start_duels(ctx).serve(DEFENDER, defender.duel_material)
    return _started[ctx]


__all__ = ["Defended", "Defender", "EvidenceSender", "KeptStep", "RECORD_FILE", "RecomputeQueue", "start_defender"]
