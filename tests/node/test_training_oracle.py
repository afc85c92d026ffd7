"""TrainingOracle: a dispute party's answers are the training program's own, and the referee can recompute them."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from protocol import (
    DEFENDER, DisputeParty, DisputeRules, Identity, StateOutputs, TensorPayload, decode_program_leaf,
    hash_tree, state_root,
)
from repops_cupy import registry
from repops_cupy.hashing import hash_tensor
from repops_cupy.jobspec import load_job
from repops_cupy.train import TrainingProgram, train

from protocol.program import decode_program_leaf, encode_program_leaf
from node import training_oracle
from node.training_oracle import StageTimer, TrainingOracle, batch_hashes, job_terms, protocol_program

MLP_JOB = """
[job]
name = "tiny-mlp"
seed = 3
steps = 7
batch_size = 8
checkpoint_interval = 3

[data]
kind = "synthetic"
n_samples = 64
n_features = 4
n_classes = 3

[model]
kind = "mlp"
hidden = [8]
dropout = 0.1

[optimizer]
kind = "sgd"
lr = 0.1
momentum = 0.9
weight_decay = 0.0001
"""

# the smallest GPT: attention brings causal_mask, whose fill of -inf the wire cannot carry
GPT_JOB = """
[job]
name = "micro-gpt"
seed = 5
steps = 3
batch_size = 2
checkpoint_interval = 2

[data]
kind = "text"
path = "builtin:sonnets"
context = 8

[model]
kind = "gpt"
d_model = 8
n_layers = 1
n_heads = 2
d_ff = 16
dropout = 0.1

[optimizer]
kind = "adamw"
lr = 0.01
weight_decay = 0.01
"""


@pytest.fixture(scope="module", autouse=True)
def one_numba_thread():
    """These arrays are tiny: starting numba's threads costs more than the work (the bits are the same)."""
    numba = pytest.importorskip("numba")
    before = numba.get_num_threads()
    numba.set_num_threads(1)
    yield
    numba.set_num_threads(before)


def _training(tmp_path_factory, text: str) -> TrainingProgram:
    path = tmp_path_factory.mktemp("job") / "job.toml"
    path.write_text(text)
    return TrainingProgram(load_job(path))


@pytest.fixture(scope="module")
def mlp(tmp_path_factory) -> TrainingProgram:
    return _training(tmp_path_factory, MLP_JOB)


@pytest.fixture(scope="module")
def gpt(tmp_path_factory) -> TrainingProgram:
    return _training(tmp_path_factory, GPT_JOB)


def _states(training: TrainingProgram) -> list[dict]:
    """The states after steps 0..T by the training program's own loop."""
    states = [training.initial_state()]
    for _ in range(training.spec.steps):
        states.append(training.run_step(states[-1]).state)
    return states


def test_checkpoints_are_those_of_the_training_loop(mlp, tmp_path):
    trace = train(mlp.spec, tmp_path / "run", program=mlp)
    oracle = TrainingOracle(mlp)
    states = list(oracle.checkpoint_states())
    assert states == [bytes.fromhex(c["state_hash"]) for c in trace.checkpoints]
    assert [c["step"] for c in trace.checkpoints] == [0, 3, 6, 7]
    assert hash_tree(states).root == trace.root  # the protocol's trace tree is the trainer's


def test_interval_and_node_answers_are_the_training_programs(mlp):
    oracle = TrainingOracle(mlp)
    states = _states(mlp)
    checkpoints = oracle.checkpoint_states()
    for c in range(oracle.schedule.intervals):
        start = oracle.schedule.checkpoint_step(c)
        n = len(oracle.schedule.interval_steps(c))
        assert list(oracle.step_states(c)) == [checkpoints[c]] + mlp.state_hashes(states[start], n)
    graph = mlp.graph
    for s in (1, 5, 7):
        assert list(oracle.node_outputs(s)) == mlp.node_hashes(states[s - 1])
        for node in (n for n in graph.nodes if not n.is_leaf):
            ours, theirs = oracle.node_inputs(s, node.id), mlp.node_inputs(states[s - 1], node.id)
            assert len(ours) == len(theirs) == len(node.inputs)
            assert all(a.dtype == b.dtype and np.array_equal(a, b) for a, b in zip(ours, theirs))
    for s in range(mlp.spec.steps + 1):
        assert state_root(oracle.state_tensor_hashes(s)) == oracle.state_hashes[s]
        assert oracle.state_tensor_hashes(s) == {k: hash_tensor(v) for k, v in states[s].items()}


@pytest.mark.parametrize("job", ["mlp", "gpt"])
def test_the_referee_recomputes_every_node_from_the_committed_program(job, request):
    training = request.getfixturevalue(job)
    oracle = TrainingOracle(training)
    program = oracle.program()
    s = 2
    outputs = list(oracle.node_outputs(s))
    assert len(outputs) == len(training.graph.nodes) == program.size - 1
    batch = batch_hashes(training)(s)
    for n in range(program.size):
        entry = decode_program_leaf(program.leaves[n])  # what the referee gets, from the wire
        assert program.proof(n).verify(program.root, program.leaves[n])
        if isinstance(entry, StateOutputs):
            assert state_root(dict(zip(entry.names, (outputs[m] for m in entry.nodes)))) == oracle.state_hashes[s]
        elif entry.is_leaf and entry.leaf_role == "batch":
            assert batch[entry.leaf_name] == outputs[n]
        elif entry.is_leaf:
            assert oracle.state_tensor_hashes(s - 1)[entry.leaf_name] == outputs[n]
        else:
            tensors = [TensorPayload.from_array(a).to_array() for a in oracle.node_inputs(s, n)]
            assert hash_tensor(registry.run(entry.op, tensors, entry.attrs)) == outputs[n], (n, entry.op)


def test_program_carries_every_attribute_through_the_wire(gpt):
    masks = [n for n in gpt.graph.nodes if n.op == "causal_mask" and n.attrs["fill"] == float("-inf")]
    assert masks
    program = protocol_program(gpt)
    for node in masks:
        entry = decode_program_leaf(encode_program_leaf(program.nodes[node.id]))
        assert entry.attrs["fill"] == float("-inf")


def test_job_terms_commit_to_the_run(mlp):
    client = Identity(bytes([7]) * 32)
    oracle = TrainingOracle(mlp)
    rules = DisputeRules(move_timeout_ms=1000, clock_ms=10_000)
    signed = job_terms(mlp, client, rules=rules, nonce=4)
    terms = signed.terms
    assert signed.verify() and terms.client == client.node_id and terms.rules == rules
    assert (terms.program_root, terms.program_size) == (oracle.program().root, oracle.program().size)
    assert terms.initial_state == oracle.checkpoint_states()[0]
    assert (terms.steps, terms.checkpoint_every) == (7, 3)
    assert terms.data_root == mlp.dataset.root() and terms.config_hash == mlp.identity()
    party = DisputeParty(identity=Identity(bytes([8]) * 32), terms=signed, oracle=oracle, role="provider",
                         side=DEFENDER)
    assert party.program.root == terms.program_root
    assert party.trace_root.root == hash_tree(oracle.checkpoint_states()).root


def test_a_run_that_takes_another_runs_prefix_ends_the_same(mlp):
    full = TrainingOracle(mlp)
    full.train()
    for prefix_steps in (1, 3, 5, 7):
        shortcut = TrainingOracle(mlp)
        shortcut.train(prefix=full, prefix_steps=prefix_steps)
        assert shortcut.state_hashes == full.state_hashes
        assert shortcut.checkpoint_states() == full.checkpoint_states()
        assert list(shortcut.step_states(2)) == list(full.step_states(2))


def test_stage_timer_charges_nested_time_to_the_inner_stage(monkeypatch):
    # The timer's clock, moved by hand: each stage is charged exactly what passed in it.
    now = [100.0]
    monkeypatch.setattr(training_oracle, "time", SimpleNamespace(perf_counter=lambda: now[0]))
    timer = StageTimer()
    with timer.stage("outer"):
        now[0] += 1
        with timer.stage("inner"):
            now[0] += 10
        now[0] += 2
    assert timer.seconds["inner"] == 10
    assert timer.seconds["outer"] == 3  # before and after the inner stage, not during it
    assert timer.total() == 13
    with timer.stage("inner"):  # a stage entered again adds up
        now[0] += 4
    assert timer.seconds["inner"] == 14 and timer.total() == 17
