"""The referee's duty: rule the node claims this node holds, from the defenders' evidence
(docs/economics.md §8.2, §9).

Which claims: those of a job whose terms say the client referees, when this node is the
client (the contract refuses it with `RefereeIsParty` once it authored a move of the game),
and those a `RefereeDrawn` names this node for, at the first level or on appeal.

How: the defenders send their evidence over /gavel/evidence/2.0.0 (`evidence_protocol`).
Evidence is taken only for an open node claim this node holds, and only when its keccak is
the `evidenceHash` a seat posted for that claim (read from the chain: `answerOf`); anything
else is refused with the reason and never judged. The claim's lists come from their events
(`SettlementV2.posted_list` of the `ListPosted` events: the picked steps list and node
list); the job's program and batches from the job's own files (`training_of`: the client's
job directory, or the bundle a drawn referee fetched from a seat, checked against the spec).
`claim_evidence.judge` rules; the `Transcript` (everything a third party needs to recompute
the ruling) is written in the node's data directory under ``transcripts/`` and its keccak
goes on chain with `rule` (or `ruleAppeal`), before the deadline.

Several seats may post evidence for one claim (each covering the list). One that holds is
enough to rule the defenders right; the referee rules them wrong only once every evidence
posted on chain has arrived and none held, so a co-seat's bad evidence cannot sink a list.
Evidence that was posted and never sent cannot stall the referee into losing its bond: Δ
before the deadline it rules on what it holds (`rule_overdue`, on its own timer), and with
nothing that holds, the defenders wrong (the transcript then carries no evidence). Before that
it asks each seat that posted evidence it does not have for it (`pull`, /gavel/evidence-of/2.0.0),
again until the ruling is due: on a congested network a push can fail for the whole window, and an
appeal that overturns a ruling made on nothing costs an honest referee its bond. A node that runs the
job (`own_runs`: the auditor's runs, or the client's) also builds the evidence itself
(`claim_evidence.build_evidence`, deterministic): when its keccak is a hash a seat posted, it is that
seat's evidence byte for byte, taken as its push would have been, and the ruling and its transcript are
the ones the push would have given. Evidence for a list its run did not compute is never built.

The fourth level comes first (docs/onchain-step.md): on a job whose terms carry an
elementSpecRoot, a claim on a node whose operator has an element program may be played on
OneStepVerifier until its evidenceBy, and then no referee moves on it. So the referee rules such a
claim only when due (Δ before its deadline), never on the evidence's arrival, and not at all once
a duel opened on it: the claimants' duels rule it, nobody has to be trusted.

Kept across a restart (the follower hands no old event again): the claims held and the evidence
taken (under ``referee/``), and the jobs this node referees as their client (``referee.json``,
`duty_state`, until the job settles), so evidence posted after the restart is still held.
"""
from __future__ import annotations

import functools
import itertools
import logging
import shutil
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Awaitable, Callable

import trio

from contracts.settlement_v2 import JobOpened, JobSettled
from contracts.settlement_v2_games import NODE, ClaimStatus, EvidencePosted, ListPosted
from contracts.settlement_v2_referees import AppealStage, RefereeDrawn
from protocol import LocalProtocolError, RemoteProtocolError
from protocol.claim_evidence import (
    ClaimEvidence, ClaimRef, Judgement, Transcript, build_evidence, evidence_hash, judge, transcript_hash,
)
from protocol.step_programs import COVERED

from ...atomic_file import write_atomic
from ...errors import LocalError, PeerError
from ...streams import RequestRefused
from ..chain import chain_failures, describe_chain_error
from .duels import SpecRoots
from .duty_state import DutyState
from .replays import OwnRuns

log = logging.getLogger(__name__)

ZERO = bytes(32)
ZERO_ADDRESS = "0x" + "00" * 20
TRANSCRIPT_DIR = "transcripts"
HELD_DIR = "referee"  # the claims held and the evidence taken, kept across a restart
STATE_FILE = "referee.json"  # the jobs this node referees as their client
REFEREE_POLL = 5.0
PULL_DELAY = 2.0  # the defender's push usually comes first; then asked after 2, 4, 8, 8, ... s
PULL_MAX = 8.0
NO_EVIDENCE = Judgement(False, "no evidence that holds arrived before the ruling was due", b"")
RULE, RULE_APPEAL = "rule", "ruleAppeal"

TrainingSource = Callable[[bytes], Awaitable[Any]]  # job id -> its TrainingProgram
EvidenceFetch = Callable[[str, bytes], Awaitable[ClaimEvidence]]  # (seat, claim) -> the evidence it posted


@dataclass(frozen=True)
class HeldClaim:
    """A node claim as the chain holds it, with everything above it that the ruling needs."""

    claim_id: bytes
    job_id: bytes
    trace_root: bytes
    interval: int
    game_id: bytes
    step_claim: bytes
    steps_root: bytes
    step_index: int  # j, of the picked step in its steps list
    nodes_root: bytes
    node: int


@dataclass(frozen=True)
class Ruled:
    """A ruling this node sent: which move, the judgement and the transcript's hash and file."""

    move: str
    judgement: Judgement
    transcript_hash: bytes
    path: Path


class RefereeDuty:
    """Takes evidence for the claims this node holds, judges it and rules on chain.

    `training_of(job_id)` gives the job's training program (its program and batches);
    `spawn` starts a background task (`RoleContext.start_soon` in a node); `behaviour` an
    `adversaries.RefereeBehaviour` (tests and testnets: a colluding or stalling client); `fetch`
    asks a seat for the evidence it posted, when its push has not arrived (`pull`); `own_runs` this
    node's runs of the jobs, from which it builds the evidence a seat posted and did not send (`build`)."""

    def __init__(self, chain: Any, data_dir: Path, spawn: Callable[..., None], training_of: TrainingSource,
                 behaviour: Any = None, fetch: EvidenceFetch | None = None, own_runs: OwnRuns | None = None) -> None:
        self.chain = chain  # node.roles.chain.ChainBinding
        self.fetch = fetch
        self.own_runs = own_runs
        self.built: dict[bytes, ClaimEvidence | None] = {}      # node claim -> our run's evidence (None: not yet, none)
        self._pulling: set[bytes] = set()                       # node claims a pull task is running for
        self.transcripts = Path(data_dir) / TRANSCRIPT_DIR
        self.held_dir = Path(data_dir) / HELD_DIR
        self.spawn = spawn
        self.training_of = training_of
        self.behaviour = behaviour
        self.lists: dict[tuple[bytes, bytes], Any] = {}        # (claim, list root) -> its ListPosted (LoggedEvent)
        self.evidence: dict[bytes, dict[bytes, ClaimEvidence]] = {}  # node claim -> evidence hash -> evidence
        self.judged: dict[tuple[bytes, bytes], Judgement] = {}  # (claim, evidence hash) -> its judgement
        self.ruled: dict[tuple[bytes, str], Ruled] = {}         # (claim, move) -> the ruling sent
        self.refereed_jobs: set[bytes] = set()                  # jobs whose terms make this node (the client) rule
        self.state = DutyState(data_dir, STATE_FILE)
        self.state.restore(lambda state: self.refereed_jobs.update(bytes.fromhex(j) for j in state["jobs"]))
        self.holding: set[bytes] = set()                        # node claims this node may hold: ruled when due
        self._locks: dict[bytes, trio.Lock] = {}
        self._programs: dict[bytes, Any] = {}
        self.spec_roots = SpecRoots(chain)  # a job's elementSpecRoot: whether its claims may go on chain
        self._load()

    # -- what is kept across a restart (the follower does not hand old events again) -------

    def _load(self) -> None:
        """The claims held and the evidence taken before a restart; an unreadable file is skipped."""
        for claim_dir in sorted(self.held_dir.glob("*")) if self.held_dir.exists() else []:
            try:
                claim_id = bytes.fromhex(claim_dir.name)
                self.holding.add(claim_id)
                for path in claim_dir.glob("*.evidence"):
                    evidence = ClaimEvidence.decode(path.read_bytes())
                    if evidence.claim_id == claim_id:
                        self.evidence.setdefault(claim_id, {})[evidence_hash(evidence)] = evidence
            except (ValueError, OSError, RemoteProtocolError) as error:
                log.warning("referee: skipping %s: %s", claim_dir, error)

    def _hold(self, claim_id: bytes, evidence: ClaimEvidence | None = None) -> None:
        self.holding.add(claim_id)
        directory = self.held_dir / claim_id.hex()
        directory.mkdir(parents=True, exist_ok=True)
        if evidence is not None:
            write_atomic(directory / f"{evidence_hash(evidence).hex()}.evidence", evidence.encode())

    def subscribe(self, follower: Any) -> None:
        follower.subscribe(JobOpened, self.on_job_opened)
        follower.subscribe(JobSettled, self.on_job_settled)
        follower.subscribe(ListPosted, self.on_list_posted)
        follower.subscribe(EvidencePosted, self.on_evidence_posted)
        follower.subscribe(RefereeDrawn, self.on_referee_drawn)
        self.spec_roots.subscribe(follower)

    def serve(self, host: Any) -> None:
        """Take evidence on `host` (/gavel/evidence/2.0.0)."""
        from .evidence_protocol import serve_evidence

        serve_evidence(host, self.accept)

    # -- what the chain told ----------------------------------------------------------

    async def on_list_posted(self, logged: Any) -> None:
        self.lists[(logged.event.claim_id, logged.event.list_root)] = logged
        await trio.lowlevel.checkpoint()

    async def on_job_opened(self, logged: Any) -> None:
        e: JobOpened = logged.event
        if e.client == self.chain.account and e.terms.client_referees:
            self.refereed_jobs.add(e.job_id)
            await self._save()  # before the follower moves past the job's opening
        await trio.lowlevel.checkpoint()

    async def on_job_settled(self, logged: Any) -> None:
        """A final job has no claim left to rule: forgotten."""
        if logged.event.job_id in self.refereed_jobs:
            self.refereed_jobs.discard(logged.event.job_id)
            await self._save()
        if self.own_runs is not None:
            self.own_runs.forget(logged.event.job_id)
        await trio.lowlevel.checkpoint()

    async def _save(self) -> None:
        await self.state.save(lambda: {"jobs": sorted(j.hex() for j in self.refereed_jobs)})

    async def on_evidence_posted(self, logged: Any) -> None:
        """Evidence posted under a job this node referees as its client: the claim is held until ruled."""
        claim_id = logged.event.claim_id
        if self.refereed_jobs and claim_id not in self.holding:
            held = await self._held(claim_id)
            if held is not None and held.job_id in self.refereed_jobs:
                await trio.to_thread.run_sync(self._hold, claim_id)
        if claim_id in self.holding:
            self._start_pull(claim_id)
            await self._offer_built(claim_id)  # built before this seat posted its hash
        await trio.lowlevel.checkpoint()

    async def on_referee_drawn(self, logged: Any) -> None:
        """Drawn for a claim: held until ruled; evidence that came before the draw is ruled on now."""
        e: RefereeDrawn = logged.event
        if e.referee == self.chain.account:
            await trio.to_thread.run_sync(self._hold, e.claim_id)
            if e.claim_id in self.evidence:
                self.spawn(self.rule_claim, e.claim_id, name=f"referee: claim {e.claim_id.hex()[:12]}")
            self._start_pull(e.claim_id)
        await trio.lowlevel.checkpoint()

    # -- evidence ---------------------------------------------------------------------

    async def accept(self, peer: Any, evidence: ClaimEvidence) -> None:
        """A defender's evidence: kept when this node holds the claim and a seat posted its hash."""
        claim_id = evidence.claim_id
        try:
            held = await self._held(claim_id)
            if held is None:
                raise RequestRefused(f"claim {claim_id.hex()} is not an open node claim")
            if await self._duty(held) is None:
                raise RequestRefused(f"this node does not referee claim {claim_id.hex()}")
            digest = evidence_hash(evidence)
            if digest not in await self._posted_hashes(held):
                raise RequestRefused(f"no seat posted evidence {digest.hex()} for claim {claim_id.hex()}")
        except chain_failures() as error:
            raise RequestRefused(f"reading the claim on chain: {describe_chain_error(error)}") from None
        self.evidence.setdefault(claim_id, {})[digest] = evidence
        await trio.to_thread.run_sync(self._hold, claim_id, evidence)
        log.info("referee: evidence %s for claim %s from %s", digest.hex()[:12], claim_id.hex()[:12], peer)
        self.spawn(self.rule_claim, claim_id, name=f"referee: claim {claim_id.hex()[:12]}")

    def _start_pull(self, claim_id: bytes) -> None:
        if (self.fetch is not None or self.own_runs is not None) and claim_id not in self._pulling:
            self._pulling.add(claim_id)
            self.spawn(self.pull, claim_id, name=f"referee: pull evidence {claim_id.hex()[:12]}")

    async def pull(self, claim_id: bytes) -> None:
        """Ask each seat that posted evidence for a claim this node holds, and whose evidence has not
        arrived, for it: after PULL_DELAY, then twice as long each time (at most PULL_MAX) until every posted
        evidence is here, the claim is no longer this node's to rule, or its ruling is due (then it
        rules on what it holds). What a seat answers is taken like a push (`accept`). The first time
        evidence is missing, this node's own run starts building it (`build`)."""
        try:
            for attempt in itertools.count(1):
                await trio.sleep(min(PULL_DELAY * 2 ** (attempt - 1), PULL_MAX))
                missing = await self._missing(claim_id)
                if not missing:
                    return
                if self.own_runs is not None and claim_id not in self.built:
                    self.built[claim_id] = None
                    self.spawn(self.build, claim_id, name=f"referee: build evidence {claim_id.hex()[:12]}")
                if self.fetch is None:
                    return
                for seat in missing:
                    try:
                        evidence = await self.fetch(seat, claim_id)
                        await self.accept(f"{seat} (asked)", evidence)
                    except (PeerError, LocalError, RequestRefused) as error:
                        log.info("referee: claim %s: evidence of %s not had: %s", claim_id.hex()[:12], seat, error)
        except chain_failures() as error:
            log.info("referee: claim %s: pulling evidence: %s", claim_id.hex()[:12], describe_chain_error(error))
        finally:
            self._pulling.discard(claim_id)

    async def build(self, claim_id: bytes) -> None:
        """The claim's evidence from this node's own run of the job (`build_evidence` on the posted node
        list), offered as a push once built. Nothing is built when our run computed other inputs of the
        node than the list's: then no honest seat posted that list."""
        try:
            held = await self._held(claim_id)
            if held is None:
                return
            own = await self.own_runs.of(held.job_id)
            step = own.schedule.checkpoint_step(held.interval) + held.step_index
            nodes = await self._list(held.step_claim, held.nodes_root)
            self.built[claim_id] = await self.own_runs.run_sync(functools.partial(
                build_evidence, own, claim_id=claim_id, step=step, node=held.node, node_list=nodes))
        except LocalProtocolError as error:
            log.info("referee: claim %s: our run did not compute the posted list: %s", claim_id.hex()[:12], error)
            return
        except (PeerError, LocalError) as error:  # the job's bundle did not come: built again on the next ask
            log.info("referee: claim %s: no run of the job: %s", claim_id.hex()[:12], error)
            self.built.pop(claim_id, None)
            return
        except chain_failures() as error:
            log.info("referee: claim %s: building evidence: %s", claim_id.hex()[:12], describe_chain_error(error))
            return
        await self._offer_built(claim_id)

    async def _offer_built(self, claim_id: bytes) -> None:
        """What our run built, taken as the push of the seat that posted its hash, if one did."""
        evidence = self.built.get(claim_id)
        if evidence is None or evidence_hash(evidence) in self.evidence.get(claim_id, {}):
            return
        try:
            await self.accept("this node's own run", evidence)
        except RequestRefused as error:
            log.info("referee: claim %s: the evidence our run built was not posted: %s", claim_id.hex()[:12], error)

    async def _missing(self, claim_id: bytes) -> list[str]:
        """The seats whose posted evidence for the claim has not arrived, while this node still rules
        it and its ruling is not yet due; else none."""
        s, chain = self.chain.settlement, self.chain.chain
        held = await self._held(claim_id)
        if held is None or (move := await self._duty(held)) is None or (claim_id, move) in self.ruled:
            return []
        claim = await self.chain.run(s.claim, claim_id)
        ruling = await self.chain.run(s.ruling, claim_id)
        now, margin = await self.chain.run(lambda: (chain.now(), s.chain_settings().margin))
        if now >= self._deadline(claim, ruling) - margin:
            return []
        have = self.evidence.get(claim_id, {})
        answers = [(seat, await self.chain.run(s.answer_of, claim_id, seat))
                   for seat in await self.chain.run(s.seats, held.job_id)]
        return [seat for seat, digest in answers if digest != ZERO and digest not in have]

    def _deadline(self, claim: Any, ruling: Any) -> int:
        """The time this node's ruling on the claim is due by (on appeal, the appeal's)."""
        return ruling.appeal_rule_by if ruling.appeal_referee == self.chain.account else claim.rule_by

    async def _held(self, claim_id: bytes) -> HeldClaim | None:
        """The node claim and its step claim and game as the chain holds them; None unless an open node claim."""
        s = self.chain.settlement
        node = await self.chain.run(s.claim, claim_id)
        if node.level != NODE or node.status != ClaimStatus.OPEN:
            return None
        step = await self.chain.run(s.claim, node.parent)
        game = await self.chain.run(s.claim, node.game_id)
        return HeldClaim(claim_id, game.parent, game.list_root, game.index, node.game_id, node.parent,
                         step.list_root, step.index, node.list_root, node.index)

    async def _duty(self, held: HeldClaim) -> str | None:
        """RULE or RULE_APPEAL when this node holds the claim now, else None (a duel plays it on chain)."""
        s, me = self.chain.settlement, self.chain.account
        if (await self.chain.run(s.step_claim, held.claim_id)).games:
            return None
        ruling = await self.chain.run(s.ruling, held.claim_id)
        if ruling.appeal == AppealStage.OPEN:
            return RULE_APPEAL if ruling.appeal_referee == me else None
        if ruling.ruler != ZERO_ADDRESS:
            return None  # ruled: only an appeal referee rules again
        if ruling.referee == me:
            return RULE
        if ruling.referee == ZERO_ADDRESS:
            job = await self.chain.run(s.job, held.job_id)
            if job.client_referees and job.client == me:
                return RULE
        return None

    async def _may_duel(self, held: HeldClaim) -> bool:
        """Whether a duel of the fourth level may still take the claim: the terms offer it and the
        node's operator has an element program (the contract refuses the rest)."""
        if await self.spec_roots.of(held.job_id) == ZERO:
            return False
        graph = getattr(await self.training_of(held.job_id), "graph", None)
        return graph is not None and held.node < len(graph.nodes) and graph.nodes[held.node].op in COVERED

    async def _all_evidence_in(self, held: HeldClaim, judged: set[bytes]) -> bool:
        """Every evidence that may still come was judged: each seat covering the node list posted
        (or the evidence window closed), and every hash posted is in `judged`. A co-seat that posts
        bad evidence first must not get the list ruled wrong before its co-defenders post theirs."""
        s, chain = self.chain.settlement, self.chain.chain
        claim = await self.chain.run(s.claim, held.claim_id)
        now = await self.chain.run(chain.now)
        for seat in await self.chain.run(s.seats, held.job_id):
            if now < claim.answer_by and await self.chain.run(s.answer_of, held.claim_id, seat) == ZERO \
                    and await self.chain.run(s.answer_of, held.step_claim, seat) == held.nodes_root:
                return False
        return await self._posted_hashes(held) <= judged

    async def _posted_hashes(self, held: HeldClaim) -> set[bytes]:
        """The evidence hashes the job's seats posted for the claim (`answerOf`)."""
        s = self.chain.settlement
        seats = await self.chain.run(s.seats, held.job_id)
        posted = {await self.chain.run(s.answer_of, held.claim_id, seat) for seat in seats}
        return posted - {ZERO}

    # -- ruling -----------------------------------------------------------------------

    async def run(self, *, poll: float = REFEREE_POLL) -> None:
        for claim_id in sorted(self.holding):  # held before a restart: what has not arrived is asked again
            self._start_pull(claim_id)
        while True:
            await self.rule_overdue()
            await trio.sleep(poll)

    async def rule_overdue(self) -> list[Ruled]:
        """Rule every held claim whose deadline is less than Δ away on what arrived: a defender that
        posted evidence and never sent it must not cost the referee its bond. Returns the rulings sent."""
        s, chain = self.chain.settlement, self.chain.chain
        try:
            now, margin = await self.chain.run(lambda: (chain.now(), s.chain_settings().margin))
        except chain_failures() as error:
            log.info("referee: reading the chain's clock: %s", describe_chain_error(error))
            return []
        sent = []
        for claim_id in sorted(self.holding):
            try:
                claim = await self.chain.run(s.claim, claim_id)
                ruling = await self.chain.run(s.ruling, claim_id)
                if claim.status != ClaimStatus.OPEN:
                    self.holding.discard(claim_id)
                    self.built.pop(claim_id, None)
                    shutil.rmtree(self.held_dir / claim_id.hex(), ignore_errors=True)
                    continue
                deadline = self._deadline(claim, ruling)
                if deadline and now >= deadline - margin:
                    ruled = await self.rule_claim(claim_id, due=True)
                    sent += [ruled] if ruled is not None else []
            except chain_failures() as error:
                log.info("referee: claim %s: %s", claim_id.hex()[:12], describe_chain_error(error))
        return sent

    async def rule_claim(self, claim_id: bytes, *, due: bool = False) -> Ruled | None:
        """Judge the claim's evidence and rule, when this node holds it and the evidence decides it
        (`due`: the deadline is near, the evidence that arrived decides it)."""
        async with self._locks.setdefault(claim_id, trio.Lock()):
            held = await self._held(claim_id)
            move = None if held is None else await self._duty(held)
            if move is None or (claim_id, move) in self.ruled:
                return None
            if not due and move == RULE and await self._may_duel(held):
                log.info("referee: claim %s may go on chain: ruled only when due", claim_id.hex()[:12])
                return None
            judgements = await self._judge_all(held)
            right = [j for j in judgements.values() if j.defender_right]
            if not right and not due and not await self._all_evidence_in(held, set(judgements)):
                log.info("referee: claim %s: evidence judged wrong so far, waiting for the other seats'",
                         claim_id.hex()[:12])
                return None
            if not judgements:
                return await self._rule(held, move, None, NO_EVIDENCE)
            digest, judgement = next(((d, j) for d, j in judgements.items() if j.defender_right),
                                     next(iter(judgements.items())))
            return await self._rule(held, move, self.evidence[claim_id][digest], judgement)

    async def _judge_all(self, held: HeldClaim) -> dict[bytes, Judgement]:
        """Every evidence received for the claim, judged once."""
        from ...training_oracle import batch_hashes, schedule_of

        training = await self.training_of(held.job_id)
        program = await self._program(held.job_id)
        steps = await self._list(held.game_id, held.steps_root)
        nodes = await self._list(held.step_claim, held.nodes_root)
        step = schedule_of(training).checkpoint_step(held.interval) + held.step_index
        claim = ClaimRef(held.claim_id, step, held.node)
        out = {}
        for digest, evidence in self.evidence.get(held.claim_id, {}).items():
            key = (held.claim_id, digest)
            if key not in self.judged:
                self.judged[key] = await trio.to_thread.run_sync(lambda e=evidence: judge(
                    e, claim=claim, program_root=program.root, program_size=program.size, node_list=nodes,
                    state_before=steps[held.step_index - 1], batch_hashes=batch_hashes(training)))
            out[digest] = self.judged[key]
        return out

    async def _program(self, job_id: bytes) -> Any:
        """The job's committed step program (its root proves the evidence's program entries)."""
        from ...training_oracle import protocol_program

        if job_id not in self._programs:
            training = await self.training_of(job_id)
            self._programs[job_id] = await trio.to_thread.run_sync(protocol_program, training)
        return self._programs[job_id]

    async def _list(self, claim_id: bytes, root: bytes) -> tuple[bytes, ...]:
        """The list posted under `claim_id` with `root`, from its ``ListPosted`` event."""
        s = self.chain.settlement
        logged = self.lists.get((claim_id, root))
        if logged is None:  # evidence can come before the follower handed the list's event: read the chain
            for found in await self.chain.run(s.events, 0, None):
                if isinstance(found.event, ListPosted):
                    self.lists.setdefault((found.event.claim_id, found.event.list_root), found)
            logged = self.lists.get((claim_id, root))
        if logged is None:
            raise LocalError(f"no list {root.hex()[:12]} was posted under claim {claim_id.hex()[:12]}")
        return await self.chain.run(s.posted_list, logged)

    async def _rule(self, held: HeldClaim, move: str, evidence: ClaimEvidence | None,
                    judgement: Judgement) -> Ruled | None:
        s, chain = self.chain.settlement, self.chain.chain
        if self.behaviour is not None and not self.behaviour.rules:
            log.warning("referee: claim %s: ruling nothing (%s)", held.claim_id.hex()[:12], self.behaviour.name)
            return None
        program = await self._program(held.job_id)
        transcript = Transcript(held.job_id, held.trace_root, held.interval, held.step_index, program.root,
                                await self._list(held.game_id, held.steps_root),
                                await self._list(held.step_claim, held.nodes_root),
                                b"" if evidence is None else evidence.encode(), judgement)
        digest = transcript_hash(transcript)
        path = self.transcripts / f"{digest.hex()}.msgpack"
        await trio.to_thread.run_sync(write_atomic, path, transcript.encode())
        claim = await self.chain.run(s.claim, held.claim_id)
        ruling = await self.chain.run(s.ruling, held.claim_id)
        deadline = ruling.appeal_rule_by if move == RULE_APPEAL else claim.rule_by
        if await self.chain.run(chain.now) >= deadline:
            log.warning("referee: claim %s: %s too late (deadline %d)", held.claim_id.hex()[:12], move, deadline)
            return None
        send = s.rule_appeal if move == RULE_APPEAL else s.rule
        right = judgement.defender_right and not (self.behaviour is not None and self.behaviour.against_defender)
        try:
            await self.chain.run(send, held.claim_id, right, digest)
        except chain_failures() as error:
            log.warning("referee: %s on claim %s refused: %s", move, held.claim_id.hex()[:12],
                        describe_chain_error(error))
            return None
        ruled = Ruled(move, judgement, digest, path)
        self.ruled[(held.claim_id, move)] = ruled
        log.info("referee: %s claim %s: defender %s (%s); transcript %s", move, held.claim_id.hex()[:12],
                 "right" if right else "wrong", judgement.reason, path)
        return ruled


_started: "weakref.WeakKeyDictionary[Any, RefereeDuty]" = weakref.WeakKeyDictionary()


def start_referee(ctx: Any, reach: Callable[[str], Awaitable[Any]] | None = None,
                  own_runs: OwnRuns | None = None) -> RefereeDuty:
    """The node's one referee duty (a role context's): subscribed to its follower and taking evidence
    on its host. The client role (it referees its jobs) and the auditor role (it may be drawn) call
    this; the first starts it. `reach` is `training_source`'s way to a seat for a job's bundle;
    `own_runs` the node's runs of its jobs (the auditor's), else the duty makes its own."""
    if ctx not in _started:
        from .adversaries import referee_behaviour

        from .evidence_protocol import evidence_fetcher

        training = training_source(ctx, reach)
        duty = _started[ctx] = RefereeDuty(ctx.chain, ctx.config.data_dir, ctx.start_soon, training,
                                           referee_behaviour(ctx.config.cheat), evidence_fetcher(ctx),
                                           own_runs or OwnRuns(training, {}))
        duty.subscribe(ctx.follower)
        duty.serve(ctx.host)
        ctx.start_soon(duty.run, name="referee duty")
    return _started[ctx]


def training_source(ctx: Any, reach: Callable[[str], Awaitable[Any]] | None = None) -> TrainingSource:
    """A node's `training_of`: the job's directory when this node has it (the client's own, or a
    bundle fetched before), else the bundle fetched from a revealed seat and checked against the
    job's spec (`data.JobDataService.fetch_item`); loaded once per job. `reach(account)` connects
    to a seat and returns its peer (default: the data service's, from the peers this node recorded)."""
    from ..jobfiles import JOB_FILE, job_dir, load_training

    loaded: dict[bytes, Any] = {}
    locks: dict[bytes, trio.Lock] = {}

    async def training_of(job_id: bytes) -> Any:
        async with locks.setdefault(job_id, trio.Lock()):
            if job_id not in loaded:
                directory = job_dir(ctx.config.data_dir, job_id)
                if not (directory / JOB_FILE).exists():
                    directory = await _fetch_bundle(ctx, job_id, reach or ctx.job_data.peer_of_seat)
                loaded[job_id] = await trio.to_thread.run_sync(load_training, directory / JOB_FILE)
            return loaded[job_id]

    return training_of


async def _fetch_bundle(ctx: Any, job_id: bytes, reach: Callable[[str], Awaitable[Any]]) -> Path:
    """The job's bundle from the first revealed seat that serves it (each owes it, §7)."""
    from .data import BUNDLE_ITEM

    chain = ctx.chain
    s = chain.settlement
    errors = []
    for seat in await chain.run(s.seats, job_id):
        if (await chain.run(s.seat, job_id, seat)).trace_root == ZERO:
            continue
        try:
            return await ctx.job_data.fetch_item(job_id, seat, BUNDLE_ITEM, peer=await reach(seat))
        except (PeerError, LocalError) as error:
            errors.append(f"{seat}: {error}")
    raise LocalError(f"job {job_id.hex()[:12]}: no revealed seat served its bundle ({'; '.join(errors) or 'none'})")


__all__ = ["HeldClaim", "NO_EVIDENCE", "REFEREE_POLL", "RULE", "RULE_APPEAL", "RefereeDuty", "Ruled", "STATE_FILE", "TRANSCRIPT_DIR",
           "start_referee", "training_source"]
