"""The committed step program and its entries."""
from __future__ import annotations

import numpy as np
import pytest

from protocol import (
    LocalProtocolError, NodeSpec, Program, RemoteProtocolError, StateOutputs, decode_program_leaf,
    encode_program_leaf,
)
from protocol.wire import packb

LEAVES = [NodeSpec("leaf", {"name": "w", "role": "state"}, ()), NodeSpec("leaf", {"name": "x", "role": "batch"}, ())]


def test_program_tree_commits_to_every_node_and_the_state_outputs():
    nodes = LEAVES + [NodeSpec("add", {}, (0, 1)), NodeSpec("mul_scalar", {"value": 0.5}, (2,))]
    program = Program(nodes, {"w": 3})
    assert program.size == 5 and program.entry(4) == StateOutputs(("w",), (3,))
    assert program.state_leaves == {"w": 0}
    for i in range(program.size):
        assert program.proof(i).verify(program.root, program.leaves[i], size=5, index=i)
        assert decode_program_leaf(program.leaves[i]) == program.entry(i)
    changed = Program(nodes[:3] + [NodeSpec("mul_scalar", {"value": 0.25}, (2,))], {"w": 3})
    assert changed.root != program.root


@pytest.mark.parametrize("nodes,outputs", [
    ([], {}),
    (LEAVES + [NodeSpec("add", {}, (0, 3))], {"w": 2}),       # reads a later node
    (LEAVES + [NodeSpec("add", {}, (0, 2))], {"w": 2}),       # reads itself
    (LEAVES + [NodeSpec("add", {}, (0, 1))], {"w": 9}),       # output names no node
    (LEAVES + [NodeSpec("add", {}, (0, 1))], {"v": 2}),       # output is not a state leaf
    (LEAVES + [NodeSpec("add", {}, (0, 1))], {}),             # a state leaf without output
])
def test_malformed_programs_are_refused(nodes, outputs):
    with pytest.raises(LocalProtocolError):
        Program(nodes, outputs)


def test_node_specs_validate_themselves():
    for bad in (lambda: NodeSpec("leaf", {"name": "w"}, ()), lambda: NodeSpec("leaf", {"name": "w", "role": "x"}, ()),
                lambda: NodeSpec("leaf", {"name": "w", "role": "state"}, (0,)), lambda: NodeSpec("", {}, ()),
                lambda: StateOutputs(("b", "a"), (1, 2)), lambda: StateOutputs(("a",), (1, 2))):
        with pytest.raises(LocalProtocolError):
            bad()


def test_decoding_entries_is_strict():
    good = encode_program_leaf(LEAVES[0])
    for bad in (packb(["node"]), packb(["other", {}]), packb({"kind": "node"}), good[:-1], good + b"\x00"):
        with pytest.raises(RemoteProtocolError):
            decode_program_leaf(bad)


def test_from_a_real_step_graph():
    graph_module = pytest.importorskip("repops_cupy.graph")
    import repops_cupy.ops  # noqa: F401 - registers the operators the graph uses
    b = graph_module.GraphBuilder()
    w = b.leaf("w", np.ones((2, 2), np.float32))
    x = b.leaf("x", np.full((2, 2), 2.0, np.float32), role="batch")
    y = b.op("add", w, x)
    graph = b.finish({"w": b.op("mul", y, w), "loss": y})
    program = Program.from_step_graph(graph)
    assert program.size == len(graph.nodes) + 1
    assert [n.op for n in program.nodes] == [n.op for n in graph.nodes]
    assert program.outputs.as_dict() == {"w": graph.outputs["w"]}
    assert all(decode_program_leaf(leaf) == program.entry(i) for i, leaf in enumerate(program.leaves))
