"""The claim game's lists over a real training job: they join the trace as the contract checks, and
`first_difference` finds a cheater's first wrong interval, step and node."""
from __future__ import annotations

import numpy as np
import pytest

from contracts.abi import ContractAbi
from contracts.artifacts import load_artifact
from contracts.embedded_chain import EmbeddedChain
from node.cheats import FlippedBit, WrongNodeOutput
from node.training_oracle import TrainingOracle
from protocol.claim_lists import (
    first_difference, first_wrong_interval, node_list, node_list_proof, step_index, steps_list, steps_proofs,
)
from protocol.errors import LocalProtocolError
from protocol.listtree import list_root
from repops_cupy.jobspec import load_job
from repops_cupy.train import TrainingProgram
from tests.node.test_training_oracle import MLP_JOB  # 7 steps, a checkpoint every 3: intervals [1-3], [4-6], [7]

WRONG_STEP = 5  # interval 1, its step j = 2


@pytest.fixture(scope="module")
def training(tmp_path_factory) -> TrainingProgram:
    path = tmp_path_factory.mktemp("job") / "job.toml"
    path.write_text(MLP_JOB)
    return TrainingProgram(load_job(path))


@pytest.fixture(scope="module")
def honest(training) -> TrainingOracle:
    oracle = TrainingOracle(training)
    oracle.train()
    return oracle


def operator_nodes(oracle: TrainingOracle) -> list[int]:
    return [i for i, n in enumerate(oracle.program().nodes) if not n.is_leaf]


def wrong_node_at(training: TrainingProgram, honest: TrainingOracle, step: int, node: int) -> TrainingOracle:
    """A run whose node `node` of step `step` outputs its true value plus one."""
    return WrongNodeOutput(training, at=step, node=node, change=lambda v: v + np.ones_like(v),
                           program=honest.program())


def test_steps_lists_join_the_trace_and_node_lists_join_their_step(honest):
    trace = list(honest.checkpoint_states())
    schedule = honest.schedule
    program_size = honest.program().size
    for c in range(schedule.intervals):
        steps = steps_list(honest, c)
        assert len(steps) == len(schedule.interval_steps(c)) + 1
        assert (steps[0], steps[-1]) == (trace[c], trace[c + 1])
        for s in schedule.interval_steps(c):
            nodes = node_list(honest, s)
            assert step_index(schedule, s) == (c, s - schedule.checkpoint_step(c))
            assert len(nodes) == program_size  # N node outputs and the state after: the program's N + 1 entries
            assert nodes[:-1] == list(honest.node_outputs(s))
            assert nodes[-1] == steps[s - schedule.checkpoint_step(c)] == honest.state_hashes[s]


def test_proofs_are_those_post_steps_and_post_nodes_check(honest):
    trace = list(honest.checkpoint_states())
    root = list_root(trace)
    c, j = step_index(honest.schedule, WRONG_STEP)
    start, end = steps_proofs(trace, c)
    assert start.verify(root, trace[c], size=len(trace), index=c)
    assert end.verify(root, trace[c + 1], size=len(trace), index=c + 1)
    steps = steps_list(honest, c)
    proof = node_list_proof(steps, j)
    assert proof.verify(list_root(steps), node_list(honest, WRONG_STEP)[-1], size=len(steps), index=j)
    assert not proof.verify(list_root(steps), steps[j - 1], size=len(steps), index=j)
    with pytest.raises(LocalProtocolError):
        steps_proofs(trace, len(trace) - 1)  # the last checkpoint starts no interval
    with pytest.raises(LocalProtocolError):
        node_list_proof(steps, 0)  # entry 0 is the checkpoint, no step's

    # the contract's own LibList accepts the same proofs and roots
    chain = EmbeddedChain()
    artifact = load_artifact("LibListHarnessV2")
    abi = ContractAbi(artifact.abi)
    address = chain.transact(chain.accounts[0], None, artifact.bytecode, gas=2_000_000).contract_address

    def call(name, *args):
        return abi.decode_result(name, chain.call(address, abi.encode_call(name, *args)))[0]

    assert call("root", steps) == list_root(steps)
    assert call("verify", root, trace[c + 1], len(trace), c + 1, list(end.siblings))
    assert call("verify", list_root(steps), steps[j], len(steps), j, list(proof.siblings))


def test_first_difference_finds_a_wrong_operators_interval_step_and_node(training, honest):
    node = operator_nodes(honest)[3]
    cheat = wrong_node_at(training, honest, WRONG_STEP, node)
    c, j = step_index(honest.schedule, WRONG_STEP)
    assert first_wrong_interval(honest.checkpoint_states(), cheat.checkpoint_states()) == c
    assert first_difference(steps_list(honest, c), steps_list(cheat, c)) == j
    assert first_difference(node_list(honest, WRONG_STEP), node_list(cheat, WRONG_STEP)) == node
    assert first_difference(node_list(honest, WRONG_STEP - 1), node_list(cheat, WRONG_STEP - 1)) is None


def test_a_state_changed_after_its_step_differs_first_at_the_node_lists_last_entry(training, honest):
    """Every node output right, the state after wrong: only entry N (the StateOutputs entry) differs."""
    name = next(n for n in honest.program().outputs.names if n != "step")
    cheat = FlippedBit(training, at=WRONG_STEP, name=name, index=0, bit=3, program=honest.program())
    ours, theirs = node_list(honest, WRONG_STEP), node_list(cheat, WRONG_STEP)
    assert first_difference(ours, theirs) == len(ours) - 1 == honest.program().size - 1


def test_first_difference_of_equal_and_of_mismatched_lists():
    a, b = [bytes([1]) * 32, bytes([2]) * 32], [bytes([1]) * 32, bytes([3]) * 32]
    assert first_difference(a, a) is None
    assert first_difference(a, b) == 1
    with pytest.raises(LocalProtocolError, match="different claims"):
        first_difference(a, a[:1])  # a prefix is no answer to the same claim
    with pytest.raises(LocalProtocolError, match="checkpoint 0"):
        first_wrong_interval(b[::-1], a)
    assert first_wrong_interval(a, b) == 0 and first_wrong_interval(a, a) is None
