"""The fourth level's world for the version 2 tests: a real small job on the claim game, down to duels
on OneStepVerifier.

The job is the tiny MLP of tests/node/test_dispute_sim (7 steps, a checkpoint every 3, 36 graph
nodes, dropout included), run once by `TrainingOracle`: its state hashes, steps lists and node lists
are the real ones, and its terms carry the graph's element spec root (`protocol.element_specs`).
A `JobComputation` is a `GameTable` computation over that run: the truth, or a cheat of one step
whose node claims an output tensor differing at one element (its trace of that element's program
wrong from a step on, `protocol.step_game.cheat_values`), every later node and state junk. The same
class stands for a cheating challenger, whose claimed output is that tensor.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from eth_utils import keccak

from contracts.step_verifier import PlayedGame, StepVerifier, play
from contracts.settlement_v2_referees import StepGameOpened
from node.training_oracle import TrainingOracle
from protocol.element_specs import ElementNode, duel_proofs, duel_setup, element_spec_leaves, node_element_spec
from protocol.listtree import list_root
from protocol.step_game import StepPlayer, StepSetup, cheat_values, claimed_output
from protocol.step_programs import trace_element
from repops_cupy.hashing import canonical_array, hash_tensor
from repops_cupy.jobspec import load_job
from repops_cupy.train import TrainingProgram
from tests.node.test_dispute_sim import JOB

from .game_world_v2 import GameTable
from .settlement_world_v2 import WorldV2

STEP = 2  # the disputed step: interval 0 (steps 1 to 3), its step 2
NODE_MILLIS = 10_000  # ρ: E_rule = 2ρ + E_xfer(Y) = 81 s, the trace's part of a duel's clock


@dataclass
class MlpRun:
    """The job's honest run and what the terms commit to about its graph."""

    training: TrainingProgram
    oracle: TrainingOracle
    spec_leaves: list[bytes]

    @property
    def graph(self):
        return self.training.graph

    @property
    def spec_root(self) -> bytes:
        return list_root(self.spec_leaves)

    @property
    def steps(self) -> int:
        return self.training.spec.steps

    @property
    def every(self) -> int:
        return self.training.spec.checkpoint_interval

    @property
    def nodes(self) -> int:
        return len(self.graph.nodes)

    def node_of(self, op: str) -> int:
        """The first node of the graph running `op`."""
        return next(n.id for n in self.graph.nodes if n.op == op)

    def element_node(self, n: int) -> ElementNode:
        node = node_element_spec(self.graph, n)
        assert node is not None, f"node {n} has no element program"
        return node

    def output(self, step: int, n: int) -> np.ndarray:
        return canonical_array(np.asarray(self.oracle.step_values(step, self.oracle.state_before(step))[n]))

    def inputs(self, step: int, n: int) -> list[np.ndarray]:
        return [np.asarray(x) for x in self.oracle.node_inputs(step, n)]


def mlp_run(directory: Path) -> MlpRun:
    path = directory / "tiny-mlp.toml"
    path.write_text(JOB)
    training = TrainingProgram(load_job(path))
    oracle = TrainingOracle(training)
    oracle.train()
    return MlpRun(training, oracle, element_spec_leaves(training.graph))


class JobComputation:
    """The run's lists as one side holds them: the truth, or a cheat at node `node` of `step` (its
    claimed output differs at `element`), junk after it."""

    def __init__(self, run: MlpRun, label: str = "truth", node: int | None = None, element: int = 0,
                 kind: str = "step", seed: int = 0) -> None:
        self.run, self.label, self.node, self.element = run, label, node, element
        self.values: tuple[int, ...] | None = None
        if node is not None:
            inputs = run.inputs(STEP, node)
            op, attrs = run.graph.nodes[node].op, dict(run.graph.nodes[node].attrs)
            honest = trace_element(op, attrs, inputs, element)
            self.values = cheat_values(honest.spec, element, inputs, honest.values, np.random.default_rng(seed), kind)

    @property
    def cheats(self) -> bool:
        return self.node is not None

    def state(self, step: int) -> bytes:
        if self.cheats and step >= STEP:
            return keccak(f"{self.label} state {step}".encode())
        return self.run.oracle.state_hashes[step]

    def trace(self) -> list[bytes]:
        intervals = -(-self.run.steps // self.run.every)
        return [self.state(min(c * self.run.every, self.run.steps)) for c in range(intervals + 1)]

    def steps(self, c: int) -> list[bytes]:
        every = self.run.every
        return [self.state(i) for i in range(c * every, min((c + 1) * every, self.run.steps) + 1)]

    def nodes(self, step: int) -> list[bytes]:
        outs = list(self.run.oracle.node_outputs(step))
        if self.cheats and step >= STEP:
            first = self.node if step == STEP else 0
            outs[first:] = [keccak(f"{self.label} node {step} {n}".encode()) for n in range(first, len(outs))]
            if step == STEP:
                outs[first] = hash_tensor(self.output(self.node))
        return outs + [self.state(step)]

    def output(self, n: int) -> np.ndarray:
        """This side's output tensor of node n at the disputed step."""
        honest = self.run.output(STEP, n)
        return claimed_output(honest, self.element, self.values[-1]) if n == self.node else honest

    def trace_values(self, n: int, element: int) -> tuple[int, ...]:
        """This side's trace of `element` of node n at the disputed step."""
        if n == self.node and element == self.element:
            return self.values
        node = self.run.graph.nodes[n]
        return trace_element(node.op, dict(node.attrs), self.run.inputs(STEP, n), element).values


def step_table(w: WorldV2, run: MlpRun, computations: tuple[JobComputation, ...], **terms) -> GameTable:
    """A GameTable of the real job, its terms carrying the element spec root."""
    terms.setdefault("element_spec_root", run.spec_root)
    return GameTable(w, computations, steps=run.steps, every=run.every, nodes=run.nodes,
                     initial_state=run.oracle.state_hashes[0], node_millis=NODE_MILLIS, **terms)


@dataclass
class Duel:
    """A duel opened through the settlement: its event, setup, and the two players."""

    opened: StepGameOpened
    setup: StepSetup
    players: tuple[StepPlayer, StepPlayer]

    @property
    def id(self) -> int:
        return self.opened.id


def duel_arguments(t: GameTable, run: MlpRun, challenger: JobComputation, defender: str, n: int,
                   element: int) -> tuple[StepSetup, object]:
    """openStepGame's setup and proofs: `challenger`'s output against `defender`'s node list at node n."""
    node = run.element_node(n)
    node_list = t.by_seat[defender].nodes(STEP)
    setup = duel_setup(node, element, node_list, hash_tensor(challenger.output(n)))
    return setup, duel_proofs(node, node_list, run.spec_leaves)


def open_duel(t: GameTable, run: MlpRun, claim: bytes, by: str, challenger: JobComputation, defender: str,
              n: int, element: int) -> Duel:
    setup, proofs = duel_arguments(t, run, challenger, defender, n, element)
    opened = t._booked(t.w.as_(by).open_step_game(claim, setup, proofs, defender)).one(StepGameOpened)
    inputs = run.inputs(STEP, n)
    sides = (challenger, t.by_seat[defender])
    players = tuple(StepPlayer(setup, side, sides[side].trace_values(n, element), sides[side].output(n), inputs)
                    for side in (0, 1))
    return Duel(opened, setup, players)  # type: ignore[arg-type]


def play_duel(t: GameTable, duel: Duel, *, ruler: int | None = None, silent: tuple[int, ...] = (),
              rule: bool = True) -> PlayedGame:
    """Plays the duel on the settlement's OneStepVerifier (`contracts.step_verifier.play`); the books
    are checked after it."""
    w = t.w
    verifier = StepVerifier(w.chain, w.settlement.setting("STEP_VERIFIER"), w.keeper)
    accounts = (duel.opened.challenger, duel.opened.defender)
    played = play(verifier, duel.setup, duel.players, accounts, clock=duel.opened.clock, ruler=ruler, silent=silent,
                  game_id=duel.id, rule=rule)
    w.assert_every_coin_accounted()
    return played
