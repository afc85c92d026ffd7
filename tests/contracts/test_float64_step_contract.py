"""Float64Step.sol on the EVM against its twin protocol/float64_steps.py, step by step.

The harness runs one step over arrays in one eth_call. The default tests give every step
its edge cases and a few hundred random, close-exponent, boundary and tie cases on py-evm (the
embedded chain, about a million gas a second); the slow test gives every step thousands more, on
anvil where it is installed (about a hundred times faster; both EVMs run the same bytecode).
"""
from __future__ import annotations

import os

import numpy as np
import pytest

from contracts import AnvilProcess, RpcChain, find_anvil
from contracts.abi import ContractAbi
from contracts.artifacts import load_artifact
from contracts.chain import Chain, RevertData
from contracts.embedded_chain import EmbeddedChain
from contracts.errors import ContractRevert
from protocol import float64_steps as F
from tests.protocol.test_float64_steps import (
    EDGES, U64, boundary_pairs, close_pairs, edge_pairs, f32_tie_bits, fma_operands, int64_cases, random_bits,
    tie_pairs,
)

pytestmark = pytest.mark.settlement

BATCH = 400  # cases per eth_call: under the call's 30M gas at the dearest step
FLOAT32_STEPS = F.FLOAT32_OPERANDS
EDGES32 = [0, 1, 2, 0x7FFFFF, 0x800000, 0x7F7FFFFF, 0x3F800000, 0x3F800001, 0x7F800000, 0x7FC00000, 0x7F800001,
           0x7FA00123, 0x7FFFFFFF]
EDGES32 += [x | (1 << 31) for x in EDGES32]


class Harness:
    """Float64StepHarness deployed on a chain of its own."""

    def __init__(self, chain: Chain) -> None:
        self.chain = chain
        artifact = load_artifact("Float64StepHarness")
        self.abi = ContractAbi(artifact.abi)
        receipt = self.chain.transact(self.chain.accounts[0], None, artifact.bytecode, gas=5_000_000)
        self.address = receipt.contract_address

    def call(self, name, *args):
        try:
            return self.abi.decode_result(name, self.chain.call(self.address, self.abi.encode_call(name, *args)))[0]
        except RevertData as reverted:
            raise self.abi.revert(reverted.data) from None

    def run(self, step: str, operands: list[list[int]]) -> list[int]:
        code, arity = F.STEPS[step].code, F.STEPS[step].arity
        padded = operands + [[0] * len(operands[0])] * (3 - arity)
        out: list[int] = []
        for lo in range(0, len(padded[0]), BATCH):
            out += self.call("run", code, *(column[lo:lo + BATCH] for column in padded))
        return out


@pytest.fixture(scope="module")
def harness() -> Harness:
    return Harness(EmbeddedChain())


@pytest.fixture(scope="module")
def fast_harness(request):
    """The harness on anvil where it is installed (required under GAVEL_REQUIRE_ANVIL), else py-evm's."""
    if find_anvil() is None:
        if os.environ.get("GAVEL_REQUIRE_ANVIL"):
            raise RuntimeError("GAVEL_REQUIRE_ANVIL is set but anvil is not installed (run `npm install`)")
        yield request.getfixturevalue("harness")
        return
    with AnvilProcess() as anvil:
        yield Harness(RpcChain(anvil.url))


def _ints(*arrays: np.ndarray) -> list[list[int]]:
    return [[int(v) for v in a] for a in arrays]


def operands_for(step: str, rng: np.random.Generator, n: int, all_edges: bool) -> list[list[int]]:
    """Edge cases (all pairs, or a sample of them) and n structured and random cases."""
    arity = F.STEPS[step].arity
    if step in FLOAT32_STEPS:
        edges = np.array(EDGES32, dtype=np.uint32)
        ea, eb = (m.ravel() for m in np.meshgrid(edges, edges))
        if not all_edges:
            pick = rng.choice(len(ea), 6 * len(edges), replace=False)
            ea, eb = ea[pick], eb[pick]
        ra, rb = (rng.integers(0, 1 << 32, n, dtype=np.uint32) for _ in range(2))
        close = (ra & np.uint32(0x807FFFFF)) | (rng.integers(100, 160, n).astype(np.uint32) << np.uint32(23))
        a = np.concatenate([ea, ra, close]).astype(U64)
        b = np.concatenate([eb, rb, np.roll(close, 1)]).astype(U64)
        return _ints(a, b)[:arity]
    if step == "i64_to_f64":
        return _ints(int64_cases(rng, n))
    if step == "f64_fma":
        a, b, c = fma_operands(rng, n)
        edge = np.array(EDGES, dtype=U64)
        ea, eb, ec = (rng.choice(edge, len(edge) * 8) for _ in range(3))
        return _ints(np.concatenate([ea, a]), np.concatenate([eb, b]), np.concatenate([ec, c]))
    if step == "select":
        a, b = random_bits(rng, n), random_bits(rng, n)
        cond = np.where(rng.integers(0, 2, n) == 1, random_bits(rng, n), 0).astype(U64)
        return _ints(cond, a, b)
    ea, eb = edge_pairs()
    if not all_edges:
        pick = rng.choice(len(ea), 4 * len(EDGES), replace=False)
        ea, eb = ea[pick], eb[pick]
    if arity == 1:
        x = np.concatenate([np.array(EDGES, dtype=U64), random_bits(rng, n), close_pairs(rng, n)[0], f32_tie_bits(rng, n)])
        return _ints(x)
    parts = [(ea, eb), (random_bits(rng, n), random_bits(rng, n)), close_pairs(rng, n), close_pairs(rng, n, spread=3),
             boundary_pairs(rng, n), tie_pairs(rng, n)]
    a = np.concatenate([p[0] for p in parts])
    b = np.concatenate([p[1] for p in parts])
    if step == "f64_ldexp":
        b = rng.integers(-2300, 2300, len(a)).astype(np.int64).view(U64)
        b[:4] = np.array([-(1 << 63), (1 << 63) - 1, 0, 1], dtype=np.int64).view(U64)
    return _ints(a, b)


MAX_STEP_GAS = 20_000  # a step is a small share of a 5M-gas transaction (docs/onchain-step.md)


def check_step(harness: Harness, step: str, rng: np.random.Generator, n: int, all_edges: bool) -> None:
    """Every case gives the twin's bits, each for less than MAX_STEP_GAS."""
    operands = operands_for(step, rng, n, all_edges)
    got = harness.run(step, operands)
    want = [F.STEPS[step].fn(*args) for args in zip(*operands)]
    bad = [i for i, (g, w) in enumerate(zip(got, want)) if g != w]
    assert not bad, f"{step}: {len(bad)} of {len(want)} differ, e.g. " + ", ".join(
        f"{tuple(hex(col[i]) for col in operands)} -> chain {hex(got[i])}, python {hex(want[i])}" for i in bad[:4])
    padded = operands + [[0] * len(operands[0])] * (3 - F.STEPS[step].arity)
    gas = harness.call("gasOf", F.STEPS[step].code, *(column[:BATCH] for column in padded))
    assert max(gas) < MAX_STEP_GAS, (step, max(gas))


@pytest.mark.parametrize("step", sorted(F.STEPS))
def test_each_step_on_chain_equals_the_python_twin(harness, step):
    check_step(harness, step, np.random.default_rng(F.STEPS[step].code), 60, all_edges=False)


# The wrapping integer and bit steps, whose own edges (every pair of word edges) have a test below.
INTEGER_STEPS = ("bit_and", "bit_or", "bit_xor", "i64_add", "i64_lt", "i64_mul", "i64_sar", "i64_sub")


@pytest.mark.slow
@pytest.mark.parametrize("step", sorted(F.STEPS))
def test_each_step_on_chain_equals_the_python_twin_on_thousands(fast_harness, step):
    check_step(fast_harness, step, np.random.default_rng(100 + F.STEPS[step].code), 600, all_edges=True)


def test_bad_input_is_refused_with_a_named_error(harness):
    with pytest.raises(ContractRevert, match="UnknownStep"):
        harness.call("run", 99, [1], [1], [1])
    with pytest.raises(ContractRevert, match="LengthMismatch"):
        harness.call("run", 0, [1, 2], [1], [1, 2])
    with pytest.raises(ContractRevert, match="NotAFloat32"):
        harness.call("run", F.STEPS["f32_add"].code, [1 << 40], [0], [0])



# --- the integer steps (those of Philox4x32-10 for dropout's element programs, protocol/step_philox.py) ---

PHILOX_EDGES = [0, 1, 2, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFE, 0xFFFFFFFF, 1 << 32, (1 << 32) + 1, 0x9E3779B9,
                0xBB67AE85, 0xD2511F53, 0xCD9E8D57, 1 << 63, (1 << 63) - 1, (1 << 64) - 1]


def numpy_integer_step(step: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """uint64 NumPy's wrapping arithmetic: the reference the twin and the contract both meet."""
    with np.errstate(over="ignore"):
        if step == "i64_mul":
            return a * b
        if step == "i64_add":
            return a + b
        if step == "i64_sub":
            return a - b
        if step == "i64_lt":
            return (a.view(np.int64) < b.view(np.int64)).astype(U64)
        if step == "bit_xor":
            return a ^ b
        if step == "bit_and":
            return a & b
        if step == "bit_or":
            return a | b
        assert step == "i64_sar"
        return (a.view(np.int64) >> (b & U64(63)).astype(np.int64)).view(U64)


@pytest.mark.parametrize("step", INTEGER_STEPS)
def test_integer_steps_on_word_edges_equal_numpy_on_chain_and_in_python(harness, step):
    """Every pair of word edges (0, 0xFFFFFFFF, 2^32, Philox's multipliers, 2^64 - 1, ...): carries out
    of the low word and past bit 63, products of the largest 32-bit words, shifts across the sign."""
    a, b = (m.ravel() for m in np.meshgrid(np.array(PHILOX_EDGES, U64), np.array(PHILOX_EDGES, U64)))
    if step == "i64_sar":
        b = np.resize(np.array([0, 2, 8, 31, 32, 63, 64, 96], U64), a.size)
    want = [int(v) for v in numpy_integer_step(step, a, b)]
    operands = _ints(a, b)
    assert [F.STEPS[step].fn(*args) for args in zip(*operands)] == want
    assert harness.run(step, operands) == want
    assert F.i64_mul(0xFFFFFFFF, 0xFFFFFFFF) == 0xFFFFFFFE00000001  # the largest 32x32 product, exact


def test_every_step_of_a_dropout_program_runs_on_chain_as_traced(harness):
    """The whole Philox program of one dropout element, each instruction executed by the contract
    on the traced operand values, gives the traced value."""
    from protocol.step_game import STEPS_BY_CODE, replay
    from protocol.step_programs import trace_element
    from protocol.step_trace import CONST, COORD, INPUT, STEP, Tracer, coordinates

    x = np.linspace(-2.0, 2.0, 24, dtype=np.float32).reshape(2, 3, 4)
    attrs = {"p": 0.3, "seed": (1 << 64) - 1, "stream": 0xFFFFFFFF00000001, "counter": (1 << 64) - 7}
    element = 23
    trace = trace_element("dropout", attrs, [x], element)
    spec = trace.spec
    loader = Tracer(spec.op, [x], spec.out_shape, spec.views, element)
    by_code: dict[int, list[tuple[int, list[int]]]] = {}
    for i, instr in enumerate(spec.program):
        args = []
        for operand in instr.operands[:STEPS_BY_CODE[instr.op].arity]:
            if operand.kind == STEP:
                args.append(trace.values[operand.ref])
            elif operand.kind == CONST:
                args.append(operand.ref)
            elif operand.kind == COORD:
                args.append(coordinates(spec.out_shape, element)[operand.ref])
            else:
                assert operand.kind == INPUT
                args.append(loader.input(operand.ref >> 48, operand.ref & ((1 << 48) - 1)).bits)
        by_code.setdefault(instr.op, []).append((i, args + [0] * (3 - len(args))))
    assert {STEPS_BY_CODE[c].fn.__name__ for c in by_code} >= {"bit_xor", "i64_mul", "i64_sar", "bit_and"}
    for code, rows in by_code.items():
        got = harness.call("run", code, *([r[1][k] for r in rows] for k in range(3)))
        assert list(got) == [trace.values[i] for i, _ in rows], STEPS_BY_CODE[code].fn.__name__
    assert replay(spec, element, [x]) == trace.values
