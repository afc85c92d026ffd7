"""`gavel dispute-sim --on-chain-step`: the fourth level and the one-step ruling on the embedded EVM.

After levels 1-3 (played as today, off chain, `dispute_sim.simulate`) have found node n of
step s, the two parties go on without the referee: the challenger names the first output
element of n where the two claimed outputs differ, both commit their traces of that
element's program (`protocol.step_programs`) to OneStepVerifier, walk down to the first
differing step, and the honest side hands in that step's operands; the contract executes
it and rules. The client takes no part. Nodes whose operator has no element program are
left to the referee-with-appeal path, and the report says so.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from contracts.embedded_chain import EmbeddedChain
from contracts.step_verifier import PlayedGame, StepVerifier, play
from protocol.step_game import StepPlayer, cheat_values, first_difference, make_setup
from protocol.errors import LocalProtocolError
from protocol.step_programs import COVERED, trace_element
from protocol.step_trace import element_bits
from repops_cupy.hashing import canonical_array

CHALLENGER_SIDE, DEFENDER_SIDE = 0, 1
GAS_TARGET = 5_000_000


@dataclass
class OnChainStep:
    """What the fourth level came to on chain."""

    op: str
    covered: bool
    step: int | None = None
    node: int | None = None
    element: int | None = None
    program_length: int = 0
    cheater_side: int | None = None
    game: PlayedGame | None = None
    located: int | None = None
    outcome: str | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def honest_won(self) -> bool:
        if self.game is None or self.cheater_side is None:
            return False
        return self.outcome == ("defender-won" if self.cheater_side == CHALLENGER_SIDE else "challenger-won")

    def lines(self) -> list[str]:
        if not self.covered:
            return [f"on-chain step: node {self.node} ({self.op}) has no element program; "
                    "the referee-with-appeal path rules there", *self.notes]
        assert self.game is not None
        g = self.game
        out = [f"on-chain step: node {self.node} ({self.op}) of step {self.step}, output element {self.element}, "
               f"a program of {self.program_length} steps",
               f"  level 4: {g.rounds} bisection rounds; the first differing step is {self.located}"]
        for k, tx in enumerate(g.transactions):
            who = {None: "anyone", CHALLENGER_SIDE: "challenger", DEFENDER_SIDE: "defender"}[tx.side]
            out.append(f"  tx {k + 1:3d} {tx.name:8s} ({who:10s}) {tx.gas:>10,} gas")
        worst = g.worst
        out.append(f"  {len(g.transactions)} transactions, {g.total_gas:,} gas in all; worst single transaction "
                   f"{worst.name} {worst.gas:,} gas ({'under' if worst.gas < GAS_TARGET else 'OVER'} 5M)")
        out.append(f"  ruling: {self.outcome} ({'the honest side won' if self.honest_won else 'the honest side LOST'})")
        return out + self.notes

    def to_json(self) -> dict[str, Any]:
        g = self.game
        return {"op": self.op, "covered": self.covered, "step": self.step, "node": self.node,
                "element": self.element, "program_length": self.program_length, "outcome": self.outcome,
                "honest_won": self.honest_won, "located": self.located,
                "rounds": g.rounds if g else 0,
                "transactions": [{"name": t.name, "side": t.side, "gas": t.gas} for t in g.transactions] if g else [],
                "total_gas": g.total_gas if g else 0, "worst_gas": g.worst.gas if g else 0}


def _node_output(oracle: Any, step: int, node: int) -> np.ndarray:
    return canonical_array(np.asarray(oracle.step_values(step, oracle.state_before(step))[node]))


def play_fourth_level(result: Any, honest: Any, *, seed: int = 0,
                      say: Callable[[str], None] = lambda line: None) -> OnChainStep | None:
    """Plays the fourth level on a fresh embedded chain after `result` (a `dispute_sim.SimResult`)
    located a node; None when the descent did not reach a node."""
    verdict = result.verdict
    if verdict is None or verdict.depth < 3 or result.cheater_run is None:
        return None
    step, node = verdict.step, verdict.node
    entry = result.program.entry(node)
    op = getattr(entry, "op", "state outputs")
    report = OnChainStep(op, op in COVERED, step, node)
    if not report.covered:
        return report
    inputs = [np.asarray(x) for x in honest.node_inputs(step, node)]
    true_out = _node_output(honest, step, node)
    claimed = _node_output(result.cheater_run, step, node)
    element = first_difference(true_out, claimed)
    if element is None:
        report.notes.append("  the two outputs of the node agree: nothing to bisect")
        return report
    say(f"level 4: node {node} ({op}), element {element}: both parties trace it")
    attrs = dict(entry.attrs)
    try:
        trace = trace_element(op, attrs, inputs, element)
    except LocalProtocolError as exc:  # attributes the programs do not cover (an axis, gelu's erf form)
        report.covered = False
        report.notes.append(f"  {exc}")
        return report
    if trace.output != element_bits(true_out, element):
        raise RuntimeError(f"the element program of {op} does not give the operator's bits")
    cheater_side = DEFENDER_SIDE if result.cheater_role == "provider" else CHALLENGER_SIDE
    wrong = element_bits(claimed, element)
    # the cheater's best trace: wrong from some step on, ending in the value it claimed
    values = list(cheat_values(trace.spec, element, inputs, trace.values, np.random.default_rng(seed), "step"))
    values[-1] = wrong
    outputs = [true_out, true_out]
    outputs[cheater_side] = claimed
    setup = make_setup(trace.spec, element, inputs, (outputs[0], outputs[1]))
    traces = [trace.values, trace.values]
    traces[cheater_side] = tuple(values)
    players = [StepPlayer(setup, s, traces[s], outputs[s], inputs) for s in (0, 1)]
    chain = EmbeddedChain()
    verifier = StepVerifier.deploy(chain)
    say(f"level 4: OneStepVerifier on the embedded EVM, a trace of {trace.spec.length} steps "
        f"(depth {setup.depth})")
    game = play(verifier, setup, players, (chain.accounts[1], chain.accounts[2]), ruler=1 - cheater_side)
    report.element, report.program_length, report.cheater_side = element, trace.spec.length, cheater_side
    report.game, report.located, report.outcome = game, game.position, game.outcome
    return report
