"""One step graph run by several workers, each on its share of the batch, with the same bits.

Theory of operation
-------------------
A job's batch of B examples is cut into contiguous shares, one per worker (`shares`).
Which values of the step graph follow the batch is read off the program itself: the
graph traced at batch B and at batch B + 1 has the same nodes, and a node whose shape
differs has exactly one axis that grows with the batch, c elements per example, laid
out example after example (`split_plan`). Worker r holds rows [c * e0, c * e1) of such a
value, where [e0, e1) are its examples; every other value it holds whole, like every
other worker.

Each node is run one of five ways (`NodeSplit.how`):

- ``replicated``: no input follows the batch; every worker computes the whole node.
- ``local``: an op whose output rows depend on the same rows of its inputs only
  (elementwise, per-row softmax and layer norm, products whose rows or batch follow the
  batch, reshapes of the leading axis): each worker computes its rows, the bits of the
  same rows of the whole node, since every op's output element is a pure function of
  the inputs it reads.
- ``embed``: an op whose rows are independent but that reads the batch's whole extent
  or the position of a row (cross_entropy_grad divides by the row count, dropout draws
  by position): the worker's rows are placed at their offset in a zero array of the
  whole shape, the op runs on that, and the worker keeps its rows. No communication.
- ``matmul_k``: a product whose summed axis K follows the batch (weight gradients
  X^T dY): the exponent shifts come from the MAX over workers of each row's and
  column's largest |value| (exact), each worker forms the exact integer sums of its
  share of K, the workers SUM those int64 sums (exact) and each rounds once. The bits
  are those of the one-device product because the specification's V is one integer.
- ``gather``: anything else that reads rows of the batch (bias and layer-norm gradients,
  the loss, embedding gradients: float64 trees whose shape depends on the whole length):
  the workers gather the inputs' rows and each computes the node whole, exactly as one
  device does, keeping its rows when the output follows the batch.

The NumPy step graph stays the reference: a referee recomputes one node of it on one
CPU, and nothing here changes a node or a bit, only who computes which rows.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable, Mapping

import numpy as np

from . import _matmul_spec as mspec
from .graph import GraphError, StepGraph, check_leaf_values
from .matmul import exact_sums, round_sums
from .parallel_comm import Communicator

# output rows depend on the same rows of the inputs only, and on nothing positional
ROWWISE_OPS = frozenset({
    "add", "sub", "mul", "div", "neg", "mul_scalar", "add_scalar", "relu", "relu_grad", "gelu", "gelu_grad",
    "exp", "log", "tanh", "erf", "sigmoid", "sqrt", "rsqrt", "tanh_grad", "sigmoid_grad", "erf_grad",
    "sqrt_grad", "rsqrt_grad", "softmax", "softmax_grad", "log_softmax", "log_softmax_grad", "layer_norm",
    "layer_norm_grad_x", "causal_mask", "embedding", "reshape", "transpose", "matmul",
})
# rows independent, but the op reads the whole extent or a row's position
EMBED_OPS = frozenset({"cross_entropy_grad", "dropout", "dropout_at_step"})
UNIFORM_OPS = frozenset({"full", "broadcast_to"})  # every row of the output alike: any cut is right
LAST_AXES = {"layer_norm": 1, "layer_norm_grad_x": 1, "causal_mask": 2}  # trailing axes each op mixes
HOWS = ("replicated", "local", "embed", "matmul_k", "gather")


class SplitError(GraphError):
    """A job whose batch cannot be cut over the workers asked for."""


@dataclass(frozen=True)
class Share:
    """Worker `rank`'s examples [start, stop) of a batch cut into `counts`."""

    rank: int
    counts: tuple[int, ...]

    @property
    def start(self) -> int:
        return sum(self.counts[: self.rank])

    @property
    def count(self) -> int:
        return self.counts[self.rank]

    @property
    def total(self) -> int:
        return sum(self.counts)


def shares(batch_size: int, workers: int) -> tuple[int, ...]:
    """Examples per worker: contiguous, as even as can be, the larger shares first."""
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise SplitError(f"workers must be a positive integer, got {workers!r}")
    if workers > batch_size:
        raise SplitError(f"{workers} workers for a batch of {batch_size}: every worker needs at least one example")
    base, extra = divmod(batch_size, workers)
    return tuple(base + (1 if r < extra else 0) for r in range(workers))


@dataclass(frozen=True)
class NodeSplit:
    axis: int | None  # the axis that follows the batch; None: every worker holds it whole
    per_example: int  # elements along `axis` per example
    how: str


def _batch_axes(graph: StepGraph, other: StepGraph, batch: int, other_batch: int) -> list[tuple[int | None, int]]:
    if len(graph) != len(other):
        raise SplitError("the step graph's nodes change with the batch size: it cannot be cut over workers")
    axes = []
    for node, twin in zip(graph.nodes, other.nodes):
        same_attrs = {k: v for k, v in node.attrs.items() if k != "shape"} == \
                     {k: v for k, v in twin.attrs.items() if k != "shape"}
        if node.op != twin.op or not same_attrs or len(node.shape) != len(twin.shape):
            raise SplitError(f"node {node.id} ({node.op}) changes with the batch size beyond its shape")
        grown = [i for i, (x, y) in enumerate(zip(node.shape, twin.shape)) if x != y]
        if not grown:
            axes.append((None, 0))
            continue
        axis = grown[0]
        per = node.shape[axis] // batch
        if len(grown) > 1 or node.shape[axis] % batch or twin.shape[axis] != per * other_batch:
            raise SplitError(f"node {node.id} ({node.op}): shape {node.shape} does not grow with the batch along one axis")
        axes.append((axis, per))
    return axes


def split_plan(graph: StepGraph, batch: int, other: StepGraph, other_batch: int) -> tuple[NodeSplit, ...]:
    """How each node of `graph` (batch `batch`) runs on workers; `other` is the same
    program traced at another batch size, `other_batch`."""
    if other_batch == batch:
        raise SplitError("the second trace needs another batch size")
    axes = _batch_axes(graph, other, batch, other_batch)
    plan: list[NodeSplit] = []
    for node, (axis, per) in zip(graph.nodes, axes):
        if node.is_leaf:
            if axis is not None and node.attrs["role"] != "batch" or axis not in (None, 0):
                raise SplitError(f"leaf {node.name!r}: only batch tensors may follow the batch, along axis 0")
            plan.append(NodeSplit(axis, per, "local" if axis is not None else "replicated"))
            continue
        ins = [plan[j] for j in node.inputs]
        if all(s.axis is None for s in ins):
            if axis is not None and node.op not in UNIFORM_OPS:
                raise SplitError(f"node {node.id} ({node.op}) makes a value that follows the batch from none: "
                                 "which of its rows belong to which examples is unknown")
            plan.append(NodeSplit(axis, per, "replicated" if axis is None else "gather"))
        elif axis is None:
            how = "matmul_k" if _is_matmul_k(node, graph, ins) else "gather"
            plan.append(NodeSplit(None, 0, how))
        elif node.op in EMBED_OPS:
            plan.append(NodeSplit(axis, per, "embed"))
        elif node.op in ROWWISE_OPS and _rowwise(node, graph, ins, axis, per):
            plan.append(NodeSplit(axis, per, "local"))
        else:
            # computed whole, then cut: its rows are example after example only if the op
            # keeps the leading axis's blocks, as it does when that axis is the cut one throughout
            if axis != 0 or any(s.axis not in (None, 0) for s in ins):
                raise SplitError(f"node {node.id} ({node.op}) moves the batch off the leading axis: "
                                 "which of its rows belong to which examples is unknown")
            plan.append(NodeSplit(axis, per, "gather"))
    for name, i in graph.outputs.items():
        if plan[i].axis is not None:
            raise SplitError(f"output {name!r} follows the batch: the next state must be whole on every worker")
    return tuple(plan)


def _is_matmul_k(node, graph: StepGraph, ins: list[NodeSplit]) -> bool:
    if node.op != "matmul" or len(node.shape) != 2:
        return False
    a, b = (graph.nodes[j] for j in node.inputs)
    if len(a.shape) != 2 or len(b.shape) != 2:
        return False
    k_axis_a = 0 if node.attrs["transpose_a"] else 1
    k_axis_b = 1 if node.attrs["transpose_b"] else 0
    return ins[0].axis == k_axis_a and ins[1].axis == k_axis_b and ins[0].per_example == ins[1].per_example


def _rowwise(node, graph: StepGraph, ins: list[NodeSplit], axis: int, per: int) -> bool:
    """Does each output row of `node` read only the same rows of its inputs?"""
    ndim = len(node.shape)
    shapes = [graph.nodes[j].shape for j in node.inputs]
    if node.op == "reshape":
        return axis == 0 and ins[0].axis == 0
    if node.op == "transpose":
        return ins[0].axis == node.attrs["perm"][axis] and ins[0].per_example == per
    if node.op == "matmul":
        if axis == ndim - 1:
            return False
        if axis == ndim - 2:  # rows of A follow the batch; B is whole
            return (ins[0].axis == len(shapes[0]) - 2 and not node.attrs["transpose_a"] and ins[1].axis is None
                    and ins[0].per_example == per)
        return all(s.axis == axis and len(sh) == ndim and s.per_example == per for s, sh in zip(ins, shapes))
    if node.op in ("softmax", "softmax_grad", "log_softmax", "log_softmax_grad"):
        if node.attrs["axis"] % ndim == axis:
            return False
    if axis >= ndim - LAST_AXES.get(node.op, 0):
        return False
    for s, sh in zip(ins, shapes):
        if s.axis is None:
            aligned = axis - (ndim - len(sh))  # NumPy broadcasting aligns trailing axes
            if node.op != "embedding" and aligned >= 0 and sh[aligned] != 1:
                return False
        elif s.axis != axis or s.per_example != per or (len(sh) != ndim and node.op != "embedding"):
            return False
    return True


# --- running a step on one worker ----------------------------------------------------


def _rows(split: NodeSplit, share: Share) -> slice:
    return slice(split.per_example * share.start, split.per_example * (share.start + share.count))


def _lengths(split: NodeSplit, share: Share) -> tuple[int, ...]:
    return tuple(split.per_example * c for c in share.counts)


def _take(x: Any, split: NodeSplit, share: Share) -> Any:
    index = [slice(None)] * x.ndim
    index[split.axis] = _rows(split, share)
    return x[tuple(index)]


def _embed(x: Any, split: NodeSplit, share: Share, full_shape: tuple[int, ...]) -> Any:
    whole = np.zeros(full_shape, x.dtype)
    index = [slice(None)] * x.ndim
    index[split.axis] = _rows(split, share)
    whole[tuple(index)] = x
    return whole


def _local_shape(shape: tuple[int, ...], split: NodeSplit, share: Share) -> tuple[int, ...]:
    if split.axis is None:
        return shape
    out = list(shape)
    out[split.axis] = split.per_example * share.count
    return tuple(out)


def matmul_split_k(a: Any, b: Any, transpose_a: bool, transpose_b: bool, comm: Communicator,
                   whole: Callable[[], Any]) -> Any:
    """The product op(a) @ op(b) whose K axis is cut over the workers, with the one-device bits.

    `whole()` gathers the inputs and computes the product whole: used when a value is
    not finite anywhere (the IEEE rules for inf and NaN read whole rows and columns).
    """
    a2 = a.T if transpose_a else a
    b2 = b.T if transpose_b else b
    finite = bool(np.isfinite(a2).all() and np.isfinite(b2).all())
    m, n = a2.shape[0], b2.shape[1]
    absmax = np.zeros(m + n + 1, np.float32)
    if a2.shape[1]:
        absmax[:m] = np.abs(a2).max(axis=1)
        absmax[m:m + n] = np.abs(b2).max(axis=0)
    absmax[-1] = 0.0 if finite else 1.0
    absmax = comm.max(absmax)
    if absmax[-1] != 0.0:
        return whole()
    row_shift = mspec.exponent_shift(absmax[:m], np)
    col_shift = mspec.exponent_shift(absmax[m:m + n], np)
    hi, lo = exact_sums(a2, b2, row_shift, col_shift)
    both = comm.sum_int64(np.stack([hi, lo]))
    return round_sums(both[0], both[1], row_shift, col_shift)


def run_split_node(op_forward: Callable[..., Any], attrs: Mapping[str, Any], inputs: list[Any],
                   in_splits: list[NodeSplit], in_shapes: list[tuple[int, ...]], out_split: NodeSplit,
                   out_shape: tuple[int, ...], share: Share, comm: Communicator) -> Any:
    """One node on one worker: `inputs` are this worker's values (rows where they follow the batch)."""
    how = out_split.how

    def whole_inputs() -> list[Any]:
        cut = [i for i, s in enumerate(in_splits) if s.axis is not None]
        gathered = comm.gather_many([(inputs[i], in_splits[i].axis, _lengths(in_splits[i], share)) for i in cut])
        whole_values = list(inputs)
        for i, value in zip(cut, gathered):
            whole_values[i] = value
        return whole_values

    def whole() -> Any:
        out = op_forward(*whole_inputs(), **attrs)
        return out if out_split.axis is None else _take(out, out_split, share)

    if how == "replicated":
        return op_forward(*inputs, **attrs)
    if how == "local":
        if "shape" in attrs:  # reshape: its target is the rows' shape
            attrs = {**attrs, "shape": _local_shape(out_shape, out_split, share)}
        return op_forward(*inputs, **attrs)
    if how == "embed":
        placed = [x if s.axis is None else _embed(x, s, share, sh) for x, s, sh in zip(inputs, in_splits, in_shapes)]
        return _take(op_forward(*placed, **attrs), out_split, share)
    if how == "matmul_k":
        return matmul_split_k(inputs[0], inputs[1], attrs["transpose_a"], attrs["transpose_b"], comm, whole)
    if how == "gather":
        return whole()
    raise SplitError(f"unknown way to run a node: {how!r}")


def execute_share(graph: StepGraph, plan: tuple[NodeSplit, ...], leaf_values: Mapping[str, Any], share: Share,
                  comm: Communicator) -> dict[str, Any]:
    """Run one step as worker `share.rank`: `leaf_values` are the whole step's leaves (this
    worker keeps its rows of the batch); returns the outputs, whole, as on one device."""
    check_leaf_values(graph, leaf_values)
    values: dict[int, Any] = {}
    pinned = set(graph.outputs.values())
    for node in graph.nodes:
        split = plan[node.id]
        if node.is_leaf:
            value = np.asarray(leaf_values[node.name])
            out = value if split.axis is None else _take(value, split, share)
        else:
            ins = [graph.nodes[j] for j in node.inputs]
            out = run_split_node(graph._forwards[node.id], node.attrs, [values[j] for j in node.inputs],
                                 [plan[j] for j in node.inputs], [n.shape for n in ins], split, node.shape,
                                 share, comm)
            expected = _local_shape(node.shape, split, share)
            if out.shape != expected or out.dtype != graph._dtypes[node.id]:
                raise SplitError(f"node {node.id} ({node.op}) gave {out.dtype} {tuple(out.shape)} on worker "
                                 f"{share.rank}, expected {node.dtype} {expected}")
        values[node.id] = out
        for j in graph._frees[node.id]:
            if j not in pinned:
                values.pop(j, None)
    return {name: values[i] for name, i in graph.outputs.items()}


def counts_by_how(plan: tuple[NodeSplit, ...]) -> dict[str, int]:
    """How many nodes run each way (shown by `gavel train --workers`)."""
    return {how: sum(1 for s in plan if s.how == how) for how in HOWS}


def with_batch_size(spec: Any, batch_size: int) -> Any:
    return replace(spec, batch_size=batch_size)
