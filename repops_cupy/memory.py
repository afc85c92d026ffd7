"""A job's peak memory, estimated from its step graph before anything runs.

The interpreter (`graph.execute`) holds every leaf, every output and each intermediate
until its last reader: walking the nodes in order with the same rule gives the bytes
of node outputs held at each node exactly (`graph_live_bytes`). On top of that, a node
needs scratch space while it runs (`workspace_bytes`): a matrix product its int8 digit
planes and its exact partial sums, other ops their float64 intermediates. The peak
estimate is the largest sum of the two over the step; a provider compares it with its
capacity before it accepts a job. It is an estimate of what the operators allocate,
not of the interpreter's own fixed cost (Python, NumPy, numba, torch: some 100s of MB).
"""
from __future__ import annotations

import math

import numpy as np

from . import _matmul_spec as mspec
from ._matmul_engines import CHUNK, int8_pays_on_cpu
from .graph import Node, StepGraph

F64 = 8
INT8_BLOCK_PLANES, INT8_PAIR_PLANES = 6, 19  # see _matmul_engines
# float64 engine (`_matmul_engines.float64_planes`): per digit of A's rows and B's columns, 5 digit
# groups and 6 concatenated operands as float64 at once; 3 product planes, stacked (twice that)
FLOAT64_OPERAND_COPIES, FLOAT64_PLANES = 11, 6
SCRATCH_COPIES = 4  # float64 intermediates of an elementwise or per-row op, per output or input element


def _nbytes(node: Node) -> int:
    return math.prod(node.shape) * np.dtype(node.dtype).itemsize


def _matmul_workspace(node: Node, graph: StepGraph) -> int:
    a, b = (graph.nodes[j] for j in node.inputs)
    k = a.shape[-2] if node.attrs["transpose_a"] else a.shape[-1]
    rows = math.prod(node.shape[:-1])
    n = node.shape[-1]
    b_count = math.prod(b.shape[:-2])
    chunk = min(k, CHUNK)
    digits = mspec.DIGITS * chunk * (rows + b_count * n)  # int8 digits of A's rows and B's columns
    if int8_pays_on_cpu():  # the int8 engine: int32 planes, one per diagonal or per digit pair when rows are few
        m = node.shape[-2] if len(node.shape) >= 2 else 1
        planes = (INT8_PAIR_PLANES if m * 4 <= n else INT8_BLOCK_PLANES) * 4 * rows * n
    else:
        planes = FLOAT64_PLANES * F64 * rows * n + FLOAT64_OPERAND_COPIES * F64 * chunk * (rows + b_count * n)
    carry = 2 * rows * n * F64 if k > CHUNK else 0  # exact (hi, lo) sums across K chunks
    return digits + planes + carry


def workspace_bytes(node: Node, graph: StepGraph) -> int:
    """Scratch bytes `node` allocates while it runs, besides its output."""
    if node.is_leaf:
        return 0
    if node.op == "matmul":
        return _matmul_workspace(node, graph)
    elements = max([math.prod(node.shape)] + [math.prod(graph.nodes[j].shape) for j in node.inputs])
    return SCRATCH_COPIES * elements * F64


def graph_live_bytes(graph: StepGraph) -> list[int]:
    """Bytes of node outputs held just after each node runs (what `execute` holds)."""
    pinned = set(graph.outputs.values())
    live, out = 0, []
    held: set[int] = set()
    for node in graph.nodes:
        live += _nbytes(node)
        held.add(node.id)
        out.append(live)
        for j in graph._frees[node.id]:
            if j not in pinned and j in held:
                held.discard(j)
                live -= _nbytes(graph.nodes[j])
    return out


def peak_bytes(graph: StepGraph) -> int:
    """Estimated peak bytes of one step: node outputs held plus the running node's scratch."""
    live = graph_live_bytes(graph)
    before = 0
    peak = 0
    for node, after in zip(graph.nodes, live):
        # while node i runs: everything held before it, its output and its scratch
        peak = max(peak, before + _nbytes(node) + workspace_bytes(node, graph), after)
        before = after
    return peak


def describe(n_bytes: int) -> str:
    """Bytes in the nearest binary unit, e.g. '12.3 MiB'."""
    value = float(n_bytes)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.1f} {unit}" if unit != "B" else f"{n_bytes} B"
        value /= 1024
    return f"{value:.1f} TiB"
