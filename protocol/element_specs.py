"""A job's element specs: what a duel of the fourth level is proven against (issue 18).

Theory of operation
-------------------
Levels 1-3 of a claim game end at node n of a step's node list. Where n's operator has an
element program (`protocol.step_programs`), a claimant may play that node on OneStepVerifier
instead of waiting for a referee (GavelRefereesV2's ``openStepGame``). The game's setup has two
parts. What it is about (the element, the inputs' and the two claimed outputs' tensor hashes) comes
from the claim: the inputs are earlier entries of the node list, the defender's output is entry n.
How to compute it (the program, the output shape, the views, each tensor's layout in its hashed
message, which node-list entries the inputs are) is a function of the committed step graph alone:
the node's *element spec*, agreed when the job is accepted.

The job terms carry ``elementSpecRoot``: a LibList (`protocol.listtree`) over one leaf per graph
node, keccak(abi.encode(setup, inputNodes)) with every tensor root and the element of the setup
zeroed, or zero for a leaf node, a node with no element program (its operator, or attributes its
program does not cover) and a node whose program is longer than `MAX_SPEC_STEPS`. The client computes it when it opens the job; a provider recomputes it from
the graph it checked against the program root before it takes a seat. ``openStepGame`` hashes the
setup it is handed the same way and proves the leaf at n, so the contract plays only the program
every party agreed to. A zero root offers no fourth level.

Programs never branch on a value or on the element, so the spec is traced once, on zeros of the
inputs' shapes and dtypes (`protocol.step_programs.element_spec`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
from eth_abi import encode as abi_encode
from .keccak import keccak

from repops_cupy.hashing import tensor_layout

from .errors import LocalProtocolError
from .listtree import ListTree
from .step_game import StepSetup
from .step_programs import COVERED, element_spec
from .step_trace import ElementSpec, TensorInfo

__all__ = ["ElementNode", "StepGameProofs", "duel_proofs", "duel_setup", "element_spec_leaves", "element_spec_root",
           "node_element_spec", "spec_leaf"]

_TENSOR = "(bytes32,uint64,uint64,uint64)"
SETUP_ABI = f"(bytes32,uint64,uint64,uint64[],{_TENSOR}[],uint64[],uint64[],{_TENSOR}[2])"
NO_SPEC = bytes(32)
# The longest element program a job's terms offer on chain: every party traces and hashes each
# node's program before it takes a seat (tiny-gpt's cross entropy, 1.36M steps, took 45 s of its
# 66 s; every other node of it is under 2^18). A longer node keeps the referee with appeal.
MAX_SPEC_STEPS = 2**18


@dataclass(frozen=True)
class ElementNode:
    """Node n's element spec, and the layouts (zero roots) and node-list entries of its tensors."""

    node: int
    spec: ElementSpec
    inputs: tuple[TensorInfo, ...]
    output: TensorInfo
    input_nodes: tuple[int, ...]

    def setup(self, element: int = 0, input_roots: Sequence[bytes] | None = None,
              output_roots: tuple[bytes, bytes] = (NO_SPEC, NO_SPEC)) -> StepSetup:
        """The setup of a duel on `element` (roots default to zero: the spec's leaf form)."""
        roots = list(input_roots) if input_roots is not None else [NO_SPEC] * len(self.inputs)
        if len(roots) != len(self.inputs):
            raise LocalProtocolError(f"node {self.node} has {len(self.inputs)} inputs, {len(roots)} roots given")
        inputs = tuple(TensorInfo(r, t.header, t.size, t.item) for r, t in zip(roots, self.inputs))
        outputs = tuple(TensorInfo(r, self.output.header, self.output.size, self.output.item) for r in output_roots)
        return StepSetup(self.spec, element, inputs, outputs)  # type: ignore[arg-type]


def _layout(shape: Sequence[int], dtype: Any) -> TensorInfo:
    return TensorInfo(NO_SPEC, *tensor_layout(shape, dtype))


def node_element_spec(graph: Any, n: int) -> ElementNode | None:
    """Node n of a step graph (`repops_cupy.graph.StepGraph`, read through its attributes) with its
    element spec; None for a leaf, a node the element programs do not cover, or an n past the
    nodes (a node list's last entry is the state after the step: the referee rules it)."""
    if not 0 <= n < len(graph.nodes):
        return None
    node = graph.nodes[n]
    if node.op not in COVERED:
        return None
    sources = [graph.nodes[j] for j in node.inputs]
    spec = _traced_spec(node.op, repr(sorted(dict(node.attrs).items())),
                        tuple((tuple(s.shape), np.dtype(s.dtype).str) for s in sources), dict(node.attrs))
    if spec is None or spec.length > MAX_SPEC_STEPS:
        return None
    return ElementNode(n, spec, tuple(_layout(s.shape, s.dtype) for s in sources), _layout(node.shape, node.dtype),
                       tuple(int(j) for j in node.inputs))


_TRACED: dict[tuple, ElementSpec | None] = {}


def _traced_spec(op: str, attrs_key: str, sources: tuple, attrs: dict) -> ElementSpec | None:
    """The element spec of `op` on inputs of these (shape, dtype)s, traced once per process: a graph
    repeats its layers' nodes, and every node of a process (a client, its providers' checks) shares it.
    Keyed by `attrs_key`, the attributes' repr."""
    key = (op, attrs_key, sources)
    if key not in _TRACED:
        try:
            _TRACED[key] = element_spec(op, attrs, [np.zeros(shape, dtype) for shape, dtype in sources])
        except LocalProtocolError:  # attributes its program does not cover (softmax off the last axis)
            _TRACED[key] = None
    return _TRACED[key]


def spec_leaf(node: ElementNode) -> bytes:
    """keccak(abi.encode(setup, inputNodes)) with the roots and element zeroed: openStepGame's leaf."""
    return keccak(abi_encode([SETUP_ABI, "uint32[]"], [node.setup().as_abi(), list(node.input_nodes)]))


def element_spec_leaves(graph: Any) -> list[bytes]:
    """One leaf per graph node: its spec leaf, or zero where it has no element program."""
    leaves = []
    for n in range(len(graph.nodes)):
        node = node_element_spec(graph, n)
        leaves.append(NO_SPEC if node is None else spec_leaf(node))
    return leaves


def element_spec_root(graph: Any) -> bytes:
    """The job terms' elementSpecRoot of a step graph (never zero: a list root is a hash)."""
    return ListTree(element_spec_leaves(graph)).root


@dataclass(frozen=True)
class StepGameProofs:
    """openStepGame's proofs: the node-list entries of the inputs with their proofs, the defender's
    output (entry n) proof, and the spec leaf's proof against elementSpecRoot."""

    input_nodes: tuple[int, ...]
    input_proofs: tuple[tuple[bytes, ...], ...]
    output_proof: tuple[bytes, ...]
    spec_proof: tuple[bytes, ...]

    def as_abi(self) -> tuple:
        return (list(self.input_nodes), [list(p) for p in self.input_proofs], list(self.output_proof),
                list(self.spec_proof))


def duel_setup(node: ElementNode, element: int, node_list: Sequence[bytes], challenger_output: bytes) -> StepSetup:
    """The setup of a duel on `element` of node n against the seat(s) covering `node_list`: the inputs'
    hashes are its entries, the defender's output its entry n, the challenger's its own claimed output."""
    roots = [node_list[j] for j in node.input_nodes]
    return node.setup(element, roots, (challenger_output, node_list[node.node]))


def duel_proofs(node: ElementNode, node_list: Sequence[bytes], spec_leaves: Sequence[bytes]) -> StepGameProofs:
    """The proofs openStepGame checks, from the defended node list and the job's spec leaves."""
    entries = ListTree(node_list)
    return StepGameProofs(node.input_nodes, tuple(tuple(entries.proof(j).siblings) for j in node.input_nodes),
                          tuple(entries.proof(node.node).siblings), tuple(ListTree(spec_leaves).proof(node.node).siblings))
