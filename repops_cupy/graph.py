"""The training-program graph: one step as a list of operator nodes, and its interpreter.

Theory of operation
-------------------
A step of training -- forward, backward and optimizer update -- is a `StepGraph`: a
tuple of `Node`s in one topological order that the program fixes once. Node ``i``
has an id (its position), an op name, canonical attributes, the ids of its inputs
(all smaller than ``i``) and the shape and dtype of its one output.

Nodes whose op is ``"leaf"`` are the step's inputs. Each has a name and a role:
``state`` (parameters, optimizer moments, the running beta powers, the int64 step
counter: everything a checkpoint holds) or ``batch`` (the examples of this step,
rebuilt from the content-addressed dataset and (seed, step) by `repops_cupy.data`).
Every other node is a registered operator: recomputing node ``i`` is
``registry.run(node.op, inputs, node.attrs)`` and needs nothing else.

The graph is the same at every step. Nothing in an attribute depends on the step:
what does (AdamW bias corrections, dropout masks) is computed from state tensors
(the running powers beta^t, the step counter) by operators. A referee therefore
needs only the graph, the agreed state before the step and the batch.

`outputs` names the nodes that give the next state (one per state leaf, same name)
and ``loss``.

Graphs are built by tracing (`GraphBuilder`): model code calls ``b.op("matmul", x,
w)`` on symbolic `Tensor`s; each call runs the operator on example values (to learn
the output's shape and dtype) and records a node. `GraphBuilder.gradients` then walks
the recorded nodes backwards and calls each op's backward rule with the builder as the
``emit`` callback, so every gradient computation is recorded as nodes too; optimizer
nodes follow. `GraphBuilder.finish` drops nodes that no output needs and numbers the
rest.

The interpreter (`execute`) runs a step on NumPy or CuPy, frees each intermediate
after its last use, and can hash every node's output in order: the list that the
second level of a dispute bisects (`node_hashes_root` is its Merkle root). A graph
checks its nodes' arity and attributes once when it is built, so the interpreter
calls each op's forward directly -- the call `registry.run` makes after the same
checks, hence the same bits as `run_node` for a referee.
"""
from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Iterable, Mapping, Sequence

import blake3
import numpy as np

from . import registry
from ._backend import to_device, to_numpy
from .errors import OpError
from .hashing import hash_tensor
from .merkle import leaf_hash, merkle_root_of_hashes

LEAF_OP = "leaf"
LEAF_ROLES = ("state", "batch")
GRAPH_FORMAT = "gavel-step-graph/1"


class GraphError(OpError):
    """A graph that is malformed, or leaf values that do not fit it."""


@dataclass(frozen=True)
class Node:
    id: int
    op: str
    attrs: Mapping[str, Any]
    inputs: tuple[int, ...]
    shape: tuple[int, ...]
    dtype: str

    @property
    def is_leaf(self) -> bool:
        return self.op == LEAF_OP

    @property
    def name(self) -> str:
        """The leaf's name (state or batch tensor)."""
        return self.attrs["name"]

    def to_wire(self) -> dict[str, Any]:
        return {
            "id": self.id, "op": self.op, "attrs": {k: _wire_value(v) for k, v in self.attrs.items()},
            "inputs": list(self.inputs), "shape": list(self.shape), "dtype": self.dtype,
        }

    @classmethod
    def from_wire(cls, obj: Mapping[str, Any]) -> Node:
        op = obj["op"]
        attrs = dict(obj["attrs"])
        if op != LEAF_OP:
            attrs = registry.get(op).canonical_attrs(attrs)
        return cls(int(obj["id"]), op, attrs, tuple(int(i) for i in obj["inputs"]),
                   tuple(int(d) for d in obj["shape"]), str(obj["dtype"]))


def _wire_value(v: Any) -> Any:
    return list(v) if isinstance(v, tuple) else v


@dataclass(frozen=True)
class StepGraph:
    nodes: tuple[Node, ...]
    outputs: Mapping[str, int]
    _last_use: tuple[int, ...] = field(default=(), repr=False, compare=False)
    _frees: tuple[tuple[int, ...], ...] = field(default=(), repr=False, compare=False)
    _dtypes: tuple[np.dtype, ...] = field(default=(), repr=False, compare=False)
    _forwards: tuple[Any, ...] = field(default=(), repr=False, compare=False)

    def __post_init__(self) -> None:
        last = list(range(len(self.nodes)))
        for i, node in enumerate(self.nodes):
            if node.id != i:
                raise GraphError(f"node at position {i} has id {node.id}")
            if node.is_leaf:
                if node.inputs or node.attrs.get("role") not in LEAF_ROLES or not node.attrs.get("name"):
                    raise GraphError(f"leaf node {i} needs a name, a role in {LEAF_ROLES} and no inputs")
            for j in node.inputs:
                if not 0 <= j < i:
                    raise GraphError(f"node {i} ({node.op}) reads node {j}, which does not come before it")
                last[j] = i
        for name, j in self.outputs.items():
            if not 0 <= j < len(self.nodes):
                raise GraphError(f"output {name!r} names node {j}, which does not exist")
        names = [n.name for n in self.nodes if n.is_leaf]
        if len(set(names)) != len(names):
            raise GraphError("two leaves share a name")
        object.__setattr__(self, "_last_use", tuple(last))
        # what the interpreter may free after node i: the values whose last reader is i
        frees: list[list[int]] = [[] for _ in self.nodes]
        for j, i in enumerate(last):
            frees[i].append(j)
        object.__setattr__(self, "_frees", tuple(tuple(f) for f in frees))
        object.__setattr__(self, "_dtypes", tuple(np.dtype(n.dtype) for n in self.nodes))
        # Attributes are checked once here; the interpreter then makes the call that
        # registry.run makes after its checks (forward(*inputs, **canonical attrs)).
        forwards = []
        for node in self.nodes:
            if node.is_leaf:
                forwards.append(None)
                continue
            op = registry.get(node.op)
            if len(node.inputs) != op.arity:
                raise GraphError(f"node {node.id} ({node.op}) has {len(node.inputs)} inputs, the op takes {op.arity}")
            if op.canonical_attrs(node.attrs) != dict(node.attrs):
                raise GraphError(f"node {node.id} ({node.op}) attributes are not canonical: {dict(node.attrs)}")
            forwards.append(op.forward)
        object.__setattr__(self, "_forwards", tuple(forwards))

    # --- structure -------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.nodes)

    def leaves(self, role: str | None = None) -> dict[str, int]:
        """Leaf name -> node id (of one role, or all)."""
        return {n.name: n.id for n in self.nodes if n.is_leaf and (role is None or n.attrs["role"] == role)}

    def state_names(self) -> list[str]:
        return sorted(self.leaves("state"))

    def last_use(self, node_id: int) -> int:
        """Id of the last node that reads `node_id` (itself if none does)."""
        return self._last_use[node_id]

    def op_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for n in self.nodes:
            counts[n.op] = counts.get(n.op, 0) + 1
        return dict(sorted(counts.items()))

    # --- encoding ----------------------------------------------------------------
    def to_wire(self) -> dict[str, Any]:
        return {"format": GRAPH_FORMAT, "nodes": [n.to_wire() for n in self.nodes],
                "outputs": dict(sorted(self.outputs.items()))}

    @classmethod
    def from_wire(cls, obj: Mapping[str, Any]) -> StepGraph:
        if obj.get("format") != GRAPH_FORMAT:
            raise GraphError(f"not a step graph of format {GRAPH_FORMAT}: {obj.get('format')!r}")
        return cls(tuple(Node.from_wire(n) for n in obj["nodes"]), {k: int(v) for k, v in obj["outputs"].items()})

    def to_json(self) -> str:
        return json.dumps(self.to_wire(), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> StepGraph:
        return cls.from_wire(json.loads(text))

    def digest(self) -> bytes:
        """BLAKE3 of the canonical JSON: names the program (two parties must run the same one)."""
        return blake3.blake3(b"gavel/step-graph/v1\0" + self.to_json().encode()).digest()


# --- the interpreter -----------------------------------------------------------------


@dataclass
class StepRun:
    """What one execution gives back.

    outputs: output name -> array, present when the whole graph ran.
    node_hashes: the output hash of every node in order, when asked for.
    values: node id -> array for the nodes asked to be kept (on the device used).
    peak_bytes: the most bytes of node outputs held at once (leaves included).
    """

    outputs: dict[str, Any]
    node_hashes: list[bytes] | None
    values: dict[int, Any]
    peak_bytes: int = 0


def check_leaf_values(graph: StepGraph, leaf_values: Mapping[str, Any]) -> None:
    """Every leaf has a value of its recorded shape and dtype; nothing extra is given."""
    leaves = graph.leaves()
    missing = sorted(set(leaves) - set(leaf_values))
    if missing:
        raise GraphError(f"no value for leaf tensor(s) {missing}")
    extra = sorted(set(leaf_values) - set(leaves))
    if extra:
        raise GraphError(f"values given for unknown leaf tensor(s) {extra}")
    for name, i in leaves.items():
        node, value = graph.nodes[i], leaf_values[name]
        if tuple(value.shape) != node.shape or value.dtype != graph._dtypes[i]:
            raise GraphError(
                f"leaf {name!r}: expected {node.dtype} {node.shape}, got {value.dtype} {tuple(value.shape)}"
            )


def execute(
    graph: StepGraph,
    leaf_values: Mapping[str, Any],
    *,
    xp: ModuleType = np,
    hashes: bool = False,
    keep: Iterable[int] = (),
    stop_after: int | None = None,
    host_outputs: bool = True,
) -> StepRun:
    """Run one step.

    leaf_values: every leaf's array by name (NumPy or already on `xp`; moved to `xp` here).
    hashes: hash every node's output, in order (leaves included).
    keep: node ids whose values are returned in `StepRun.values`.
    stop_after: run nodes 0..stop_after only (then no outputs are returned).
    host_outputs: return outputs as NumPy arrays (else they stay on `xp`).
    Intermediates are freed after their last reader, except kept ones.
    """
    check_leaf_values(graph, leaf_values)
    last = len(graph.nodes) - 1 if stop_after is None else stop_after
    if not 0 <= last < len(graph.nodes):
        raise GraphError(f"stop_after={stop_after} is outside the graph's {len(graph.nodes)} nodes")
    keep_set = set(keep)
    pinned = keep_set | (set(graph.outputs.values()) if stop_after is None else set())
    values: dict[int, Any] = {}
    node_hashes: list[bytes] | None = [] if hashes else None
    kept: dict[int, Any] = {}
    live_bytes = peak_bytes = 0
    frees, dtypes, forwards = graph._frees, graph._dtypes, graph._forwards
    for node in graph.nodes[: last + 1]:
        i = node.id
        if node.is_leaf:
            value = leaf_values[node.name]
            out = np.asarray(value) if xp is np else xp.asarray(value)
        else:
            out = forwards[i](*[values[j] for j in node.inputs], **node.attrs)
            if xp is not np and isinstance(out, np.ndarray):
                out = to_device(out, xp)  # ops without inputs ("full") make host arrays
            if out.shape != node.shape or out.dtype != dtypes[i]:
                raise GraphError(
                    f"node {i} ({node.op}) gave {out.dtype} {tuple(out.shape)}, "
                    f"the graph records {node.dtype} {node.shape}"
                )
        values[i] = out
        live_bytes += out.nbytes
        peak_bytes = max(peak_bytes, live_bytes)
        if node_hashes is not None:
            node_hashes.append(hash_tensor(out))
        if i in keep_set:
            kept[i] = out
        for j in frees[i]:  # includes i itself when nothing reads it
            if j not in pinned:
                live_bytes -= values.pop(j).nbytes
    outputs: dict[str, Any] = {}
    if stop_after is None:
        convert = to_numpy if host_outputs else (lambda a: a)
        outputs = {name: convert(values[i]) for name, i in graph.outputs.items()}
    return StepRun(outputs, node_hashes, kept, peak_bytes)


def node_inputs(graph: StepGraph, leaf_values: Mapping[str, Any], node_id: int, *, xp: ModuleType = np) -> list[np.ndarray]:
    """The input arrays of node `node_id` in the step given by `leaf_values` (host NumPy).

    With them and the node's op and attributes a referee recomputes the node alone.
    """
    node = graph.nodes[node_id]
    if node.is_leaf:
        raise GraphError(f"node {node_id} is the leaf {node.name!r}: it has no inputs")
    run = execute(graph, leaf_values, xp=xp, keep=node.inputs, stop_after=max(node.inputs, default=0))
    return [to_numpy(run.values[j]) for j in node.inputs]


def run_node(op: str, attrs: Mapping[str, Any], inputs: Sequence[Any]) -> Any:
    """Recompute one node from its op name, attributes and input arrays (the referee's call)."""
    if op == LEAF_OP:
        raise GraphError("a leaf is not computed: its value is part of the state or the batch")
    return registry.run(op, inputs, attrs)


def node_hashes_root(hashes: Sequence[bytes]) -> bytes:
    """Merkle root over a step's node-output hashes, in node order."""
    return merkle_root_of_hashes([leaf_hash(h) for h in hashes])


# --- tracing -----------------------------------------------------------------------


class Tensor:
    """A symbolic value while a graph is traced: a node id with its shape and dtype."""

    __slots__ = ("builder", "id", "shape", "dtype")

    def __init__(self, builder: GraphBuilder, node_id: int, shape: tuple[int, ...], dtype: np.dtype) -> None:
        self.builder = builder
        self.id = node_id
        self.shape = shape
        self.dtype = dtype

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))  # exact: integer product of a shape

    def __repr__(self) -> str:
        return f"Tensor(node={self.id}, {self.dtype} {self.shape})"


class GraphBuilder:
    """Records operator calls as nodes; computes them on example values to learn shapes."""

    def __init__(self, *, keep_values: bool = True) -> None:
        """keep_values=False: `gradients` drops each forward example value once its backward
        sweep has passed it (no later op can read it), so a traced step holds about what an
        executed one does instead of every node's value; `value` of a dropped node raises."""
        self._nodes: list[Node] = []
        self._values: list[Any] = []
        self._keep_values = keep_values

    def __len__(self) -> int:
        return len(self._nodes)

    def _append(self, op: str, attrs: Mapping[str, Any], inputs: tuple[int, ...], value: Any) -> Tensor:
        node_id = len(self._nodes)
        shape = tuple(int(d) for d in value.shape)
        self._nodes.append(Node(node_id, op, dict(attrs), inputs, shape, str(value.dtype)))
        self._values.append(value)
        return Tensor(self, node_id, shape, value.dtype)

    def leaf(self, name: str, value: Any, role: str = "state") -> Tensor:
        """A step input: a state tensor (kept across steps) or a batch tensor."""
        if role not in LEAF_ROLES:
            raise GraphError(f"leaf role must be one of {LEAF_ROLES}, got {role!r}")
        if any(n.is_leaf and n.name == name for n in self._nodes):
            raise GraphError(f"leaf {name!r} declared twice")
        value = np.asarray(value)
        return self._append(LEAF_OP, {"name": name, "role": role}, (), value)

    def op(self, name: str, *inputs: Tensor, **attrs: Any) -> Tensor:
        """Record one operator call; returns its symbolic output."""
        opdef = registry.get(name)
        canonical = opdef.canonical_attrs(attrs)
        for x in inputs:
            if not isinstance(x, Tensor) or x.builder is not self:
                raise GraphError(
                    f"{name}: every input must be a Tensor of this graph, got {type(x).__name__}"
                    " (a backward rule may only pass values it was given or got from emit)"
                )
        with np.errstate(all="ignore"):
            value = registry.run(name, [self._values[x.id] for x in inputs], canonical)
        return self._append(name, canonical, tuple(x.id for x in inputs), value)

    def emit(self, name: str, *inputs: Tensor, **attrs: Any) -> Tensor:
        """The ``emit`` callback for backward rules: the same as `op`."""
        return self.op(name, *inputs, **attrs)

    def value(self, t: Tensor) -> Any:
        """The example value computed for `t` while tracing."""
        if self._values[t.id] is None:
            raise GraphError(f"node {t.id}: its example value was dropped (GraphBuilder(keep_values=False))")
        return self._values[t.id]

    def gradients(self, loss: Tensor, wrt: Sequence[Tensor]) -> list[Tensor]:
        """Reverse mode: d loss / d each of `wrt`, recorded as nodes.

        Contributions to one gradient are added with "add" in the order they arise
        (consumers from the last node backwards), so the graph -- and its bits -- are
        fixed by the program. A `wrt` tensor the loss does not depend on gets zeros.
        """
        if loss.shape != ():
            raise GraphError(f"the loss must be a scalar, got shape {loss.shape}")
        targets = {t.id for t in wrt}
        # nodes that depend on some target: only those need gradients
        needs = set()
        for node in self._nodes[: loss.id + 1]:
            if node.id in targets or any(j in needs for j in node.inputs):
                needs.add(node.id)
        contributions: dict[int, list[Tensor]] = {loss.id: [self.op("full", shape=(), value=1.0, dtype="float32")]}
        finished: dict[int, Tensor] = {}
        pending: Counter[int] = Counter()  # emitted gradient id -> contribution lists holding it
        for node in reversed(self._nodes[: loss.id + 1]):
            if not self._keep_values and node.id + 1 < loss.id and not self._nodes[node.id + 1].is_leaf:
                # every reader of the node after this one came later and is done, its
                # backward rule included: nothing traced from here on reads its value
                self._values[node.id + 1] = None
            parts = contributions.pop(node.id, None)
            if parts is None or node.id not in needs:
                continue
            for p in parts:
                pending[p.id] -= 1
            g = parts[0]
            for p in parts[1:]:
                g = self.op("add", g, p)
            if node.id in targets:
                finished[node.id] = g
            if not node.is_leaf:
                inputs = [self._tensor(j) for j in node.inputs]
                grads = registry.vjp(node.op, g, inputs, self._tensor(node.id), node.attrs, emit=self.emit)
                for j, gj in zip(node.inputs, grads):
                    if gj is None or j not in needs:
                        continue
                    if not isinstance(gj, Tensor) or gj.shape != self._nodes[j].shape:
                        raise GraphError(
                            f"backward rule of {node.op} gave {gj!r} for an input of shape {self._nodes[j].shape}"
                        )
                    contributions.setdefault(j, []).append(gj)
                    pending[gj.id] += 1
            if not self._keep_values:
                self._drop_gradient_values(loss.id, [*parts, g], pending, finished)
        out = []
        for t in wrt:
            if t.id in finished:
                out.append(finished[t.id])
            else:
                out.append(self.op("full", shape=t.shape, value=0.0, dtype="float32"))
        return out

    def _drop_gradient_values(self, loss_id: int, used: list[Tensor], pending: Counter[int],
                              finished: dict[int, Tensor]) -> None:
        """Drop the values of gradient parts a backward step has consumed: emitted nodes
        that no pending contribution holds and that are not a requested gradient."""
        keep = {t.id for t in finished.values()}
        for t in used:
            if t.id > loss_id and pending[t.id] == 0 and t.id not in keep:
                self._values[t.id] = None

    def _tensor(self, node_id: int) -> Tensor:
        node = self._nodes[node_id]
        return Tensor(self, node_id, node.shape, np.dtype(node.dtype))

    def finish(self, outputs: Mapping[str, Tensor]) -> StepGraph:
        """The graph of everything `outputs` need (all leaves kept), numbered densely."""
        live = {t.id for t in outputs.values()}
        live.update(n.id for n in self._nodes if n.is_leaf)
        for node in reversed(self._nodes):
            if node.id in live:
                live.update(node.inputs)
        renumber: dict[int, int] = {}
        nodes = []
        for node in self._nodes:
            if node.id not in live:
                continue
            renumber[node.id] = len(nodes)
            nodes.append(Node(len(nodes), node.op, node.attrs, tuple(renumber[j] for j in node.inputs),
                              node.shape, node.dtype))
        return StepGraph(tuple(nodes), {name: renumber[t.id] for name, t in sorted(outputs.items())})
