"""The training program seen by the dispute game: a `protocol.TraceOracle` over real training.

`TrainingOracle` runs a job with `repops_cupy.train.TrainingProgram` and answers what
a dispute party is asked, level by level:

1. ``checkpoint_states``: the state hash at every checkpoint of the job (from its run);
2. ``step_states(c)``: interval c recomputed from the checkpoint-c state it kept;
3. ``node_outputs(s)``: every node's output hash in step s, from the state before s;
   ``node_inputs(s, n)`` and ``state_tensor_hashes(s)`` for the referee's evidence.

Steps follow `protocol.jobs.CheckpointSchedule`: step s turns state s-1 into state
s and reads the batch of training step ``s - 1`` (the state's own step counter).

Two methods are the whole computation, so a deviating run (`node.cheats`) changes
what it computes by overriding them: `step` (state s-1 to state s) and
`step_values` (every node's output in step s). The honest ones call the training
program's own `run_step` and interpreter.

`StageTimer` splits the time spent into training (the job's own run), replay
(recomputation the dispute asks for) and hashing, for the dispute simulator and the
benchmark. `job_terms` and `batch_hashes` give the client's side: the signed terms
that commit to the program, and the referee's own batch hashes.
"""
from __future__ import annotations

import random
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping, Sequence

import numpy as np

from protocol import CheckpointSchedule, DisputeRules, Identity, JobTerms, Program, SignedJobTerms
from repops_cupy.checkpoint import state_hash
from repops_cupy.graph import execute
from repops_cupy.hashing import hash_tensor
from repops_cupy.train import TrainingProgram

State = dict[str, Any]

TRAIN, REPLAY, HASH = "train", "replay", "hash"


class StageTimer:
    """Seconds spent per stage; nested stages count only in the innermost one."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {TRAIN: 0.0, REPLAY: 0.0, HASH: 0.0}
        self._active: list[list[Any]] = []  # [stage, start] frames, innermost last

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        now = time.perf_counter()
        if self._active:  # pause the enclosing stage
            outer = self._active[-1]
            self.seconds[outer[0]] = self.seconds.get(outer[0], 0.0) + now - outer[1]
        self._active.append([name, now])
        try:
            yield
        finally:
            end = time.perf_counter()
            name, start = self._active.pop()
            self.seconds[name] = self.seconds.get(name, 0.0) + end - start
            if self._active:
                self._active[-1][1] = end

    def total(self) -> float:
        return sum(self.seconds.values())


def schedule_of(training: TrainingProgram) -> CheckpointSchedule:
    return CheckpointSchedule(training.spec.steps, training.spec.checkpoint_interval)


def protocol_program(training: TrainingProgram) -> Program:
    """The committed step program: the traced step graph's nodes and state outputs (a
    program without a step graph, a rounding-log job's, gives its own)."""
    if hasattr(training, "protocol_program"):
        return training.protocol_program()
    return Program.from_step_graph(training.graph)


def batch_hashes(training: TrainingProgram) -> Callable[[int], dict[str, bytes]]:
    """The referee's `BatchOracle`: it rebuilds step s's batch (training step s - 1) from the job's data."""
    def hashes(step: int) -> dict[str, bytes]:
        return {name: hash_tensor(value) for name, value in training.batch(step - 1).items()}
    return hashes


def job_terms(training: TrainingProgram, client: Identity, *, rules: DisputeRules, payment: int = 0, stake: int = 0,
              deadline: int = 0, nonce: int = 0, program: Program | None = None) -> SignedJobTerms:
    """The terms a client signs for a training job: its identity, program, data and initial state."""
    program = program or protocol_program(training)
    terms = JobTerms(
        client=client.node_id, config_hash=training.identity(), program_root=program.root,
        program_size=program.size, data_root=training.dataset.root(),
        initial_state=state_hash(training.initial_state()), steps=training.spec.steps,
        checkpoint_every=training.spec.checkpoint_interval, payment=payment, stake=stake, deadline=deadline,
        nonce=nonce, rules=rules,
    )
    return SignedJobTerms.sign(client, terms)


class TrainingOracle:
    """One party's run of a training job, and its answers in a dispute (a `protocol.TraceOracle`).

    The run keeps the state tensors of every checkpoint (what a provider stores);
    a dispute's recomputation starts from them. `program` may be passed to share
    one committed program between parties of the same job.
    """

    def __init__(self, training: TrainingProgram, *, timer: StageTimer | None = None,
                 program: Program | None = None) -> None:
        self.training = training
        self.schedule = schedule_of(training)
        self.timer = timer or StageTimer()
        self._program = program
        self._checkpoints: list[State] | None = None   # state tensors at checkpoints 0..C
        self._checkpoint_hashes: list[bytes] = []
        self.state_hashes: list[bytes] = []            # state hash after every step of the run (0: initial)
        self._interval: tuple[int, list[State]] | None = None   # the interval last recomputed, with its states
        self._values: tuple[int, list[Any]] | None = None      # node values of the step last recomputed

    # --- the computation (what a deviating run overrides) ----------------------------------

    def step(self, s: int, state: State) -> State:
        """Step s: the state after it, from the state before it."""
        return self.training.run_step(state).state

    def step_values(self, s: int, state: State) -> list[Any]:
        """Every node's output in step s, in program order (leaves included)."""
        if hasattr(self.training, "step_node_values"):  # a rounding-log job: no step graph
            return self.training.step_node_values(state)
        graph = self.training.graph
        run = execute(graph, self.training.leaf_values(state), keep=range(len(graph)))
        return [run.values[i] for i in range(len(graph))]

    # --- the run -----------------------------------------------------------------------------

    def train(self, *, prefix: TrainingOracle | None = None, prefix_steps: int = 0) -> list[bytes]:
        """Run the whole job once (later calls return the same); returns the checkpoint state hashes.

        `prefix` is a simulation shortcut: another run of this job known to compute the
        same bits through step `prefix_steps`. Its checkpoints up to there are taken as
        this run's own, and training goes on from the last of them.
        """
        if self._checkpoints is None:
            if prefix is not None and prefix_steps > 0:
                prefix.train()
                c = min(prefix_steps // self.schedule.every, self.schedule.intervals)
                start = self.schedule.checkpoint_step(c)
                checkpoints, hashes = list(prefix._checkpoints[:c + 1]), list(prefix.state_hashes[:start + 1])
            else:
                start, checkpoints = 0, [self.training.initial_state()]
                hashes = [self._hash_state(checkpoints[0])]
            state = checkpoints[-1]
            for s in range(start + 1, self.schedule.steps + 1):
                with self.timer.stage(TRAIN):
                    state = self.step(s, state)
                hashes.append(self._hash_state(state))
                if self.schedule.is_checkpoint(s):
                    checkpoints.append(state)
            self.state_hashes = hashes
            self._checkpoint_hashes = [hashes[self.schedule.checkpoint_step(c)]
                                       for c in range(self.schedule.checkpoints)]
            self._checkpoints = checkpoints
        return self._checkpoint_hashes

    def checkpoint_state(self, c: int) -> State:
        self.train()
        return self._checkpoints[c]

    def _hash_state(self, state: State) -> bytes:
        with self.timer.stage(HASH):
            return state_hash(state)

    def _interval_states(self, c: int) -> list[State]:
        """The states of interval c, recomputed from checkpoint c (the last interval is kept)."""
        if self._interval is None or self._interval[0] != c:
            state = self.checkpoint_state(c)
            states = [state]
            for s in self.schedule.interval_steps(c):
                with self.timer.stage(REPLAY):
                    state = self.step(s, state)
                states.append(state)
            self._interval = (c, states)
        return self._interval[1]

    def state_before(self, s: int) -> State:
        c = self.schedule.interval_of_step(s)
        return self._interval_states(c)[s - 1 - self.schedule.checkpoint_step(c)]

    def state_after(self, s: int) -> State:
        """The state after step s (0: the initial state)."""
        if self.schedule.is_checkpoint(s):
            return self.checkpoint_state(self.schedule.intervals if s == self.schedule.steps else s // self.schedule.every)
        return self.state_before(s + 1)

    def _step_values(self, s: int) -> list[Any]:
        if self._values is None or self._values[0] != s:
            state = self.state_before(s)
            with self.timer.stage(REPLAY):
                self._values = (s, self.step_values(s, state))
        return self._values[1]

    # --- TraceOracle ---------------------------------------------------------------------

    def program(self) -> Program:
        if self._program is None:
            self._program = protocol_program(self.training)
        return self._program

    def checkpoint_states(self) -> Sequence[bytes]:
        return list(self.train())

    def step_states(self, checkpoint: int) -> Sequence[bytes]:
        return [self._hash_state(state) for state in self._interval_states(checkpoint)]

    def node_outputs(self, step: int) -> Sequence[bytes]:
        values = self._step_values(step)
        with self.timer.stage(HASH):
            return [hash_tensor(v) for v in values]

    def state_tensor_hashes(self, step: int) -> Mapping[str, bytes]:
        state = self.state_after(step)
        with self.timer.stage(HASH):
            return {name: hash_tensor(value) for name, value in state.items()}

    def node_inputs(self, step: int, node: int) -> Sequence[Any]:
        values = self._step_values(step)
        return [np.asarray(values[m]) for m in self.program().entry(node).inputs]

    def node_value(self, step: int, node: int) -> Any:
        """Node `node`'s output tensor in step `step` (a duel of the fourth level opens an element of it)."""
        return np.asarray(self._step_values(step)[node])


@dataclass
class CheatContext:
    """What a deviating run starts from (each strategy of `node.cheats` takes one): the job's
    program, the honest run (the cheater could always compute it), a seeded source of its
    random choices, and the timer."""

    training: TrainingProgram
    honest: TrainingOracle
    rng: random.Random
    timer: StageTimer

    @property
    def steps(self) -> int:
        return self.training.spec.steps

    @property
    def schedule(self) -> CheckpointSchedule:
        return self.honest.schedule

    @property
    def state_outputs_entry(self) -> int:
        """Program index of the state-outputs entry (after the graph's nodes)."""
        return len(self.training.graph.nodes)
