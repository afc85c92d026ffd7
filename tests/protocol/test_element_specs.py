"""protocol.element_specs: a job's element spec root, and the duel setups proven against it.

The spec of a node is traced once on zeros; the players trace the real inputs at any element: the two
must be the same program, shapes, views and tensor layouts, or an honest player's commitment would not
fit the setup the contract opened."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from protocol.element_specs import (
    NO_SPEC, duel_proofs, duel_setup, element_spec_leaves, element_spec_root, node_element_spec, spec_leaf,
)
from protocol.listtree import list_root
from protocol.step_programs import COVERED, trace_element
from protocol.step_trace import tensor_info
from repops_cupy.graph import execute
from repops_cupy.hashing import hash_tensor
from repops_cupy.jobspec import load_job
from repops_cupy.train import TrainingProgram
from tests.node.test_dispute_sim import JOB


@pytest.fixture(scope="module")
def training(tmp_path_factory):
    path = tmp_path_factory.mktemp("mlp") / "tiny-mlp.toml"
    path.write_text(JOB)
    return TrainingProgram(load_job(path))


@pytest.fixture(scope="module")
def step_values(training):
    graph = training.graph
    run = execute(graph, training.leaf_values(training.initial_state()), keep=range(len(graph)))
    return [np.asarray(run.values[i]) for i in range(len(graph))]


def test_one_leaf_per_node_zero_where_no_program(training):
    graph = training.graph
    leaves = element_spec_leaves(graph)
    assert len(leaves) == len(graph.nodes)
    for node, leaf in zip(graph.nodes, leaves):
        assert (leaf == NO_SPEC) == (node.is_leaf or node.op not in COVERED), node
    assert element_spec_root(graph) == list_root(leaves) != NO_SPEC
    assert len(set(leaves) - {NO_SPEC}) > 10  # nodes of one operator differ by shapes and inputs


def test_the_spec_traced_on_zeros_is_the_players_at_every_element(training, step_values):
    graph = training.graph
    rng = np.random.default_rng(0)
    for node in graph.nodes:
        spec = node_element_spec(graph, node.id)
        if spec is None:
            continue
        inputs = [step_values[j] for j in node.inputs]
        output = step_values[node.id]
        for element in {0, int(rng.integers(0, max(output.size, 1))), output.size - 1}:
            traced = trace_element(node.op, dict(node.attrs), inputs, element)
            assert traced.spec == spec.spec, (node.id, node.op, element)
            node_list = [hash_tensor(v) for v in step_values] + [b"\x00" * 32]
            setup = duel_setup(spec, element, node_list, hash_tensor(output))
            assert setup.inputs == tuple(tensor_info(x) for x in inputs)
            assert setup.outputs == (tensor_info(output), tensor_info(output))
        assert spec_leaf(spec) == element_spec_leaves(graph)[node.id]


def test_duel_proofs_place_the_tensors_in_the_node_list(training, step_values):
    from protocol.listtree import ListProof

    graph = training.graph
    n = next(node.id for node in graph.nodes if node.op == "matmul")
    spec = node_element_spec(graph, n)
    node_list = [hash_tensor(v) for v in step_values] + [b"\x07" * 32]
    leaves = element_spec_leaves(graph)
    proofs = duel_proofs(spec, node_list, leaves)
    size = len(node_list)
    for j, siblings in zip(proofs.input_nodes, proofs.input_proofs):
        assert ListProof(size, j, siblings).verify(list_root(node_list), node_list[j])
    assert ListProof(size, n, proofs.output_proof).verify(list_root(node_list), node_list[n])
    assert ListProof(len(leaves), n, proofs.spec_proof).verify(list_root(leaves), leaves[n])


def test_attributes_a_program_does_not_cover_give_no_spec():
    x = SimpleNamespace(id=0, op="leaf", attrs={"name": "x", "role": "batch"}, inputs=(), shape=(3, 4), dtype="float32",
                        is_leaf=True)
    softmax = SimpleNamespace(id=1, op="softmax", attrs={"axis": 0}, inputs=(0,), shape=(3, 4), dtype="float32",
                              is_leaf=False)
    last = SimpleNamespace(id=2, op="softmax", attrs={"axis": -1}, inputs=(0,), shape=(3, 4), dtype="float32",
                           is_leaf=False)
    graph = SimpleNamespace(nodes=(x, softmax, last))
    assert node_element_spec(graph, 1) is None
    assert element_spec_leaves(graph)[:2] == [NO_SPEC, NO_SPEC]
    assert element_spec_leaves(graph)[2] != NO_SPEC


def test_an_entry_past_the_graph_nodes_has_no_spec():
    # a node list ends with the state after the step: a pick there is the referee's, not a duel's
    x = SimpleNamespace(id=0, op="leaf", attrs={"name": "x", "role": "batch"}, inputs=(), shape=(3, 4), dtype="float32",
                        is_leaf=True)
    graph = SimpleNamespace(nodes=(x,))
    assert node_element_spec(graph, 1) is None
    assert node_element_spec(graph, -1) is None
