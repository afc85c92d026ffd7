"""Element programs (protocol/step_programs.py) against the registry operators they trace: every
element's last value is the operator's output bits, one program serves every element, and
executing the program again (`step_game.replay`) gives the traced values."""
from __future__ import annotations

import numpy as np
import pytest

from protocol import float64_steps as F
from protocol.step_game import replay
from protocol.step_programs import COVERED, trace_element
from protocol.step_trace import Instr, keccak_tree_proof, keccak_tree_root, program_leaf, verify_proof
from repops_cupy import ops
from repops_cupy.hashing import canonical_array

EDGES32 = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-40, -1e-40, 1.4e-45, 88.72, 88.73, -103.9, -104.0, 1e38,
                    3.4e38, -3.4e38, 22.0, -22.0, 1e-9, 0.3, 1.0, -1.0, 0.5, 0.84375, 0.6931472], dtype=np.float32)


def values(rng: np.random.Generator, n: int, *, edges: bool = True) -> np.ndarray:
    """float32 values over many binades, the edge values first."""
    x = (rng.standard_normal(n) * 10.0 ** rng.integers(-3, 3, n)).astype(np.float32)
    if edges:
        k = min(n, len(EDGES32))
        x[:k] = rng.permutation(EDGES32)[:k]
    return x


def cases(rng: np.random.Generator) -> dict[str, tuple[list[np.ndarray], dict]]:
    v = lambda n, **kw: values(rng, n, **kw)  # noqa: E731
    return {
        "add": ([v(48).reshape(6, 8), v(8)], {}), "sub": ([v(48).reshape(6, 8), v(48).reshape(6, 8)], {}),
        "mul": ([v(6).reshape(6, 1), v(48).reshape(6, 8)], {}), "div": ([v(64), v(64)[::-1].copy()], {}),
        "neg": ([v(30)], {}), "relu": ([v(30)], {}),
        "add_scalar": ([v(30)], {"value": 0.1}), "mul_scalar": ([v(30)], {"value": -1e-3}),
        "exp": ([v(120)], {}), "log": ([np.abs(v(120)) - np.float32(0.25)], {}), "tanh": ([v(120)], {}),
        "sigmoid": ([v(60)], {}),
        "softmax": ([v(40).reshape(5, 8)], {"axis": -1}),
        "layer_norm": ([v(40, edges=False).reshape(5, 8), v(8), v(8)], {"eps": 1e-5}),
        "matmul": ([v(6 * 10, edges=False).reshape(6, 10), v(10 * 4, edges=False).reshape(10, 4)], {}),
        "adam_moment1": ([v(30), v(30)], {"beta": 0.9}), "adam_moment2": ([np.abs(v(30)), v(30)], {"beta": 0.99}),
        "adamw_update": ([v(30), v(30), np.abs(v(30)), np.float32(0.9 ** 3), np.float32(0.99 ** 3)],
                         {"lr": 3e-3, "eps": 1e-8, "weight_decay": 0.01}),
        "beta_power_step": ([np.float32(0.729)], {"beta": 0.9}),
        "reshape": ([v(24).reshape(2, 3, 4)], {"shape": (4, -1)}),
        "transpose": ([v(24).reshape(2, 3, 4)], {"perm": (2, 0, 1)}),
        "broadcast_to": ([v(4).reshape(1, 4)], {"shape": (3, 2, 4)}),
        "sum_to": ([v(60).reshape(3, 5, 4)], {"shape": (5, 1)}),
        "relu_grad": ([v(30), v(30)], {}),
        "gelu": ([v(60)], {"approximate": "tanh"}), "gelu_grad": ([v(60), v(60)], {"approximate": "tanh"}),
        "causal_mask": ([v(2 * 4 * 4).reshape(2, 4, 4)], {"fill": float("-inf")}),
        "step_increment": ([np.array(41, dtype=np.int64)], {}),
        "full": ([], {"shape": (2, 3), "value": 0.1, "dtype": "float32"}),
        "softmax_grad": ([v(40, edges=False).reshape(5, 8), np.abs(v(40, edges=False)).reshape(5, 8)], {"axis": -1}),
        "layer_norm_grad_x": ([v(40, edges=False).reshape(5, 8), v(40, edges=False).reshape(5, 8),
                               v(8, edges=False)], {"eps": 1e-5}),
        "layer_norm_grad_gamma": ([v(40, edges=False).reshape(5, 8), v(40, edges=False).reshape(5, 8)], {"eps": 1e-5}),
        "embedding": ([v(7 * 3, edges=False).reshape(7, 3), rng.integers(0, 7, (2, 4)).astype(np.int64)], {}),
        "cross_entropy": ([v(4 * 6, edges=False).reshape(4, 6), rng.integers(0, 6, 4).astype(np.int64)], {}),
        "cross_entropy_grad": ([np.float32(1.5), v(4 * 6, edges=False).reshape(4, 6),
                                rng.integers(0, 6, 4).astype(np.int32)], {}),
        "sqrt": ([v(30)], {}), "rsqrt": ([v(30)], {}), "sqrt_grad": ([v(30), np.abs(v(30))], {}),
        "rsqrt_grad": ([v(30), v(30)], {}), "sigmoid_grad": ([v(30), v(30)], {}), "tanh_grad": ([v(30), v(30)], {}),
        "sgd_momentum": ([v(30), v(30), v(30)], {"momentum": 0.9, "weight_decay": 1e-4}),
        "sgd_update": ([v(30), v(30)], {"lr": 0.1}),
        "sum": ([v(60).reshape(3, 5, 4)], {"axis": (0, 2), "keepdims": False}),
        "mean": ([v(60).reshape(3, 5, 4)], {"axis": (1,), "keepdims": True}),
        "log_softmax": ([v(40).reshape(5, 8)], {"axis": -1}),
        "log_softmax_grad": ([v(40).reshape(5, 8), v(40, edges=False).reshape(5, 8)], {"axis": -1}),
        "var": ([v(60).reshape(3, 5, 4)], {"axis": (0, 2), "keepdims": False, "correction": 1}),
        "var_grad": ([v(5), v(60).reshape(3, 5, 4)], {"axis": (0, 2), "keepdims": False, "correction": 1}),
        "max": ([v(60).reshape(3, 5, 4)], {"axis": (1,), "keepdims": True}),
        "max_grad": ([v(12).reshape(3, 1, 4), v(60).reshape(3, 5, 4), v(12).reshape(3, 1, 4)],
                     {"axis": (1,), "keepdims": True}),
        "erf": ([v(60)], {}), "erf_grad": ([v(30), v(30)], {}),
        "unfold2d": ([v(2 * 4 * 5).reshape(1, 2, 4, 5)], {"kernel": (2, 3), "stride": (2, 1), "padding": (1, 1)}),
        "unfold2d_grad": ([v(2 * 3 * 6 * 4).reshape(1, 2, 3, 6, 4)],
                          {"kernel": (2, 2), "stride": (2, 1), "padding": (1, 1), "input_hw": (4, 5)}),
        "embedding_grad": ([v(2 * 5 * 3).reshape(2, 5, 3), rng.integers(0, 5, (2, 5)).astype(np.int64)],
                           {"num_embeddings": 6}),
        "dropout": ([v(30).reshape(5, 6)], {"p": 0.25, "seed": 7, "stream": 3, "counter": (1 << 32) - 3}),
        "dropout_at_step": ([v(30).reshape(3, 10), np.array(41, dtype=np.int64)],
                            {"p": 0.5, "seed": (1 << 63) + 5, "site": 3}),
    }


@pytest.mark.parametrize("op", sorted(COVERED))
def test_every_element_of_the_trace_ends_in_the_operators_bits(op):
    rng = np.random.default_rng(sorted(COVERED).index(op))
    inputs, attrs = cases(rng)[op]
    out = canonical_array(np.asarray(ops.run(op, inputs, attrs))).reshape(-1)
    bits = out.view(np.uint32 if out.dtype.itemsize == 4 else np.uint64)
    first = trace_element(op, attrs, inputs, 0)
    for e in range(bits.size):
        trace = trace_element(op, attrs, inputs, e)
        assert trace.spec.program == first.spec.program, (op, e)
        assert trace.output == int(bits[e]), (op, e, hex(trace.output), hex(int(bits[e])))
    assert replay(first.spec, 0, inputs) == first.values


def test_a_second_input_draw_gives_the_same_program_and_its_own_bits():
    rng = np.random.default_rng(7)
    for op in ("exp", "tanh", "softmax"):
        inputs, attrs = cases(rng)[op]
        again, _ = cases(np.random.default_rng(8))[op]
        assert trace_element(op, attrs, inputs, 3).spec.root == trace_element(op, attrs, again, 3).spec.root


def test_instruction_words_round_trip_and_program_proofs_hold():
    trace = trace_element("tanh", {}, [values(np.random.default_rng(1), 9)], 4)
    program = trace.spec.program
    assert all(Instr.from_word(i.word) == i for i in program)
    leaves = [program_leaf(i) for i in program]
    root = keccak_tree_root(leaves)
    for index in (0, 1, len(program) // 2, len(program) - 1):
        proof = keccak_tree_proof(leaves, index)
        assert verify_proof(root, leaves[index], index, proof)
        assert not verify_proof(root, leaves[index], index ^ 1, proof)


def test_glue_steps_against_numpy():
    rng = np.random.default_rng(3)
    a64 = np.concatenate([rng.standard_normal(500), [0.0, -0.0, np.inf, -np.inf, 1.0]])
    b64 = np.concatenate([rng.standard_normal(500), [-0.0, 0.0, -np.inf, np.inf, 1.0]])
    for x, y in zip(a64, b64):
        got = F.f64_max(int(np.float64(x).view(np.uint64)), int(np.float64(y).view(np.uint64)))
        assert np.uint64(got).view(np.float64) == np.maximum(x, y)
    nan = int(np.float64(np.nan).view(np.uint64))
    assert F.is_nan64(F.f64_max(nan, 0)) and F.is_nan64(F.f64_max(0, nan))
    ia, ib = (rng.integers(-(1 << 63), 1 << 63, 500, dtype=np.int64) for _ in range(2))
    with np.errstate(over="ignore"):
        for x, y in zip(ia, ib):
            ux, uy = int(x.view(np.uint64)), int(y.view(np.uint64))
            assert F.i64_add(ux, uy) == int((x + y).view(np.uint64))
            assert F.i64_sub(ux, uy) == int((x - y).view(np.uint64))
            assert F.i64_mul(ux, uy) == int((x * y).view(np.uint64))
            assert F.i64_lt(ux, uy) == int(x < y)
            assert F.bit_xor(ux, uy) == int((x ^ y).view(np.uint64))
    assert F.f32_canon(0xFFC00001) == 0x7FC00000 and F.f32_canon(0x7F800000) == 0x7F800000
    assert F.select(5, 1, 2) == 1 and F.select(0, 1, 2) == 2


@pytest.mark.parametrize("op", ["sum", "mean"])
def test_a_reduction_over_unsorted_axes_sums_in_c_order(op):
    # The spec sorts the axes; summing with axis 0 fastest would pair 1e20 with -1e20 first.
    x = np.zeros((3, 5, 4), np.float32)
    x[0, 0, 0], x[0, 0, 1], x[1, 0, 0] = 1e20, 1, -1e20
    attrs = {"axis": (2, 0)}
    out = canonical_array(np.asarray(ops.run(op, [x], attrs))).reshape(-1).view(np.uint32)
    for e in range(out.size):
        assert trace_element(op, attrs, [x], e).output == int(out[e]), (op, e)
