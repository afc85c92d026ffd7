"""The auditor on settlement version 2: replays sampled intervals of every revealed root and takes
a wrong one through the claim game (docs/economics.md §8, §9, §11, §12 "no gossip").

It learns everything from the chain: each seat's trace from its `TraceRevealed`
(checked against the event's root), the job's bundle from a seat, checked by the data service
against the spec its `JobOpened` carries; nothing is gossiped. For a
fraction `audit_jobs` of the jobs (drawn once per job), per revealed root (once per job and root,
whichever seat revealed it first):

  sample   m = sample_size(audit_rate, C) of the C intervals, drawn at random
  replay   checkpoint c fetched from the seat (checked against trace[c] by the data service),
           interval c recomputed with the job's own program from it (`ReplayOracle`); the first
           checkpoint the seat does not serve ends the fetching: the job is run once from its
           initial state and that run checks every interval of the trace (`replays.own_audit`).
           A sample of every interval (m = C, as at rate 1) starts from that run and fetches no
           checkpoint; a game's or a duel's replay then comes from the run too
  told     each seat's signed steps list of interval c asked for too (`told_steps`): of the seat
           replayed and of every other seat that revealed the same root (the replay is shared, the
           statements are each seat's own), kept by the node's `statements_keeper` as evidence
           (§10: an equivocation or a contradiction slashes it), in the background, the intervals
           due meanwhile in one ask per seat
  open     the first sampled (or own-run) interval whose end is not trace[c+1]: `openGame` (B_open from free
           stake), or a join when the game exists (no bond)
  pick     under each steps list a defender posts in a game it watches, the first entry unlike
           its own replay (`claim_lists.first_difference`): `pickStep`; under each node list of
           a step claim there, likewise `pickNode` (a pick already made joins it)
  duel     a node claim it picked or joined, on a job whose terms carry an elementSpecRoot: duels
           against the covering seats on OneStepVerifier (`challenger.Challenger`, played by the
           node's `duels.Duels`), so that no referee rules it (docs/onchain-step.md)
  appeal   a ruling on a node claim there that its replay contradicts (§9: a colluding client
           referee is overturned), with the appeal bond A from free stake

With ``lies`` (the ``false-challenger`` of `adversaries`, tests and testnets only) it opens a game on
the first sampled interval of every root it audits, picks the middle entry of a list where its
replay finds no difference, and appeals nothing.

What it must still act on is written to ``auditor.json`` in the data directory (`duty_state`) as it
learns it: the jobs drawn, each audited root with its seat, the block of its `TraceRevealed` and
whether its audit finished, and each game it follows (its interval, the block it was opened by, the
lists already answered). A restarted auditor, handed none of those events again, reruns the
unfinished audits (the trace read again from the reveal's event) and takes each open game up
from the chain: the picks and lists posted since the game opened are read back from its block on,
so a pick it still owes is made and a ruling still open to appeal is checked. Picks and lists are
kept only for games on roots it audited; a game is forgotten once its claim resolves, a job once
it settles.

Games on a root it audited are watched whoever opened them, so a false ruling against an honest
root is appealed by an auditor that never challenged it. Entry N of a node list (the state after
the step) is picked like any other: a step whose outputs are right and whose state is not is
wrong there.

`Auditor` is the logic over a chain binding, with the job's training and a seat's checkpoint
state handed in; `auditor_role.AuditorRoleV2` is the node's role around it, which also runs the game keeper
(the games it is in end by its own calls) and the referee duty (it may be drawn).
"""
from __future__ import annotations

import logging
import random
from pathlib import Path
from typing import Any, Awaitable, Callable

import trio

from contracts.settlement_v2 import JobSettled, TraceRevealed, trace_root
from contracts.settlement_v2_games import NODE, STEP, ClaimPicked, ClaimResolved, ClaimStatus, GameOpened, ListPosted
from contracts.settlement_v2_referees import AppealStage, ClaimRuled
from protocol import claim_lists
from protocol.claims import claim_id as claim_id_of, game_id as game_id_of
from protocol.sampling import sample_size

from ...errors import LocalError, PeerError
from ...training_oracle import protocol_program, schedule_of
from ..chain import chain_failures, describe_chain_error
from .audit_records import Audit, Followed, Watched
from .duty_state import DutyState
from .replays import OwnRuns, ReplayOracle, own_audit, own_replay, own_steps_list, replay_from_own_run
from .steps_asks import StepsAsks, ToldStepsSource

log = logging.getLogger(__name__)

ZERO = bytes(32)
STATE_FILE = "auditor.json"

CheckpointSource = Callable[[bytes, str, int], Awaitable[Any]]  # (job, seat, c) -> checkpoint c's state, checked


class Auditor:
    """Audits revealed roots and plays the claim game against the wrong ones.

    `training_of(job_id)` gives the job's training program, `checkpoint_of(job, seat, c)` checkpoint
    c's state as the seat serves it; `spawn` starts a background task; what it must still act on is
    kept in ``data_dir`` (None: in memory only)."""

    def __init__(self, chain: Any, spawn: Callable[..., None], training_of: Callable[[bytes], Awaitable[Any]],
                 checkpoint_of: CheckpointSource, *, rate: float, jobs: float = 1.0,
                 rng: random.Random | None = None, data_dir: Path | None = None,
                 told_steps: ToldStepsSource | None = None, duels: Any = None, output_of: Any = None,
                 lies: bool = False) -> None:
        self.chain = chain  # node.roles.chain.ChainBinding
        self.spawn = spawn
        self.training_of = training_of
        self.checkpoint_of = checkpoint_of
        self.told_steps = told_steps
        self.lies = lies  # a false challenger (adversaries.ChallengerBehaviour): every audited root is "wrong"
        self.rate = rate
        self.jobs = jobs  # the fraction of jobs audited (`audit_jobs`), drawn once per job
        self.rng = rng or random.SystemRandom()
        self.chosen: dict[bytes, bool] = {}  # job -> audited, until it settles
        self.audits: dict[tuple[bytes, bytes], Audit] = {}            # (job, root) audited -> its audit
        self.results: dict[tuple[bytes, bytes], dict[int, bool]] = {}  # (job, root) -> interval -> replay agreed
        self.co_seats: dict[tuple[bytes, bytes], list[str]] = {}       # (job, root) -> other seats that revealed it
        self.replayed_lists: dict[tuple[bytes, bytes], dict[int, list]] = {}  # (job, root) -> c -> our steps list
        self.steps_asks = StepsAsks(told_steps)                       # each seat's signed lists asked for
        self.replays: dict[tuple[bytes, bytes, int], ReplayOracle] = {}
        self.followed: dict[bytes, Followed] = {}                   # game on an audited root -> what is kept
        self.games: dict[bytes, Watched] = {}                       # followed game -> its replay, once made
        self.claim_game: dict[bytes, bytes] = {}                    # claim under a followed game -> the game
        self.steps: dict[bytes, tuple[bytes, int]] = {}             # step claim -> (game, global step)
        self.nodes: dict[bytes, tuple[bytes, int]] = {}             # node claim -> (step claim, node)
        self.picks: dict[bytes, dict[bytes, Any]] = {}              # parent claim -> claim -> its ClaimPicked
        self.lists: dict[bytes, dict[bytes, Any]] = {}              # claim -> list root -> its ListPosted
        self.checked: set[bytes] = set()                            # node claims whose ruling was checked
        self.moves: list[tuple[str, bytes]] = []                    # (move, claim) sent, in order
        self._programs: dict[bytes, Any] = {}
        self.own_runs = OwnRuns(training_of, self._programs)  # job -> our run of it from its initial state
        self.state = DutyState(data_dir, STATE_FILE)
        self.state.restore(self._restore)
        self.challenger = None  # with the node's duels and a way to the seats' outputs: the fourth level
        if duels is not None and output_of is not None:
            from .challenger import Challenger

            self.challenger = Challenger(chain, duels, training_of, self.node_values, output_of, afford=self._afford,
                                         send=self._send, data_dir=data_dir)

    @property
    def seat_of(self) -> dict[tuple[bytes, bytes], str]:
        """(job, root) audited -> the seat that revealed it."""
        return {key: audit.seat for key, audit in self.audits.items()}

    def subscribe(self, follower: Any) -> None:
        follower.subscribe(TraceRevealed, self.on_revealed)
        follower.subscribe(GameOpened, self.on_game_opened)
        follower.subscribe(ClaimPicked, self.on_claim_picked)
        follower.subscribe(ListPosted, self.on_list_posted)
        follower.subscribe(ClaimRuled, self.on_ruled)
        follower.subscribe(ClaimResolved, self.on_resolved)
        follower.subscribe(JobSettled, self.on_settled)

    # -- what is kept across a restart ------------------------------------------------

    def _restore(self, state: dict) -> None:
        self.chosen.update({bytes.fromhex(j): bool(v) for j, v in state["jobs"].items()})
        for key, record in state["audits"].items():
            job_hex, root_hex = key.split(":")
            self.audits[(bytes.fromhex(job_hex), bytes.fromhex(root_hex))] = Audit(
                str(record["seat"]), int(record["block"]), bool(record["done"]))
        for game_hex, record in state["games"].items():
            game = bytes.fromhex(game_hex)
            self.followed[game] = Followed.from_record(record)
            self.claim_game[game] = game

    async def _save(self) -> None:
        await self.state.save(lambda: {
            "jobs": {j.hex(): v for j, v in self.chosen.items()},
            "audits": {f"{j.hex()}:{r.hex()}": {"seat": a.seat, "block": a.block, "done": a.done}
                       for (j, r), a in self.audits.items()},
            "games": {g.hex(): f.to_record() for g, f in self.followed.items()}})

    def resume(self) -> None:
        """Take up what a previous run left: the audits not finished, the games still followed."""
        for (job_id, root), audit in list(self.audits.items()):
            if not audit.done:
                self.spawn(self.reaudit, job_id, root, name=f"audit again {job_id.hex()[:12]}")
        for game in list(self.followed):
            self.spawn(self.take_up, game, name=f"auditor: take up game {game.hex()[:12]}")
        if self.challenger is not None:
            self.challenger.resume(self.spawn)

    async def reaudit(self, job_id: bytes, root: bytes) -> dict[int, bool]:
        """An audit a restart interrupted, from its reveal read again at the block kept."""
        audit = self.audits[(job_id, root)]
        found = [x for x in await self.chain.run(self.chain.settlement.events, audit.block, audit.block)
                 if isinstance(x.event, TraceRevealed) and (x.event.job_id, x.event.trace_root, x.event.seat)
                 == (job_id, root, audit.seat)]
        if not found:
            log.warning("auditor: job %s: no reveal of %s at block %d", job_id.hex()[:12], audit.seat, audit.block)
            return {}
        return await self.audit(found[0])

    async def take_up(self, game: bytes) -> None:
        """A followed game after a restart: forgotten if it ended, else its picks, lists and rulings
        since it opened read back from the chain and answered as if handed now."""
        if (await self.chain.run(self.chain.settlement.claim, game)).status != ClaimStatus.OPEN:
            await self._forget_game(game)
            return
        f = self.followed[game]
        await self.watch(game, f.job_id, f.root, f.interval)
        for logged in await self.chain.run(self.chain.settlement.events, f.block):
            if game not in self.followed:
                return
            if isinstance(logged.event, ClaimPicked):
                await self.on_claim_picked(logged)
            elif isinstance(logged.event, ListPosted):
                await self.on_list_posted(logged)
            elif isinstance(logged.event, ClaimRuled):
                await self.on_ruled(logged)

    async def _forget_game(self, game: bytes) -> None:
        """A game whose claim resolved: nothing of it is due any more."""
        self.followed.pop(game, None)
        self.games.pop(game, None)
        for claim in [c for c, g in self.claim_game.items() if g == game]:
            del self.claim_game[claim]
            self.steps.pop(claim, None)
            self.nodes.pop(claim, None)
            self.picks.pop(claim, None)
            self.lists.pop(claim, None)
            self.checked.discard(claim)
        await self._save()

    # -- what the chain told ----------------------------------------------------------

    async def on_revealed(self, logged: Any) -> None:
        e: TraceRevealed = logged.event
        drawn = e.job_id not in self.chosen
        if drawn:
            self.chosen[e.job_id] = self.rng.random() < self.jobs
        if self.chosen[e.job_id] and (e.job_id, e.trace_root) not in self.audits and e.seat != self.chain.account:
            self.audits[(e.job_id, e.trace_root)] = Audit(e.seat, logged.block_number)
            await self._save()  # before the follower moves past the reveal
            self.spawn(self.audit, logged, name=f"audit {e.job_id.hex()[:12]} {e.seat}")
        elif self.chosen[e.job_id] and (e.job_id, e.trace_root) in self.audits and e.seat != self.chain.account:
            # another seat of an audited root: replayed once, but each seat's signed lists are its own (§10)
            key = (e.job_id, e.trace_root)
            if e.seat != self.audits[key].seat and e.seat not in self.co_seats.setdefault(key, []):
                self.co_seats[key].append(e.seat)
                for c, ours in list(self.replayed_lists.get(key, {}).items()):  # intervals replayed before it revealed
                    self.spawn(self._tell, e.job_id, e.seat, c, ours, name=f"auditor: steps of {e.seat}")
            await trio.lowlevel.checkpoint()
        elif drawn:
            await self._save()
        else:
            await trio.lowlevel.checkpoint()

    async def on_game_opened(self, logged: Any) -> None:
        e: GameOpened = logged.event
        if (e.job_id, e.trace_root) in self.audits and e.game_id not in self.games:
            await self._follow(e.game_id, e.job_id, e.trace_root, e.interval, logged.block_number)
            self.spawn(self.watch, e.game_id, e.job_id, e.trace_root, e.interval, name="auditor: watch a game")
        await trio.lowlevel.checkpoint()

    async def _follow(self, game: bytes, job_id: bytes, root: bytes, c: int, block: int) -> None:
        if game not in self.followed:
            self.followed[game] = Followed(job_id, root, c, block)
            self.claim_game[game] = game
            await self._save()

    async def on_claim_picked(self, logged: Any) -> None:
        # kept under a followed game only; a game's replay may still be running when its picks come
        e: ClaimPicked = logged.event
        game = self.claim_game.get(e.parent)
        if game is not None and e.claim_id not in self.picks.get(e.parent, {}):
            self.claim_game[e.claim_id] = game
            self.picks.setdefault(e.parent, {})[e.claim_id] = e
            self._adopt(e)
        await trio.lowlevel.checkpoint()

    def _adopt(self, e: ClaimPicked) -> None:
        """Follow a claim picked under a watched game or step claim (ours or anyone's), and its children."""
        if e.level == STEP and e.parent in self.games:
            watched = self.games[e.parent]
            self.steps[e.claim_id] = (e.parent, watched.oracle.schedule.checkpoint_step(watched.interval) + e.index)
        elif e.level == NODE and e.parent in self.steps:
            self.nodes[e.claim_id] = (e.parent, e.index)
        else:
            return
        for child in list(self.picks.get(e.claim_id, {}).values()):
            self._adopt(child)

    async def on_list_posted(self, logged: Any) -> None:
        claim = logged.event.claim_id
        if claim in self.claim_game:
            self.lists.setdefault(claim, {}).setdefault(logged.event.list_root, logged)
            if claim in self.games or claim in self.steps:
                self.spawn(self.answer_list, logged, name="auditor: pick")
        await trio.lowlevel.checkpoint()

    async def on_ruled(self, logged: Any) -> None:
        if logged.event.claim_id in self.nodes:
            self.spawn(self.check_ruling, logged.event.claim_id, name="auditor: check a ruling")
        await trio.lowlevel.checkpoint()

    async def on_resolved(self, logged: Any) -> None:
        if logged.event.claim_id in self.followed:
            await self._forget_game(logged.event.claim_id)
            return
        await trio.lowlevel.checkpoint()

    async def on_settled(self, logged: Any) -> None:
        """A final job: its draw, audits and replays are forgotten (its games resolved before)."""
        job_id = logged.event.job_id
        for game in [g for g, f in self.followed.items() if f.job_id == job_id]:
            await self._forget_game(game)
        self.chosen.pop(job_id, None)
        for key in [k for k in self.audits if k[0] == job_id]:
            del self.audits[key]
            self.results.pop(key, None)
            self.co_seats.pop(key, None)
            self.replayed_lists.pop(key, None)
        self.steps_asks.forget(job_id)
        for key in [k for k in self.replays if k[0] == job_id]:
            del self.replays[key]
        self._programs.pop(job_id, None)
        self.own_runs.forget(job_id)
        await self._save()

    # -- auditing -----------------------------------------------------------------------

    async def audit(self, logged: Any) -> dict[int, bool]:
        """Replay sampled intervals of the revealed root; the first that does not check goes to a game."""
        e: TraceRevealed = logged.event
        s = self.chain.settlement
        trace = await self.chain.run(s.revealed_trace, logged)
        if trace_root(list(trace)) != e.trace_root:
            log.warning("auditor: job %s: %s's revealed trace is not its root's list", e.job_id.hex()[:12], e.seat)
            return {}
        intervals = len(trace) - 1
        sampled = sorted(self.rng.sample(range(intervals), sample_size(self.rate, intervals)))
        key = (e.job_id, e.trace_root)
        if key in self.audits:
            self.audits[key].trace = tuple(trace)
        results = self.results.setdefault(key, {})
        if len(sampled) == intervals:  # the whole job: our own run replays as much and fetches nothing (`replays`)
            await self._audit_own_run(e, trace, sampled[0], results)
        else:
            await self._audit_sampled(e, trace, sampled, results)
        log.info("auditor: job %s: root of %s replayed at %s", e.job_id.hex()[:12], e.seat, results)
        audit = self.audits.get(key)
        if audit is not None:
            audit.done = True
            await self._save()
        return results

    async def _audit_sampled(self, e: TraceRevealed, trace: tuple[bytes, ...], sampled: list[int],
                             results: dict[int, bool]) -> None:
        """Each sampled interval replayed from the seat's checkpoint, up to the first that does not
        check (disputed); the first checkpoint the seat does not serve hands the rest to our own run."""
        key = (e.job_id, e.trace_root)
        for c in sampled:
            if key not in self.audits:  # the job settled meanwhile: nothing left to audit
                log.info("auditor: job %s settled before its audit of %s ended", e.job_id.hex()[:12], e.seat)
                return
            try:
                oracle = await self._replay(e.job_id, e.trace_root, c)
            except (PeerError, LocalError) as error:  # the seat does not serve it: our own run audits it (`replays`)
                log.warning("auditor: job %s: checkpoint %d of %s: %s; auditing from our own run", e.job_id.hex()[:12],
                            c, e.seat, error)
                await self._audit_own_run(e, trace, sampled[0], results)
                return
            ours = await trio.to_thread.run_sync(claim_lists.steps_list, oracle, c)
            self._keep_list(e.job_id, e.trace_root, c, ours)
            results[c] = ours[-1] == trace[c + 1] and not (self.lies and c == sampled[0])
            if not results[c]:
                log.warning("auditor: job %s: %s's interval %d does not replay to its trace", e.job_id.hex()[:12],
                            e.seat, c)
                await self.challenge(e.job_id, e.trace_root, c)
                return
            self.replays.pop((e.job_id, e.trace_root, c), None)  # a right interval is no game's: its replay is not kept

    async def _audit_own_run(self, e: TraceRevealed, trace: tuple[bytes, ...], lie_at: int,
                             results: dict[int, bool]) -> None:
        """The rest of an audit from our own run of the job: every interval of the trace checked, the
        first wrong one replayed and disputed (a false challenger disputes ``lie_at``)."""
        job_id, root = e.job_id, e.trace_root
        own = await self.own_runs.patiently(job_id, lambda: self._may_challenge(e))
        if own is None or (job_id, root) not in self.audits:
            return
        if self.lies:
            checked, oracle = {lie_at: False}, await self.own_runs.run_sync(replay_from_own_run, own, lie_at)
        else:
            checked, oracle = await self.own_runs.run_sync(own_audit, own, trace)
        if (job_id, root) not in self.audits:  # settled while it trained: nothing is due any more
            return
        results.update(checked)
        for c in [c for c, agreed in checked.items() if agreed]:  # each seat's signed list of it asked, as sampled
            self._keep_list(job_id, root, c, own_steps_list(own, c))
        if oracle is None:
            return
        self.replays[(job_id, root, oracle.c)] = oracle
        ours = await trio.to_thread.run_sync(claim_lists.steps_list, oracle, oracle.c)
        self._keep_list(job_id, root, oracle.c, ours)
        log.warning("auditor: job %s: our own run finds %s's interval %d wrong", job_id.hex()[:12], e.seat, oracle.c)
        await self.challenge(job_id, root, oracle.c)

    async def _may_challenge(self, e: TraceRevealed) -> bool:
        """Whether a game may still be opened on the revealed root (audited, its challenge window open)."""
        if (e.job_id, e.trace_root) not in self.audits:
            return False
        try:
            seat = await self.chain.run(self.chain.settlement.seat, e.job_id, e.seat)
            return await self.chain.run(self.chain.chain.now) < seat.challenge_by
        except chain_failures():
            return True  # asked again later: the chain's answer decides

    def _keep_list(self, job_id: bytes, root: bytes, c: int, ours: list) -> None:
        """Our steps list of a replayed interval, kept for seats that reveal the root later; each seat
        of the root is asked its own in the background (the audit does not wait on a seat's answer)."""
        self.replayed_lists.setdefault((job_id, root), {})[c] = ours
        for seat in [self.audits[(job_id, root)].seat, *self.co_seats.get((job_id, root), [])]:
            self.spawn(self._tell, job_id, seat, c, ours, name=f"auditor: steps of {seat}")

    async def _tell(self, job_id: bytes, seat: str, c: int, ours: list) -> None:
        """Seat's signed steps list of interval c, asked once (`StepsAsks`): of every seat that revealed
        an audited root, since a seat that tells two samplers two lists is caught only where both asked it."""
        await self.steps_asks.ask(job_id, seat, c, ours)

    async def node_values(self, job_id: bytes, root: bytes, c: int, step: int, n: int) -> tuple[list, Any]:
        """Node n's inputs and output at `step` in our replay of interval c (what a duel plays from)."""
        oracle = await self._replay(job_id, root, c)
        watched = self.games.get(game_id_of(job_id, root, c))
        async with watched.lock if watched is not None else trio.Lock():
            return await trio.to_thread.run_sync(lambda: (list(oracle.node_inputs(step, n)), oracle.node_value(step, n)))

    async def _replay(self, job_id: bytes, root: bytes, c: int) -> ReplayOracle:
        """Interval c of the root replayed: from our own run where the job has one (or is audited
        whole) and the run's checkpoint c is the trace's, else from the seat's checkpoint c."""
        key = (job_id, root, c)
        if key not in self.replays:
            audit = self.audits.get((job_id, root))
            if audit is None:  # forgotten: the job settled
                raise LocalError(f"job {job_id.hex()[:12]} settled: its audit of this root is over")
            training = await self.training_of(job_id)
            intervals = schedule_of(training).intervals
            if audit.trace and (job_id in self.own_runs or sample_size(self.rate, intervals) == intervals):
                replay = await self.own_runs.run_sync(own_replay, await self.own_runs.of(job_id), audit.trace, c)
                if replay is not None and key not in self.replays:
                    self.replays[key] = replay
                if key in self.replays:
                    return self.replays[key]
            program = self._programs.get(job_id)
            if program is None:
                program = await trio.to_thread.run_sync(protocol_program, training)
                self._programs[job_id] = program
            start = await self.checkpoint_of(job_id, audit.seat, c)
            if (job_id, root) not in self.audits:  # settled while we fetched: its program and replays are forgotten
                raise LocalError(f"job {job_id.hex()[:12]} settled: its audit of this root is over")
            self.replays[key] = ReplayOracle(training, c, start, program=program)
        return self.replays[key]

    async def challenge(self, job_id: bytes, root: bytes, c: int) -> bytes | None:
        """Open the game on interval c of the root (or join it) and watch it; its id, or None."""
        s = self.chain.settlement
        game = game_id_of(job_id, root, c)
        info = await self.chain.run(s.claim, game)
        if info.status not in (ClaimStatus.NONE, ClaimStatus.OPEN):
            return None
        if info.status == ClaimStatus.NONE and not await self._afford(job_id, "open_game"):
            return None
        block = await self.chain.run(self.chain.chain.block_number)
        # an audit rerun after a restart finds the game it opened before: nothing is sent twice
        if info.author != self.chain.account and not await self._send("openGame", game, s.open_game, job_id, root, c):
            return None
        await self._follow(game, job_id, root, c, block)
        await self.watch(game, job_id, root, c)
        return game

    async def watch(self, game: bytes, job_id: bytes, root: bytes, c: int) -> None:
        """Follow a game on a root this node audited with its replay of the interval; lists posted
        before are looked at now."""
        if game in self.games:
            await trio.lowlevel.checkpoint()
            return
        try:
            oracle = await self._replay(job_id, root, c)
        except (PeerError, LocalError) as error:
            log.warning("auditor: game %s: no replay of interval %d: %s", game.hex()[:12], c, error)
            return
        if game not in self.followed:  # resolved while the replay was made
            return
        self.games.setdefault(game, Watched(job_id, root, c, oracle))
        for picked in list(self.picks.get(game, {}).values()):
            self._adopt(picked)
        for logged in list(self.lists.get(game, {}).values()):
            await self.answer_list(logged)

    async def answer_list(self, logged: Any) -> None:
        """Pick the first entry of a posted list that our replay does not have."""
        claim, root = logged.event.claim_id, logged.event.list_root
        game = self.claim_game.get(claim)
        if game not in self.followed or (claim, root) in self.followed[game].answered:
            return
        followed = self.followed[game]
        followed.answered.add((claim, root))
        s = self.chain.settlement
        posted = list(await self.chain.run(s.posted_list, logged))
        if claim in self.games:
            watched = self.games[claim]
            async with watched.lock:
                ours = await trio.to_thread.run_sync(claim_lists.steps_list, watched.oracle, watched.interval)
            j = self._point_at(ours, posted)
            if j is not None:
                step_claim = claim_id_of(claim, STEP, root, j)
                self.claim_game[step_claim] = game
                self.steps.setdefault(step_claim, (claim, watched.oracle.schedule.checkpoint_step(watched.interval) + j))
                if await self._pick(watched.job_id, step_claim, "pick_step", s.pick_step, claim, root, j):
                    for later in list(self.lists.get(step_claim, {}).values()):
                        await self.answer_list(later)
        elif claim in self.steps:
            _, step = self.steps[claim]
            watched = self.games[game]
            async with watched.lock:
                ours = await trio.to_thread.run_sync(claim_lists.node_list, watched.oracle, step)
            n = self._point_at(ours, posted)
            if n is not None:
                node_claim = claim_id_of(game, NODE, root, n)
                self.claim_game[node_claim] = game
                self.nodes.setdefault(node_claim, (claim, n))
                if await self._pick(watched.job_id, node_claim, "pick_node", s.pick_node, claim, root, n) \
                        and self.challenger is not None:
                    await self.challenger.claimed(node_claim, watched.job_id, watched.root, watched.interval, step, n,
                                                  logged)
        if game in self.followed:
            await self._save()  # the list is answered: a restart does not pick it again

    def _point_at(self, ours: list, posted: list) -> int | None:
        """The entry of a posted list to pick: the first our replay does not have (a false challenger
        picks the middle one all the same)."""
        found = claim_lists.first_difference(ours, posted)
        return max(1, len(posted) // 2) if found is None and self.lies else found

    async def check_ruling(self, claim_id: bytes) -> None:
        """Appeal a ruling on a watched node claim that our replay contradicts, read from the chain:
        a ruling already appealed (by us before a restart, or by anyone) or past its window is left."""
        if claim_id in self.checked or self.lies:  # a false challenger appeals no ruling for the defender
            return
        self.checked.add(claim_id)
        s = self.chain.settlement
        step_claim, n = self.nodes[claim_id]
        game, step = self.steps[step_claim]
        watched = self.games[game]
        info = await self.chain.run(s.claim, claim_id)
        ruling = await self.chain.run(s.ruling, claim_id)
        now = await self.chain.run(self.chain.chain.now)
        if not info.ruled or ruling.appeal != AppealStage.NONE or now >= ruling.appeal_by:
            return
        found = self.lists.get(step_claim, {}).get(info.list_root)
        if found is None:
            log.warning("auditor: claim %s: its node list was not seen posted", claim_id.hex()[:12])
            return
        posted = await self.chain.run(s.posted_list, found)
        async with watched.lock:
            ours = await trio.to_thread.run_sync(claim_lists.node_list, watched.oracle, step)
        defender_right = ours[n] == posted[n]
        if info.defender_right == defender_right or ruling.ruler.lower() == self.chain.account.lower():
            return
        log.warning("auditor: claim %s ruled defender %s by %s; our replay says %s: appealing", claim_id.hex()[:12],
                    "right" if info.defender_right else "wrong", ruling.ruler,
                    "right" if defender_right else "wrong")
        if await self._afford(watched.job_id, "appeal"):
            await self._send("appeal", claim_id, s.appeal, claim_id)

    # -- moves --------------------------------------------------------------------------

    async def _pick(self, job_id: bytes, claim: bytes, bond: str, send: Callable[..., Any], *args: Any) -> bool:
        """A pick: a join (no bond) when the claim exists, else a new claim paid from free stake; none
        when the claim is ours already (picked before a restart)."""
        info = await self.chain.run(self.chain.settlement.claim, claim)
        if info.status != ClaimStatus.NONE and info.author == self.chain.account:
            return True
        if info.status == ClaimStatus.NONE and not await self._afford(job_id, bond):
            return False
        return await self._send(bond, claim, send, *args)

    async def _afford(self, job_id: bytes, bond: str, need: int | None = None) -> bool:
        """Whether our free stake covers the bond: one of `bonds_of`'s by name, or `need` wei named `bond`."""
        s = self.chain.settlement
        if need is None:
            need = getattr(await self.chain.run(s.bonds_of, job_id), bond)
        free = (await self.chain.run(s.node, self.chain.account)).free_stake
        if free < need:
            log.warning("auditor: job %s: %s needs a bond of %d wei, %d free", job_id.hex()[:12], bond, need, free)
            return False
        return True

    async def _send(self, move: str, claim: bytes, send: Callable[..., Any], *args: Any) -> bool:
        try:
            await self.chain.run(send, *args)
        except chain_failures() as error:
            log.warning("auditor: %s on %s refused: %s", move, claim.hex()[:12], describe_chain_error(error))
            return False
        self.moves.append((move, claim))
        log.info("auditor: %s on %s", move, claim.hex()[:12])
        return True


__all__ = ["Audit", "Auditor", "ReplayOracle"]
