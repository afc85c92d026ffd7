"""Shape operators: values moved exactly, sum_to by the specified tree, causal_mask, errors."""
import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from repops_cupy import registry
from repops_cupy import elementwise  # noqa: F401 - registers ops the shape tests emit through
from repops_cupy import shape as S
from repops_cupy._backend import cupy_module
from repops_cupy.errors import OpError

from .bits import assert_same_bits

FLOATS32 = st.floats(width=32, allow_nan=True, allow_infinity=True)


def tree_sum_reference(values: list[float]) -> float:
    """The specified tree, literally: adjacent pairs level by level, an odd last one carried up."""
    if not values:
        return 0.0
    while len(values) > 1:
        paired = [values[i] + values[i + 1] for i in range(0, len(values) - 1, 2)]
        if len(values) % 2:
            paired.append(values[-1])
        values = paired
    return values[0]


def sum_to_reference(x: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    lead = x.ndim - len(shape)
    out = np.empty(shape, np.float32)
    for idx in np.ndindex(shape):
        # every x index that broadcasting maps onto idx, in C order over x's axes
        ranges = [range(x.shape[a]) for a in range(lead)]
        ranges += [range(x.shape[lead + i]) if shape[i] == 1 else [idx[i]] for i in range(len(shape))]
        addends = [float(x[full]) for full in itertools.product(*ranges)]
        with np.errstate(over="ignore"):
            out[idx] = np.float32(tree_sum_reference(addends))
    return out


@st.composite
def broadcast_pairs(draw):
    """(x, small_shape): x has a shape that small_shape broadcasts to."""
    big = draw(hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=5))
    keep = draw(st.integers(0, len(big)))
    small = tuple(d if draw(st.booleans()) else 1 for d in big[len(big) - keep:])
    x = draw(hnp.arrays(np.float32, big, elements=st.one_of(FLOATS32, st.floats(-8, 8, width=32))))
    return x, small


@settings(max_examples=80, deadline=None)
@given(pair=broadcast_pairs())
def test_sum_to_matches_the_literal_tree(pair):
    x, small = pair
    out = S.sum_to(x, small)
    assert out.shape == small and out.dtype == np.float32
    assert_same_bits(out, sum_to_reference(x, small))
    assert_same_bits(registry.run("sum_to", (x,), {"shape": small}), out)


def test_sum_to_bias_gradient_case_and_layouts():
    rng = np.random.default_rng(0)
    g = (rng.standard_normal((37, 6)) * np.exp(rng.uniform(-20, 20, (37, 6)))).astype(np.float32)
    expected = sum_to_reference(g, (6,))
    assert_same_bits(S.sum_to(g, (6,)), expected)
    assert_same_bits(S.sum_to(np.asfortranarray(g), (6,)), expected)
    wide = np.zeros((37, 12), np.float32)
    wide[:, ::2] = g
    assert_same_bits(S.sum_to(wide[:, ::2], (6,)), expected)
    # batch position: a row's sum does not depend on what sits beside it
    assert_same_bits(S.sum_to(g[:, 2:3], (1,)), expected[2:3])


def test_sum_to_keeps_a_lone_negative_zero_and_sums_empty_to_zero():
    assert_same_bits(S.sum_to(np.array([[-0.0]], np.float32), (1,)), np.array([-0.0], np.float32))
    assert_same_bits(S.sum_to(np.zeros((0, 3), np.float32), (3,)), np.zeros(3, np.float32))


def test_reshape_transpose_broadcast_move_values_exactly():
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    assert_same_bits(S.reshape(x, (4, -1)), x.reshape(4, 6))
    assert_same_bits(S.reshape(x, (-1,)), x.reshape(-1))
    assert_same_bits(S.reshape(np.asfortranarray(x), (6, 4)), x.reshape(6, 4))
    assert_same_bits(S.transpose(x, (2, 0, 1)), np.transpose(x, (2, 0, 1)))
    assert_same_bits(S.broadcast_to(x[:, :1, :], (5, 2, 3, 4)), np.broadcast_to(x[:, :1, :], (5, 2, 3, 4)))
    ids = np.arange(6, dtype=np.int64).reshape(2, 3)
    assert S.reshape(ids, (3, 2)).dtype == np.int64
    assert S.transpose(ids.astype(np.int32), (1, 0)).dtype == np.int32


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda x: S.reshape(x, (5, -1)), "cannot reshape"),
        (lambda x: S.reshape(x, (-1, -1)), "at most one -1"),
        (lambda x: S.reshape(x, (2, 3, 5)), "cannot reshape"),
        (lambda x: S.transpose(x, (0, 0, 1)), "permutation"),
        (lambda x: S.transpose(x, (0, 1)), "permutation"),
        (lambda x: S.broadcast_to(x, (3, 4)), "does not broadcast"),
        (lambda x: S.sum_to(x, (5, 1)), "does not broadcast"),
        (lambda x: S.sum_to(x, (1, 2, 3, 4)), "does not broadcast"),
        (lambda x: S.causal_mask(x[0, 0]), "at least 2 axes"),
        (lambda x: S.reshape(x.astype(np.float64), (24,)), "float32, int32 or int64"),
        (lambda x: S.sum_to(x.astype(np.int64), (4,)), "float32"),
    ],
)
def test_bad_calls_are_op_errors(call, message):
    x = np.zeros((2, 3, 4), np.float32)
    with pytest.raises(OpError, match=message):
        call(x)


def test_causal_mask_sets_entries_above_the_diagonal():
    x = np.arange(2 * 3 * 4, dtype=np.float32).reshape(2, 3, 4)
    x[1, 0, 3] = np.nan
    out = S.causal_mask(x)
    for b, i, j in np.ndindex(x.shape):
        expected = -np.inf if j > i else x[b, i, j]
        assert_same_bits(out[b, i, j], np.float32(expected))
    assert_same_bits(S.causal_mask(x, fill=-1e9)[0, 0, 1], np.float32(-1e9))
    assert_same_bits(S.causal_mask(x, fill=1e39)[0, 0, 1], np.float32(np.inf))  # rounded to float32
    assert_same_bits(S.causal_mask(np.asfortranarray(x)), out)
    assert_same_bits(S.causal_mask(x[:, :, ::-1]), np.where(np.triu(np.ones((3, 4), bool), 1), -np.inf, x[:, :, ::-1]).astype(np.float32))


def test_backward_rules_emit_the_inverse_moves():
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    emitted = []

    def recording(name, *inputs, **attrs):
        emitted.append((name, attrs))
        return registry.run(name, inputs, attrs)

    out = S.transpose(x, (2, 0, 1))
    (gx,) = registry.vjp("transpose", out, (x,), out, {"perm": (2, 0, 1)}, emit=recording)
    assert_same_bits(gx, x)
    assert emitted[-1] == ("transpose", {"perm": (1, 2, 0)})

    small = x[:1, :, :1]
    out = S.broadcast_to(small, (2, 3, 4))
    (gs,) = registry.vjp("broadcast_to", np.ones_like(out), (small,), out, {"shape": (2, 3, 4)}, emit=recording)
    assert_same_bits(gs, np.full((1, 3, 1), 8, np.float32))
    assert emitted[-1][0] == "sum_to"

    (gm,) = registry.vjp("causal_mask", np.ones((3, 3), np.float32), (x[0, :, :3],), None, {}, emit=recording)
    assert emitted[-1] == ("causal_mask", {"fill": 0.0})
    assert_same_bits(gm, np.tril(np.ones((3, 3), np.float32)))

    (gr,) = registry.vjp("reshape", np.ones((6, 4), np.float32), (x,), None, {"shape": (6, 4)}, emit=recording)
    assert gr.shape == x.shape


def test_sum_to_and_broadcast_to_are_adjoint():
    rng = np.random.default_rng(1)
    # integer values: every float sum is exact, so the adjoint identity holds exactly
    small = rng.integers(-5, 5, (3, 1)).astype(np.float32)
    big = rng.integers(-5, 5, (4, 3, 6)).astype(np.float32)
    lhs = float(np.dot(S.broadcast_to(small, big.shape).ravel().astype(float), big.ravel().astype(float)))
    rhs = float(np.dot(small.ravel().astype(float), S.sum_to(big, (3, 1)).ravel().astype(float)))
    assert lhs == rhs
    assert math.isfinite(lhs)


@pytest.mark.gpu
def test_cupy_gives_the_same_bits():
    cp = cupy_module()
    rng = np.random.default_rng(2)
    x = (rng.standard_normal((5, 7, 9)) * 100).astype(np.float32)
    xc = cp.asarray(x)
    for small in ((9,), (7, 1), (1, 7, 9), (5, 1, 1), ()):
        assert_same_bits(cp.asnumpy(S.sum_to(xc, small)), S.sum_to(x, small))
    assert_same_bits(cp.asnumpy(S.causal_mask(xc)), S.causal_mask(x))
    assert_same_bits(cp.asnumpy(S.transpose(xc, (1, 2, 0))), S.transpose(x, (1, 2, 0)))
