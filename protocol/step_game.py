"""The fourth level of the dispute game: one element's trace, bisected to one step (issue 18).

Theory of operation
-------------------
Levels 1-3 end at one operator node whose inputs both parties agree on and whose output
hashes differ. The challenger names one output element where they differ. Then, as in
`contracts/solidity/OneStepVerifier.sol` (this module is its twin; time is an argument,
nothing here does I/O):

1. COMMIT: each side opens its value at that element in its own output tensor (a BLAKE3
   chunk proof) and commits the root of its trace of the element program
   (`protocol.step_trace`), proving that the trace's last leaf is that value. If the two
   values are equal, the challenger named an element without a difference and loses.
2. BISECT: each round both sides reveal the two children of their current node; the walk
   goes left where the left children differ, else right. At the last level the children
   are leaf values. After depth rounds, leaf i differs and every leaf left of i agrees.
3. LOCATED: anyone hands in instruction i with its proof in the agreed program and its
   operands opened against the agreed prefix or the agreed input tensors; the step is
   executed (`protocol.float64_steps`) and every side whose value differs loses.

A side that does not move within its chess clock (time left across all its moves) loses
by `timeout`. Events of the table are names, as in `protocol.game_state`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
from .keccak import keccak

from repops_cupy.hashing import canonical_array

from . import chunk_tree
from .errors import LocalProtocolError, RemoteProtocolError
from .float64_steps import STEPS, f32_canon, is_nan32
from .step_trace import (
    CONST, COORD, GATHER, INPUT, NONE, STEP, ElementSpec, Instr, TensorInfo, Tracer, coordinates, element_bits,
    KeccakTree, input_index, program_leaf, tensor_info, tensor_opening, trace_leaf, tree_depth, verify_proof,
)

__all__ = [
    "BISECT", "BOTH_LOST", "CHALLENGER_WON", "COMMIT", "DEFENDER_WON", "DONE", "LOCATED", "Commitment", "Opening",
    "CHEATS", "StepGame", "StepPlayer", "StepSetup", "TRANSITIONS", "cheat_values", "claimed_output", "execute_step",
    "first_difference", "make_setup", "play_offline", "players_for", "replay",
]

COMMIT, BISECT, LOCATED, DONE = "COMMIT", "BISECT", "LOCATED", "DONE"
CHALLENGER_WON, DEFENDER_WON, BOTH_LOST = "challenger-won", "defender-won", "both-lost"
OUTCOME_CODES = {CHALLENGER_WON: 1, DEFENDER_WON: 2, BOTH_LOST: 3}

TRANSITIONS: dict[str, dict[str, str]] = {
    COMMIT: {"committed": COMMIT, "walk": BISECT, "located": LOCATED, "no-difference": DONE, "timeout": DONE},
    BISECT: {"revealed": BISECT, "descended": BISECT, "located": LOCATED, "timeout": DONE},
    LOCATED: {"ruled": DONE},
    DONE: {},
}


@dataclass(frozen=True)
class StepSetup:
    """What both sides agree on before the fourth level opens (the contract's `Setup`)."""

    spec: ElementSpec
    element: int
    inputs: tuple[TensorInfo, ...]
    outputs: tuple[TensorInfo, TensorInfo]  # each side's claimed output tensor

    @property
    def depth(self) -> int:
        return tree_depth(self.spec.length)

    def as_abi(self) -> tuple:
        def t(info: TensorInfo) -> tuple:
            return (info.root, info.header, info.size, info.item)
        dims = len(self.spec.out_shape)
        strides = [s for v in self.spec.views for s in (v.strides + (0,) * dims)[:dims]]
        return (self.spec.root, self.spec.length, self.element, list(self.spec.out_shape),
                [t(i) for i in self.inputs], [v.tensor for v in self.spec.views], strides,
                [t(self.outputs[0]), t(self.outputs[1])])


@dataclass(frozen=True)
class Opening:
    """One operand's opening: a trace value with its siblings, or an input chunk with its siblings."""

    value: int = 0
    chunk: bytes = b""
    siblings: tuple[bytes, ...] = ()
    step_siblings: tuple[bytes, ...] = ()  # a GATHER: the trace proof of the index's step (value: that index)

    def as_abi(self) -> tuple:
        return (self.value, self.chunk, list(self.siblings), list(self.step_siblings))


@dataclass(frozen=True)
class Commitment:
    root: bytes
    chunk: bytes
    chunk_siblings: tuple[bytes, ...]
    last_siblings: tuple[bytes, ...]


def _element_of(info: TensorInfo, index: int, chunk: bytes, siblings: Sequence[bytes]) -> int:
    offset = info.header + index * info.item
    if offset + info.item > info.size:
        raise RemoteProtocolError("element beyond the tensor")
    count = chunk_tree.chunk_count(info.size)
    if not chunk_tree.blake3_verify_chunk(info.root, chunk, offset // chunk_tree.CHUNK_SIZE, count, siblings):
        raise RemoteProtocolError("chunk proof does not hold")
    within = offset % chunk_tree.CHUNK_SIZE
    return int.from_bytes(chunk[within:within + info.item], "little")


CANONICAL_NAN32 = f32_canon(0x7FC00001)
STEPS_BY_CODE = {step.code: step for step in STEPS.values()}


def replay(spec: ElementSpec, element: int, inputs: Sequence[np.ndarray],
           overrides: dict[int, int] | None = None) -> tuple[int, ...]:
    """Executes the program on element `element`'s inputs; `overrides` replaces step outputs (a cheat)."""
    loader = Tracer(spec.op, inputs, spec.out_shape, spec.views, element)
    values: list[int] = []
    for i, instr in enumerate(spec.program):
        args = []
        for operand in instr.operands[:STEPS_BY_CODE[instr.op].arity]:
            if operand.kind == STEP:
                args.append(values[operand.ref])
            elif operand.kind == CONST:
                args.append(operand.ref)
            elif operand.kind == INPUT:
                args.append(loader.input(operand.ref >> 48, operand.ref & ((1 << 48) - 1)).bits)
            elif operand.kind == COORD:
                args.append(coordinates(spec.out_shape, element)[operand.ref])
            elif operand.kind == GATHER:
                at = values[operand.ref & ((1 << 48) - 1)]
                tensor, index = input_index(spec.views, spec.out_shape, element, operand.ref, at)
                # an index out of the tensor only comes from an altered step (a cheat): read 0
                inside = 0 <= index < loader.inputs[tensor].size
                args.append(element_bits(loader.inputs[tensor], index) if inside else 0)
            else:
                args.append(0)
        value = STEPS_BY_CODE[instr.op].fn(*args)
        values.append((overrides or {}).get(i, value))
    return tuple(values)


def execute_step(instr: Instr, operands: Sequence[int]) -> int:
    step = STEPS_BY_CODE.get(instr.op)
    if step is None:
        raise RemoteProtocolError(f"no step with code {instr.op}")
    return step.fn(*list(operands)[:step.arity])


@dataclass
class StepGame:
    """The fourth level as the contract plays it: side 0 the challenger, side 1 the defender."""

    setup: StepSetup
    clock: int
    now: int
    phase: str = COMMIT
    outcome: str | None = None
    level: int = 0
    position: int = 0
    located_value: int | None = None
    clocks: list[int] = field(init=False)
    turn_start: int = field(init=False)
    moved: list[bool] = field(default_factory=lambda: [False, False])
    roots: list[bytes | None] = field(default_factory=lambda: [None, None])
    nodes: list[bytes | None] = field(default_factory=lambda: [None, None])
    values: list[int | None] = field(default_factory=lambda: [None, None])
    revealed: list[tuple[bytes, bytes] | None] = field(default_factory=lambda: [None, None])

    def __post_init__(self) -> None:
        self.clocks = [self.clock, self.clock]
        self.turn_start = self.now

    def _fire(self, event: str) -> None:
        try:
            self.phase = TRANSITIONS[self.phase][event]
        except KeyError:
            raise LocalProtocolError(f"step game in {self.phase} cannot take {event!r}") from None

    def _charge(self, side: int, now: int) -> None:
        if side not in (0, 1) or self.moved[side]:
            raise RemoteProtocolError("not this side's move")
        spent = now - self.turn_start
        if spent > self.clocks[side]:
            raise RemoteProtocolError("clock spent")
        self.clocks[side] -= spent
        self.moved[side] = True

    def _round_done(self, now: int) -> bool:
        if not all(self.moved):
            return False
        self.moved = [False, False]
        self.turn_start = now
        return True

    def commit(self, side: int, c: Commitment, now: int) -> None:
        if self.phase != COMMIT:
            raise RemoteProtocolError("not committing")
        depth, length = self.setup.depth, self.setup.spec.length
        value = _element_of(self.setup.outputs[side], self.setup.element, c.chunk, c.chunk_siblings)
        if len(c.last_siblings) != depth or not verify_proof(c.root, trace_leaf(value), length - 1, c.last_siblings):
            raise RemoteProtocolError("the trace's last leaf is not the claimed value")
        self._charge(side, now)
        self.roots[side] = self.nodes[side] = c.root
        self.values[side] = value
        if not self._round_done(now):
            return self._fire("committed")
        if self.values[0] == self.values[1]:
            self.outcome = DEFENDER_WON
            return self._fire("no-difference")
        self._fire("located" if depth == 0 else "walk")

    def reveal(self, side: int, left: bytes, right: bytes, now: int) -> None:
        if self.phase != BISECT:
            raise RemoteProtocolError("not walking")
        leaves = self.level + 1 == self.setup.depth
        if leaves:
            lv, rv = int.from_bytes(left, "big"), int.from_bytes(right, "big")
            if lv >> 64 or rv >> 64:
                raise RemoteProtocolError("a leaf value wider than 64 bits")
            pair = trace_leaf(lv) + trace_leaf(rv)
        else:
            pair = left + right
        if keccak(pair) != self.nodes[side]:
            raise RemoteProtocolError("children do not hash to the node")
        self._charge(side, now)
        self.revealed[side] = (left, right)
        if not self._round_done(now):
            return self._fire("revealed")
        go_left = self.revealed[0][0] != self.revealed[1][0]
        self.position = self.position * 2 + (0 if go_left else 1)
        self.level += 1
        for s in (0, 1):
            child = self.revealed[s][0 if go_left else 1]
            if leaves:
                self.values[s] = int.from_bytes(child, "big")
            else:
                self.nodes[s] = child
        self._fire("located" if leaves else "descended")

    def timeout(self, now: int) -> None:
        if self.phase not in (COMMIT, BISECT):
            raise LocalProtocolError("nothing to time out")
        late = [not self.moved[s] and now > self.turn_start + self.clocks[s] for s in (0, 1)]
        if not any(late):
            raise LocalProtocolError("nobody is overdue")
        self.outcome = BOTH_LOST if all(late) else (DEFENDER_WON if late[0] else CHALLENGER_WON)
        self._fire("timeout")

    def operand(self, instr: Instr, k: int, opening: Opening, index: int) -> int:
        operand = instr.operands[k]
        if operand.kind == NONE:
            return 0
        if operand.kind == CONST:
            return operand.ref
        spec = self.setup.spec
        if operand.kind == STEP:
            return self._agreed_step(operand.ref, opening.value, opening.siblings, index)
        if operand.kind == COORD:
            if operand.ref >= len(spec.out_shape):
                raise RemoteProtocolError("no such coordinate")
            return coordinates(spec.out_shape, self.setup.element)[operand.ref]
        if operand.kind == GATHER:
            at = self._agreed_step(operand.ref & ((1 << 48) - 1), opening.value, opening.step_siblings, index)
            tensor, element = input_index(spec.views, spec.out_shape, self.setup.element, operand.ref, at)
        elif operand.kind == INPUT:
            tensor, element = input_index(spec.views, spec.out_shape, self.setup.element, operand.ref)
        else:
            raise RemoteProtocolError(f"no operand kind {operand.kind}")
        return _element_of(self.setup.inputs[tensor], element, opening.chunk, opening.siblings)

    def _agreed_step(self, step: int, value: int, siblings: Sequence[bytes], index: int) -> int:
        """The value of step `step` left of the located one, proven in either side's tree."""
        if step >= index:
            raise RemoteProtocolError("an operand after the step")
        # every leaf left of the located one is the same in both trees: a proof in either holds
        leaf = trace_leaf(value)
        if len(siblings) != self.setup.depth or not any(
                verify_proof(root, leaf, step, siblings) for root in self.roots):
            raise RemoteProtocolError("trace proof does not hold")
        return value

    def rule(self, instr: Instr, program_proof: Sequence[bytes], openings: Sequence[Opening]) -> int:
        """Executes the located step; returns the expected value and sets the outcome."""
        if self.phase != LOCATED:
            raise LocalProtocolError("no step located")
        index, expected = self.position, 0
        if index < self.setup.spec.length:
            if len(program_proof) != self.setup.depth or not verify_proof(
                    self.setup.spec.root, program_leaf(instr), index, program_proof):
                raise RemoteProtocolError("the instruction is not the program's")
            expected = execute_step(instr, [self.operand(instr, k, openings[k], index) for k in range(3)])
        ok = [self.values[s] == expected for s in (0, 1)]
        self.outcome = CHALLENGER_WON if ok[0] else (DEFENDER_WON if ok[1] else BOTH_LOST)
        self.located_value = expected
        self._fire("ruled")
        return expected


class StepPlayer:
    """One side's moves from its trace (honest, or a cheat's altered values) and its output tensor."""

    def __init__(self, setup: StepSetup, side: int, values: Sequence[int], output: np.ndarray,
                 inputs: Sequence[np.ndarray]) -> None:
        self.setup, self.side, self.values = setup, side, tuple(values)
        self.output, self.inputs = output, list(inputs)
        depth = setup.depth
        padded = list(self.values) + [0] * ((1 << depth) - len(self.values))
        self.leaves = [trace_leaf(v) for v in padded]
        self.padded = padded
        self.tree = KeccakTree(self.leaves)
        self._program_tree: KeccakTree | None = None

    @property
    def root(self) -> bytes:
        return self.tree.root

    def commitment(self) -> Commitment:
        _, chunk, siblings = tensor_opening(self.output, self.setup.element)
        last = self.tree.proof(self.setup.spec.length - 1)
        return Commitment(self.root, chunk, tuple(siblings), tuple(last))

    def children(self, level: int, position: int) -> tuple[bytes, bytes]:
        """The two children of node `position` at `level` rounds down (as the contract takes them)."""
        depth = self.setup.depth
        if level + 1 == depth:
            return (self.padded[2 * position].to_bytes(32, "big"), self.padded[2 * position + 1].to_bytes(32, "big"))
        below = self.tree.levels[depth - level - 1]
        return below[2 * position], below[2 * position + 1]

    def ruling_arguments(self, index: int) -> tuple[Instr, list[bytes], list[Opening]]:
        """Instruction `index`, its program proof, and its operands' openings (from this side's prefix,
        which equals the other's left of `index`)."""
        spec = self.setup.spec
        if index >= spec.length:
            return Instr(0), [], [Opening()] * 3
        instr = spec.program[index]
        if self._program_tree is None:
            self._program_tree = KeccakTree([program_leaf(i) for i in spec.program])
        proof = self._program_tree.proof(index)
        openings = []
        for operand in instr.operands:
            if operand.kind == STEP:
                openings.append(Opening(self.padded[operand.ref], b"",
                                        tuple(self.tree.proof(operand.ref))))
            elif operand.kind in (INPUT, GATHER):
                at, step_siblings = None, ()
                if operand.kind == GATHER:
                    step = operand.ref & ((1 << 48) - 1)
                    at, step_siblings = self.padded[step], tuple(self.tree.proof(step))
                tensor, element = input_index(spec.views, spec.out_shape, self.setup.element, operand.ref, at)
                _, chunk, siblings = tensor_opening(self.inputs[tensor], element)
                openings.append(Opening(at or 0, chunk, tuple(siblings), step_siblings))
            else:
                openings.append(Opening())
        return instr, proof, openings


def make_setup(spec: ElementSpec, element: int, inputs: Sequence[np.ndarray],
               outputs: tuple[np.ndarray, np.ndarray]) -> StepSetup:
    """The setup of a game on `element`: the inputs' and the two claimed outputs' tensor infos."""
    return StepSetup(spec, element, tuple(tensor_info(x) for x in inputs),
                     (tensor_info(outputs[0]), tensor_info(outputs[1])))


def first_difference(a: np.ndarray, b: np.ndarray) -> int | None:
    """The first element where two claimed outputs differ in their stored bits (what the challenger names)."""
    x, y = canonical_array(a).reshape(-1), canonical_array(b).reshape(-1)
    bits = np.uint32 if x.dtype.itemsize == 4 else np.uint64
    diff = np.flatnonzero(x.view(bits) != y.view(bits))
    return int(diff[0]) if diff.size else None



CHEATS = ("step", "last", "garbage")


def cheat_values(spec: ElementSpec, element: int, inputs: Sequence[np.ndarray], honest: Sequence[int],
                 rng: np.random.Generator, kind: str = "step", at: int | None = None) -> tuple[int, ...]:
    """A cheater's trace ending in a wrong value: one step's value altered (step `at`, else a random one)
    and the rest computed on from it ("step"), only the last value altered ("last"), or random values
    from a random step on ("garbage")."""
    length = len(honest)
    at = int(rng.integers(0, length)) if at is None else at
    if kind == "step":
        values = replay(spec, element, inputs, {at: honest[at] ^ (1 << int(rng.integers(0, 32)))})
    elif kind == "last":
        values = tuple(honest)
    elif kind == "garbage":
        values = tuple(honest[:at]) + tuple(int(v) for v in rng.integers(0, 1 << 32, length - at, dtype=np.uint64))
    else:
        raise LocalProtocolError(f"no cheat {kind!r}; one of {CHEATS}")
    last = values[-1]
    if last == honest[-1] or (last >> 32 == 0 and is_nan32(last) and last != CANONICAL_NAN32):
        # a wrong value a tensor can hold (its hash stores every NaN as the canonical one)
        last = honest[-1] ^ 1 if not is_nan32(honest[-1] ^ 1) else (0 if honest[-1] else 1)
        values = values[:-1] + (last,)
    return values


def claimed_output(output: np.ndarray, element: int, value: int) -> np.ndarray:
    """`output` (canonical) with `element`'s bits replaced: the tensor a cheater claims."""
    out = canonical_array(output).copy()
    flat = out.reshape(-1).view(np.uint32 if out.dtype.itemsize == 4 else np.uint64)
    flat[element] = value
    return out


def players_for(op: str, attrs: dict, inputs: Sequence[np.ndarray], output: np.ndarray, element: int, *,
                cheater_side: int | None, rng: np.random.Generator, kind: str = "step",
                at: int | None = None) -> tuple[StepSetup, tuple[StepPlayer, StepPlayer]]:
    """A game on `element` of `op`'s `output`: the honest trace on one side and, on `cheater_side`,
    a cheater's trace (`cheat_values`) with the output tensor it claims (None: both honest)."""
    from .step_programs import trace_element
    honest = trace_element(op, attrs, inputs, element)
    values = [honest.values, honest.values]
    outputs = [canonical_array(output), canonical_array(output)]
    if cheater_side is not None:
        values[cheater_side] = cheat_values(honest.spec, element, inputs, honest.values, rng, kind, at)
        outputs[cheater_side] = claimed_output(output, element, values[cheater_side][-1])
    setup = make_setup(honest.spec, element, inputs, (outputs[0], outputs[1]))
    players = tuple(StepPlayer(setup, s, values[s], outputs[s], inputs) for s in (0, 1))
    return setup, players  # type: ignore[return-value]


def play_offline(setup: StepSetup, players: Sequence[StepPlayer], *, now: int = 0, clock: int = 3600,
                 ruler: int = 0) -> StepGame:
    """Both sides' moves through the Python twin, one second apart, then the ruling with side
    `ruler`'s openings (left of the located step both prefixes are the same)."""
    game = StepGame(setup, clock, now)
    for side in (0, 1):
        now += 1
        game.commit(side, players[side].commitment(), now)
    while game.phase == BISECT:
        level, position = game.level, game.position
        for side in (0, 1):
            now += 1
            game.reveal(side, *players[side].children(level, position), now)
    if game.phase == LOCATED:
        game.rule(*players[ruler].ruling_arguments(game.position))
    return game
