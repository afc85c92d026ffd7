"""`gavel dispute-sim`: an honest party and a cheating one play the dispute game on a real job.

    gavel dispute-sim JOB.toml --cheat STRATEGY [--steps N] [--seed S] [--cheater-role provider|auditor] [--json]
                      [--on-chain-step]

Both parties train the job with the reproducible training code (`TrainingOracle`);
the cheater's run deviates as its strategy says (`node.cheats`). Each signs its
trace root. If the roots differ, the auditor (the challenger) opens a dispute at the
job's client (the referee) against the provider (the defender), and the three
protocol machines play it out in one process: every message is sealed, encoded and
handed to its receiver as bytes (the bytes are counted), on a simulated clock in
milliseconds that only the simulator advances. A cheater that stalls just never
answers; the clock runs to the referee's deadline and the referee rules.

By default the cheater is the provider; with ``--cheater-role auditor`` it is the
auditor, who accuses an honest provider. ``--seed`` seeds the cheat's choices (which
step, which bit, ...); the job's own seed stays as in the job file.

While it runs it says on stderr what it is doing: each party's training, then each round
of the game as the referee asks for it (the level and the range of the descent, the
interval, step or node it asks about) and any timeout.

With ``--on-chain-step``, a dispute that reached an operator node goes on to the fourth
level on the embedded EVM (`node.cli.onchain_step`): both parties trace the first differing
output element, bisect the traces on OneStepVerifier and the contract executes the one step
and rules, the client offline; each transaction is printed with its gas, and the worst one.

Output: the verdict, where the descent ended (checkpoint, step, node), the rounds
against the bound `protocol.max_rounds`, the bytes exchanged and the time spent,
split into the job's training, the dispute's recomputation, hashing, and game logic
(protocol machines, signatures, the referee's recomputation). With ``--json`` the
last line is one JSON object. Exit status 0 when the honest party won (or, for
``--cheat honest``, when no dispute arose), 1 otherwise, 2 on a usage error.
"""
from __future__ import annotations

import argparse
import heapq
import itertools
import json
import random
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import blake3

from protocol import (
    CHALLENGER, DEFENDER, DisputeParty, EvidenceRequest, GameOver, Identity, IntervalRequest,
    Program, Received, Referee, RemoteProtocolError, RevealRequest, Send, SignedJobTerms, StateOutputs, StepRequest,
    Verdict, max_rounds,
)
from protocol.settings import DEFAULT_JOB_SETTINGS
from repops_cupy.train import TrainingProgram

from ..cheats import STRATEGIES, Cheat, CheatContext, Rewrite, Truth
from ..training_oracle import HASH, REPLAY, TRAIN, StageTimer, TrainingOracle, batch_hashes, job_terms

PROVIDER, AUDITOR = "provider", "auditor"
# dispute rules of the simulated job, and the simulated network: one-way latency and each party's time to answer
RULES = DEFAULT_JOB_SETTINGS.rules  # a job's default move timeout and clock (protocol.settings)
LATENCY_MS = 20
THINK_MS = 100
START_MS = 1_000

EXIT_HONEST_WON, EXIT_HONEST_LOST, EXIT_USAGE = 0, 1, 2

Progress = Callable[[str], None]  # told one line at a time what the simulation is doing
LEVEL_NAMES = {1: "checkpoints", 2: "steps", 3: "nodes"}


def sim_identity(name: str) -> Identity:
    """A fixed key per participant, so that runs are reproducible (the signatures are real Ed25519)."""
    return Identity(blake3.blake3(b"gavel/dispute-sim/" + name.encode()).digest())


CLIENT, PROVIDER_KEY, AUDITOR_KEY = sim_identity("client"), sim_identity(PROVIDER), sim_identity(AUDITOR)


class RewritingParty:
    """A party machine whose outgoing moves pass through a cheat's `rewrite` (re-signed, or dropped)."""

    def __init__(self, party: DisputeParty, rewrite: Rewrite) -> None:
        self.party = party
        self.rewrite = rewrite

    def __getattr__(self, name: str) -> Any:
        return getattr(self.party, name)

    def receive_bytes(self, data: bytes, *, now: int) -> Received:
        received = self.party.receive_bytes(data, now=now)
        actions = []
        for action in received.actions:
            if isinstance(action, Send):
                out = self.rewrite(received.envelope, action.envelope, self.party.identity)
                if out is not None:
                    actions.append(Send(action.to, out))
            else:
                actions.append(action)
        return Received(received.envelope, actions)


@dataclass
class Timings:
    """Seconds: the job's training by both parties (and its hashing), then the dispute's own split."""

    train: float = 0.0
    train_hash: float = 0.0
    replay: float = 0.0
    hash: float = 0.0
    game: float = 0.0

    def to_json(self) -> dict[str, float]:
        return {f"{k}_s": round(v, 4) for k, v in self.__dict__.items()}


@dataclass
class SimResult:
    strategy: str
    cheater_role: str
    seed: int
    description: str
    truth: Truth
    terms: SignedJobTerms
    program: Program
    verdict: Verdict | None
    honest_id: bytes
    cheater_id: bytes
    cheater_run: TrainingOracle | None = None
    referee: Referee | None = None
    bytes: int = 0
    messages: int = 0
    refused: int = 0
    simulated_ms: int = 0
    timings: Timings = field(default_factory=Timings)

    @property
    def dispute(self) -> bool:
        return self.verdict is not None

    @property
    def bound(self) -> int:
        t = self.terms.terms
        return max_rounds(t.schedule.intervals, t.checkpoint_every, t.graph_nodes)

    @property
    def rounds(self) -> int:
        return self.verdict.rounds if self.verdict else 0

    @property
    def winner(self) -> str | None:
        if self.verdict is None:
            return None
        losers = self.verdict.losers
        if losers == {self.cheater_id}:
            return "honest"
        if losers == {self.honest_id}:
            return "cheater"
        if losers == {self.honest_id, self.cheater_id}:
            return "both-lose"
        raise RuntimeError(f"a verdict with faults {sorted(x.hex()[:8] for x in losers)} names neither party")

    @property
    def honest_won(self) -> bool:
        return self.winner == "honest" if self.truth.reason else not self.dispute

    def located(self, depth: int) -> int | None:
        """The checkpoint (1), step (2) or node (3) the descent found, if it got that far."""
        if self.verdict is None or self.verdict.depth < depth:
            return None
        return (self.verdict.checkpoint, self.verdict.step, self.verdict.node)[depth - 1]

    def node_name(self, node: int | None) -> str | None:
        if node is None:
            return None
        entry = self.program.entry(node)
        if isinstance(entry, StateOutputs):
            return "state outputs"
        return f"leaf {entry.leaf_name}" if entry.is_leaf else entry.op

    def faults(self) -> list[dict[str, str]]:
        if self.verdict is None:
            return []
        who = {self.honest_id: "honest", self.cheater_id: "cheater"}
        return [{"party": who[f.party], "reason": f.reason, "detail": f.detail} for f in self.verdict.faults]

    def to_json(self) -> dict[str, Any]:
        t = self.terms.terms
        truth = self.truth
        return {
            "strategy": self.strategy, "cheater_role": self.cheater_role, "seed": self.seed,
            "cheat": self.description, "steps": t.steps, "checkpoint_every": t.checkpoint_every,
            "intervals": t.schedule.intervals, "graph_nodes": t.graph_nodes,
            "dispute": self.dispute, "winner": self.winner, "faults": self.faults(),
            "depth": self.verdict.depth if self.verdict else 0,
            "checkpoint": self.located(1), "step": self.located(2), "node": self.located(3),
            "node_op": self.node_name(self.located(3)),
            "truth": {"step": truth.step, "node": truth.node, "node_op": self.node_name(truth.node),
                      "reason": truth.reason},
            "rounds": self.rounds, "bound": self.bound, "bytes": self.bytes, "messages": self.messages,
            "refused": self.refused, "simulated_ms": self.simulated_ms,
            "transcript": self.verdict.transcript_hash.hex() if self.verdict else None,
            "timings": self.timings.to_json(),
        }


def _stage_seconds(*timers: StageTimer) -> dict[str, float]:
    return {stage: sum(t.seconds.get(stage, 0.0) for t in timers) for stage in (TRAIN, REPLAY, HASH)}


def simulate(training: TrainingProgram, strategy: str, *, cheater_role: str = PROVIDER, seed: int = 0,
             honest: TrainingOracle | None = None, progress: Progress | None = None) -> SimResult:
    """Play one dispute between an honest party and a cheater on `training`'s job.

    `honest` may be an honest run of this job made earlier (it is reused, not rerun),
    so that many simulations of one job share it. `progress`, if given, is told each
    stage (each party's training, each round of the game) as it begins.
    """
    say = progress or (lambda line: None)
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}; one of {', '.join(STRATEGIES)}")
    if cheater_role not in (PROVIDER, AUDITOR):
        raise ValueError(f"the cheater is the {PROVIDER} or the {AUDITOR}, not {cheater_role!r}")
    honest = honest or TrainingOracle(training)
    program = honest.program()
    terms = job_terms(training, CLIENT, rules=RULES, program=program)
    cheat_timer = StageTimer()
    before = _stage_seconds(honest.timer, cheat_timer)

    steps = training.spec.steps
    honest_role = AUDITOR if cheater_role == PROVIDER else PROVIDER
    say(f"training: the honest {honest_role}, {steps} steps")
    honest.train()
    # what the cheater knows of the honest computation it departs from: its own copy, on its own clock
    shadow = TrainingOracle(training, timer=cheat_timer, program=program)
    shadow.train(prefix=honest, prefix_steps=steps)
    say(f"training: the other {cheater_role}'s run (it trains honestly)" if strategy == "honest" else
        f"training: the cheating {cheater_role}'s run ({strategy})")
    cheat: Cheat = STRATEGIES[strategy](CheatContext(training, shadow, random.Random(seed), cheat_timer))
    # the cheater computes exactly what the honest party does before its first deviation
    cheat.oracle.train(prefix=honest, prefix_steps=(cheat.truth.step or 1) - 1)
    trained = _stage_seconds(honest.timer, cheat_timer)
    say(f"training done in {trained[TRAIN] - before[TRAIN]:.2f} s (+{trained[HASH] - before[HASH]:.2f} s hashing)")

    cheater_key, honest_key = (PROVIDER_KEY, AUDITOR_KEY) if cheater_role == PROVIDER else (AUDITOR_KEY, PROVIDER_KEY)
    cheater = DisputeParty(identity=cheater_key, terms=terms, oracle=cheat.oracle, role=cheater_role,
                           side=DEFENDER if cheater_role == PROVIDER else CHALLENGER)
    upright = DisputeParty(identity=honest_key, terms=terms, oracle=honest,
                           role=AUDITOR if cheater_role == PROVIDER else PROVIDER,
                           side=CHALLENGER if cheater_role == PROVIDER else DEFENDER)
    result = SimResult(strategy, cheater_role, seed, cheat.description, cheat.truth, terms, program, None,
                       honest_key.node_id, cheater_key.node_id, cheater_run=cheat.oracle)
    started = time.perf_counter()
    if cheater.trace_root.statement != upright.trace_root.statement:
        say(f"the trace roots differ: the auditor opens a dispute (at most {result.bound} rounds)")
        referee = Referee(identity=CLIENT, terms=terms, batch_hashes=batch_hashes(training))
        playing = RewritingParty(cheater, cheat.rewrite) if cheat.rewrite else cheater
        auditor, provider = (upright, playing) if cheater_role == PROVIDER else (playing, upright)
        _play(referee, auditor, provider, result, say)
        result.verdict, result.referee = referee.verdict, referee
        say(f"the referee ruled after {result.rounds} round{'s' if result.rounds != 1 else ''}")
    else:
        say("the trace roots agree: no dispute")
    elapsed = time.perf_counter() - started
    done = _stage_seconds(honest.timer, cheat_timer)
    result.timings = Timings(
        train=trained[TRAIN] - before[TRAIN], train_hash=trained[HASH] - before[HASH],
        replay=done[REPLAY] - trained[REPLAY], hash=done[HASH] - trained[HASH],
        game=elapsed - (done[REPLAY] - trained[REPLAY]) - (done[HASH] - trained[HASH]),
    )
    return result


def describe_request(body: Any) -> str:
    """What the referee asks both parties for, in words."""
    if isinstance(body, RevealRequest):
        return f"level {body.level} ({LEVEL_NAMES.get(body.level, '?')}): the children of [{body.lo}, {body.hi})"
    if isinstance(body, IntervalRequest):
        return f"level 2 (steps): the commitment to interval {body.checkpoint}"
    if isinstance(body, StepRequest):
        return f"level 3 (nodes): the commitment to step {body.step}"
    if isinstance(body, EvidenceRequest):
        return f"the evidence for node {body.node} of step {body.step}"
    return type(body).__name__


def _play(referee: Referee, auditor: Any, provider: Any, result: SimResult, say: Progress) -> None:
    """Deliver every message as bytes on a simulated clock until the referee has ruled and all is delivered."""
    machines = {CLIENT.node_id: referee, auditor.identity.node_id: auditor, provider.identity.node_id: provider}
    queue: list[tuple[int, int, bytes, bytes]] = []   # (arrival time, order, receiver, bytes)
    order = itertools.count()
    told = {"rounds": 0}

    def post(sender: bytes, actions: list, now: int) -> None:
        answer_delay = 0 if sender == CLIENT.node_id else THINK_MS
        if sender == CLIENT.node_id and referee.rounds > told["rounds"]:
            told["rounds"] = referee.rounds
            asked = next((a.envelope.body for a in actions if isinstance(a, Send)), None)
            say(f"round {referee.rounds}: {describe_request(asked)}")
        for action in actions:
            if isinstance(action, Send):
                data = action.envelope.encode()
                heapq.heappush(queue, (now + answer_delay + LATENCY_MS, next(order), action.to, data))

    now = START_MS
    post(auditor.identity.node_id, [auditor.open_dispute(provider.trace_root, now=now)], now)
    while queue or referee.state != "DONE":
        if not queue:  # nothing in flight: the clock runs to the next deadline
            deadline = referee.next_deadline
            if deadline is None:
                raise RuntimeError(f"the game is stuck in state {referee.state}: nothing in flight, no deadline")
            now = max(now, deadline + 1)
            say(f"no answer in flight: the simulated clock runs to the referee's deadline "
                f"({(now - START_MS) / 1000:.1f} s)")
            post(CLIENT.node_id, referee.tick(now=now), now)
            continue
        at, _, to, data = heapq.heappop(queue)
        now = max(now, at)
        machine = machines[to]
        if machine.state == "DONE":
            continue  # the game is over for this receiver: a late move is moot
        result.bytes += len(data)
        result.messages += 1
        try:
            received = machine.receive_bytes(data, now=now)
        except RemoteProtocolError:
            result.refused += 1  # refused as a network peer would drop it; the sender's clock keeps running
            continue
        post(to, [a for a in received.actions if not isinstance(a, GameOver)], now)
    result.simulated_ms = now - START_MS


# --- the command ------------------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gavel dispute-sim",
                                description="Play the dispute game between an honest and a cheating party on a job.",
                                usage="gavel dispute-sim JOB.toml --cheat STRATEGY [options] (see --help)")
    p.add_argument("job", help="job file (TOML)")
    p.add_argument("--cheat", required=True, choices=list(STRATEGIES), help="the cheater's strategy")
    p.add_argument("--steps", type=int, help="number of steps (overrides job.steps)")
    p.add_argument("--seed", type=int, default=0, help="seeds the cheat's choices (the job keeps its own seed)")
    p.add_argument("--cheater-role", choices=(PROVIDER, AUDITOR), default=PROVIDER)
    p.add_argument("--json", action="store_true", help="end with one line of JSON")
    p.add_argument("--on-chain-step", action="store_true",
                   help="after the node is found, play the fourth level and the one-step ruling on the embedded EVM")
    return p


def report_lines(r: SimResult) -> list[str]:
    t = r.terms.terms
    lines = [f"job: {t.steps} steps, checkpoint every {t.checkpoint_every} ({t.schedule.intervals} intervals), "
             f"{t.graph_nodes} nodes per step",
             f"cheater ({r.cheater_role}, {r.strategy}, seed {r.seed}): {r.description}"]
    if not r.dispute:
        lines.append("the trace roots agree: no dispute")
    else:
        lines.append(f"verdict: {r.winner} wins" if r.winner != "both-lose" else "verdict: both lose")
        for f in r.faults():
            lines.append(f"  {f['party']} loses: {f['reason']} ({f['detail']})")
        found = [f"checkpoint {r.located(1)}" if r.located(1) is not None else "nothing located"]
        if r.located(2) is not None:
            found.append(f"step {r.located(2)}")
        if r.located(3) is not None:
            found.append(f"node {r.located(3)} ({r.node_name(r.located(3))})")
        lines.append("found: " + ", ".join(found))
        if r.truth.step is not None:
            lines.append(f"cheat: first wrong state after step {r.truth.step}, first wrong node {r.truth.node} "
                         f"({r.node_name(r.truth.node)})")
        lines.append(f"rounds: {r.rounds} (bound {r.bound}); {r.messages} messages, {r.bytes:,} bytes; "
                     f"{r.refused} refused; simulated {r.simulated_ms / 1000:.2f} s")
    tm = r.timings
    lines.append(f"time: training {tm.train:.2f} s (+{tm.train_hash:.2f} s hashing); dispute: recomputation "
                 f"{tm.replay:.2f} s, hashing {tm.hash:.2f} s, game logic {tm.game:.2f} s")
    return lines


def dispute_sim_main(argv: list[str]) -> int:
    from . import roundlog
    if any(roundlog.is_roundlog_job(a) for a in argv if not a.startswith("-")):
        from .roundlog_dispute import dispute_sim_main as roundlog_dispute_sim
        return roundlog_dispute_sim(argv)  # model.kind = "torch-roundlog": its own game and cheats
    args = _parser().parse_args(argv)
    from .train import UsageError, load_training
    try:
        training = load_training(args.job, args.steps)
    except UsageError as exc:
        print(f"gavel dispute-sim: {exc}", file=sys.stderr)
        return EXIT_USAGE
    started = time.perf_counter()

    def progress(line: str) -> None:
        print(f"[{time.perf_counter() - started:6.1f} s] {line}", file=sys.stderr, flush=True)

    honest = TrainingOracle(training)
    result = simulate(training, args.cheat, cheater_role=args.cheater_role, seed=args.seed, honest=honest,
                      progress=progress)
    for line in report_lines(result):
        print(line)
    fourth = None
    if args.on_chain_step:
        from .onchain_step import play_fourth_level
        fourth = play_fourth_level(result, honest, seed=args.seed, say=progress)
        for line in fourth.lines() if fourth else ["on-chain step: the descent found no operator node"]:
            print(line)
    if args.json:
        out = result.to_json()
        if args.on_chain_step:
            out["on_chain_step"] = fourth.to_json() if fourth else None
        print(json.dumps(out, sort_keys=True))
    honest_won = result.honest_won and (fourth is None or not fourth.covered or fourth.honest_won)
    return EXIT_HONEST_WON if honest_won else EXIT_HONEST_LOST
