"""Element programs and their traces: the fourth level's commitments (issue 18).

Theory of operation
-------------------
One output element of an operator is a straight-line program of primitive steps
(`protocol.float64_steps.STEPS`): no branch depends on a value, a NumPy `where` is a
`select` step. An *instruction* names its step and up to three operands, each

- STEP j: the output of instruction j < i of the same program,
- INPUT (view, offset): element `base(view, element) + offset` of an input tensor, where a
  view is (input tensor, one stride per output dimension) and base is the dot product of
  the output element's coordinates with those strides,
- CONST bits: a value written into the instruction;
- COORD d: coordinate d of the output element (a causal mask compares two);
- GATHER (view, j): element `base(view, element) + value of step j` of an input tensor, an
  index read from the data (embedding rows, cross entropy's targets).

So one program serves every element of the output (the element enters only through the
views), and an element spec (program, output shape, views) is a function of the operator,
its attributes and its input shapes. An instruction packs into one 256-bit word:
op | kind_a << 8 | kind_b << 16 | kind_c << 24 | ref_a << 32 | ref_b << 96 | ref_c << 160,
an INPUT ref being view << 48 | offset, a GATHER ref view << 48 | j.

A *trace* is the list of each instruction's output value (uint64 bits: a float32 in the
low 32 bits). Both are committed by keccak Merkle trees of depth ceil(log2 L), padded
with value 0: program leaf keccak(word as 32 bytes), trace leaf keccak(0x00 ‖ value as 8
bytes big-endian), inner node keccak(left ‖ right). `contracts/solidity/OneStepVerifier.sol`
hashes the same way. The last instruction's value is the output element as the output
tensor's bytes hold it (a float32 NaN as the canonical NaN: programs end in f32_canon).

The generators (`protocol/step_programs.py`) run an operator's spec through a `Tracer`,
which executes each step in Python integers as it records it.
"""
from __future__ import annotations

import functools
import math
import struct
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
from .keccak import keccak

from repops_cupy.hashing import tensor_message

from . import chunk_tree
from .errors import LocalProtocolError
from .float64_steps import STEPS

__all__ = [
    "CONST", "COORD", "GATHER", "INPUT", "NONE", "STEP", "ElementSpec", "ElementTrace", "Instr", "KeccakTree",
    "Operand", "TensorInfo", "Tracer", "Val", "View", "coordinates", "element_bits", "elementwise_layout",
    "input_index", "keccak_tree_proof", "keccak_tree_root", "program_leaf", "tensor_info", "tensor_opening",
    "trace_leaf", "tree_depth", "verify_proof",
]

NONE, STEP, INPUT, CONST, COORD, GATHER = 0, 1, 2, 3, 4, 5
_U64 = (1 << 64) - 1
_OFFSET_BITS = 48


@dataclass(frozen=True)
class Operand:
    kind: int
    ref: int = 0

    def __post_init__(self) -> None:
        if self.kind not in (NONE, STEP, INPUT, CONST, COORD, GATHER) or not 0 <= self.ref <= _U64:
            raise LocalProtocolError(f"bad operand {self!r}")


NO_OPERAND = Operand(NONE)


@dataclass(frozen=True)
class Instr:
    op: int
    a: Operand = NO_OPERAND
    b: Operand = NO_OPERAND
    c: Operand = NO_OPERAND

    @property
    def word(self) -> int:
        w = self.op | self.a.kind << 8 | self.b.kind << 16 | self.c.kind << 24
        return w | self.a.ref << 32 | self.b.ref << 96 | self.c.ref << 160

    @property
    def operands(self) -> tuple[Operand, Operand, Operand]:
        return self.a, self.b, self.c

    @classmethod
    def from_word(cls, word: int) -> "Instr":
        ops = [Operand((word >> (8 + 8 * k)) & 0xFF, (word >> (32 + 64 * k)) & _U64) for k in range(3)]
        return cls(word & 0xFF, *ops)


@dataclass(frozen=True)
class View:
    """An input tensor seen from the output: element index = Σ coordinate_d · strides[d] + offset."""

    tensor: int
    strides: tuple[int, ...]


def input_ref(view: int, offset: int) -> int:
    return view << _OFFSET_BITS | offset


def coordinates(out_shape: Sequence[int], element: int) -> tuple[int, ...]:
    return tuple(int(c) for c in np.unravel_index(element, tuple(out_shape))) if out_shape else ()


def input_index(views: Sequence[View], out_shape: Sequence[int], element: int, ref: int,
                gathered: int | None = None) -> tuple[int, int]:
    """(input tensor, flat index) an INPUT operand reads for output `element`; for a GATHER
    operand, `gathered` (the value of its step) replaces the offset."""
    view = views[ref >> _OFFSET_BITS]
    base = sum(c * s for c, s in zip(coordinates(out_shape, element), view.strides))
    return view.tensor, base + (ref & ((1 << _OFFSET_BITS) - 1) if gathered is None else gathered)


@dataclass(frozen=True)
class ElementSpec:
    """What every party of a job derives from the operator node: the program and where inputs come from."""

    op: str
    out_shape: tuple[int, ...]
    views: tuple[View, ...]
    program: tuple[Instr, ...]

    @property
    def length(self) -> int:
        return len(self.program)

    @functools.cached_property
    def root(self) -> bytes:  # cached: a job's element specs put it in a leaf per node
        return keccak_tree_root([program_leaf(i) for i in self.program])


@dataclass(frozen=True)
class ElementTrace:
    spec: ElementSpec
    element: int
    values: tuple[int, ...]

    @property
    def output(self) -> int:
        return self.values[-1]

    def leaves(self) -> list[bytes]:
        return [trace_leaf(v) for v in self.values]

    @property
    def root(self) -> bytes:
        return keccak_tree_root(self.leaves())


# --- Merkle trees (keccak, perfect, padded with value 0) ------------------------------------

ZERO_LEAF = keccak(b"\x00" + bytes(8))


def trace_leaf(value: int) -> bytes:
    return keccak(b"\x00" + value.to_bytes(8, "big"))


def program_leaf(instr: Instr) -> bytes:
    return keccak(instr.word.to_bytes(32, "big"))


def tree_depth(length: int) -> int:
    return max(0, (length - 1).bit_length())


class KeccakTree:
    """A perfect keccak tree over leaves padded to a power of two: levels bottom-up, kept for proofs."""

    def __init__(self, leaves: Sequence[bytes], pad: bytes = ZERO_LEAF) -> None:
        level = list(leaves) + [pad] * ((1 << tree_depth(len(leaves))) - len(leaves))
        self.levels = [level]
        while len(level) > 1:
            level = [keccak(level[k] + level[k + 1]) for k in range(0, len(level), 2)]
            self.levels.append(level)

    @property
    def root(self) -> bytes:
        return self.levels[-1][0]

    def proof(self, index: int) -> list[bytes]:
        """Siblings from the leaf up."""
        if not 0 <= index < len(self.levels[0]):
            raise LocalProtocolError(f"leaf {index} of {len(self.levels[0])}")
        return [level[(index >> d) ^ 1] for d, level in enumerate(self.levels[:-1])]


def keccak_tree_root(leaves: Sequence[bytes], pad: bytes = ZERO_LEAF) -> bytes:
    return KeccakTree(leaves, pad).root


def keccak_tree_proof(leaves: Sequence[bytes], index: int, pad: bytes = ZERO_LEAF) -> list[bytes]:
    """Siblings from the leaf up."""
    return KeccakTree(leaves, pad).proof(index)


def verify_proof(root: bytes, leaf: bytes, index: int, siblings: Sequence[bytes]) -> bool:
    node = leaf
    for d, sibling in enumerate(siblings):
        node = keccak(sibling + node) if (index >> d) & 1 else keccak(node + sibling)
    return node == root and index >> len(siblings) == 0


# --- tensors as the contract opens them ----------------------------------------------------


@dataclass(frozen=True)
class TensorInfo:
    """A tensor hash and where its elements sit in the hashed message (header, then the elements)."""

    root: bytes
    header: int
    size: int  # bytes of the whole message
    item: int  # bytes per element


def tensor_info(x: np.ndarray) -> TensorInfo:
    message, header = tensor_message(x)
    return TensorInfo(chunk_tree.blake3_chunk_root(message), header, len(message), np.asarray(x).dtype.itemsize)


def tensor_opening(x: np.ndarray, index: int) -> tuple[int, bytes, list[bytes]]:
    """(element `index`'s bits, its chunk, the chunk's BLAKE3 siblings)."""
    message, header = tensor_message(x)
    item = np.asarray(x).dtype.itemsize
    offset = header + index * item
    chunk, siblings = chunk_tree.blake3_chunk_proof(message, offset // chunk_tree.CHUNK_SIZE)
    within = offset % chunk_tree.CHUNK_SIZE
    return int.from_bytes(chunk[within:within + item], "little"), chunk, siblings


# --- the tracer ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Val:
    """A value in a program being traced: where it comes from and its bits."""

    operand: Operand
    bits: int


def f64_bits(x: float) -> int:
    return struct.unpack("<Q", struct.pack("<d", x))[0]


def element_bits(arr: np.ndarray, index: int) -> int:
    """The bits of element `index` (C order) of a 4- or 8-byte array."""
    flat = np.ascontiguousarray(arr).reshape(-1)
    return int(flat[index:index + 1].view(np.uint32 if flat.dtype.itemsize == 4 else np.uint64)[0])


class Tracer:
    """Records a program while executing it on one element's inputs.

    `inputs` are the operator's input arrays (canonical: NaNs as tensor hashes store them).
    """

    def __init__(self, op: str, inputs: Sequence[np.ndarray], out_shape: Sequence[int], views: Sequence[View],
                 element: int) -> None:
        self.op, self.out_shape, self.views, self.element = op, tuple(out_shape), tuple(views), element
        self.inputs = [np.ascontiguousarray(x) for x in inputs]
        self.program: list[Instr] = []
        self.values: list[int] = []

    def input(self, view: int, offset: int = 0) -> Val:
        ref = input_ref(view, offset)
        tensor, index = input_index(self.views, self.out_shape, self.element, ref)
        return Val(Operand(INPUT, ref), element_bits(self.inputs[tensor], index))

    def coord(self, dim: int) -> Val:
        dim %= len(self.out_shape)
        return Val(Operand(COORD, dim), coordinates(self.out_shape, self.element)[dim])

    def gather(self, view: int, index: Val) -> Val:
        """The element of `view` at base + index, `index` a step's value (an int64 offset)."""
        if index.operand.kind != STEP:
            raise LocalProtocolError("a gathered index must be a step's value")
        tensor, at = input_index(self.views, self.out_shape, self.element, view << _OFFSET_BITS, index.bits)
        return Val(Operand(GATHER, view << _OFFSET_BITS | index.operand.ref), element_bits(self.inputs[tensor], at))

    @staticmethod
    def const(bits: int) -> Val:
        return Val(Operand(CONST, bits), bits)

    def c64(self, x: float) -> Val:
        return self.const(f64_bits(x))

    def step(self, name: str, *args: Val) -> Val:
        step = STEPS[name]
        if len(args) != step.arity:
            raise LocalProtocolError(f"{name} takes {step.arity} operands")
        bits = step.fn(*(a.bits for a in args))
        operands = [a.operand for a in args] + [NO_OPERAND] * (3 - len(args))
        self.program.append(Instr(step.code, *operands))
        self.values.append(bits)
        return Val(Operand(STEP, len(self.program) - 1), bits)

    def __getattr__(self, name: str) -> Callable[..., Val]:
        if name in STEPS:
            return lambda *args: self.step(name, *args)
        raise AttributeError(name)

    def result(self) -> tuple[ElementSpec, ElementTrace]:
        spec = ElementSpec(self.op, self.out_shape, self.views, tuple(self.program))
        return spec, ElementTrace(spec, self.element, tuple(self.values))


def contiguous_strides(shape: Sequence[int]) -> tuple[int, ...]:
    strides, acc = [], 1
    for n in reversed(tuple(shape)):
        strides.append(acc)
        acc *= n
    return tuple(reversed(strides))


def broadcast_view(tensor: int, shape: Sequence[int], out_shape: Sequence[int]) -> View:
    """The view of an input broadcast (NumPy rules) to the output: stride 0 along broadcast dimensions."""
    shape, out_shape = tuple(shape), tuple(out_shape)
    pad = len(out_shape) - len(shape)
    own = contiguous_strides(shape)
    strides = [0] * pad + [0 if n == 1 and m != 1 else s for n, m, s in zip(shape, out_shape[pad:], own)]
    return View(tensor, tuple(strides))


def elementwise_layout(shapes: Sequence[Sequence[int]]) -> tuple[tuple[int, ...], tuple[View, ...]]:
    """The output shape of element-wise inputs (NumPy broadcasting) and one view per input."""
    out = tuple(np.broadcast_shapes(*(tuple(s) for s in shapes)))
    return out, tuple(broadcast_view(k, s, out) for k, s in enumerate(shapes))


def element_count(shape: Sequence[int]) -> int:
    return math.prod(tuple(shape))
