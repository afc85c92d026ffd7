"""The committed step program: which operator every node of a step runs, on what.

A step of training is a list of nodes in one topological order that is the same at
every step (`repops_cupy.graph.StepGraph`). Node n either is a *leaf* (op
``"leaf"``, attributes ``name`` and ``role``: a tensor of the state before the step
or of the step's batch) or runs a registered operator on the outputs of earlier
nodes. After the nodes comes one more entry, `StateOutputs`: which node gives each
tensor of the state after the step.

The job's terms commit to the program by a Merkle root over those N + 1 entries, so
a referee who must recompute node n needs only that node's entry, proven against
the root: the parties cannot argue about what node n is.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from .errors import LocalProtocolError, RemoteProtocolError
from .merkle import MAX_TREE_SIZE, InclusionProof, MerkleTree
from .wire import OpAttrs, SeqOf, Text, UInt, WireStruct, packb, remote, unpackb_canonical, wire

LEAF_OP = "leaf"
LEAF_ROLES = ("state", "batch")
MAX_INPUTS = 64
MAX_STATE_TENSORS = 4096
MAX_PROGRAM_LEAF_SIZE = 1 << 20


@dataclass(frozen=True)
class NodeSpec(WireStruct):
    op: str = field(metadata=wire(Text(128, empty=False)))
    attrs: dict = field(metadata=wire(OpAttrs()))
    inputs: tuple[int, ...] = field(metadata=wire(SeqOf(UInt(0, MAX_TREE_SIZE), MAX_INPUTS)))

    def _validate(self) -> None:
        if self.op == LEAF_OP:
            if self.inputs or set(self.attrs) != {"name", "role"} or self.attrs["role"] not in LEAF_ROLES \
                    or type(self.attrs["name"]) is not str or not self.attrs["name"]:
                raise LocalProtocolError(f"a leaf node has no inputs and attributes name and role in {LEAF_ROLES}")

    @property
    def is_leaf(self) -> bool:
        return self.op == LEAF_OP

    @property
    def leaf_name(self) -> str:
        return self.attrs["name"]

    @property
    def leaf_role(self) -> str:
        return self.attrs["role"]


_NAME = Text(256, empty=False)


@dataclass(frozen=True)
class StateOutputs(WireStruct):
    """The state after a step: tensor `names[i]` is the output of node `nodes[i]`; names in state order."""

    names: tuple[str, ...] = field(metadata=wire(SeqOf(_NAME, MAX_STATE_TENSORS, min_len=1)))
    nodes: tuple[int, ...] = field(metadata=wire(SeqOf(UInt(0, MAX_TREE_SIZE), MAX_STATE_TENSORS, min_len=1)))

    def _validate(self) -> None:
        if len(self.names) != len(self.nodes):
            raise LocalProtocolError("state outputs need one node per name")
        keys = [n.encode() for n in self.names]
        if keys != sorted(set(keys)):
            raise LocalProtocolError("state output names must be unique and in UTF-8 byte order")

    def as_dict(self) -> dict[str, int]:
        return dict(zip(self.names, self.nodes))


def encode_program_leaf(entry: NodeSpec | StateOutputs) -> bytes:
    tag = "node" if isinstance(entry, NodeSpec) else "outputs"
    return packb([tag, entry.to_wire()])


def decode_program_leaf(data: bytes) -> NodeSpec | StateOutputs:
    """Strictly decode one program entry; raises only RemoteProtocolError."""
    raw = unpackb_canonical(data, max_size=MAX_PROGRAM_LEAF_SIZE)

    def build() -> NodeSpec | StateOutputs:
        if type(raw) is not list or len(raw) != 2 or raw[0] not in ("node", "outputs"):
            raise RemoteProtocolError("a program entry is [\"node\" | \"outputs\", {...}]")
        return (NodeSpec if raw[0] == "node" else StateOutputs).from_wire(raw[1])

    return remote(build)


class Program:
    """The step program: its nodes, its state outputs, and the Merkle tree the job commits to."""

    def __init__(self, nodes: Sequence[NodeSpec], state_outputs: Mapping[str, int]) -> None:
        self.nodes = tuple(nodes)
        names = sorted(state_outputs, key=lambda n: n.encode())
        self.outputs = StateOutputs(tuple(names), tuple(int(state_outputs[n]) for n in names))
        n_nodes = len(self.nodes)
        if n_nodes < 1:
            raise LocalProtocolError("a program has at least one node")
        state_leaves = {}
        for i, node in enumerate(self.nodes):
            if any(j >= i for j in node.inputs):
                raise LocalProtocolError(f"node {i} ({node.op}) reads a node that does not come before it")
            if node.is_leaf and node.leaf_role == "state":
                state_leaves[node.leaf_name] = i
        if any(j >= n_nodes for j in self.outputs.nodes):
            raise LocalProtocolError("a state output names a node that does not exist")
        if set(state_leaves) != set(names):
            raise LocalProtocolError("the state outputs must name exactly the program's state leaves")
        self.state_leaves: dict[str, int] = state_leaves
        self.leaves = [encode_program_leaf(x) for x in self.nodes] + [encode_program_leaf(self.outputs)]
        self.tree = MerkleTree.from_data(self.leaves)

    @classmethod
    def from_step_graph(cls, graph: Any) -> Program:
        """From a `repops_cupy.graph.StepGraph` (read through its attributes only)."""
        nodes = [
            NodeSpec(node.op, {k: _attr(node.attrs[k]) for k in sorted(node.attrs)}, tuple(int(j) for j in node.inputs))
            for node in graph.nodes
        ]
        state = {name: graph.outputs[name] for name in graph.state_names()}
        return cls(nodes, state)

    @property
    def size(self) -> int:
        """Leaves of the program tree: N nodes and the state outputs."""
        return len(self.leaves)

    @property
    def root(self) -> bytes:
        return self.tree.root

    def entry(self, index: int) -> NodeSpec | StateOutputs:
        return self.nodes[index] if index < len(self.nodes) else self.outputs

    def proof(self, index: int) -> InclusionProof:
        return self.tree.inclusion_proof(index)


def _attr(value: Any) -> Any:
    return tuple(int(v) for v in value) if isinstance(value, (tuple, list)) else value
